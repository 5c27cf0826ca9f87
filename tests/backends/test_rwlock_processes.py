"""rwlock between processes, on a real redis-server: readers share, a writer is alone, no
writer starves, fencing tokens follow the order of the holds, and a process killed while it
holds or waits holds the others back only until its lease or its claim ends.

``RWLOCK_SECONDS=60`` runs the contention test for 60 seconds (10 by default: every
assertion on progress scales with the length, so a longer run proves the same, more often).
"""

from __future__ import annotations

import itertools
import json
import multiprocessing
import os
import signal
import time
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NamedTuple

import pytest
import redis as redis_py

from django_redis_lock import locks, rwlock
from django_redis_lock._core.handle import WAIT_SLICE
from tests.support import rwlock_workers
from tests.support.helpers import eventually, in_thread, running
from tests.support.rwlock_workers import NAME, side_of

# Many processes at once, their pace asserted: one such module runs at a time under xdist.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("processes")]

spawn = multiprocessing.get_context("spawn")

SECONDS = float(os.environ.get("RWLOCK_SECONDS", "10"))

#: The longest a writer of the contention test may wait. Readers hold 10 to 50 ms and queue
#: behind a waiting writer, so a writer waits for the readers inside when it came, the other
#: writer (a few ms) and the readers queued before that one: about 0.2 s, or a few times that
#: on a loaded machine. A wake-up the lock failed to send costs a retry slice (WAIT_SLICE,
#: 2 s) or a lease (5 s); a starved writer waits for ever (its acquire times out at 20 s).
MAX_WRITER_WAIT = 1.5


# The contention test -------------------------------------------------------------------------


class Stats(NamedTuple):
    holds: Counter[tuple[str, int]]  # (mode, pid): holds
    max_writer_wait: float
    overlapping_readers: int
    max_readers: int


def check_exclusion(holds: list[dict[str, Any]]) -> None:
    """Assert that no writer's hold overlapped another hold, and fencing tokens tell the order.

    Tokens are all distinct, and for a writer's hold W and any other hold H, H ended before W
    started if its token is smaller, and started after W ended if its token is larger.
    """
    tokens = [hold["token"] for hold in holds]
    assert len(set(tokens)) == len(tokens), "two holds had the same fencing token"
    spans = [(h["token"], h["start"], h["end"], h["mode"], h.get("pid")) for h in holds]
    for w_token, w_start, w_end, _, w_pid in (span for span in spans if span[3] == "write"):
        for token, start, end, mode, pid in spans:
            if token == w_token:
                continue
            assert end <= w_start or start >= w_end, (
                f"a writer (token {w_token}, pid {w_pid}) held beside a {mode} hold (token "
                f"{token}, pid {pid}): {(start - w_start) / 1e6:+.1f}ms to "
                f"{(end - w_start) / 1e6:+.1f}ms from the writer's start, which lasted "
                f"{(w_end - w_start) / 1e6:.1f}ms"
            )
            assert (token < w_token) == (end <= w_start), (
                f"fencing: token {token} ({mode}) is {'smaller' if token < w_token else 'larger'}"
                f" than writer token {w_token}, yet held {'after' if end > w_start else 'before'}"
                " the writer"
            )


def reader_overlaps(holds: list[dict[str, Any]]) -> tuple[int, int]:
    """Return how many read holds began while another was held, and the most at once."""
    reads = sorted((h["start"], h["end"]) for h in holds if h["mode"] == "read")
    overlapping, latest_end = 0, 0
    for start, end in reads:
        overlapping += start < latest_end
        latest_end = max(latest_end, end)
    changes = sorted([(start, 1) for start, _ in reads] + [(end, -1) for _, end in reads])
    at_once = list(itertools.accumulate(change for _, change in changes))
    return overlapping, max(at_once, default=0)


def check_log(entries: list[dict[str, Any]]) -> Stats:
    """Assert what the logs of the contention test must show; return what they measured."""
    refused = [entry for entry in entries if entry["event"] == "refused"]
    assert refused == [], f"{len(refused)} acquisitions timed out, e.g. {refused[:3]}"
    holds = [entry for entry in entries if entry["event"] == "held"]
    check_exclusion(holds)
    waits = [(h["start"] - h["asked"]) / 1e9 for h in holds if h["mode"] == "write"]
    overlapping, most = reader_overlaps(holds)
    return Stats(
        holds=Counter((h["mode"], h["pid"]) for h in holds),
        max_writer_wait=max(waits, default=0.0),
        overlapping_readers=overlapping,
        max_readers=most,
    )


def test_check_log__catches_a_writer_beside_anyone_and_fencing_out_of_order() -> None:
    def held(mode: str, token: int, start: int, end: int) -> dict[str, Any]:
        return {"event": "held", "mode": mode, "pid": token, "token": token, "asked": 0,
                "start": start, "end": end}  # fmt: skip

    good = [held("read", 1, 0, 10), held("read", 2, 5, 20), held("write", 3, 20, 30),
            held("read", 4, 30, 40)]  # fmt: skip
    stats = check_log(good)
    assert (stats.overlapping_readers, stats.max_readers) == (1, 2)
    assert stats.max_writer_wait == 20e-9
    with pytest.raises(AssertionError, match="held beside a read hold"):
        check_log([*good, held("read", 5, 25, 26)])
    with pytest.raises(AssertionError, match="held beside a write hold"):
        check_log([*good, held("write", 5, 29, 31)])
    with pytest.raises(AssertionError, match="fencing: token 5"):
        check_log([*good, held("read", 5, 0, 1)])
    with pytest.raises(AssertionError, match="same fencing token"):
        check_log([*good, held("read", 4, 50, 60)])
    with pytest.raises(AssertionError, match="timed out"):
        check_log([*good, {"event": "refused", "mode": "write", "pid": 1}])


@pytest.mark.serial
def test_rwlock__8_reader_and_2_writer_processes_share_exclude_and_no_writer_starves(
    redis_url: str, prefix: str, raw_redis: redis_py.Redis
) -> None:
    modes = ["read"] * 8 + ["write"] * 2
    children = [
        spawn.Process(
            target=rwlock_workers.contend,
            args=(redis_url, prefix, n, SECONDS, mode, n in (3, 7, 9)),  # three of them asyncio
        )
        for n, mode in enumerate(modes)
    ]
    with running(children):
        eventually(lambda: raw_redis.llen(f"{prefix}:ready") == len(children), 120)
        raw_redis.rpush(f"{prefix}:go", *["1"] * len(children))  # all start together
        for child in children:
            child.join(SECONDS + 90)
    assert [c.exitcode for c in children] == [0] * len(children), "a process hung or failed"
    stats = check_log([json.loads(line) for line in raw_redis.lrange(f"{prefix}:log", 0, -1)])
    writers = {pid: n for (mode, pid), n in stats.holds.items() if mode == "write"}
    readers = {pid: n for (mode, pid), n in stats.holds.items() if mode == "read"}
    summary = (
        f"{SECONDS:.0f}s: holds per writer {sorted(writers.values())}, per reader "
        f"{sorted(readers.values())}; max writer wait {stats.max_writer_wait:.3f}s; "
        f"{stats.overlapping_readers} reads began beside another, {stats.max_readers} at most"
    )
    print(summary)
    assert (len(writers), len(readers)) == (2, 8), summary
    assert min(writers.values()) >= SECONDS, f"a writer made little progress: {summary}"
    assert min(readers.values()) >= SECONDS, f"a reader made little progress: {summary}"
    assert stats.max_writer_wait < MAX_WRITER_WAIT, f"a writer waited too long: {summary}"
    assert stats.overlapping_readers >= SECONDS, f"readers rarely shared the lock: {summary}"
    assert stats.max_readers >= 3, summary


# Killed processes ----------------------------------------------------------------------------


class Taken(NamedTuple):
    mode: str
    token: int
    start: int  # time.monotonic_ns(), in the hold
    end: int


def take(rw: Any, mode: str, hold: float = 0.2) -> Taken:
    """Take the ``mode`` side of ``rw`` (blocking) and hold it ``hold`` seconds."""
    side = side_of(rw, mode)
    assert side.acquire(), f"the {mode} side was not taken within its timeout"
    start, token = time.monotonic_ns(), side.fencing_token
    time.sleep(hold)
    end = time.monotonic_ns()
    side.release()
    return Taken(mode, token, start, end)


def free_to(rw: Any, mode: str) -> bool:
    """Return whether another owner (a thread of its own) takes the ``mode`` side at once."""

    def attempt() -> bool:
        side = side_of(rw, mode)
        if not side.acquire(blocking=False):
            return False
        side.release()
        return True

    return in_thread(attempt)


def check_taken(taken: Sequence[Taken]) -> None:
    check_exclusion([t._asdict() for t in taken])


def seconds_since(at: float, taken: Sequence[Taken]) -> tuple[float, float]:
    """Return when the first and the last of ``taken`` started, in seconds after ``at``."""
    starts = [t.start / 1e9 - at for t in taken]
    return min(starts), max(starts)


@pytest.mark.parametrize(
    ("killed", "takers"), [("read", ["write"]), ("write", ["read", "read", "read"])]
)
def test_rwlock__a_killed_holder_holds_the_other_side_back_until_its_lease_ends(
    redis_url: str, prefix: str, raw_redis: redis_py.Redis, killed: str, takers: list[str]
) -> None:
    ttl = 2.0
    rw = rwlock(NAME, ttl=30, timeout=15)
    child = spawn.Process(
        target=rwlock_workers.hold_until_killed, args=(redis_url, prefix, killed, ttl)
    )
    with running([child]):
        reply = raw_redis.blpop([f"{prefix}:holding"], timeout=60)
        assert reply is not None, "the child never took the lock"
        old = int(reply[1])
        time.sleep(ttl + 0.5)  # renewal keeps a living holder's lease past its first end
        assert not free_to(rw, "write")
        assert free_to(rw, "read") == (killed == "read")  # readers share with a reader only
        assert child.pid is not None
        os.kill(child.pid, signal.SIGKILL)
        child.join(10)
        left = locks["default"].ttl(NAME)  # of the killed holder's lease, on the server
        lease_end = time.monotonic() + (left or 0)
        assert left is not None, "the killed holder's lease ended before it was killed"
        assert left <= ttl
        with ThreadPoolExecutor(len(takers)) as pool:
            taken = list(pool.map(lambda mode: take(rw, mode, 0.3), takers))
    assert child.exitcode == -signal.SIGKILL
    first, last = seconds_since(lease_end, taken)
    print(f"the killed {killed} hold's lease ended {left:.3f}s after its death; "
          f"{'+'.join(takers)} in {first:+.3f}s to {last:+.3f}s after that")  # fmt: skip
    assert first >= -0.01, "taken before the killed holder's lease ended"
    assert last < 1.0, "the lock stayed out of reach after the killed holder's lease ended"
    assert all(t.token > old for t in taken)
    check_taken(taken)
    if len(taken) > 1:  # the readers shared the lock
        assert max(t.start for t in taken) < min(t.end for t in taken)


def waiting_writer(pid: int | None) -> bool:
    return [(w.mode, w.pid) for w in locks["default"].waiters(NAME)] == [("write", pid)]


@pytest.mark.parametrize("holder_releases", [True, False], ids=["released", "still-held"])
def test_rwlock__a_killed_waiting_writer_holds_the_others_back_only_briefly(
    redis_url: str, prefix: str, raw_redis: redis_py.Redis, holder_releases: bool
) -> None:
    """A reader holds; a writer process waits behind it and is killed while it waits.

    Released: the release hands the lock to the dead writer, whose grant is never claimed:
    readers (one queued behind the dead writer, two coming after the release) get in once
    the grant lapses (CLAIM_MS, 1 s), within a retry slice (WAIT_SLICE, 2 s) of the release.
    Still held: the dead writer's registration keeps new readers queued behind it (nobody
    can tell it from a live writer) until it ends; they join the holder within a retry slice
    after that. Then a writer gets in at once, and nothing is left queued or held.
    """
    rw = rwlock(NAME, ttl=30, timeout=15)
    holder = rw.read()
    assert holder.acquire()
    child = spawn.Process(target=rwlock_workers.wait_to_write, args=(redis_url, prefix))
    with running([child]):
        eventually(lambda: waiting_writer(child.pid), 60)
        assert not free_to(rw, "read"), "a reader passed a waiting writer"
        assert child.pid is not None
        os.kill(child.pid, signal.SIGKILL)
        child.join(10)
        registration = locks["default"].waiters(NAME)[0].expires_in  # fixed once it is dead
        registration_end = time.monotonic() + registration
        with ThreadPoolExecutor(3) as pool:
            early = pool.submit(take, rw, "read")  # queued behind the dead writer
            eventually(lambda: len(locks["default"].waiters(NAME)) == 2)
            if holder_releases:
                holder.release()
                since = time.monotonic()
            else:
                since = registration_end
            late = [pool.submit(take, rw, "read") for _ in range(2)]
            reads = [early.result(), *(future.result() for future in late)]
        if not holder_releases:
            holder.release()
        released = time.monotonic()
        write = take(rw, "write", 0)
    assert child.exitcode == -signal.SIGKILL
    assert raw_redis.llen(f"{prefix}:wrote") == 0, "the killed writer wrote"
    first, last = seconds_since(since, reads)
    after = "the release" if holder_releases else "it ended"
    print(f"the dead writer's registration had {registration:.3f}s left; readers in "
          f"{first:+.3f}s to {last:+.3f}s after {after}; then a writer in "
          f"{write.start / 1e9 - released:.3f}s")  # fmt: skip
    assert last < WAIT_SLICE + 0.5, "readers were held back too long"
    assert write.start / 1e9 - released < 1.0, "a writer was held back"
    check_taken([*reads, write])
    assert locks["default"].waiters(NAME) == [], "a waiter stayed queued"
    assert locks["default"].ttl(NAME) is None, "the lock stayed held"


# Fair order ----------------------------------------------------------------------------------


def test_rwlock__fair_readers_and_writers_are_served_in_arrival_order(
    redis_url: str, prefix: str, raw_redis: redis_py.Redis
) -> None:
    arrivals = [("r1", "read"), ("w1", "write"), ("r2", "read"), ("r3", "read"),
                ("w2", "write"), ("r4", "read")]  # fmt: skip
    children = [
        spawn.Process(target=rwlock_workers.take_in_turn, args=(redis_url, prefix, tag, mode, 0.3))
        for tag, mode in arrivals
    ]
    with running(children):
        eventually(lambda: raw_redis.llen(f"{prefix}:ready") == len(children), 120)
        with rwlock(NAME, ttl=30, fair=True).write():  # they all queue, in the order they come
            for count, (tag, _) in enumerate(arrivals, 1):
                raw_redis.rpush(f"{prefix}:go:{tag}", "1")
                eventually(lambda n=count: len(locks["default"].waiters(NAME)) == n, 30)
        for child in children:
            child.join(60)
    assert [c.exitcode for c in children] == [0] * len(children)
    holds = [json.loads(line) for line in raw_redis.lrange(f"{prefix}:log", 0, -1)]
    check_exclusion(holds)
    by_tag = {hold["tag"]: hold for hold in holds}
    assert [h["tag"] for h in sorted(holds, key=lambda h: h["token"])] == [t for t, _ in arrivals]
    r2, r3 = by_tag["r2"], by_tag["r3"]
    assert max(r2["start"], r3["start"]) < min(r2["end"], r3["end"]), "r2 and r3 did not share"
