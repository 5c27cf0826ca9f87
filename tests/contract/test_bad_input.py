"""Bad arguments raise this package's own errors (also ValueError/TypeError), naming them."""

from __future__ import annotations

from typing import Any

import pytest
from django.http import HttpRequest, HttpResponse
from django.test import RequestFactory
from django.views import View

from django_redis_lock import (
    InvalidLockArgumentError,
    InvalidLockBackendError,
    LockArgumentTypeError,
    LockError,
    alock,
    alock_all,
    lock,
    lock_all,
)
from django_redis_lock._core.validation import MAX_NAME_LENGTH, MAX_SECONDS
from django_redis_lock.backends.base import AcquireRequest, holder_metadata
from django_redis_lock.backends.locmem import LocMemBackend
from django_redis_lock.backends.redis import RedisBackend
from django_redis_lock.decorators import lock_view
from django_redis_lock.mixins import LockMixin


@pytest.mark.parametrize(
    ("name", "error", "message"),
    [
        (None, LockArgumentTypeError, "Lock name must be a str, not NoneType: None."),
        (42, LockArgumentTypeError, "Lock name must be a str, not int: 42."),
        (b"bytes", LockArgumentTypeError, "Lock name must be a str, not bytes: b'bytes'."),
        ("", InvalidLockArgumentError, "Lock name must not be empty."),
        ("x" * (MAX_NAME_LENGTH + 1), InvalidLockArgumentError, "at most 1024 characters"),
        ("bad\ud800", InvalidLockArgumentError, "encodable as UTF-8"),
    ],
)
def test_name__bad_values_are_refused(name: Any, error: type[Exception], message: str) -> None:
    with pytest.raises(error) as caught:
        lock(name)
    assert message in str(caught.value)


def test_name__the_longest_allowed_name_works(using: str) -> None:
    with lock("n" * MAX_NAME_LENGTH, using=using) as handle:
        assert handle.owned()


@pytest.mark.parametrize(
    ("ttl", "error", "message"),
    [
        (0, InvalidLockArgumentError, "ttl must be a finite number of seconds of at least 0.001, got 0."),  # noqa: E501
        (-1, InvalidLockArgumentError, "got -1."),
        (0.0001, InvalidLockArgumentError, "got 0.0001."),
        (float("nan"), InvalidLockArgumentError, "got nan."),
        (float("inf"), InvalidLockArgumentError, "got inf."),
        ("30", LockArgumentTypeError, "ttl must be a number of seconds, not str: '30'."),
        (True, LockArgumentTypeError, "ttl must be a number of seconds, not bool: True."),
    ],
)  # fmt: skip
def test_ttl__bad_values_are_refused(ttl: Any, error: type[Exception], message: str) -> None:
    with pytest.raises(error) as caught:
        lock("bad:ttl", ttl=ttl)
    assert message in str(caught.value)
    assert caught.value.lock_name == "bad:ttl"  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("timeout", "error", "message"),
    [
        (-1, InvalidLockArgumentError, "timeout must be None or a finite number of seconds >= 0, got -1."),  # noqa: E501
        (float("nan"), InvalidLockArgumentError, "got nan."),
        (float("inf"), InvalidLockArgumentError, "got inf."),
        ("5", LockArgumentTypeError, "timeout must be a number of seconds, not str: '5'."),
    ],
)  # fmt: skip
def test_timeout__bad_values_are_refused(
    timeout: Any, error: type[Exception], message: str, using: str
) -> None:
    with pytest.raises(error) as caught:
        lock("bad:timeout", timeout=timeout)
    assert message in str(caught.value)
    with pytest.raises(error) as caught:
        lock("bad:timeout", using=using).acquire(timeout=timeout)
    assert message in str(caught.value)


def test_timeout__with_non_blocking_is_refused(using: str) -> None:
    with pytest.raises(InvalidLockArgumentError, match="non-blocking"):
        lock("bad:nb", blocking=False, timeout=1)
    with pytest.raises(InvalidLockArgumentError, match="non-blocking acquire"):
        lock("bad:nb", using=using).acquire(blocking=False, timeout=1)
    assert not lock("bad:nb", using=using).locked()


def test_blocking__must_be_a_bool() -> None:
    with pytest.raises(LockArgumentTypeError, match=r"blocking must be True or False, got 1\."):
        lock("bad:blocking", blocking=1)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("metadata", "message"),
    [
        ([1, 2], "metadata must be a dict, not list: [1, 2]."),
        ({"when": object}, "metadata must be JSON-serialisable"),
        ({"x": float("nan")}, "metadata must be JSON-serialisable"),
    ],
)
def test_metadata__bad_values_are_refused(metadata: Any, message: str) -> None:
    with pytest.raises(LockArgumentTypeError) as caught:
        lock("bad:meta", metadata=metadata)
    assert message in str(caught.value)


@pytest.mark.parametrize("seconds", [0, -5, float("nan"), "10"])
def test_extend__bad_seconds_are_refused_and_the_lease_is_kept(seconds: Any, using: str) -> None:
    with lock("bad:extend", ttl=30, using=using) as handle:
        with pytest.raises(InvalidLockArgumentError, match="seconds"):
            handle.extend(seconds)
        remaining = handle.ttl()
        assert remaining is not None
        assert remaining > 25


def test_errors__are_lock_errors_and_builtin_errors() -> None:
    assert issubclass(InvalidLockArgumentError, LockError)
    assert issubclass(InvalidLockArgumentError, ValueError)
    assert issubclass(LockArgumentTypeError, TypeError)
    assert issubclass(LockArgumentTypeError, InvalidLockArgumentError)


@pytest.mark.parametrize("owner", [object(), b"a", 123, ["a"]])
def test_owner__of_a_wrong_type_is_a_type_error(owner: Any) -> None:
    with pytest.raises(LockArgumentTypeError, match="owner must be None or a str"):
        lock("x", owner=owner)


@pytest.mark.parametrize("owner", ["", "a b", "x" * 201, "é"])
def test_owner__a_bad_value_is_a_value_error(owner: str) -> None:
    with pytest.raises(InvalidLockArgumentError, match="owner must be 1 to 200"):
        lock("x", owner=owner)


# Durations: one maximum for every one of them --------------------------------------------------

#: Longer than MAX_SECONDS (ten years); Redis would refuse the first with "not an integer or
#: out of range", and float() cannot hold the last.
TOO_LONG = [1e18, MAX_SECONDS + 0.001, 10**400]


def too_long(argument: str, value: object) -> str:
    return f"{argument} must be at most 315360000 seconds (ten years), got {value!r}."


@pytest.mark.parametrize("value", TOO_LONG)
@pytest.mark.parametrize("argument", ["ttl", "timeout", "max_hold"])
def test_durations__longer_than_ten_years_are_refused_by_lock(
    argument: str, value: object
) -> None:
    with pytest.raises(InvalidLockArgumentError) as caught:
        lock("too:long", **{argument: value})
    assert str(caught.value) == too_long(argument, value)
    assert caught.value.lock_name == "too:long"


@pytest.mark.parametrize("value", TOO_LONG)
def test_durations__longer_than_ten_years_are_refused_by_acquire_and_extend(
    value: object, using: str
) -> None:
    with lock("too:long", ttl=30, using=using) as held:
        with pytest.raises(InvalidLockArgumentError) as caught:
            held.extend(value)  # type: ignore[arg-type]
        assert str(caught.value) == too_long("seconds", value)
        remaining = held.ttl()
        assert remaining is not None
        assert 25 < remaining <= 30
    with pytest.raises(InvalidLockArgumentError) as caught:
        lock("too:long", using=using).acquire(timeout=value)  # type: ignore[arg-type]
    assert str(caught.value) == too_long("timeout", value)


async def test_durations__longer_than_ten_years_are_refused_by_alock(using: str) -> None:
    async with alock("too:long", ttl=30, using=using) as held:
        with pytest.raises(InvalidLockArgumentError) as caught:
            await held.extend(1e18)
        assert str(caught.value) == too_long("seconds", 1e18)
        assert await held.owned()


@pytest.mark.parametrize("argument", ["ttl", "timeout"])
def test_durations__longer_than_ten_years_are_refused_by_lock_view(argument: str) -> None:
    with pytest.raises(InvalidLockArgumentError) as caught:
        lock_view("path", **{argument: 1e18})(lambda request: HttpResponse("ok"))
    assert str(caught.value) == too_long(argument, 1e18)


@pytest.mark.parametrize("attribute", ["lock_ttl", "lock_timeout"])
def test_durations__longer_than_ten_years_are_refused_by_lock_mixin(attribute: str) -> None:
    class Charge(LockMixin, View):
        lock_key = "path"

        def post(self, request: HttpRequest) -> HttpResponse:
            return HttpResponse("charged")

    setattr(Charge, attribute, 1e18)
    with pytest.raises(InvalidLockArgumentError) as caught:
        Charge.as_view()(RequestFactory().post("/charge/"))
    argument = attribute.removeprefix("lock_")
    assert str(caught.value) == too_long(argument, 1e18)


@pytest.mark.parametrize(
    ("arguments", "argument"),
    [
        ({"ttl": 1e18}, "ttl"),
        ({"on_conflict": "wait", "timeout": 1e18}, "timeout"),
        ({"on_conflict": "retry", "countdown": 1e18}, "countdown"),
    ],
)
def test_durations__longer_than_ten_years_are_refused_by_single_instance(
    arguments: dict[str, Any], argument: str
) -> None:
    from django_redis_lock.celery import single_instance

    with pytest.raises(InvalidLockArgumentError) as caught:
        single_instance(**arguments)(lambda: None)
    assert str(caught.value) == too_long(argument, 1e18)


@pytest.mark.parametrize("option", ["ttl", "fencing_ttl", "socket_timeout"])
def test_durations__longer_than_ten_years_are_refused_by_backends(option: str) -> None:
    with pytest.raises(InvalidLockBackendError) as caught:
        RedisBackend(url="redis://127.0.0.1:1/0", **{option: 1e18})
    assert str(caught.value) == (
        f"{too_long(f'RedisBackend OPTIONS[{option!r}]', 1e18)} Durations are seconds; floats "
        "give millisecond precision (0.5 is 500 ms)."
    )
    if option == "ttl":
        with pytest.raises(InvalidLockBackendError, match="ten years"):
            LocMemBackend(ttl=1e18)


def test_durations__the_longest_lease_works_on_redis(redis_url: str, prefix: str) -> None:
    # Ten years of lease, plus ten of fencing counter, plus an extension of ten more: every
    # number the scripts compute stays one Redis takes.
    backend = RedisBackend(url=redis_url, key_prefix=prefix, fencing_ttl=MAX_SECONDS)
    try:
        meta = holder_metadata(host="h", pid=1, thread="t")
        result = backend.acquire("decade", "owner", AcquireRequest(ttl=MAX_SECONDS, metadata=meta))
        assert result.acquired
        assert result.lease == MAX_SECONDS
        extended = backend.extend("decade", "owner", MAX_SECONDS)
        assert extended is not None
        assert extended > 2 * MAX_SECONDS - 60
        [info] = backend.lock_info("decade")
        assert info.ttl > 2 * MAX_SECONDS - 60
        assert backend.release("decade", "owner") == 0
    finally:
        backend.close()


def _plain() -> None: ...


async def _coroutine() -> None: ...


@pytest.mark.parametrize(
    ("build", "func", "message"),
    [
        (lambda: lock("deco"), _coroutine, "lock() cannot decorate the coroutine function"),
        (lambda: alock("deco"), _plain, "alock() decorates coroutine functions"),
        (
            lambda: lock_all(["deco:a", "deco:b"]),
            _coroutine,
            "lock_all() cannot decorate the coroutine function",
        ),
        (lambda: alock_all(["deco:a", "deco:b"]), _plain, "alock_all() decorates coroutine"),
    ],
)
def test_decorating__the_wrong_kind_of_function_is_refused_when_applied(
    build: Any, func: Any, message: str
) -> None:
    # A blocking handle would hold a coroutine function's lock only while the coroutine is
    # created; an asyncio one cannot run a plain function. Refused at once, not at a call.
    with pytest.raises(LockArgumentTypeError) as caught:
        build()(func)
    assert message in str(caught.value)
