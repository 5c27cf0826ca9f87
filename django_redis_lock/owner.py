"""Who owns a lock: one random token per thread, new in a forked child."""

from __future__ import annotations

import os
import secrets
import threading

__all__ = ["current_owner"]

_owner = threading.local()


def current_owner() -> str:
    """Return the owner token of the calling thread: random, from :mod:`secrets`."""
    token: str | None = getattr(_owner, "token", None)
    if token is None:
        token = _owner.token = secrets.token_hex(16)
    return token


def _forget_owners_in_child() -> None:
    # A forked child is a new owner: it must not release or extend its parent's locks.
    global _owner  # noqa: PLW0603
    _owner = threading.local()


os.register_at_fork(after_in_child=_forget_owners_in_child)
