"""``@single_instance`` without a worker: keys, settings, eager runs."""

from __future__ import annotations

import datetime as dt
import decimal
import inspect
import logging
import os
import queue
import re
import subprocess
import sys
import time
import uuid
from typing import Any

import pytest
import redis as redis_py
from celery import Celery
from django.contrib.auth.models import User

from django_redis_lock import (
    InvalidLockArgumentError,
    LockLostError,
    LockNotAcquiredError,
    lock,
    locks,
)
from django_redis_lock.backends.base import AcquireRequest
from django_redis_lock.celery import (
    MAX_READABLE_NAME,
    SingleInstance,
    config_of,
    enqueue,
    single_instance,
)
from django_redis_lock.celery.enqueue import take_over_claim
from django_redis_lock.celery.run_names import claim_name, claim_owner, message_lock_name


@pytest.fixture
def app() -> Celery:
    """An eager Celery app: tasks run in this process, as in users' tests."""
    eager = Celery("eager", set_as_current=False)
    eager.conf.update(task_always_eager=True, task_eager_propagates=True)
    return eager


def config(key: Any, func: Any) -> SingleInstance:
    decorated = single_instance(key)(func)
    found = decorated.__single_instance__  # type: ignore[attr-defined]
    assert isinstance(found, SingleInstance)
    return found


def billing(customer_id: int, kind: str = "monthly", *, dry_run: bool = False) -> None:
    """A task function."""


def test_key__template_over_bound_arguments_with_defaults() -> None:
    found = config("{customer_id}:{kind}", billing)
    assert found.lock_name("shop.bill", (7,), {}) == "celery:shop.bill:7:monthly"
    assert found.lock_name("shop.bill", (), {"customer_id": 7, "kind": "x"}) == (
        "celery:shop.bill:7:x"
    )


def test_key__none_is_one_lock_per_task() -> None:
    assert config(None, billing).lock_name("shop.bill", (1,), {}) == "celery:shop.bill"


def test_key__list_of_argument_names() -> None:
    found = config(["kind", "customer_id"], billing)
    assert found.lock_name("shop.bill", (7,), {"kind": "yearly"}) == "celery:shop.bill:yearly:7"


def test_key__callable_gets_the_task_arguments() -> None:
    found = config(lambda customer_id, **kw: f"c{customer_id * 2}", billing)
    assert found.lock_name("shop.bill", (21,), {}) == "celery:shop.bill:c42"


@pytest.mark.django_db
def test_key__values_format_predictably() -> None:
    def task(who: Any, when: Any, amount: Any, ref: Any) -> None:
        pass

    user = User.objects.create(username="ada")
    found = config("{who}/{when}/{amount}/{ref}", task)
    ref = uuid.UUID(int=1)
    name = found.lock_name(
        "t", (user, dt.datetime(2026, 1, 2, 3, 4, 5), decimal.Decimal("1.50"), ref), {}
    )
    assert name == f"celery:t:{user.pk}/2026-01-02T03%3A04%3A05/1.50/{ref}"


def pair(first: object, second: object) -> None:
    """A task function of two arguments."""


@pytest.mark.parametrize("key", ["{first}:{second}", ["first", "second"]])
def test_key__values_with_a_colon_never_give_the_same_name(key: Any) -> None:
    found = config(key, pair)
    assert found.lock_name("t", ("x:y", "z"), {}) == "celery:t:x%3Ay:z"
    assert found.lock_name("t", ("x", "y:z"), {}) == "celery:t:x:y%3Az"


@pytest.mark.parametrize("key", ["{first}:{second}", ["first", "second"]])
def test_key__a_percent_sign_is_encoded_too(key: Any) -> None:
    """Else the value "x%3Ay" would read as the encoded "x:y"."""
    found = config(key, pair)
    assert found.lock_name("t", ("x%3Ay", "z"), {}) == "celery:t:x%253Ay:z"
    assert found.lock_name("t", ("x:y", "z"), {}) == "celery:t:x%3Ay:z"


@pytest.mark.parametrize("key", ["{first}:{second}", ["first", "second"]])
def test_key__ordinary_values_read_as_they_are(key: Any) -> None:
    found = config(key, pair)
    assert found.lock_name("t", (42, "spring-sale_2026"), {}) == "celery:t:42:spring-sale_2026"
    assert found.lock_name("t", ("ada@example.com", "a.b/c d"), {}) == (
        "celery:t:ada@example.com:a.b/c d"
    )


def test_key__a_format_specification_applies_to_the_value_before_it_is_encoded() -> None:
    found = config("{first:05d}:{second!r}", pair)
    assert found.lock_name("t", (42, "a:b"), {}) == "celery:t:00042:'a%3Ab'"


def test_key__a_task_name_with_a_colon_is_encoded() -> None:
    """Else task "shop:bill" with no key would share the lock of task "shop" keyed "bill"."""
    assert config(None, pair).lock_name("shop:bill", (1, 2), {}) == "celery:shop%3Abill"
    assert config("{first}", pair).lock_name("shop", ("bill", 2), {}) == "celery:shop:bill"


def test_key__a_long_name_is_hashed_and_stays_stable() -> None:
    found = config("{kind}", billing)
    long_kind = "x" * 500
    name = found.lock_name("shop.bill", (1, long_kind), {})
    assert name.startswith("celery:shop.bill:sha256:")
    assert len(name) <= MAX_READABLE_NAME
    assert name == found.lock_name("shop.bill", (1, long_kind), {})
    assert name != found.lock_name("shop.bill", (1, long_kind + "y"), {})


def test_key__a_template_naming_no_argument_is_refused_when_the_task_is_defined() -> None:
    with pytest.raises(InvalidLockArgumentError, match=r"\['customer'\] are not arguments"):
        config("{customer}", billing)


def test_key__a_template_that_does_not_fit_a_run_names_the_arguments() -> None:
    found = config("{customer_id.nope}", billing)
    with pytest.raises(InvalidLockArgumentError, match="customer_id, kind, dry_run"):
        found.lock_name("shop.bill", (1,), {})


@pytest.mark.parametrize("bind", [True, False])
@pytest.mark.parametrize(
    ("key", "part"),
    [
        (None, ""),
        ("{customer_id}-{kind}", ":7-yearly"),
        (["customer_id", "kind"], ":7:yearly"),
        (lambda *args, kind="monthly", **kwargs: f"{len(args)}.{kind}", None),
    ],
)
def test_key__a_message_names_the_lock_its_run_takes(
    app: Celery, bind: bool, key: Any, part: str | None
) -> None:
    """The worker's main process names the lock from the message, as the run did."""
    taken: list[str] = []

    def run(*args: Any, **kwargs: Any) -> None:
        [info] = locks["default"].iter_locks("celery:eager.shape*")
        taken.append(info.name)

    if bind:

        def bill(self: Any, customer_id: int, kind: str = "monthly") -> None:
            run()

    else:

        def bill(customer_id: int, kind: str = "monthly") -> None:  # type: ignore[misc]
            run()

    # Not shared: each parameter's function would be registered in later tests' apps.
    task = app.task(bind=bind, name="eager.shape", shared=False)(single_instance(key)(bill))
    task.apply((7,), {"kind": "yearly"})
    found = config_of(task)
    assert found is not None
    if part is None:  # the callable gets the task too, when the task is bound
        part = f":{2 if bind else 1}.yearly"
    assert message_lock_name(found, task, (7,), {"kind": "yearly"}) == taken[0]
    assert taken == [f"celery:eager.shape{part}"]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"on_conflict": "ignore"}, "on_conflict must be 'skip', 'raise', 'retry' or 'wait'"),
        ({"then": "retry"}, "then must be 'skip' or 'raise'"),
        ({"timeout": 5}, "timeout only applies to on_conflict='wait'"),
        ({"key": 42}, "key must be None, a template, a list of argument names or a callable"),
    ],
)
def test_settings__bad_values_are_refused(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidLockArgumentError, match=message):
        single_instance(**kwargs)


def test_settings__unknown_argument_names_are_refused() -> None:
    with pytest.raises(InvalidLockArgumentError, match=r"\['customer'\] are not arguments"):
        single_instance(["customer"])(billing)


def test_decorator__keeps_the_signature_and_the_name() -> None:
    decorated = single_instance("{customer_id}")(billing)
    assert inspect.signature(decorated) == inspect.signature(billing)
    assert decorated.__name__ == "billing"
    assert decorated.__doc__ == "A task function."


def test_eager__a_run_holds_the_lock_with_task_details(app: Celery) -> None:
    seen: dict[str, Any] = {}

    @app.task(bind=True, name="eager.report")
    @single_instance("{day}")
    def report(self: Any, day: str) -> str:
        [info] = locks["default"].lock_info(f"celery:eager.report:{day}")
        seen.update(info.metadata, owner=info.owner)
        return day

    result = report.delay("2026-11-21")
    assert result.get() == "2026-11-21"
    assert seen["task_name"] == "eager.report"
    assert re.fullmatch("celery:[0-9a-f]{32}", seen["owner"]), "a random run id"
    assert seen["args"] == "day='2026-11-21'"
    assert "worker_pid" in seen
    assert "started_at" in seen
    assert not lock("celery:eager.report:2026-11-21").locked()
    assert config_of(report) is not None


def test_eager__a_held_lock_makes_a_run_skip_with_a_warning(
    app: Celery, caplog: pytest.LogCaptureFixture
) -> None:
    @app.task(name="eager.nightly")
    @single_instance()
    def nightly() -> str:
        return "ran"

    with lock("celery:eager.nightly", metadata={"task_id": "the-holder"}):
        with caplog.at_level(logging.WARNING, "django_redis_lock"):
            assert nightly.delay().get() is None
    assert "is held by Celery task (unnamed) [the-holder]" in caplog.text
    assert nightly.delay().get() == "ran"


def test_eager__raise_policy_names_the_holder(app: Celery) -> None:
    @app.task(name="eager.strict")
    @single_instance(on_conflict="raise")
    def strict() -> str:
        return "ran"

    with lock("celery:eager.strict", metadata={"task_id": "the-holder"}):
        with pytest.raises(
            LockNotAcquiredError, match=r"held by Celery task \(unnamed\) \[the-holder\]\.$"
        ):
            strict.delay().get()


def test_eager__the_lock_is_freed_when_the_body_raises(app: Celery) -> None:
    @app.task(name="eager.broken")
    @single_instance()
    def broken() -> None:
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        broken.delay().get()
    assert not lock("celery:eager.broken").locked()


def test_eager__a_lost_lease_does_not_hide_the_body_exception(
    app: Celery, caplog: pytest.LogCaptureFixture
) -> None:
    @app.task(name="eager.lost")
    @single_instance(ttl=5)
    def lost() -> None:
        locks["default"].force_release("celery:eager.lost")
        raise ValueError("the body's own error")

    with caplog.at_level(logging.WARNING, "django_redis_lock"):
        with pytest.raises(ValueError, match="the body's own error"):
            lost.delay().get()
    assert "was lost" in caplog.text


def test_eager__a_lost_lease_fails_a_run_that_succeeded(app: Celery) -> None:
    @app.task(name="eager.lost-ok")
    @single_instance(ttl=5)
    def lost_ok() -> str:
        locks["default"].force_release("celery:eager.lost-ok")
        return "done"

    with pytest.raises(LockLostError):
        lost_ok.delay().get()


def test_decorator__celery_checks_the_arguments_when_a_task_is_sent(app: Celery) -> None:
    @app.task(name="eager.typed")
    @single_instance("{customer_id}")
    def typed(customer_id: int) -> int:
        return customer_id

    with pytest.raises(TypeError):
        typed.delay(1, 2)
    assert typed.delay(3).get() == 3


class Request:
    """The part of a Celery worker request that the worker-side hook uses."""

    def __init__(self, task: Any) -> None:
        self.task, self.worker_pid, self.id = task, None, "req-1"
        self.args, self.kwargs = (), {}
        self.request_dict: dict[str, Any] = {"id": self.id}
        self.calls: list[str] = []

    def on_accepted(self, pid: int, time_accepted: float) -> None:
        self.worker_pid = pid
        self.calls.append("on_accepted")

    def on_success(self, failed__retval__runtime: object, **kwargs: Any) -> None:
        self.calls.append("on_success")

    def on_failure(
        self, exc_info: object, send_failed_event: bool = True, return_ok: bool = False
    ) -> None:
        self.calls.append("on_failure")

    def on_timeout(self, soft: bool, timeout: float) -> None:
        self.calls.append("on_timeout")


def test_worker_hook__ordinary_failures_and_soft_limits_free_nothing(
    app: Celery, monkeypatch: pytest.MonkeyPatch
) -> None:
    from django_redis_lock.celery import worker as integration

    @app.task(name="eager.hooked")
    @single_instance()
    def hooked() -> None:
        pass

    freed: queue.Queue[str] = queue.Queue()
    monkeypatch.setattr(integration, "release_run", lambda task, run_id, a, k: freed.put(run_id))
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    request = Request(hooked)
    integration._watch_request(request=request)
    run_id = request.request_dict[integration.RUN_ID_FIELD]
    request.on_accepted(child.pid, time.monotonic())  # the child runs it
    request.on_failure(object(), return_ok=True)  # the body raised: reported via on_success
    request.on_timeout(True, 1.0)  # a soft time limit: the body gets an exception
    assert freed.empty()
    child.kill()
    child.wait()
    assert freed.get(timeout=10) == run_id, "freed when the child died"
    request.on_failure(object())  # the pool's error callback: the child is gone
    request.on_timeout(False, 1.0)  # a hard time limit
    assert [freed.get_nowait(), freed.get_nowait()] == [run_id, run_id]
    assert request.calls == ["on_accepted", "on_failure", "on_timeout", "on_failure", "on_timeout"]


def test_worker_hook__gives_each_delivery_a_run_id_of_its_own(app: Celery) -> None:
    from django_redis_lock.celery import worker as integration

    @app.task(name="eager.delivered")
    @single_instance()
    def delivered() -> None:
        pass

    first, second = Request(delivered), Request(delivered)
    second.request_dict[integration.RUN_ID_FIELD] = "0" * 32  # came with the message
    for request in (first, second):
        integration._watch_request(request=request)
    run_ids = {r.request_dict[integration.RUN_ID_FIELD] for r in (first, second)}
    assert len(run_ids) == 2
    assert all(re.fullmatch("[0-9a-f]{32}", run_id) for run_id in run_ids)
    assert "0" * 32 not in run_ids


def test_publish__a_message_never_carries_a_run_id_on() -> None:
    """Celery copies a request's unknown fields into the headers of the retry it sends."""
    from django_redis_lock import celery
    from django_redis_lock.celery import worker as _celery_worker

    headers = {"id": "t-1", _celery_worker.RUN_ID_FIELD: "a" * 32, "custom": "kept"}
    celery._release_before_retry(headers=headers)
    assert headers == {"id": "t-1", "custom": "kept"}


def test_eager__two_runs_of_one_task_id_are_two_owners(app: Celery) -> None:
    """A run that finds its own task id holding the lock is another delivery: it skips."""
    inner: list[object] = []

    @app.task(bind=True, name="eager.redelivered")
    @single_instance()
    def redelivered(self: Any, depth: int) -> str:
        if depth == 0:
            inner.append(redelivered.apply((1,), task_id=self.request.id).get())
        return "ran"

    assert redelivered.apply((0,), task_id="one-id").get() == "ran"
    assert inner == [None], "the second delivery skipped"


@pytest.mark.parametrize("task_id", ["report/2024-01", "sync customer 7", "x" * 300])
def test_eager__any_task_id_works(app: Celery, task_id: str) -> None:
    @app.task(bind=True, name="eager.custom-id", shared=False)
    @single_instance()
    def custom(self: Any) -> str:
        [info] = locks["default"].lock_info("celery:eager.custom-id")
        assert info.metadata["task_id"] == self.request.id
        return str(self.request.id)

    assert custom.apply(task_id=task_id).get() == task_id


def test_enqueue__a_claim_taken_over_is_renewed_on_its_own(app: Celery) -> None:
    # A run's claim may be on another server than its lock (Redis Cluster), so that no
    # renewal of the lock renews it too: it must be renewed on the run's lease by itself.
    @app.task(bind=True, name="claims.outliving")
    @single_instance("{n}", enqueue="raise", ttl=1)
    def outliving(self: Any, n: int) -> int:
        return n

    found = config_of(outliving)
    assert found is not None
    lock_name = message_lock_name(found, outliving, (3,), {})
    owner = claim_owner("t-1")
    sent = AcquireRequest(ttl=3600)  # as the send took it: for enqueue_ttl
    assert locks["default"].acquire(claim_name(lock_name), owner, sent).acquired
    outliving.push_request(id="t-1", is_eager=False, args=(3,), kwargs={})
    try:
        take_over_claim(outliving, found, lock_name, "run-1", {})
        assert locks["default"].ttl(claim_name(lock_name), owner) <= 1.0
        time.sleep(3.0)  # three of the run's leases
        assert locks["default"].ttl(claim_name(lock_name), owner) is not None
    finally:
        outliving.pop_request()
        enqueue._forget(enqueue._taken_over.pop("run-1", None))


def test_enqueue__a_task_whose_class_does_not_claim_is_reported_once_when_it_runs(
    app: Celery, caplog: pytest.LogCaptureFixture
) -> None:
    # Only SingleInstanceTask's apply_async claims: a task with enqueue= on Celery's own
    # Task class sends every duplicate, and its worker says so.
    @app.task(bind=True, name="claims.unseen")
    @single_instance("{n}", enqueue="skip")
    def unseen(self: Any, n: int) -> int:
        return n

    found = config_of(unseen)
    assert found is not None
    lock_name = message_lock_name(found, unseen, (4,), {})
    unseen.push_request(id="t-2", is_eager=False, args=(4,), kwargs={})
    try:
        with caplog.at_level(logging.ERROR, "django_redis_lock"):
            take_over_claim(unseen, found, lock_name, "run-2", {})
            take_over_claim(unseen, found, lock_name, "run-3", {})
    finally:
        unseen.pop_request()
        for run in ("run-2", "run-3"):
            enqueue._forget(enqueue._taken_over.pop(run, None))
        locks["default"].force_release(claim_name(lock_name))
    # Of this task: a lease of an earlier test may still be renewing in the background.
    reports = [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.ERROR and r.getMessage().startswith("claims.unseen")
    ]
    assert reports == [
        "claims.unseen has enqueue='skip', but its sends do not refuse duplicates: its class "
        "is not django_redis_lock.celery.SingleInstanceTask (give it base=SingleInstanceTask)."
    ]


def test_enqueue__a_task_whose_class_does_not_claim_is_reported_once_when_it_is_sent(
    redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    # The sending process is told too, on a real broker: its sends are the ones that go
    # through unrefused.
    from celery._state import _set_current_app, get_current_app

    sender = Celery("sender", broker=redis_url, set_as_current=False)
    sender.conf.update(task_default_queue=f"unseen-{os.getpid()}")

    @sender.task(name="claims.unseen_sent")
    @single_instance("{n}", enqueue="skip")
    def unseen_sent(n: int) -> int:
        return n

    previous = get_current_app()
    _set_current_app(sender)
    try:
        with caplog.at_level(logging.ERROR, "django_redis_lock"):
            unseen_sent.delay(1)
            unseen_sent.delay(1)
    finally:
        _set_current_app(previous)
        redis_py.Redis.from_url(redis_url).delete(f"unseen-{os.getpid()}")
    # Of this task: a lease of an earlier test may still be renewing in the background.
    reports = [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.ERROR and r.getMessage().startswith("claims.unseen")
    ]
    assert reports == [
        "claims.unseen_sent has enqueue='skip', but its sends do not refuse duplicates: its "
        "class is not django_redis_lock.celery.SingleInstanceTask (give it "
        "base=SingleInstanceTask)."
    ]
