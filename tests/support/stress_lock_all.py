"""The fault stress run of :mod:`tests.support.stress`, with ``lock_all`` over several names.

Workers take random subsets of the names (in random order) while the same chaos thread
stops, resumes and kills them. Each worker keeps one log per name, in that name's directory
and in the format of :mod:`tests.support.stress`, so the same checker reads each name on its
own: every overlap of two holds of one name must be explained by a loss reported to one of
them.
"""

from __future__ import annotations

import asyncio
import itertools
import multiprocessing
import os
import random
import shutil
import time
from pathlib import Path
from typing import Any

from .stress import TIMEOUTS, TTLS, Report, Window, _chaos, _Log, _setup, check, finish

spawn = multiprocessing.get_context("spawn")


def worker(
    setting: dict[str, Any],
    names: list[str],
    directory: str,
    number: int,
    window: Window,
    seed: int,
    use_asyncio: bool,
) -> None:
    """Take lock_all over random subsets of ``names`` until the ``window`` ends, logging each."""
    _setup(setting)
    import logging

    from django_redis_lock.signals import lock_lost

    logging.getLogger("django_redis_lock").setLevel(logging.ERROR)
    logs = {name: _Log(str(Path(directory) / name / f"worker-{number}.log")) for name in names}
    for log in logs.values():
        log("pid", os.getpid())

    def reported(name: str, fencing_token: int, **kwargs: Any) -> None:
        logs[name]("lost", fencing_token, time.monotonic_ns())

    lock_lost.connect(reported, weak=False)
    rng = random.Random(seed)
    until = window.join()
    if use_asyncio:
        asyncio.run(_async_rounds(names, logs, until, rng))
    else:
        _rounds(names, logs, until, rng)


def _choose(names: list[str], rng: random.Random) -> dict[str, Any]:
    return {
        "names": rng.sample(names, rng.randint(2, 3)),
        "ttl": rng.choice(TTLS),
        "timeout": rng.choice(TIMEOUTS),
        "auto_renew": rng.random() < 0.7,
    }


def _hold(rng: random.Random, ttl: float) -> float:
    # Fewer long holds than the one-name run: each blocks two or three names at once.
    return rng.uniform(ttl, ttl * 1.5) if rng.random() < 0.15 else rng.uniform(0, 0.01)


def _tokens(names: list[str], held: dict[str, int]) -> dict[str, int]:
    """Return each name asked for with its token (0: not held, which the checker flags)."""
    return {name: held.get(name, 0) for name in names}


def _enter(logs: dict[str, _Log], tokens: dict[str, int], renewed: bool) -> None:
    from django_redis_lock._core.holds import held

    now = time.monotonic_ns()
    for name, token in tokens.items():
        ends = [h.ends for (_, n, _), h in held.items() if n == name and h.fencing_token == token]
        lease_end = "-" if renewed or not ends else str(int(ends[0] * 1e9))
        logs[name]("enter", token, now, lease_end)


def _leave(logs: dict[str, _Log], tokens: dict[str, int]) -> None:
    now = time.monotonic_ns()
    for name, token in tokens.items():
        logs[name]("leave", token, now)


def _rounds(names: list[str], logs: dict[str, _Log], until: float, rng: random.Random) -> None:
    from django_redis_lock import LockError, lock_all

    while time.monotonic() < until:
        choice = _choose(names, rng)
        tokens: dict[str, int] = {}
        left = False
        try:
            with lock_all(**choice) as multi:
                tokens = _tokens(choice["names"], multi.fencing_tokens)
                _enter(logs, tokens, choice["auto_renew"])
                time.sleep(_hold(rng, choice["ttl"]))
                _leave(logs, tokens)
                left = True
        except LockError:
            if tokens and not left:
                _leave(logs, tokens)
        time.sleep(rng.uniform(0, 0.02))


async def _async_rounds(
    names: list[str], logs: dict[str, _Log], until: float, rng: random.Random
) -> None:
    from django_redis_lock import LockError, alock_all

    async def rounds() -> None:  # two tasks of one process: two owners
        while time.monotonic() < until:
            choice = _choose(names, rng)
            tokens: dict[str, int] = {}
            left = False
            try:
                async with alock_all(**choice) as multi:
                    tokens = _tokens(choice["names"], multi.fencing_tokens)
                    _enter(logs, tokens, choice["auto_renew"])
                    await asyncio.sleep(_hold(rng, choice["ttl"]))
                    _leave(logs, tokens)
                    left = True
            except LockError:
                if tokens and not left:
                    _leave(logs, tokens)
            await asyncio.sleep(rng.uniform(0, 0.02))

    await asyncio.gather(rounds(), rounds())


def run(
    setting: dict[str, Any],
    directory: Path,
    *,
    names: int = 6,
    processes: int = 8,
    seconds: float = 15.0,
    seed: int = 1,
) -> dict[str, Report]:
    """Run the stress test over ``names`` names; return each name's report."""
    rng = random.Random(seed)
    chosen = [f"stress:{n}" for n in range(names)]
    for name in chosen:
        (directory / name).mkdir()
    inside = spawn.Array("q", processes, lock=False)  # the chaos thread clears a killed slot
    window = Window(seconds)
    chaos_log = _Log(str(directory / "chaos.log"))
    counter = itertools.count()
    children: dict[int, multiprocessing.process.BaseProcess] = {}

    def start(slot: int) -> None:
        number = next(counter)
        child = spawn.Process(
            target=worker,
            args=(setting, chosen, str(directory), number, window, seed * 1000 + number, slot < 2),
            daemon=True,
        )
        child.start()
        children[slot] = child

    for slot in range(processes):
        start(slot)
    until = window.open(children)
    _chaos(rng, children, inside, chaos_log, until, start)
    crashed = finish(children, until)
    reports = {}
    for name in chosen:
        shutil.copy(directory / "chaos.log", directory / name / "chaos.log")
        reports[name] = check(directory / name, processes, seconds)
        reports[name].crashed = crashed
    return reports
