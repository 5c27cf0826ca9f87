"""lock_all between processes, on a real redis-server: no deadlock, no overlap, all or nothing.

The contention test runs for ``LOCK_ALL_SECONDS`` seconds (10 by default; every process
must still make five holds or more).
"""

from __future__ import annotations

import itertools
import json
import multiprocessing
import os
import signal
import time
from collections import defaultdict
from typing import Any

import pytest
import redis as redis_py

from django_redis_lock import lock_all
from tests.support import lock_all_workers
from tests.support.helpers import eventually

# Many processes at once, their pace asserted: one such module runs at a time under xdist.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("processes")]

spawn = multiprocessing.get_context("spawn")

SECONDS = float(os.environ.get("LOCK_ALL_SECONDS", "10"))


def check_log(entries: list[dict[str, Any]], processes: int) -> dict[int, int]:
    """Assert what the logs of the contention test must show; return holds per process.

    No two holds of one name overlap, each hold has every name it asked for (a token of
    each, tokens of a name growing with each new hold), and a refused acquisition kept none.
    """
    holds = [entry for entry in entries if entry["event"] == "held"]
    for entry in holds:
        assert sorted(entry["tokens"]) == sorted(entry["names"]), f"not all or nothing: {entry}"
    for entry in entries:
        if entry["event"] == "refused":
            assert entry["kept"] == [], f"a refused acquisition kept names: {entry}"
    by_name: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for entry in holds:
        for name in entry["names"]:
            by_name[name].append(entry)
    for name, entries_of_name in by_name.items():
        entries_of_name.sort(key=lambda e: e["start"])
        for before, after in itertools.pairwise(entries_of_name):
            assert before["end"] <= after["start"], f"two holds of {name} overlapped"
            assert before["tokens"][name] < after["tokens"][name], f"{name}: token not newer"
    per_process: dict[int, int] = defaultdict(int)
    for entry in holds:
        per_process[entry["pid"]] += 1
    return per_process


def test_check_log__catches_overlap_partial_holds_and_kept_names() -> None:
    def held(pid: int, names: list[str], start: int, end: int, **tokens: int) -> dict[str, Any]:
        return {"event": "held", "pid": pid, "names": names, "tokens": tokens, "start": start,
                "end": end}  # fmt: skip

    good = [held(1, ["a", "b"], 0, 10, a=1, b=1), held(2, ["b", "c"], 10, 20, b=2, c=1)]
    assert check_log(good, 2) == {1: 1, 2: 1}
    with pytest.raises(AssertionError, match="overlapped"):
        check_log([*good, held(3, ["a"], 5, 6, a=2)], 3)
    with pytest.raises(AssertionError, match="not all or nothing"):
        check_log([held(1, ["a", "b"], 0, 10, a=1)], 1)
    with pytest.raises(AssertionError, match="kept names"):
        check_log([{"event": "refused", "pid": 1, "names": ["a", "b"], "kept": ["a"]}], 1)


def test_lock_all__overlapping_subsets_from_8_processes_never_deadlock_or_overlap(
    redis_url: str, prefix: str, raw_redis: redis_py.Redis
) -> None:
    processes = 8
    children = [
        spawn.Process(
            target=lock_all_workers.contend,
            args=(redis_url, prefix, n, SECONDS, n % 4 == 3),  # two of them asyncio
        )
        for n in range(processes)
    ]
    for child in children:
        child.start()
    try:
        eventually(lambda: raw_redis.llen(f"{prefix}:ready") == processes, 120)
        raw_redis.rpush(f"{prefix}:go", "1")  # all start together, so they contend
        for child in children:
            child.join(SECONDS + 90)
    finally:
        for child in children:
            if child.is_alive():
                child.kill()
    assert [c.exitcode for c in children] == [0] * processes, "a process hung or failed"
    entries = [json.loads(line) for line in raw_redis.lrange(f"{prefix}:log", 0, -1)]
    per_process = check_log(entries, processes)
    assert len(per_process) == processes
    assert min(per_process.values()) >= 5, f"a process made little progress: {per_process}"
    sizes = {len(entry["names"]) for entry in entries if entry["event"] == "held"}
    assert sizes == {2, 3}


def test_lock_all__a_killed_holder_frees_every_name_when_its_leases_end(
    redis_url: str, prefix: str, raw_redis: redis_py.Redis
) -> None:
    names, ttl = ["killed:a", "killed:b", "killed:c"], 1.0
    child = spawn.Process(
        target=lock_all_workers.hold_until_killed, args=(redis_url, prefix, names, ttl)
    )
    child.start()
    try:
        reply = raw_redis.blpop([f"{prefix}:holding"], timeout=60)
        assert reply is not None, "the child never held the names"
        old = json.loads(reply[1])
        assert sorted(old) == names
        time.sleep(2 * ttl)  # renewal keeps a living holder's names past their first lease
        assert not lock_all(names).acquire(blocking=False)
        assert child.pid is not None
        os.kill(child.pid, signal.SIGKILL)
        killed = time.monotonic()
        taker = lock_all(names, ttl=30, timeout=10)
        assert taker.acquire(), "the names must be free once the killed holder's leases end"
        assert time.monotonic() - killed < ttl + 1.0
        assert all(taker.fencing_tokens[name] > old[name] for name in names)
        taker.release()
    finally:
        child.kill()
        child.join(30)
    assert child.exitcode == -signal.SIGKILL
