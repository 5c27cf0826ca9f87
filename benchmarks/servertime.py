"""Redis server time per uncontended cycle: the commands each library sent, and Redis's CPU.

Two figures per acquire+release cycle (a fresh lock object each time, as in ``with lock(...)``):

* the time Redis spent executing the commands the client sent, from ``INFO commandstats``.
  Inside a script Redis counts every command the script runs under its own name *and* in the
  ``EVALSHA`` that ran it, so only the commands sent at top level are summed. Which those are
  is learned, for each library, by running a few cycles under ``MONITOR``, which shows a
  script's commands as ``[0 lua]``: nothing about a library's scripts or keys is assumed;
* the Redis process's CPU time (``INFO cpu``, user + system), which also counts reading
  requests and writing replies: the cost of each round trip on the server.

The libraries take turns in slices of cycles (as in ``uncontended.py``), each slice bracketed
by two ``INFO`` snapshots, so that load from elsewhere falls on all of them alike.
django-redis-lock's other locks (``rwlock``'s sides, ``lock_all`` over 2 and 3 names) take
their turns too, a fresh object per cycle as well, and so does a read cycle on a name that
:data:`OTHER_READERS` other owners hold for reading meanwhile (a subject's ``during``).
"""

from __future__ import annotations

import contextlib
import functools
import sys
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import redis
from libraries import DJANGO_REDIS_LOCK, FORMS, LIBRARIES, READ, REDIS_PY, Form, Library

Op = Callable[[], object]

#: Sent after the operations watched under MONITOR: when it shows, they have all shown.
SENTINEL = "bench-monitor-end"
#: How many other owners hold the read side while the shared read cycle is measured.
OTHER_READERS = 15


class Snapshot(NamedTuple):
    """The server's counters at one instant: per-command usec and calls, and CPU seconds."""

    usec: dict[str, int]
    calls: dict[str, int]
    cpu: float


def snapshot(client: redis.Redis[bytes], *, closing: bool = False) -> Snapshot:
    """Return the server's command statistics and CPU time now.

    An opening snapshot reads the CPU last, a ``closing`` one first, so that the CPU between
    the two leaves out the other ``INFO`` (:func:`bracket_cpu` is what is left).
    """
    cpu = client.info("cpu") if closing else {}
    stats = client.info("commandstats")
    cpu = cpu or client.info("cpu")
    usec: dict[str, int] = {}
    calls: dict[str, int] = {}
    for key, value in stats.items():
        # cmdstat_evalsha; from Redis 7 on, subcommands too: cmdstat_client|setinfo.
        name = key.removeprefix("cmdstat_").split("|", 1)[0]
        usec[name] = usec.get(name, 0) + int(value["usec"])
        calls[name] = calls.get(name, 0) + int(value["calls"])
    return Snapshot(usec, calls, float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"]))


@dataclass(frozen=True)
class Spent:
    """What the server spent on some commands: their usec and calls, and its CPU seconds.

    The CPU counts everything the server did meanwhile, its own timers (about a millisecond per
    second at rest) and part of the ``INFO`` commands that read it too (:func:`bracket_cpu`).
    """

    usec: int = 0
    calls: int = 0
    cpu: float = 0.0

    def __add__(self, other: Spent) -> Spent:
        return Spent(self.usec + other.usec, self.calls + other.calls, self.cpu + other.cpu)


def spent(before: Snapshot, after: Snapshot, commands: Collection[str]) -> Spent:
    """Return what ``commands`` cost the server between two snapshots."""
    usec = sum(after.usec.get(name, 0) - before.usec.get(name, 0) for name in commands)
    calls = sum(after.calls.get(name, 0) - before.calls.get(name, 0) for name in commands)
    return Spent(usec, calls, after.cpu - before.cpu)


def measured(client: redis.Redis[bytes], commands: Collection[str], op: Op) -> Spent:
    """Run ``op`` once between two snapshots; return what ``commands`` cost the server."""
    before = snapshot(client)
    op()
    return spent(before, snapshot(client, closing=True), commands)


def bracket_cpu(client: redis.Redis[bytes], times: int = 20) -> float:
    """Return the CPU seconds two snapshots with nothing between them count (the mean)."""
    return sum(measured(client, (), lambda: None).cpu for _ in range(times)) / times


def top_level_commands(client: redis.Redis[bytes], op: Op, times: int = 3) -> frozenset[str]:
    """Run ``op`` ``times`` under MONITOR; return the names of the commands sent at top level.

    Whichever client ``op`` uses: MONITOR shows every client's commands. Commands a script ran
    (``[0 lua]``) are left out. MONITOR runs on a connection of its own, so that no connection
    ``client`` opens (and its ``HELLO``) shows; ``client`` sends the closing ``ECHO``.
    """
    names: set[str] = set()
    pool = client.connection_pool
    watcher = redis.Redis(connection_pool=type(pool)(**pool.connection_kwargs))
    client.ping()  # a connection ready for the ECHO
    with watcher, watcher.monitor() as monitor:
        for _ in range(times):
            op()
        client.echo(SENTINEL)
        while True:
            command = monitor.next_command()
            words = command["command"].split(" ", 1)
            if words[0].lower() == "echo" and words[1:] == [SENTINEL]:
                return frozenset(names)
            if command["client_type"] != "lua":
                names.add(words[0].lower())


def repeat(op: Op, times: int) -> None:
    """Call ``op`` ``times`` times."""
    for _ in range(times):
        op()


@dataclass(frozen=True)
class Subject:
    """One operation whose server time is measured; ``make_op`` builds it from a client.

    ``during``, if given, makes what must hold on the server while every subject runs (other
    owners holding its lock, say), entered before the first subject is built, left after
    the last slice.
    """

    key: str
    label: str
    make_op: Callable[[redis.Redis[bytes]], Op]
    during: Callable[[], contextlib.AbstractContextManager[object]] | None = None


def fresh_cycle(library: Library, name: str = "server-time") -> Callable[[redis.Redis[bytes]], Op]:
    """Return what builds ``library``'s cycle on ``name``: a new lock object, acquire, release."""

    def make_op(client: redis.Redis[bytes]) -> Op:
        def cycle() -> None:
            handle = library.handle(client, name)
            if not handle.acquire():
                raise RuntimeError(f"{library.label} could not acquire a free lock")
            handle.release()

        return cycle

    return make_op


def others_holding(
    form: Form, name: str, count: int
) -> Callable[[], contextlib.AbstractContextManager[object]]:
    """Return what holds ``form``'s lock on ``name`` by ``count`` other owners meanwhile.

    Their leases are long (600 s), never ending during a run; they are released after it.
    """

    @contextlib.contextmanager
    def holding() -> Iterator[None]:
        from django_redis_lock import LockError

        owners = [f"bench-other-{index}" for index in range(count)]
        others = [form.make(form.name(name), ttl=600, owner=owner) for owner in owners]
        try:
            for other in others:
                if not other.acquire(blocking=False):
                    raise RuntimeError(f"{form.label}: another owner could not share {name!r}")
            yield
        finally:
            for other in others:
                with contextlib.suppress(LockError):  # one that never acquired
                    other.release()

    return holding


FLOOR = Subject("ping", "PING (floor)", lambda client: client.ping)
SUBJECTS: tuple[Subject, ...] = (
    FLOOR,
    *(Subject(key, library.label, fresh_cycle(library)) for key, library in LIBRARIES.items()),
    *(Subject(key, form.label, fresh_cycle(form.library)) for key, form in FORMS.items()),
    Subject(
        f"{READ.key}_shared",
        f"{READ.label}, {OTHER_READERS} reading",
        fresh_cycle(READ.library, "server-time-shared"),
        during=others_holding(READ, "server-time-shared", OTHER_READERS),
    ),
)


def measure(
    client: redis.Redis[bytes],
    subjects: Sequence[Subject] = SUBJECTS,
    *,
    cycles: int,
    slice_cycles: int = 250,
) -> list[dict[str, Any]]:
    """Run ``cycles`` cycles of every subject, in turns; return one row per subject."""
    with contextlib.ExitStack() as stack:
        for subject in subjects:
            if subject.during is not None:
                stack.enter_context(subject.during())
        ops = [subject.make_op(client) for subject in subjects]
        for op in ops:  # warm up: connections made, scripts loaded
            for _ in range(20):
                op()
        commands = [top_level_commands(client, op) for op in ops]
        overhead = bracket_cpu(client)
        totals = [Spent() for _ in subjects]
        slices = max(1, round(cycles / slice_cycles))
        for slice_index in range(slices):
            shift = slice_index % len(ops)  # rotate who goes first
            for index in [*range(shift, len(ops)), *range(shift)]:
                run = functools.partial(repeat, ops[index], slice_cycles)
                totals[index] += measured(client, commands[index], run)
    done = slices * slice_cycles
    rows: list[dict[str, Any]] = []
    for subject, names, total in zip(subjects, commands, totals, strict=True):
        rows.append(
            {
                "subject": subject.key,
                "label": subject.label,
                "cycles": done,
                "commands": sorted(names),
                "commands_per_cycle": round(total.calls / done, 2),
                "usec_per_cycle": round(total.usec / done, 2),
                "cpu_us_per_cycle": round((total.cpu - slices * overhead) * 1e6 / done, 2),
            }
        )
    reference = next(row for row in rows if row["subject"] == REDIS_PY.key)
    for row in rows:
        row["usec_vs_redis_py"] = round(row["usec_per_cycle"] / reference["usec_per_cycle"], 2)
        row["cpu_vs_redis_py"] = round(row["cpu_us_per_cycle"] / reference["cpu_us_per_cycle"], 2)
        print(
            f"server time {row['label']:<30}{row['usec_per_cycle']:>7.1f} us commands"
            f"{row['cpu_us_per_cycle']:>8.1f} us CPU per cycle",
            file=sys.stderr,
        )
    return rows


def ours(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Return django-redis-lock's row."""
    return next(row for row in rows if row["subject"] == DJANGO_REDIS_LOCK.key)


def format_table(rows: Sequence[dict[str, Any]]) -> str:
    """Return the server-time rows as a plain-text table."""
    header = (
        f"{'cycle':<24}{'commands':>10}{'cmd us':>9}{'vs redis-py':>13}"
        f"{'CPU us':>9}{'vs redis-py':>13}  top-level commands"
    )
    lines = [header, "-" * (len(header) + 12)]
    for row in rows:
        lines.append(
            f"{row['label']:<24}{row['commands_per_cycle']:>10.2f}{row['usec_per_cycle']:>9.1f}"
            f"{row['usec_vs_redis_py']:>12.2f}x{row['cpu_us_per_cycle']:>9.1f}"
            f"{row['cpu_vs_redis_py']:>12.2f}x  {' '.join(row['commands'])}"
        )
    lines += [
        "",
        f"{rows[0]['cycles']:,} cycles each, a fresh lock object per cycle. commands: top-level"
        " commands sent per cycle (found with MONITOR);",
        "cmd us: their usec in INFO commandstats (a script's own commands counted once, inside"
        " EVALSHA); CPU us: the Redis process's user+sys CPU",
        f"(less what reading INFO itself costs). {READ.label}, {OTHER_READERS} reading: while"
        f" {OTHER_READERS} other owners hold the same name for reading.",
    ]
    return "\n".join(lines)
