"""A fault-injection stress run: processes contend for one lock while a chaos thread pauses,
resumes and kills them; then every overlap of two critical sections must be explained.

Each worker process appends to a log of its own, with ``os.write`` on an ``O_APPEND`` file so
that a line written survives a SIGKILL right after it (times are ``time.monotonic_ns()``, one
clock for every process of the machine)::

    enter <token> <ns> <end>   first statement of a critical section; <end>: when the lease
                               ends as the lock told its holder, or "-" if it is renewed;
                               "read" after it marks a reader of a read-write lock
    lease <token> <end>        a nested acquire took a new lease, ending then
    seen <token> <other> <ns>  on entry, the shared occupancy array showed another holder
    leave <token> <ns>         last statement of the critical section (before the release)
    lost <token> <ns>          a loss was reported to the holder (signal, or LockLostError)

The chaos thread logs ``stop``, ``cont`` and ``kill`` with the pid and time. A critical section
runs from its ``enter`` to its ``leave``, or to its process's death (to the pause it died in,
if it was killed while stopped: it never ran after that). Two that overlap are explained when
either holder was told of a loss; :func:`check` returns the ones that are not. Two readers
of a read-write lock may overlap (tests/support/stress_rwlock.py): only an overlap with a
writer needs explaining.
"""

from __future__ import annotations

import asyncio
import itertools
import multiprocessing
import os
import random
import signal
import threading
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

spawn = multiprocessing.get_context("spawn")

#: A worker's two loops of acquisitions, blocking and asyncio: each is called with the lock
#: name, the worker's slot, the occupancy array, its log, the end (monotonic) and its random
#: generator.
Rounds = tuple[Callable[..., None], Callable[..., Coroutine[Any, Any, None]]]

#: Leases short enough that pauses outlast them, and renewal runs on most holds.
TTLS = (0.3, 0.5, 1.0)
TIMEOUTS = (None, 0.05, 0.5, 2.0)


def _setup(setting: dict[str, Any]) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    import django
    from django.test import override_settings

    django.setup()
    override_settings(LOCKS=setting).enable()


class _Log:
    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)

    def __call__(self, *words: object) -> None:
        os.write(self.fd, (" ".join(map(str, words)) + "\n").encode())


class Window:
    """When a run's workers stop, shared with them: ``seconds`` from when the first are ready.

    A spawned worker imports Django before it takes a lock, which takes a second or more on a
    loaded machine: a window counted from the spawn would lose that time, and draw fewer
    acquisitions and faults. A worker started again after a kill joins the window as it is.
    """

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.ready = spawn.Value("i", 0)
        self.until = spawn.Value("d", 0.0)

    def join(self) -> float:
        """In a worker that is ready to run: wait for the window; return its end (monotonic)."""
        with self.ready.get_lock():
            self.ready.value += 1
        while not self.until.value:
            time.sleep(0.01)
        return float(self.until.value)

    def open(self, children: dict[int, multiprocessing.process.BaseProcess]) -> float:
        """Once every child is ready (or has ended), start the window; return its end."""
        deadline = time.monotonic() + 120
        while self.ready.value < len(children) and all(c.is_alive() for c in children.values()):
            assert time.monotonic() < deadline, "the workers did not start within 120 s"
            time.sleep(0.01)
        self.until.value = time.monotonic() + self.seconds
        return float(self.until.value)


def worker(
    setting: dict[str, Any],
    name: str,
    slot: int,
    inside: Any,
    log_path: str,
    window: Window,
    seed: int,
    use_asyncio: bool,
    rounds: Rounds | None = None,
) -> None:
    """Take ``name`` again and again until the ``window`` ends, logging what ran when.

    ``rounds`` are the blocking and the asyncio loop of acquisitions (by default, this
    module's, on a lock); tests/support/stress_rwlock.py gives those of a read-write lock.
    """
    log = prepare(setting, log_path)
    rng = random.Random(seed)
    blocking, asynchronous = rounds or (_rounds, _async_rounds)
    until = window.join()
    if use_asyncio:
        asyncio.run(asynchronous(name, slot, inside, log, until, rng))
    else:
        blocking(name, slot, inside, log, until, rng)


def prepare(setting: dict[str, Any], log_path: str) -> _Log:
    """Set up a worker process: Django, its log (starting with its pid), losses logged."""
    _setup(setting)
    import logging

    from django_redis_lock.signals import lock_lost

    # Thousands of "gave up" and "lost" warnings: the worker's own log says what matters.
    logging.getLogger("django_redis_lock").setLevel(logging.ERROR)

    log = _Log(log_path)
    log("pid", os.getpid())

    def reported(**kwargs: Any) -> None:
        log("lost", kwargs["fencing_token"], time.monotonic_ns())

    lock_lost.connect(reported, weak=False)
    return log


def _hold(rng: random.Random, ttl: float) -> float:
    # Mostly short; one in three longer than the lease itself, so that renewal must run.
    return rng.uniform(ttl, ttl * 2) if rng.random() < 0.3 else rng.uniform(0, 0.01)


def _lease_end(handle: Any) -> str:
    """When an unrenewed hold's lease ends, as the lock told its holder ("-": renewed)."""
    from django_redis_lock._core.holds import held

    if handle.auto_renew:
        return "-"
    ends = [h.ends for h in held.values() if h.fencing_token == handle.fencing_token]
    return str(int(ends[0] * 1e9)) if ends else "-"


def _enter(
    log: _Log, inside: Any, slot: int, token: int, lease_end: str, *, shared: bool = False
) -> None:
    """Log an entry; a ``shared`` one (a reader's) is marked so, and sees writers only.

    The occupancy array holds a writer's token, or minus a reader's.
    """
    log("enter", token, time.monotonic_ns(), lease_end, *(["read"] if shared else []))
    inside[slot] = -token if shared else token
    for other, value in enumerate(inside):
        if other != slot and (value > 0 if shared else value):
            log("seen", token, abs(value), time.monotonic_ns())


def _leave(log: _Log, inside: Any, slot: int, token: int) -> None:
    inside[slot] = 0
    log("leave", token, time.monotonic_ns())


def _rounds(
    name: str, slot: int, inside: Any, log: _Log, until: float, rng: random.Random
) -> None:
    from django_redis_lock import LockError, LockLostError, LockNotAcquiredError, lock

    while time.monotonic() < until:
        ttl = rng.choice(TTLS)
        handle = lock(
            name,
            ttl=ttl,
            timeout=rng.choice(TIMEOUTS),
            fair=rng.random() < 0.3,
            auto_renew=rng.random() < 0.7,  # without renewal, a long hold outlives its lease
        )
        token = 0
        try:
            with handle:
                token = handle.fencing_token or 0
                _enter(log, inside, slot, token, _lease_end(handle))
                time.sleep(_hold(rng, ttl))
                if rng.random() < 0.5:  # a nested acquire, through this handle or another
                    inner = handle if rng.random() < 0.5 else lock(name, ttl=ttl)
                    with inner:
                        log("lease", token, _lease_end(handle))  # a new lease from here
                        time.sleep(_hold(rng, ttl) / 2)
                _leave(log, inside, slot, token)
        except LockLostError:
            inside[slot] = 0
            log("lost", token, time.monotonic_ns())
            log("leave", token, time.monotonic_ns())
        except (LockNotAcquiredError, LockError):
            inside[slot] = 0
        time.sleep(rng.uniform(0, 0.02))


async def _async_rounds(
    name: str, slot: int, inside: Any, log: _Log, until: float, rng: random.Random
) -> None:
    # Two tasks of one process: each is its own owner. They share the process's slot, so
    # each marks its own entry in the log only (the slot shows the last one to enter).
    await asyncio.gather(*(_task_rounds(name, slot, inside, log, until, rng) for _ in range(2)))


async def _task_rounds(
    name: str, slot: int, inside: Any, log: _Log, until: float, rng: random.Random
) -> None:
    from django_redis_lock import LockError, LockLostError, alock

    while time.monotonic() < until:
        ttl = rng.choice(TTLS)
        handle = alock(name, ttl=ttl, timeout=rng.choice(TIMEOUTS), auto_renew=rng.random() < 0.7)
        token = 0
        try:
            async with handle:
                token = handle.fencing_token or 0
                _enter(log, inside, slot, token, _lease_end(handle))
                await asyncio.sleep(_hold(rng, ttl))
                if rng.random() < 0.5:
                    async with handle:
                        log("lease", token, _lease_end(handle))
                        await asyncio.sleep(_hold(rng, ttl) / 2)
                _leave(log, inside, slot, token)
        except LockLostError:
            log("lost", token, time.monotonic_ns())
            log("leave", token, time.monotonic_ns())
        except LockError:
            pass
        await asyncio.sleep(rng.uniform(0, 0.02))


# The run ----------------------------------------------------------------------------------


@dataclass
class Report:
    """What one stress run did, and what it found."""

    processes: int
    seconds: float
    acquisitions: int = 0
    pauses: int = 0
    kills: int = 0
    losses: int = 0
    overlaps: int = 0
    #: Overlaps of two readers of a read-write lock, which need no explaining.
    shared: int = 0
    #: Overlaps with a holder that outlived an unrenewed lease and died before it looked.
    outlived: int = 0
    unexplained: list[str] = field(default_factory=list)
    #: Workers that ended other than by the chaos or at the end of the run (see ``finish``).
    crashed: list[str] = field(default_factory=list)

    def summary(self) -> str:
        return (
            f"{self.processes} processes for {self.seconds:.0f}s: {self.acquisitions} "
            f"acquisitions, {self.pauses} pauses, {self.kills} kills, {self.losses} losses "
            f"reported, {self.overlaps} overlaps ({self.outlived} with a holder that outlived an "
            f"unrenewed lease and died), {len(self.unexplained)} unexplained"
            + (f"; and {self.shared} overlaps of two readers" if self.shared else "")
        )


def run(
    setting: dict[str, Any],
    directory: Path,
    *,
    processes: int = 8,
    seconds: float = 30.0,
    name: str = "stress",
    seed: int = 1,
    asyncio_share: float = 0.25,
    chaos: bool = True,
    rounds: Rounds | None = None,
) -> Report:
    """Run the stress test; return its report (``unexplained`` must be empty).

    ``rounds`` are what each worker process runs (see :func:`worker`).
    """
    rng = random.Random(seed)
    inside = spawn.Array("q", processes, lock=False)
    window = Window(seconds)
    chaos_log = _Log(str(directory / "chaos.log"))
    counter = itertools.count()
    children: dict[int, multiprocessing.process.BaseProcess] = {}

    def start(slot: int) -> None:
        number = next(counter)
        child = spawn.Process(
            target=worker,
            args=(
                setting,
                name,
                slot,
                inside,
                str(directory / f"worker-{number}.log"),
                window,
                seed * 1000 + number,
                slot < processes * asyncio_share,
                rounds,
            ),
            daemon=True,
        )
        child.start()
        children[slot] = child

    for slot in range(processes):
        start(slot)
    until = window.open(children)
    if chaos:
        _chaos(rng, children, inside, chaos_log, until, start)
    crashed = finish(children, until)
    report = check(directory, processes, seconds)
    report.crashed = crashed
    return report


def finish(children: dict[int, multiprocessing.process.BaseProcess], until: float) -> list[str]:
    """Wait for the workers the chaos left alive; return how each that failed ended.

    Those end by themselves at ``until``: one that raised, or hangs, is a failed run, however
    many acquisitions the others made.
    """
    failed = []
    for child in children.values():
        child.join(max(5.0, until - time.monotonic() + 30))
        if child.is_alive():
            child.kill()
            failed.append(f"worker pid {child.pid} hung, and was killed")
        elif child.exitcode != 0:
            failed.append(f"worker pid {child.pid} exited with {child.exitcode}")
    return failed


def _chaos(
    rng: random.Random,
    children: dict[int, multiprocessing.process.BaseProcess],
    inside: Any,
    log: _Log,
    until: float,
    start: Callable[[int], None],
) -> None:
    while time.monotonic() < until - 3:
        time.sleep(rng.uniform(0.2, 1.0))
        slot = rng.randrange(len(children))
        child = children[slot]
        pid = child.pid
        if pid is None or not child.is_alive():
            continue
        action = rng.random()
        if action < 0.2:
            os.kill(pid, signal.SIGKILL)
            child.join(5)
            log("kill", pid, time.monotonic_ns())
            inside[slot] = 0  # it holds nothing any more (its lease runs out)
            start(slot)
            continue
        os.kill(pid, signal.SIGSTOP)
        log("stop", pid, time.monotonic_ns())
        pause = rng.choice((0.05, 0.2, 0.6, 1.5))  # longer than a lease, often
        if action < 0.3:  # stopped, then killed while stopped
            time.sleep(pause)
            os.kill(pid, signal.SIGKILL)
            child.join(5)
            log("kill", pid, time.monotonic_ns())
            inside[slot] = 0
            start(slot)
            continue
        threading.Timer(pause, _resume, args=(pid, log)).start()


def _resume(pid: int, log: _Log) -> None:
    try:
        os.kill(pid, signal.SIGCONT)
    except ProcessLookupError:
        return
    log("cont", pid, time.monotonic_ns())


# Checking -----------------------------------------------------------------------------------


@dataclass
class _Section:
    pid: int
    token: int
    enter: int
    #: When the lease of a hold that was not renewed ended, at the latest.
    lease_end: int | None
    leave: int | None = None
    #: A reader of a read-write lock: it may overlap other readers.
    shared: bool = False


def check(directory: Path, processes: int, seconds: float) -> Report:
    """Read the logs of a run; list every overlap that no reported loss explains."""
    report = Report(processes, seconds)
    death: dict[int, int] = {}
    stopped_at: dict[int, int] = {}
    events: list[tuple[int, str, int]] = []
    for words in _lines(directory / "chaos.log"):
        kind, pid, at = words[0], int(words[1]), int(words[2])
        events.append((at, kind, pid))
        if kind == "stop":
            report.pauses += 1
            stopped_at.setdefault(pid, at)  # stopped again while stopped: from the first
        elif kind == "cont":
            stopped_at.pop(pid, None)
        elif kind == "kill":
            report.kills += 1
            # Killed while stopped: it never ran after the stop.
            death[pid] = stopped_at.pop(pid, at)
    sections: list[_Section] = []
    lost: set[int] = set()
    seen: list[tuple[int, int, int]] = []
    pids: dict[str, int] = {}
    for path in sorted(directory.glob("worker-*.log")):
        key = path.name
        for words in _lines(path):
            kind = words[0]
            if kind == "pid":
                pids[key] = int(words[1])
            elif kind == "enter":
                lease_end = None if words[3] == "-" else int(words[3])
                sections.append(
                    _Section(
                        pids.get(key, -1),
                        int(words[1]),
                        int(words[2]),
                        lease_end,
                        shared=words[4:] == ["read"],
                    )
                )
            elif kind == "lease" and words[2] != "-":
                for section in reversed(sections):
                    if section.token == int(words[1]):
                        section.lease_end = int(words[2])
                        break
            elif kind == "leave":
                for section in reversed(sections):
                    if section.token == int(words[1]) and section.leave is None:
                        section.leave = int(words[2])
                        break
            elif kind == "lost":
                lost.add(int(words[1]))
            elif kind == "seen":
                seen.append((int(words[1]), int(words[2]), int(words[3])))
    report.acquisitions = len(sections)
    report.losses = len(lost)
    end_of_run = time.monotonic_ns()
    for section in sections:
        if section.leave is None:
            section.leave = death.get(section.pid, end_of_run)
    ordered = sorted(sections, key=lambda s: s.enter)
    for index, first in enumerate(ordered):
        assert first.leave is not None
        for second in ordered[index + 1 :]:
            if second.enter >= first.leave:
                break
            if first.token == second.token:
                continue  # one hold, counted by two tasks of one process: not possible
            if first.shared and second.shared:
                report.shared += 1
                continue
            report.overlaps += 1
            if {first.token, second.token} & lost:
                continue
            if _outlived(first, second, death):
                report.outlived += 1
            else:
                report.unexplained.append(
                    f"tokens {first.token} (pid {first.pid}) and {second.token} "
                    f"(pid {second.pid}) ran at once; neither was told of a loss\n"
                    + _timeline(first, second, events)
                )
    # A holder seen inside after it stopped for good (it was killed while stopped) never ran
    # beside the one that saw it; nor did one that had outlived its unrenewed lease and died.
    died = {s.token: death[s.pid] for s in sections if s.pid in death}
    by_token = {s.token: s for s in sections}
    for mine, other, at in seen:
        explained = (
            mine == other
            or bool({mine, other} & lost)
            or at >= died.get(other, at + 1)
            or (
                mine in by_token
                and other in by_token
                and _outlived(by_token[other], by_token[mine], death)
            )
        )
        if not explained:
            report.unexplained.append(f"token {mine} saw {other} inside; nobody was told")
    return report


def _timeline(first: _Section, second: _Section, events: list[tuple[int, str, int]]) -> str:
    """Describe two overlapping sections and what the chaos thread did to their processes."""

    def ms(at: int | None) -> str:
        return "-" if at is None else f"{(at - first.enter) / 1e6:+.1f}ms"

    lines = [
        f"  {s.token} pid {s.pid}: enter {ms(s.enter)}, lease end {ms(s.lease_end)}, "
        f"leave {ms(s.leave)}"
        for s in (first, second)
    ]
    lines += [
        f"  {kind} pid {pid} {ms(at)}"
        for at, kind, pid in events
        if pid in (first.pid, second.pid) and first.enter - 3e9 <= at <= (second.leave or at)
    ]
    return "\n".join(lines)


def _outlived(first: _Section, second: _Section, death: dict[int, int]) -> bool:
    """Return whether ``first`` ran on past a lease it did not renew, and died before its exit.

    Such a holder is told at its exit (its release finds the lease gone); it was killed
    first. It is the one case where nobody can be told, and it needs no renewal to happen.
    """
    return (
        first.pid in death
        and first.lease_end is not None
        and second.enter >= first.lease_end
        and first.leave == death[first.pid]
    )


def _lines(path: Path) -> list[list[str]]:
    if not path.exists():
        return []
    return [line.split() for line in path.read_text().splitlines() if line.strip()]
