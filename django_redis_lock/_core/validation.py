"""Checks of user-supplied lock arguments, shared by every entry point."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ..exceptions import InvalidLockArgumentError, LockArgumentTypeError
from .owner import MIN_HOLD_PREFIX

#: The longest lock name accepted, in characters.
MAX_NAME_LENGTH = 1024

#: The longest duration accepted anywhere (a lease, an extension, a timeout, a duration
#: option), in seconds: ten 365-day years. Redis takes milliseconds as signed 64-bit integers,
#: and the scripts add a lease and a fencing counter's lifetime to the server's clock in Lua,
#: whose numbers are doubles written back to Redis with at most 14 significant digits.
#: Ten years keep every such sum (about 2.4e12 ms today) an exact integer of 13 digits.
MAX_SECONDS = 10 * 365 * 24 * 3600

#: The shortest lease accepted, in seconds: Redis counts leases in whole milliseconds.
MIN_SECONDS = 0.001


def validate_name(name: object) -> str:
    """Return ``name`` if it is a usable lock name, else raise."""
    if not isinstance(name, str):
        raise LockArgumentTypeError(
            f"Lock name must be a str, not {type(name).__name__}: {name!r}."
        )
    if not name:
        raise InvalidLockArgumentError("Lock name must not be empty.")
    if len(name) > MAX_NAME_LENGTH:
        raise InvalidLockArgumentError(
            f"Lock name must be at most {MAX_NAME_LENGTH} characters, got {len(name)}: "
            f"{name[:40]!r}...",
            lock_name=name,
        )
    try:
        name.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidLockArgumentError(
            f"Lock name must be encodable as UTF-8 ({exc.reason}): {name!r}."
        ) from None
    return name


def validate_names(names: object) -> tuple[str, ...]:
    """Return ``names`` (an iterable of lock names) checked, without repeats, and sorted.

    One order for every caller is what keeps two acquisitions of overlapping sets, taken
    name by name, from waiting for each other for ever.
    """
    if isinstance(names, (str, bytes)) or not isinstance(names, Iterable):
        raise LockArgumentTypeError(
            f"names must be a list of lock names, not {type(names).__name__}: {names!r}."
        )
    listed = list(names)
    checked = {validate_name(name) for name in listed}
    if not checked:
        raise InvalidLockArgumentError(f"names must hold at least one lock name, got {listed!r}.")
    return tuple(sorted(checked))


def _seconds(
    value: object, *, argument: str, lock_name: str | None, at_least: float, must: str
) -> float:
    """Return ``value`` as seconds if it is a finite number from ``at_least`` to MAX_SECONDS.

    ``must`` says what else ``value`` must be, in the message that refuses it.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise LockArgumentTypeError(
            f"{argument} must be a number of seconds, not {type(value).__name__}: {value!r}.",
            lock_name=lock_name,
        )
    # Compared before float(): an int can be too large for one.
    if MAX_SECONDS < value < math.inf:
        raise InvalidLockArgumentError(
            f"{argument} must be at most {MAX_SECONDS} seconds (ten years), got {value!r}.",
            lock_name=lock_name,
        )
    if value < at_least or not math.isfinite(value):
        raise InvalidLockArgumentError(
            f"{argument} must be {must}, got {value!r}.", lock_name=lock_name
        )
    return float(value)


_LEASE_MUST = f"a finite number of seconds of at least {MIN_SECONDS}"


def validate_ttl(value: object, *, argument: str = "ttl", lock_name: str | None = None) -> float:
    """Return ``value`` as seconds if it is a lease from 1 ms to :data:`MAX_SECONDS`."""
    return _seconds(
        value, argument=argument, lock_name=lock_name, at_least=MIN_SECONDS, must=_LEASE_MUST
    )


def validate_switch_duration(value: object, *, argument: str) -> float:
    """Return ``value`` as seconds if it is from 0 (off) to :data:`MAX_SECONDS`."""
    return _seconds(
        value,
        argument=argument,
        lock_name=None,
        at_least=0,
        must="a finite number of seconds >= 0 (0: off)",
    )


def validate_timeout(
    value: object, *, argument: str = "timeout", lock_name: str | None = None
) -> float | None:
    """Return ``value`` as seconds (``None``: forever) if it is from 0 to :data:`MAX_SECONDS`."""
    if value is None:
        return None
    return _seconds(
        value,
        argument=argument,
        lock_name=lock_name,
        at_least=0,
        must="None or a finite number of seconds >= 0",
    )


def validate_min_hold(value: object, *, lock_name: str | None = None) -> float:
    """Return ``value`` as seconds if it is from 0 (none) to :data:`MAX_SECONDS`."""
    return _seconds(
        value,
        argument="min_hold",
        lock_name=lock_name,
        at_least=0,
        must="a finite number of seconds >= 0 (0: none)",
    )


def validate_limit(value: object, *, lock_name: str | None = None) -> int:
    """Return ``value`` if it is a whole number of concurrent holders >= 1."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise LockArgumentTypeError(
            f"limit must be an int, not {type(value).__name__}: {value!r}.", lock_name=lock_name
        )
    if value < 1:
        raise InvalidLockArgumentError(
            f"limit must be at least 1, got {value!r}.", lock_name=lock_name
        )
    return value


def validate_metadata(value: object, *, lock_name: str | None = None) -> dict[str, Any]:
    """Return a copy of ``value`` if it is a JSON-serialisable mapping (or None)."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise LockArgumentTypeError(
            f"metadata must be a dict, not {type(value).__name__}: {value!r}.",
            lock_name=lock_name,
        )
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise LockArgumentTypeError(
            f"metadata must be JSON-serialisable: {exc} in {value!r}.", lock_name=lock_name
        ) from exc
    return dict(value)


def validate_flag(value: object, *, argument: str, lock_name: str | None = None) -> bool:
    """Return ``value`` if it is True or False."""
    if not isinstance(value, bool):
        raise LockArgumentTypeError(
            f"{argument} must be True or False, got {value!r}.", lock_name=lock_name
        )
    return value


def validate_optional_flag(
    value: object, *, argument: str, lock_name: str | None = None
) -> bool | None:
    """Return ``value`` if it is None, True or False."""
    if value is not None and not isinstance(value, bool):
        raise LockArgumentTypeError(
            f"{argument} must be None, True or False, got {value!r}.", lock_name=lock_name
        )
    return value


def validate_on_lost(
    value: object, *, lock_name: str | None = None
) -> Callable[[Any], object] | None:
    """Return ``value`` if it is None or a callable (it is called with the lock)."""
    if value is not None and not callable(value):
        raise LockArgumentTypeError(
            f"on_lost must be a callable taking the lock, got {value!r}.", lock_name=lock_name
        )
    return value


_OWNER = re.compile(r"[A-Za-z0-9_.:@-]{1,200}")


def validate_owner(value: object, *, lock_name: str | None = None) -> str | None:
    """Return ``value`` if it is None or a usable owner token."""
    if value is not None and not isinstance(value, str):
        raise LockArgumentTypeError(
            f"owner must be None or a str, not {type(value).__name__}: {value!r}.",
            lock_name=lock_name,
        )
    if value is not None and not _OWNER.fullmatch(value):
        raise InvalidLockArgumentError(
            f"owner must be 1 to 200 letters, digits or '-_.:@' characters, got {value!r}.",
            lock_name=lock_name,
        )
    if value is not None and value.startswith(MIN_HOLD_PREFIX):
        raise InvalidLockArgumentError(
            f"owner must not start with {MIN_HOLD_PREFIX!r}, the owner of holds kept for "
            f"their min_hold window, got {value!r}.",
            lock_name=lock_name,
        )
    return value
