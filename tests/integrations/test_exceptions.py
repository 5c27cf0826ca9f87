"""The package's errors keep their type and attributes when pickled, copied or rebuilt.

A Celery result backend hands a task's error to the caller: pickled, or (with JSON) rebuilt
from its class and message; a process pool pickles it too.
"""

from __future__ import annotations

import copy
import pickle

import pytest

from django_redis_lock import exceptions

ERRORS = [
    exceptions.LockError("m", lock_name="n"),
    exceptions.LockNotAcquiredError("m", lock_name="n"),
    exceptions.DuplicateTaskError("m", lock_name="n", task_id="t-1"),
    exceptions.RateLimitExceededError("m", lock_name="n", retry_after=2.5),
    exceptions.LockNotOwnedError("m", lock_name="n"),
    exceptions.LockLostError("m", lock_name="n"),
    exceptions.LockUpgradeError("m", lock_name="n"),
    exceptions.BackendUnavailableError("m", lock_name="n"),
    exceptions.InvalidLockArgumentError("m", lock_name="n"),
    exceptions.LockArgumentTypeError("m", lock_name="n"),
]


@pytest.mark.parametrize("error", ERRORS, ids=lambda error: type(error).__name__)
@pytest.mark.parametrize("again", [lambda e: pickle.loads(pickle.dumps(e)), copy.copy])
def test_an_error__keeps_its_type_and_attributes(error: Exception, again: object) -> None:
    found = again(error)  # type: ignore[operator]
    assert type(found) is type(error)
    assert found.args == error.args
    assert vars(found) == vars(error)


@pytest.mark.parametrize("error", ERRORS, ids=lambda error: type(error).__name__)
def test_an_error__is_rebuilt_from_its_message_alone(error: Exception) -> None:
    # As Celery's JSON result backend rebuilds it: the class called with the message.
    rebuilt = type(error)(*error.args)
    assert str(rebuilt) == str(error)
