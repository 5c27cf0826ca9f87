"""The machine a run was on, the targets it is judged by, and the whole report as text."""

from __future__ import annotations

import os
import platform
from importlib import metadata
from typing import Any

import contention
import footprint
import handoff
import redis
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
        "redis_py": redis.__version__,
        "hiredis": HIREDIS_AVAILABLE,
        "django": metadata.version("django"),
        "django_redis_lock": metadata.version("django-redis-lock"),
        "django_redis_lock_path": os.path.dirname(django_redis_lock.__file__),
        "python_redis_lock": metadata.version("python-redis-lock"),
        "connection": "TCP loopback, one connection per client",
    }


def _row(rows: list[dict[str, Any]], **match: Any) -> dict[str, Any]:
    return next(row for row in rows if all(row[key] == value for key, value in match.items()))


def targets(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Return django-redis-lock's targets, each with the measured value and whether it is met."""
    ours = "django_redis_lock"
    cycle = _row(report["uncontended"], scenario=ours)
    handed = _row(report["handoff"], contender=ours)
    most = max(row["processes"] for row in report["contention"])
    plain = _row(report["contention"], library=ours, processes=most, fair=False)
    fair = _row(report["contention"], library=ours, processes=most, fair=True)
    renewal = report["renewal"]
    distinct = _row(report["keys"]["distinct"], library=ours)
    end = report["keys"]["end"]["libraries"][ours]
    lost = sum(row["lost_updates"] for row in report["contention"])
    per_interval = renewal["round_trips_per_interval"]
    one_trip = (
        renewal["leases_per_call"] == [renewal["held"]]
        and per_interval is not None
        and per_interval <= 1.05
        and renewal["lost"] == 0
    )
    checks = [
        (
            "uncontended >= 0.9x redis-py",
            f"{cycle['vs_redis_py']:.2f}x",
            cycle["vs_redis_py"] >= 0.9,
        ),
        ("handoff p50 <= 2 RTTs", f"{handed['p50_rtts']:.1f} RTTs", handed["p50_rtts"] <= 2),
        ("handoff p99 <= 10 RTTs", f"{handed['p99_rtts']:.1f} RTTs", handed["p99_rtts"] <= 10),
        (f"Jain >= 0.98 at {most} processes", f"{plain['jain']:.3f}", plain["jain"] >= 0.98),
        (f"Jain >= 0.98 at {most}, fair=True", f"{fair['jain']:.3f}", fair["jain"] >= 0.98),
        (
            f"FIFO with fair=True ({most} processes)",
            f"{fair['out_of_order']} out of order",
            fair["out_of_order"] == 0,
        ),
        (
            f"1 renewal round trip per interval ({renewal['held']:,} locks)",
            f"{per_interval} per interval, {'/'.join(map(str, renewal['leases_per_call']))}"
            " leases each",
            one_trip,
        ),
        (
            "no lock keys left (fencing counters expire)",
            f"{distinct['lock_state_keys']} after {distinct['locks']:,} locks,"
            f" {end['lock_state_keys']} at the end",
            distinct["lock_state_keys"] == 0 and end["lock_state_keys"] == 0,
        ),
        ("mutual exclusion (no lost updates, any library)", f"{lost} lost", lost == 0),
    ]
    return [{"target": name, "value": value, "met": met} for name, value, met in checks]


def format_report(report: dict[str, Any]) -> str:
    """Return the whole report as plain text."""
    machine, params = report["machine"], report["parameters"]
    renewal = report["renewal"]
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
        f"2. Contention: processes on one lock for {params['contention_seconds']:g} s each,"
        " critical section = GET + SET of a counter",
        "",
        contention.format_table(report["contention"]),
        "",
        "3. Handoff latency: release -> the waiting process's acquire returns, 2 processes",
        "",
        handoff.format_table(report["handoff"]),
        "",
        f"4. Keys left after acquiring and releasing {params['distinct']:,} distinct lock names",
        "",
        footprint.format_table(report["keys"]["distinct"], report["keys"]["end"]),
        "",
        f"5. Renewal: {renewal['locks']:,} django-redis-lock locks held in one process",
        "",
        footprint.format_renewal(renewal),
        "",
        "Targets (django-redis-lock)",
        "",
    ]
    width = max(len(target["target"]) for target in report["targets"]) + 2
    for target in report["targets"]:
        verdict = "met" if target["met"] else "MISSED"
        lines.append(f"  {target['target']:<{width}}{verdict:<8}{target['value']}")
    return "\n".join(lines)
