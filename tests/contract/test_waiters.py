"""Who waits for a lock: ``waiters()``, the ``waiting`` count of listings, ``locks show``."""

from __future__ import annotations

import asyncio
import datetime as dt
import io
import json
import multiprocessing
import os
import signal
import threading
import time
from typing import Any

import pytest
import redis as redis_py
from django.conf import settings
from django.core.management import call_command

from django_redis_lock import alock, lock
from django_redis_lock.backends.base import AcquireRequest, BaseLockBackend, holder_metadata
from tests.support import workers
from tests.support.helpers import eventually

spawn = multiprocessing.get_context("spawn")


def request(tag: str, *, wait: float = 30.0, fair: bool = False) -> AcquireRequest:
    """Return an acquire that registers a waiter recording ``tag`` as its host and thread."""
    meta = holder_metadata(host=f"host-{tag}", pid=len(tag), thread=f"T-{tag}", data={"t": tag})
    return AcquireRequest(ttl=30, metadata=meta, wait=wait, fair=fair)


@pytest.mark.needs("waiter_queue")
def test_waiters__listed_in_queue_order_with_their_details(
    using: str, backend: BaseLockBackend
) -> None:
    before = dt.datetime.now(dt.timezone.utc) - dt.timedelta(seconds=1)
    with lock("q:details", using=using):
        for owner, fair in (("w-one", True), ("w-two", False), ("w-three", True)):
            assert not backend.acquire("q:details", owner, request(owner, fair=fair)).acquired
            time.sleep(0.002)  # distinct arrival times, so the order is the queue's own

        found = backend.waiters("q:details")
        [held] = backend.lock_info("q:details")
        listed = [info.waiting for info in backend.iter_locks("q:*")]

    assert [w.owner for w in found] == ["w-one", "w-two", "w-three"]
    assert [w.position for w in found] == [0, 1, 2]
    assert [w.next for w in found] == [True, False, False]
    assert [w.fair for w in found] == [True, False, True]
    assert [(w.host, w.pid, w.thread) for w in found] == [
        ("host-w-one", 5, "T-w-one"),
        ("host-w-two", 5, "T-w-two"),
        ("host-w-three", 7, "T-w-three"),
    ]
    assert [w.metadata for w in found] == [{"t": "w-one"}, {"t": "w-two"}, {"t": "w-three"}]
    assert [w.name for w in found] == ["q:details"] * 3
    since = [w.waiting_since for w in found]
    assert before <= since[0] < since[1] < since[2] <= dt.datetime.now(dt.timezone.utc)
    assert all(0.0 <= w.waited_for < 5.0 for w in found)
    assert all(25.0 < w.expires_in <= 30.0 for w in found)
    assert held.waiting == 3
    assert listed == [3]


@pytest.mark.needs("waiter_queue")
def test_waiters__registering_again_keeps_the_first_place_and_time(
    using: str, backend: BaseLockBackend
) -> None:
    with lock("q:again", using=using):
        backend.acquire("q:again", "first", request("first"))
        backend.acquire("q:again", "second", request("second"))
        [since, _] = [w.waiting_since for w in backend.waiters("q:again")]
        backend.acquire("q:again", "first", request("first"))

        found = backend.waiters("q:again")

    assert [w.owner for w in found] == ["first", "second"]
    assert found[0].waiting_since == since


@pytest.mark.needs("waiter_queue")
def test_waiters__one_that_gives_up_drops_out_at_once(
    using: str, backend: BaseLockBackend
) -> None:
    with lock("q:giveup", using=using):
        backend.acquire("q:giveup", "stays", request("stays"))
        backend.acquire("q:giveup", "leaves", request("leaves"))
        assert [w.owner for w in backend.waiters("q:giveup")] == ["stays", "leaves"]

        backend.withdraw("q:giveup", "stays")

        assert [(w.owner, w.next) for w in backend.waiters("q:giveup")] == [("leaves", True)]
        assert [info.waiting for info in backend.lock_info("q:giveup")] == [1]


@pytest.mark.needs("waiter_queue")
def test_waiters__one_whose_registration_ends_drops_out(
    using: str, backend: BaseLockBackend
) -> None:
    """A waiter that died is listed only until its registration ends, and not counted."""
    with lock("q:dead", using=using):
        backend.acquire("q:dead", "dead", request("dead", wait=0.3))
        backend.acquire("q:dead", "alive", request("alive"))
        assert [w.owner for w in backend.waiters("q:dead")] == ["dead", "alive"]

        eventually(lambda: [w.owner for w in backend.waiters("q:dead")] == ["alive"], 3.0)

        assert backend.waiters("q:dead")[0].next
        assert [info.waiting for info in backend.lock_info("q:dead")] == [1]


def test_waiters__none_for_a_lock_nobody_waits_for(using: str, backend: BaseLockBackend) -> None:
    assert backend.waiters("q:free") == []
    with lock("q:alone", using=using):
        assert backend.waiters("q:alone") == []
        assert [info.waiting for info in backend.lock_info("q:alone")] == [0]


def _show(using: str, name: str) -> dict[str, Any]:
    out = io.StringIO()
    call_command("locks", "show", name, "--json", "--using", using, stdout=out)
    document: dict[str, Any] = json.loads(out.getvalue())
    return document


@pytest.mark.slow
@pytest.mark.needs("processes", "waiter_queue")
def test_show__two_processes_and_an_asyncio_task_listed_in_queue_order(
    using: str, backend: BaseLockBackend, redis_url: str, prefix: str, raw_redis: redis_py.Redis
) -> None:
    """Three real waiters: ``locks show --json`` lists them in order; a killed one drops out."""
    name = "q:report"
    nodes = settings.LOCKS[using]["OPTIONS"].get("startup_nodes", [])
    holder = lock(name, using=using, ttl=60)
    assert holder.acquire()
    children: list[Any] = []
    for tag, fair in (("first", True), ("second", False)):
        child = spawn.Process(
            target=workers.wait_for_lock,
            args=(redis_url, prefix, nodes, using, name, tag, fair),
        )
        child.start()
        children.append(child)
        count = len(children)
        eventually(lambda: len(backend.waiters(name)) == count, 30.0)  # noqa: B023
    served: list[str] = []

    async def wait_in_task() -> None:
        async with alock(name, using=using, timeout=60, metadata={"worker": "task"}):
            served.append("task")

    async def main() -> None:
        await asyncio.create_task(wait_in_task(), name="waiter-task")

    thread = threading.Thread(target=lambda: asyncio.run(main()), name="aio-waiter")
    thread.start()
    try:
        eventually(lambda: len(backend.waiters(name)) == 3, 10.0)

        document = _show(using, name)

        waiters = document["waiters"]
        assert document["version"] == 4
        assert [w["pid"] for w in waiters] == [children[0].pid, children[1].pid, os.getpid()]
        assert [w["metadata"] for w in waiters] == [
            {"worker": "first"},
            {"worker": "second"},
            {"worker": "task"},
        ]
        assert [w["position"] for w in waiters] == [0, 1, 2]
        assert [w["next"] for w in waiters] == [True, False, False]
        assert [w["fair"] for w in waiters] == [True, False, False]
        assert [w["thread"] for w in waiters] == [
            "MainThread",
            "MainThread",
            "aio-waiter/waiter-task",
        ]
        assert {w["host"] for w in waiters} == {document["locks"][0]["host"]}
        assert {(w["alias"], w["name"], w["task_id"]) for w in waiters} == {(using, name, None)}
        since = [dt.datetime.fromisoformat(w["waiting_since"]) for w in waiters]
        assert since == sorted(since)
        assert document["locks"][0]["waiting"] == 3

        os.kill(children[1].pid, signal.SIGKILL)  # dies waiting: nobody withdraws it
        children[1].join(10)
        # Gone at the latest when its registration ends (the backend's max_wait and a margin).
        eventually(lambda: len(backend.waiters(name)) == 2, backend.max_wait + 5.0)
        assert [w["pid"] for w in _show(using, name)["waiters"]] == [
            children[0].pid,
            os.getpid(),
        ]
    finally:
        holder.release()
        thread.join(60)
        for child in children:
            child.join(60)
    assert children[0].exitcode == 0
    assert raw_redis.lrange(f"{prefix}:served", 0, -1) == [b"first"]
    assert served == ["task"]
    assert backend.waiters(name) == []
