"""The fault stress run of :mod:`tests.support.stress`, with the two sides of a read-write lock.

Workers take the read or the write side of one ``rwlock`` (some nest a read or a write in a
write, or a read in a read) while the same chaos thread stops, resumes and kills them. They
log in the format of :mod:`tests.support.stress`, a reader's entries marked "read", so the
same checker reads the run: two readers may overlap, but every overlap of a writer with
anyone must be explained by a loss reported to one of the two.
"""

from __future__ import annotations

import asyncio
import random
import time
from pathlib import Path
from typing import Any

from . import stress
from .rwlock_workers import side_of
from .stress import TIMEOUTS, TTLS, _enter, _lease_end, _leave, _Log

#: The share of acquisitions that take the write side.
WRITES = 0.3


def _choose(rng: random.Random) -> tuple[str, dict[str, Any]]:
    """Return a side to take, and the options of the read-write lock to take it from."""
    mode = "write" if rng.random() < WRITES else "read"
    return mode, {
        "ttl": rng.choice(TTLS),
        "timeout": rng.choice(TIMEOUTS),
        "fair": rng.random() < 0.3,
        "auto_renew": rng.random() < 0.7,  # without renewal, a long hold outlives its lease
    }


def _hold(rng: random.Random, ttl: float) -> float:
    # One hold in ten outlasts its lease, so renewal runs; the others take a few ms, so that
    # readers and writers take turns often.
    if rng.random() < 0.1:
        return rng.uniform(ttl, ttl * 1.5)
    return rng.uniform(0, 0.01)


def _nested(rng: random.Random, mode: str) -> str | None:
    """Return the side of a nested acquire (a writer may also read; a reader only reads)."""
    if rng.random() >= 0.5:
        return None
    return "read" if mode == "read" or rng.random() < 0.5 else "write"


def _rounds(
    name: str, slot: int, inside: Any, log: _Log, until: float, rng: random.Random
) -> None:
    from django_redis_lock import LockError, LockLostError, rwlock

    while time.monotonic() < until:
        mode, options = _choose(rng)
        rw = rwlock(name, **options)
        handle, token, entered = side_of(rw, mode), 0, False
        try:
            with handle:
                token, entered = handle.fencing_token or 0, True
                _enter(log, inside, slot, token, _lease_end(handle), shared=mode == "read")
                time.sleep(_hold(rng, options["ttl"]))
                inner = _nested(rng, mode)
                if inner is not None:  # through this lock, or another handle on the name
                    other = rw if rng.random() < 0.5 else rwlock(name, ttl=options["ttl"])
                    with side_of(other, inner):
                        log("lease", token, _lease_end(handle))  # a new lease from here
                        time.sleep(_hold(rng, options["ttl"]) / 2)
                _leave(log, inside, slot, token)
                entered = False
        except LockLostError:
            log("lost", token, time.monotonic_ns())
        except LockError:
            pass
        if entered:  # left by an exception
            _leave(log, inside, slot, token)
        time.sleep(rng.uniform(0, 0.02))


async def _async_rounds(
    name: str, slot: int, inside: Any, log: _Log, until: float, rng: random.Random
) -> None:
    from django_redis_lock import LockError, LockLostError, arwlock

    async def rounds() -> None:  # two tasks of one process: two owners, sharing one slot
        while time.monotonic() < until:
            mode, options = _choose(rng)
            rw = arwlock(name, **options)
            handle, token, entered = side_of(rw, mode), 0, False
            try:
                async with handle:
                    token, entered = handle.fencing_token or 0, True
                    _enter(log, inside, slot, token, _lease_end(handle), shared=mode == "read")
                    await asyncio.sleep(_hold(rng, options["ttl"]))
                    inner = _nested(rng, mode)
                    if inner is not None:
                        async with side_of(rw, inner):
                            log("lease", token, _lease_end(handle))
                            await asyncio.sleep(_hold(rng, options["ttl"]) / 2)
                    _leave(log, inside, slot, token)
                    entered = False
            except LockLostError:
                log("lost", token, time.monotonic_ns())
            except LockError:
                pass
            if entered:
                _leave(log, inside, slot, token)
            await asyncio.sleep(rng.uniform(0, 0.02))

    await asyncio.gather(rounds(), rounds())


def run(
    setting: dict[str, Any], directory: Path, *, processes: int = 8, seconds: float = 15.0
) -> stress.Report:
    """Run the stress test on the read-write lock "stress-rw"; return its report."""
    return stress.run(
        setting,
        directory,
        processes=processes,
        seconds=seconds,
        name="stress-rw",
        rounds=(_rounds, _async_rounds),
    )
