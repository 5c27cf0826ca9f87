"""leader() across real processes: one leader at a time, takeover after SIGKILL, SIGSTOP."""

from __future__ import annotations

import itertools
import multiprocessing
import os
import signal
import time
import warnings

import pytest
import redis as redis_py

from django_redis_lock import leader
from tests.support import leader_workers

pytestmark = pytest.mark.slow

spawn = multiprocessing.get_context("spawn")


def pop(raw_redis: redis_py.Redis, key: str, timeout: float = 30) -> list[int]:
    reply = raw_redis.blpop([key], timeout=timeout)
    assert reply is not None, f"nothing arrived on {key} within {timeout}s"
    return [int(part) for part in reply[1].split()]


def test_processes__one_leader_at_a_time_and_terms_grow_in_time_order(
    redis_url: str, prefix: str, raw_redis: redis_py.Redis
) -> None:
    children = [
        spawn.Process(target=leader_workers.lead_in_turns, args=(redis_url, prefix, "turns", n, 3))
        for n in range(3)
    ]
    for child in children:
        child.start()
    for child in children:
        child.join(60)
        assert child.exitcode == 0
    terms = sorted(
        (start, end, number, worker)
        for worker, number, start, end in (
            map(int, entry.split()) for entry in raw_redis.lrange(f"{prefix}:terms", 0, -1)
        )
    )
    assert len(terms) >= 10
    assert len({worker for *_, worker in terms}) == 3, "every process led at some point"
    for (_, end, number, _), (start, _, later, _) in itertools.pairwise(terms):
        assert end <= start, "two processes led at once"
        assert later > number, "a later term had a smaller number"


@pytest.mark.serial
def test_sigkill__another_process_takes_over_within_the_lease(
    redis_url: str, prefix: str, raw_redis: redis_py.Redis
) -> None:
    ttl = 1.0
    doomed = spawn.Process(
        target=leader_workers.lead_and_act, args=(redis_url, prefix, "killed", ttl)
    )
    doomed.start()
    try:
        pid, old_term, _ = pop(raw_redis, f"{prefix}:elected")
        assert pid == doomed.pid
        successor = leader("killed", ttl=ttl)
        assert successor.acquire(blocking=False) is None
        info = successor.leader()
        assert info is not None
        assert info.pid == doomed.pid
        assert info.fencing_token == old_term
        os.kill(doomed.pid, signal.SIGKILL)
        killed = time.monotonic()
        term = successor.acquire(timeout=10)
        waited = time.monotonic() - killed
    finally:
        doomed.kill()
        doomed.join(10)
    assert term is not None
    assert waited <= ttl + 0.5, f"took over {waited:.2f}s after the kill, lease {ttl}s"
    assert term.number > old_term
    term.resign()


def test_sigstop__past_the_lease__the_old_leader_sees_lost_before_it_acts(
    redis_url: str, prefix: str, raw_redis: redis_py.Redis
) -> None:
    ttl = 0.5
    paused = spawn.Process(
        target=leader_workers.lead_and_act, args=(redis_url, prefix, "paused", ttl)
    )
    paused.start()
    try:
        _, old_term, _ = pop(raw_redis, f"{prefix}:elected")
        pop(raw_redis, f"{prefix}:acts")  # it acts
        os.kill(paused.pid, signal.SIGSTOP)
        term = leader("paused", ttl=30).acquire(timeout=10)
        assert term is not None, "the stopped leader's term must end with its lease"
        elected_at = time.monotonic_ns()
        time.sleep(0.2)
        os.kill(paused.pid, signal.SIGCONT)
        lost_term, lost_at = pop(raw_redis, f"{prefix}:lost", timeout=10)
    finally:
        os.kill(paused.pid, signal.SIGCONT)
        paused.join(30)
    assert paused.exitcode == 0
    assert lost_term == old_term < term.number
    assert lost_at > elected_at
    acts = [int(at) for at in raw_redis.lrange(f"{prefix}:acts", 0, -1)]
    late = [at for at in acts if at >= elected_at]
    assert not late, f"the old leader acted {len(late)} times after another was elected"
    assert leader("paused").leader() is not None, "the new term survives the old leader"
    term.resign()


def test_fork__a_child_neither_leads_nor_ends_its_parents_term() -> None:
    told: list[object] = []
    with leader("forked", ttl=0.4, on_lost=told.append) as term:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # fork with threads running
            pid = os.fork()
        if pid == 0:  # the child: the term is not its own
            code = 1
            try:
                if term.lost and not told:
                    term.resign()
                    code = 0
            except BaseException:
                code = 2
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        time.sleep(1.0)  # two and a half leases: the parent keeps renewing
        assert not term.lost
        info = leader("forked").leader()
        assert info is not None
        assert info.owner == term.owner
    assert not told
