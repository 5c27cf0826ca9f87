"""``manage.py locks release``: force-release one lock, after confirmation, and audit it.

The holders shown are the holders freed: each is released by its owner token, so one that took
the lock since is kept. The user confirms at a terminal (or passes ``--yes``), and every release
is logged at WARNING on the ``django_redis_lock.audit`` logger with the OS user who did it.
"""

from __future__ import annotations

import getpass
import logging
import os
import sys

from django.core.management.base import CommandError, OutputWrapper

from ..backends.base import BaseLockBackend, LockInfo
from ..listing import task_id
from .inspection import each_backend, on_alias
from .output import plural, shown, summary

__all__ = ["audit_logger", "release_lock"]

audit_logger = logging.getLogger("django_redis_lock.audit")


def release_lock(
    stdout: OutputWrapper, name: str, *, owner: str | None, using: str | None, yes: bool
) -> None:
    """Force-release the holders shown, after confirmation; log who did it."""
    targets = _holders_to_free(name, owner, using)
    count = sum(len(chosen) for _, _, chosen in targets)
    stdout.write(f"Force-releasing lock {name!r} frees {plural(count, 'holder')}:")
    for alias, _, chosen in targets:
        for info in chosen:
            stdout.write(f"  {alias}: {summary(info)}")
    if not yes:
        _confirm(f"Release lock {name!r}? The holders are not told. [y/N] ")
    user, freed_total = _os_user(), 0
    for alias, backend, chosen in targets:
        freed: list[LockInfo] = []
        try:
            for info in chosen:
                if backend.force_release(name, owner=info.owner):
                    freed.append(info)
                else:
                    stdout.write(f"Owner {shown(info.owner)} on {alias} had let go already.")
        finally:  # what was freed is logged even if the backend fails half-way
            if freed:
                _audit(user, alias, name, freed)
                owners = "; ".join(summary(info) for info in freed)
                stdout.write(f"Released lock {name!r} on alias {alias!r}: {owners}.")
        freed_total += len(freed)
    if not freed_total:
        raise CommandError(
            f"Nothing was released: the holders of {name!r} let go of it meanwhile.",
            returncode=1,
        )


def _holders_to_free(
    name: str, owner: str | None, using: str | None
) -> list[tuple[str, BaseLockBackend, list[LockInfo]]]:
    """Return, per alias, the holders of ``name`` to free (only ``owner``, if given)."""
    targets: list[tuple[str, BaseLockBackend, list[LockInfo]]] = []
    others: list[str] = []
    for alias, backend in each_backend(using):
        holders = backend.lock_info(name)
        chosen = [info for info in holders if owner is None or info.owner == owner]
        others += [f"{alias} {shown(info.owner)}" for info in holders if info not in chosen]
        if chosen:
            targets.append((alias, backend, chosen))
    if targets:
        return targets
    where = on_alias(using)
    if owner is None:
        message = f"Lock {name!r} is not held{where}; nothing was released."
    else:
        held = f"it is held by {', '.join(others)}" if others else "nobody holds it"
        message = (
            f"Owner {owner!r} does not hold lock {name!r}{where} ({held}); nothing was released."
        )
    raise CommandError(message, returncode=1)


def _confirm(prompt: str) -> None:
    """Return if the user at the terminal says yes; raise CommandError otherwise."""
    try:
        interactive = sys.stdin is not None and sys.stdin.isatty()
    except ValueError:  # stdin was closed
        interactive = False
    if not interactive:
        raise CommandError(
            "Refusing to force-release without confirmation: stdin is not a terminal "
            "(pass --yes to release anyway).",
            returncode=2,
        )
    try:
        answer = input(prompt)
    except (EOFError, KeyboardInterrupt):
        answer = ""
    if answer.strip().lower() not in {"y", "yes"}:
        raise CommandError("Release declined; nothing was released.", returncode=1)


def _os_user() -> str:
    """Return who runs the command: the login name, else the numeric user id."""
    try:
        return getpass.getuser()
    except (OSError, KeyError, ImportError):  # no name in the environment or the user database
        return f"uid {os.getuid()}" if hasattr(os, "getuid") else "unknown"


def _audit(user: str, alias: str, name: str, freed: list[LockInfo]) -> None:
    task_ids = [task_id(info) for info in freed]
    audit_logger.warning(
        "OS user %r force-released lock %r on alias %r, freeing %s",
        user,
        name,
        alias,
        "; ".join(summary(info) for info in freed),
        extra={
            "os_user": user,
            "lock_alias": alias,
            "lock_name": name,
            "lock_owners": [info.owner for info in freed],
            "task_ids": [one for one in task_ids if one],
        },
    )
