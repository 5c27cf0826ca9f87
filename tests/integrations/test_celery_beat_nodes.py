"""`celery beat -S django_redis_lock.celery.beat:LeaderScheduler` on two and three real nodes.

Each node is a real `celery beat` process on the test's redis-server (broker and locks), with
one entry due every second, sent to a queue nobody consumes: the test reads every message
the broker received, with the header that says which term sent it and for which run.
"""

from __future__ import annotations

import itertools
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
import redis as redis_py

from django_redis_lock import leader
from tests.support.celery_harness import beat_messages, celery_beat, stop_beat
from tests.support.helpers import eventually

pytestmark = [pytest.mark.slow, pytest.mark.serial]

TTL = 2.0
#: How long the nodes run after the first message, and when the leader is killed: several
#: runs of the first term before the kill, and several of the next after its takeover (a
#: longer run only repeats the same sends).
RUN_FOR, KILL_AT = 12.0, 5.0
#: The schedule's period, and the longest a follower waits between two tries (min(1, ttl/4)).
PERIOD, POLL = 1.0, 0.5
#: What a loaded machine (CI has two cores for three nodes and the test) may add to a wait.
SLACK = 1.0


def assert_each_run_sent_once(sent: list[dict[str, Any]]) -> list[float]:
    """Check the messages beat sent, oldest first; return their run times (seconds).

    Each run is sent once: every message counts from a run no earlier than the one before it
    (a second send of one due time would count from the same run, or an older one), and the
    sends are a period apart. No gap between two sends is longer than the lease allows.
    """
    runs = [message["run"] / 1e6 for message in sent]
    afters = [message["after"] / 1e6 for message in sent]
    for previous_run, after, run in zip(runs, afters[1:], runs[1:], strict=False):
        assert after >= previous_run, f"a run was sent twice: {sent}"
        assert run - previous_run >= PERIOD * 0.9, f"two sends {run - previous_run:.3f}s apart"
    gaps = [later - earlier for earlier, later in itertools.pairwise(runs)]
    assert max(gaps) <= PERIOD + TTL + POLL + SLACK, f"a gap of {max(gaps):.2f}s"
    return runs


@pytest.mark.parametrize("count", [2, 3])
def test_nodes__each_run_is_sent_once__through_a_sigkill_of_the_leader(
    redis_url: str, prefix: str, raw_redis: redis_py.Redis, tmp_path: Path, count: int
) -> None:
    nodes = [
        celery_beat(redis_url, prefix, tmp_path, name=f"{count}-{n}", ttl=TTL)
        for n in range(count)
    ]
    pids = {node.pid: node for node in nodes}
    try:
        eventually(lambda: bool(beat_messages(raw_redis, prefix)), timeout=60)
        started = time.monotonic()
        time.sleep(KILL_AT)
        first = leader("beat").leader()
        assert first is not None
        assert first.pid in pids, "the leader is one of the nodes"
        os.kill(first.pid, signal.SIGKILL)
        killed_at = time.time()
        pids.pop(first.pid).wait(10)
        time.sleep(RUN_FOR - (time.monotonic() - started))
        second = leader("beat").leader()
    finally:
        for node in nodes:
            if node.poll() is None:
                stop_beat(node)
    sent = beat_messages(raw_redis, prefix)
    assert second is not None
    assert second.pid in pids, "a surviving node took over"
    assert second.fencing_token > first.fencing_token

    runs = assert_each_run_sent_once(sent)
    terms = [message["term"] for message in sent]
    assert terms == sorted(terms), "an old term sent after a new one"
    # A loaded machine may delay a renewal past the lease: a term then ends, and another node
    # is elected, without a run sent twice. The killed leader's and the last one's are there.
    assert {first.fencing_token, second.fencing_token} <= set(terms)

    # The next leader sends within the lease, and no run is skipped beyond it.
    after_kill = [
        run for run, term in zip(runs, terms, strict=True) if term == second.fencing_token
    ]
    takeover = after_kill[0] - killed_at
    assert takeover <= TTL + POLL + SLACK, f"the next leader sent {takeover:.2f}s after the kill"
    assert len(sent) >= RUN_FOR - TTL - POLL - 1, f"only {len(sent)} runs in {RUN_FOR}s"


def test_nodes__a_leader_paused_past_its_lease_sends_nothing_when_it_resumes(
    redis_url: str, prefix: str, raw_redis: redis_py.Redis, tmp_path: Path
) -> None:
    nodes = [
        celery_beat(redis_url, prefix, tmp_path, name=f"paused-{n}", ttl=TTL) for n in range(2)
    ]
    try:
        eventually(lambda: len(beat_messages(raw_redis, prefix)) >= 2, timeout=60)
        first = leader("beat").leader()
        assert first is not None
        os.kill(first.pid, signal.SIGSTOP)
        stopped_at = time.time()
        try:
            eventually(lambda: getattr(leader("beat").leader(), "pid", first.pid) != first.pid)
            time.sleep(1.0)
        finally:
            os.kill(first.pid, signal.SIGCONT)
        time.sleep(4.0)  # the resumed node runs on; the other keeps leading
        second = leader("beat").leader()
    finally:
        for node in nodes:
            stop_beat(node)
    sent = beat_messages(raw_redis, prefix)
    assert second is not None
    assert second.pid != first.pid, "the resumed node took the office back"
    old = [message["run"] / 1e6 for message in sent if message["term"] == first.fencing_token]
    assert old, "the first leader sent"
    assert max(old) < stopped_at, "the paused leader sent a run after it was stopped"
    assert_each_run_sent_once(sent)
