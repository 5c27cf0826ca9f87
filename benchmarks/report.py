"""The machine a run was on, the targets it is judged by, and the whole report as text."""

from __future__ import annotations

import os
import platform
from importlib import metadata
from typing import Any

import ceiling
import contention
import footprint
import handoff
import listing
import rate_limits
import readers
import redis
import renewal_cost
import servertime
import uncontended


def cpu_model() -> str:
    """Return the CPU's model name where the system tells it, else the platform's guess."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def describe_machine(client: redis.Redis[bytes]) -> dict[str, Any]:
    """Return the versions and hardware a reader needs to judge the numbers."""
    from redis.utils import HIREDIS_AVAILABLE

    import django_redis_lock

    return {
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "platform": platform.platform(),
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "load_average": [round(load, 2) for load in os.getloadavg()],
        "redis_server": client.info("server")["redis_version"],
        "server": server_name(client),
        "redis_py": redis.__version__,
        "hiredis": HIREDIS_AVAILABLE,
        "django": metadata.version("django"),
        "django_redis_lock": metadata.version("django-redis-lock"),
        "django_redis_lock_path": os.path.dirname(django_redis_lock.__file__),
        "python_redis_lock": metadata.version("python-redis-lock"),
        "connection": "TCP loopback, one connection per client",
    }


def server_name(client: redis.Redis[bytes]) -> str:
    """Return the server's name and version: "Redis 7.0.15", "Valkey 9.1.2"."""
    info = client.info("server")
    name = str(info.get("server_name") or "redis")
    return f"{name.capitalize()} {info.get(f'{name}_version') or info['redis_version']}"


def _row(rows: list[dict[str, Any]], **match: Any) -> dict[str, Any]:
    return next(row for row in rows if all(row[key] == value for key, value in match.items()))


#: The server-time subjects of a read cycle on a free name and among 15 other readers.
READ_SUBJECTS = ("rwlock_read", "rwlock_read_shared")


def _readers_share(rows: list[dict[str, Any]], processes: int) -> float:
    """Return the read side's cycles per second at ``processes``, as a share of no lock's."""
    read = _row(rows, library="rwlock_read", processes=processes)
    unlocked = _row(rows, library="no_lock", processes=processes)
    share: float = read["acquisitions_per_s"] / unlocked["acquisitions_per_s"]
    return share


def targets(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Return django-redis-lock's targets, each with the measured value and whether it is met."""
    ours, theirs = "django_redis_lock", "redis_py"
    cycle = _row(report["uncontended"], scenario=ours)
    acycle = _row(report["uncontended"], scenario=f"{ours}_asyncio")
    server, server_ref = (_row(report["server_time"], subject=key) for key in (ours, theirs))
    handed = _row(report["handoff"], contender=ours)
    floor = _row(report["handoff"], contender=handoff.FLOOR.key)
    rows = report["contention"]
    fair = _row(rows, library=ours, fair=True)
    memory = _row(report["memory"]["distinct"], library=ours)
    end = report["memory"]["end"]["libraries"][ours]
    lost = sum(row["lost_updates"] for row in rows)
    renewal = report["renewal"]
    lock_all = _row(report["uncontended"], scenario="lock_all_3")
    read, shared = (_row(report["server_time"], subject=k) for k in READ_SUBJECTS)
    # A fair lock hands over once per acquisition: at most one per hold and wake-up.
    ceiling = 1 / (report["parameters"]["hold"] + floor["p50_us"] / 1e6)
    checks = [
        (
            "uncontended >= 1.05x redis-py",
            f"{cycle['vs_redis_py']:.2f}x",
            cycle["vs_redis_py"] >= 1.05,
        ),
        (
            "server time per cycle <= 2x redis-py (commandstats)",
            f"{server['usec_vs_redis_py']:.2f}x ({server['usec_per_cycle']:.1f} vs"
            f" {server_ref['usec_per_cycle']:.1f} us)",
            server["usec_vs_redis_py"] <= 2.0,
        ),
        (
            "Redis CPU per cycle <= 1.25x redis-py",
            f"{server['cpu_vs_redis_py']:.2f}x",
            server["cpu_vs_redis_py"] <= 1.25,
        ),
        (
            "handoff p50 <= 1.25x floor p50",
            f"{handed['p50_vs_floor']:.2f}x ({handed['p50_us']:,.0f} vs"
            f" {floor['p50_us']:,.0f} us)",
            handed["p50_vs_floor"] <= 1.25,
        ),
        (
            "handoff p99 <= 2x floor p99",
            f"{handed['p99_vs_floor']:.2f}x ({handed['p99_us']:,.0f} vs"
            f" {floor['p99_us']:,.0f} us)",
            handed["p99_vs_floor"] <= 2.0,
        ),
    ]
    for processes in (4, 16, 64):
        row = _row(rows, library=ours, processes=processes, fair=False)
        share = row["acquisitions_per_s"] / ceiling
        checks.append(
            (
                f"contended >= 0.95x the FIFO ceiling at {processes} processes",
                f"{share:.2f}x ({row['acquisitions_per_s']:,.0f} of {ceiling:,.0f} acq/s, the"
                " hold asked + the wake-up p50)",
                share >= 0.95,
            )
        )
    at16 = _row(rows, library=ours, processes=16, fair=False)
    checks.append(("Jain >= 0.98 at 16 processes", f"{at16['jain']:.3f}", at16["jain"] >= 0.98))
    checks += [
        (
            "a read among 15 readers <= 1.2x a read alone (server time)",
            f"{shared['usec_per_cycle'] / read['usec_per_cycle']:.2f}x"
            f" ({shared['usec_per_cycle']:.1f} vs {read['usec_per_cycle']:.1f} us)",
            shared["usec_per_cycle"] <= 1.2 * read["usec_per_cycle"],
        ),
        (
            "16 readers >= 0.8x 16 processes taking no lock",
            f"{_readers_share(report['readers'], 16):.2f}x",
            _readers_share(report["readers"], 16) >= 0.8,
        ),
        (
            "lock_all over 3 names <= 1.5x a lock() cycle",
            f"{lock_all['us_per_op'] / cycle['us_per_op']:.2f}x",
            lock_all["us_per_op"] <= 1.5 * cycle["us_per_op"],
        ),
    ]
    outliving = memory["outliving_lease"] + end["outliving_lease"]
    checks += [
        (
            "wait p99 <= 50 ms at 16 processes",
            f"{at16['wait_p99_ms']:.1f} ms",
            at16["wait_p99_ms"] <= 50,
        ),
        (
            f"memory <= {footprint.TARGET_GROWTH // 1000} kB per {footprint.PER_NAMES:,} names",
            f"{memory['growth_per_10k_names']:+,} B of used_memory ({memory['keys']:,} keys,"
            f" {memory['key_bytes']:,} B, left by {memory['locks']:,} names)",
            memory["growth_per_10k_names"] <= footprint.TARGET_GROWTH,
        ),
        (
            "nothing left outlives its lease",
            f"{memory['outliving_lease']:,} of {memory['keys']:,} keys after"
            f" {memory['locks']:,} locks, {end['outliving_lease']:,} at the end"
            + (f" (max TTL {end['max_ttl_s']:,.0f} s)" if end["max_ttl_s"] else ""),
            outliving == 0,
        ),
        (
            "alock >= 1.05x redis-py asyncio Lock",
            f"{acycle['vs_redis_py']:.2f}x",
            acycle["vs_redis_py"] >= 1.05,
        ),
        (
            f"FIFO with fair=True ({fair['processes']} processes)",
            f"{fair['out_of_order']} out of order",
            fair["out_of_order"] == 0,
        ),
        (
            "1 renewal round trip per interval ("
            + " / ".join(f"{row['held']:,}" for row in renewal)
            + " locks)",
            " / ".join(f"{row['round_trips_per_round']:g}" for row in renewal)
            + " round trips per round (every lease renewed once)",
            all(
                row["leases_per_call"] == [row["held"]]
                and row["round_trips_per_round"] == 1
                and row["lost"] == 0
                for row in renewal
            ),
        ),
        ("mutual exclusion (no lost updates, any library)", f"{lost} lost", lost == 0),
    ]
    return [{"target": name, "value": value, "met": met} for name, value, met in checks]


def format_report(report: dict[str, Any]) -> str:
    """Return the whole report as plain text."""
    machine, params = report["machine"], report["parameters"]
    lines = [
        f"Python {machine['python']} on {machine['platform']}",
        f"CPU: {machine['cpu']} ({machine['cpu_count']} CPUs), load average at start"
        f" {' '.join(map(str, machine['load_average']))}",
        f"Redis server {machine['redis_server']}, redis-py {machine['redis_py']}"
        f" (hiredis: {'yes' if machine['hiredis'] else 'no'}), Django {machine['django']}",
        f"django-redis-lock {machine['django_redis_lock']} (from"
        f" {machine['django_redis_lock_path']}), python-redis-lock"
        f" {machine['python_redis_lock']}; {machine['connection']}",
        f"Every library uses its defaults and a {params['lease']} s lease;"
        " redis-py's Lock polls every 0.1 s while it waits.",
        "",
        f"1. Uncontended acquire+release cycles, one process: median of {params['rounds']}"
        f" round(s) of {params['seconds']:g} s, in {params['slice']:g} s turns, after"
        f" {params['warmup']:g} s warm-up",
        "",
        uncontended.format_table(report["uncontended"]),
        "",
        "2. Redis server time per uncontended cycle (the libraries taking turns in slices)",
        "",
        servertime.format_table(report["server_time"]),
        "",
        f"3. Contention: processes on one lock for {params['contention_seconds']:g} s each,"
        f" critical section = GET + SET of a counter, lock held {params['hold'] * 1e3:g} ms",
        "",
        contention.format_table(report["contention"]),
        "",
        "4. Handoff latency: release -> the waiting process's acquire returns, 2 processes",
        "",
        handoff.format_table(report["handoff"]),
        "",
        f"5. Keys and memory left after acquiring and releasing {params['distinct']:,} distinct"
        " lock names",
        "",
        footprint.format_table(report["memory"]["distinct"], report["memory"]["end"]),
        "",
        "6. Renewal: django-redis-lock locks held with auto_renew in one process",
        "",
        renewal_cost.format_table(report["renewal"]),
        "",
        "7. Listing: manage.py locks list --json over held django-redis-lock locks",
        "",
        listing.format_table(report["listing"]),
        "",
        f"8. Readers: processes cycling rwlock's read side on one name, beside a lock, for"
        f" {params['contention_seconds']:g} s each, critical section = INCR + DECR of a"
        f" counter, held {params['hold'] * 1e3:g} ms",
        "",
        readers.format_table(report["readers"]),
        "",
        f"9. One Redis core's ceiling: {params['ceiling_processes']} processes, each cycling"
        f" acquire+release on a name of its own for {params['contention_seconds']:g} s",
        "",
        ceiling.format_table(report["ceiling"]),
        "",
        "10. Rate limits: server time per hit, a hot key, memory per key",
        "",
        rate_limits.format_table(report["rate_limits"]),
        "",
        "Targets (django-redis-lock)",
        "",
    ]
    width = max(len(target["target"]) for target in report["targets"]) + 2
    for target in report["targets"]:
        verdict = "met" if target["met"] else "MISSED"
        lines.append(f"  {target['target']:<{width}}{verdict:<8}{target['value']}")
    return "\n".join(lines)
