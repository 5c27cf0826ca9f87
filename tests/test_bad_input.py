"""Bad arguments raise this package's own errors (also ValueError/TypeError), naming them."""

from __future__ import annotations

from typing import Any

import pytest

from django_redis_lock import (
    InvalidLockArgumentError,
    LockArgumentTypeError,
    LockError,
    lock,
)
from django_redis_lock._validation import MAX_NAME_LENGTH


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
