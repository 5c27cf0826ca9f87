"""``@single_instance`` on real django-tasks-db workers: two ``db_worker`` processes at once.

The workers share one SQLite file, migrated for the module, and the session's throw-away
redis-server (see :mod:`tests.support.tasks_worker`). Each test uses keys of its own; what
overlapped is read from the runs' start and end lines, timed by the one monotonic clock
that every process on the machine reads.
"""

from __future__ import annotations

import secrets
import time
from typing import Any

import pytest

from django_redis_lock import lock, locks
from tests.support.helpers import queued
from tests.support.tasks_worker import Pool, assert_no_overlap, call, poll, spans

pytestmark = pytest.mark.slow

#: The lock name of a run of ``task`` (of tests.support.tasks) with ``key``.
LOCK = "task:tests.support.tasks.{task}:{key}"


@pytest.fixture
def key() -> str:
    """Return a key no other test uses."""
    return f"k{secrets.token_hex(4)}"


def ended(workers: Pool, key: str, run: str) -> bool:
    """Tell whether the run ``run`` of ``key`` has logged its end."""
    return any((line.event, line.run) == ("end", run) for line in workers.lines(key))


def test_duplicates__never_overlap_and_runs_plus_skips_add_up(workers: Pool, key: str) -> None:
    by_position, by_name = call("exclusive", key, 0.5), call("exclusive", key=key, seconds=0.5)
    outcomes = workers.enqueue(*[by_position, by_name] * 5)
    rows = workers.finished(*(outcome["id"] for outcome in outcomes))
    assert {row.status for row in rows} == {"SUCCESSFUL"}
    ran = [row.id for row in rows if row.value is not None]
    skipped = [row.id for row in rows if row.value is None]
    assert len(ran) + len(skipped) == 10
    assert skipped, "with two workers, some duplicates met a running instance"
    lines = workers.lines(key)
    assert sorted(line.run for line in lines if line.event == "start") == sorted(ran)
    assert_no_overlap(spans(lines))


def test_keys__different_keys_run_in_parallel_on_both_workers(workers: Pool, key: str) -> None:
    first, second = f"{key}-1", f"{key}-2"
    outcomes = workers.enqueue(call("exclusive", first, 1.0), call("exclusive", second, 1.0))
    rows = workers.finished(*(outcome["id"] for outcome in outcomes))
    assert [row.value for row in rows] == [outcome["id"] for outcome in outcomes]
    [(s1, e1)], [(s2, e2)] = spans(workers.lines(first)), spans(workers.lines(second))
    assert s2 < e1, "different keys ran one after the other"
    assert s1 < e2, "different keys ran one after the other"
    assert len({line.pid for line in workers.lines() if line.key in (first, second)}) == 2


def test_policy_skip__returns_none_while_the_holder_runs(workers: Pool, key: str) -> None:
    holder = workers.send("exclusive", key, 2.0)
    workers.logged("start", key, holder)
    duplicate = workers.send("exclusive", key, 0.0)
    [skipped] = workers.finished(duplicate)
    assert not ended(workers, key, holder), "the duplicate ran after the holder, not beside it"
    assert (skipped.status, skipped.value) == ("SUCCESSFUL", None)
    [held] = workers.finished(holder)
    assert held.value == holder
    assert [line.run for line in workers.lines(key) if line.event == "start"] == [holder]


def test_policy_raise__fails_the_duplicate_naming_the_holder(workers: Pool, key: str) -> None:
    holder = workers.send("strict", key, "holder", 2.0)
    workers.logged("start", key, "holder")
    duplicate = workers.send("strict", key, "duplicate", 0.0)
    [failed] = workers.finished(duplicate)
    assert not ended(workers, key, "holder"), "the duplicate ran after the holder, not beside it"
    assert failed.status == "FAILED"
    assert failed.exception == "django_redis_lock.exceptions.LockNotAcquiredError"
    assert f"[{holder}]" in failed.traceback, "the error names the holding task"
    [held] = workers.finished(holder)
    assert (held.status, held.value) == ("SUCCESSFUL", "holder")
    assert [line.run for line in workers.lines(key) if line.event == "start"] == ["holder"]


def test_policy_wait__runs_after_the_holder_not_beside_it(workers: Pool, key: str) -> None:
    holder = workers.send("patient", key, "holder", 1.5)
    workers.logged("start", key, "holder")
    duplicate = workers.send("patient", key, "duplicate", 0.1)
    poll(lambda: workers.row(duplicate).status == "RUNNING" or None, "the duplicate running")
    assert not ended(workers, key, "holder"), "the duplicate started after the holder ended"
    rows = workers.finished(holder, duplicate)
    assert [row.value for row in rows] == ["holder", "duplicate"]
    (_, first_end), (second_start, _) = spans(workers.lines(key))
    assert first_end <= second_start


def test_policy_retry__reenqueues_with_run_after_and_runs_after_the_holder(
    workers: Pool, key: str
) -> None:
    holder = workers.send("retrying", key, 1.0)
    workers.logged("start", key, holder)
    duplicate = workers.send("retrying", key, 0.1)
    [refused] = workers.finished(duplicate)
    assert (refused.status, refused.value) == ("SUCCESSFUL", None)
    assert not ended(workers, key, holder), "the duplicate ran after the holder, not beside it"
    retries = [r for r in workers.rows() if r.args == [key, 0.1] and r.id != duplicate]
    assert retries, "the refused run was not enqueued again"
    retry = retries[0]
    assert retry.run_after is not None
    assert (retry.run_after - retry.enqueued_at).total_seconds() >= 1.0, "no countdown"
    last = poll(
        lambda: next((r for r in workers.rows() if r.args == [key, 0.1] and r.value), None),
        "a retry ran",
    )
    assert last.status == "SUCCESSFUL"
    (_, holder_end), (retry_start, _) = spans(workers.lines(key))
    assert [line.run for line in workers.lines(key) if line.event == "start"] == [
        holder,
        last.id,
    ]
    assert holder_end <= retry_start


@pytest.mark.serial
def test_lease__a_killed_workers_lock_is_taken_when_its_lease_ends_not_before(
    workers: Pool, key: str
) -> None:
    workers.send("patient", key, "killed", 30.0)
    holder = workers.logged("start", key, "killed")
    waiter = workers.send("patient", key, "next", 0.1)  # waits up to 10 s for the lock
    poll(lambda: workers.row(waiter).status == "RUNNING" or None, "the waiter running")
    killed_at = workers.kill(holder.pid)
    read_at = time.monotonic()
    left = locks["default"].ttl(LOCK.format(task="patient", key=key))
    assert left is not None, "the lock was freed when its worker was killed"
    assert left > 0.5, "the lock was freed when its worker was killed"
    expires_at = read_at + left
    started = workers.logged("start", key, "next")
    assert started.at >= expires_at - 0.005, (
        f"the next run started {expires_at - started.at:.3f}s before the lease ended"
    )
    assert started.at - expires_at < 1.0, "the next run was slow to take the freed lock"
    assert started.at - killed_at < 2.0 + 1.0, "the lease outlived its ttl"
    assert [line.run for line in workers.lines(key) if line.event == "start"] == ["killed", "next"]
    assert workers.finished(waiter)[0].value == "next"


@pytest.mark.parametrize("task", ["renewed", "arenewed"])
def test_renewal__a_run_three_times_longer_than_its_lease_is_never_doubled(
    workers: Pool, key: str, task: str
) -> None:
    """ttl=1, a 3 s body: only renewal keeps duplicates, run on the other worker, out."""
    first = workers.send(task, key, "long", 3.0)
    started = workers.logged("start", key, "long")
    [holder] = locks["default"].lock_info(LOCK.format(task=task, key=key))
    assert holder.metadata["task_id"] == first, "the lock does not name the run's task"
    refused_past_the_lease = count = 0
    while True:
        count += 1
        sent_at = time.monotonic()
        [duplicate] = workers.finished(workers.send(task, key, f"dup{count}", 0.0))
        if ended(workers, key, "long"):
            break  # this duplicate may have run once the first ended: the spans tell
        assert (duplicate.status, duplicate.value) == ("SUCCESSFUL", None), (
            "a duplicate ran beside the first run"
        )
        refused_past_the_lease += sent_at > started.at + 1.5
    assert refused_past_the_lease, "no duplicate ran once the first lease would have ended"
    assert spans(workers.lines(key))[0] == (started.at, workers.logged("end", key, "long").at)
    assert_no_overlap(spans(workers.lines(key)))


#: The tasks refusing duplicates at enqueue time, and their enqueue= setting.
CLAIMED = [("claimed", "skip"), ("claimed_strictly", "raise"), ("aclaimed", "skip")]


def assert_refused(outcome: dict[str, Any], enqueue: str, result_id: str, when: str = "") -> None:
    """Check that an enqueue was refused as ``enqueue`` says, for the task ``result_id``."""
    found = outcome if enqueue == "skip" else (outcome.get("error"), outcome.get("task_id"))
    expected = {"id": result_id} if enqueue == "skip" else ("DuplicateTaskError", result_id)
    assert found == expected, f"a duplicate was enqueued {when}: {outcome}"


@pytest.mark.parametrize(("task", "enqueue"), CLAIMED)
def test_enqueue__refuses_duplicates_while_queued_or_running_then_accepts(
    workers: Pool, key: str, task: str, enqueue: str
) -> None:
    """A run 1.5 times its lease (ttl=2): renewal keeps its claim as it keeps its lock."""
    first = workers.send(task, key, "first", 3.0, countdown=2.0)
    [outcome] = workers.enqueue(call(task, key=key, run="queued", seconds=0.0))
    assert workers.row(first).status == "READY", "the first task was not queued any more"
    assert_refused(outcome, enqueue, first)
    started = workers.logged("start", key, "first")
    refused_past_the_lease = 0
    while True:
        sent_at = time.monotonic()
        [outcome] = workers.enqueue(call(task, key, "running", 0.0))
        if ended(workers, key, "first"):
            break
        assert_refused(outcome, enqueue, first, f"{sent_at - started.at:.2f}s into the run")
        refused_past_the_lease += sent_at > started.at + 2.5
    assert refused_past_the_lease, (
        "no duplicate was enqueued once the first lease would have ended"
    )
    assert workers.finished(first)[0].value == "first"
    # The last duplicate met the first run's end: it may have been enqueued; let it run.
    late = [outcome["id"]] if outcome.get("id") not in (None, first) else []
    workers.finished(*late)
    again = workers.send(task, key, "again", 0.0)
    assert again not in (first, *late)
    assert workers.finished(again)[0].value == "again"
    runs = [row.args[1] for row in workers.rows() if row.args[:1] == [key]]
    assert runs == ["first", *(["running"] if late else []), "again"]


@pytest.mark.parametrize(("task", "enqueue"), CLAIMED[:2])
def test_enqueue__a_killed_workers_claim_is_freed_when_its_lease_ends(
    workers: Pool, key: str, task: str, enqueue: str
) -> None:
    killed = workers.send(task, key, "killed", 30.0)
    holder = workers.logged("start", key, "killed")
    killed_at = workers.kill(holder.pid)
    read_at = time.monotonic()
    left = locks["default"].ttl("queued:" + LOCK.format(task=task, key=key))
    assert left is not None, "the claim was freed when its worker was killed"
    [outcome] = workers.enqueue(call(task, key, "refused", 0.0))
    assert_refused(outcome, enqueue, killed)

    def accepted() -> tuple[float, str] | None:
        at = time.monotonic()
        [outcome] = workers.enqueue(call(task, key, "next", 0.1))
        if "id" in outcome and outcome["id"] != killed:
            return at, outcome["id"]
        assert_refused(outcome, enqueue, killed)
        return None

    accepted_at, following = poll(accepted, "an enqueue accepted", timeout=10)
    assert accepted_at >= read_at + left - 0.1, "the claim was freed before its lease ended"
    assert accepted_at - killed_at < 2.0 + 1.0, "the claim outlived its ttl"
    assert workers.finished(following)[0].value == "next"


def test_enqueue__a_run_killed_while_it_waits_for_its_lock_frees_its_claim_at_lease_end(
    workers: Pool, key: str
) -> None:
    """on_conflict="wait": a run waiting for its lock holds its claim on its own lease."""
    name = LOCK.format(task="claimed", key=key)
    elsewhere = lock(name, ttl=30)  # held outside any task, by this test
    assert elsewhere.acquire(blocking=False)
    try:
        waiting = workers.send("claimed", key, "waiting", 0.1)
        poll(lambda: queued(locks["default"], name) or None, "the run waiting for its lock")
        [worker_id] = workers.row(waiting).worker_ids
        killed_at = workers.kill(workers.pid(worker_id))

        def accepted() -> str | None:
            [outcome] = workers.enqueue(call("claimed", key, "next", 0.1))
            if outcome["id"] != waiting:
                return str(outcome["id"])
            return None

        following = poll(accepted, "an enqueue accepted", timeout=10)
        assert time.monotonic() - killed_at < 2.0 + 1.0, "the claim outlived the run's ttl"
    finally:
        elsewhere.release()
    assert workers.finished(following)[0].value == "next"


def test_enqueue__min_hold_keeps_the_claim_until_the_locks_window_ends_after_a_wait(
    workers: Pool, key: str
) -> None:
    """min_hold=2: the claim is kept as long as the lock, whose window starts after a wait."""
    name = LOCK.format(task="held_on", key=key)
    assert lock(name, ttl=1.0).acquire(blocking=False)  # its lease ends by itself in 1 s
    first = workers.send("held_on", key, "first", 0.0)
    started = workers.logged("start", key, "first")

    def accepted() -> tuple[float, str] | None:
        at = time.monotonic()
        [outcome] = workers.enqueue(call("held_on", key, "next", 0.0))
        if "id" in outcome:
            return at, str(outcome["id"])
        assert_refused(outcome, "raise", first)
        return None

    accepted_at, following = poll(accepted, "an enqueue accepted", timeout=10)
    assert accepted_at >= started.at + 2.0 - 0.1, "the claim was freed before min_hold ended"
    assert accepted_at < started.at + 2.0 + 1.0, "the claim outlived min_hold"
    assert workers.finished(following)[0].value == "next"
