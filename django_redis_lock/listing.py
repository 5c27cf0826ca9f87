"""One presentation of a lock holder, for every place that shows one to people.

The admin page, ``manage.py locks``, a locked view's conflict answer and ``@single_instance``'s
conflict messages all describe holders (and waiters) through this module: a duration in one
format, who holds the lock or waits for it (and, for a read-write lock, whether to read or to
write, and how many readers hold it), a one-line summary of its metadata, the Celery task id,
and the seconds until a lease ends. What a Celery run records about itself is defined
here too (:class:`TaskRecord`), so the writer and the readers of that metadata agree on its
keys.

Text is returned as the holder wrote it: each output escapes it for its medium (HTML by the
templates, terminals by ``management/listing.py``).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from .backends.base import LockInfo, RateLimitInfo, WaiterInfo

__all__ = [
    "TaskRecord",
    "describe_holder",
    "describe_mode",
    "describe_waiter",
    "duration",
    "held_until",
    "metadata_json",
    "metadata_summary",
    "min_hold_note",
    "rate_use",
    "reader_counts",
    "retry_after",
    "shorten",
    "task_id",
]


@dataclass(frozen=True)
class TaskRecord:
    """What a ``@single_instance`` run records in its lock's metadata, keyed by these fields.

    ``args`` is the task's arguments as ``name=value`` pairs; ``started_at`` is ISO 8601 (UTC);
    ``runner`` is the task queue: ``"celery"`` or ``"django.tasks"``.
    """

    task_id: str | None
    task_name: str
    hostname: str | None
    worker_pid: int | None
    args: str
    started_at: str
    runner: str = "celery"

    def as_metadata(self) -> dict[str, Any]:
        """Return the record as the metadata of the run's lock."""
        return dataclasses.asdict(self)


#: The keys :func:`describe_holder` shows of a task holder, left out of its summary.
_DESCRIBED_KEYS = frozenset({"task_id", "task_name", "hostname", "worker_pid", "runner"})

#: How a holder's task queue is named, by the ``runner`` its record gives.
_RUNNERS = {"celery": "Celery task", "django.tasks": "Django task"}


def duration(seconds: float) -> str:
    """Return a short, human form of a number of seconds: 4.2s, 5m03s, 2h07m, 3d01h.

    ``static/django_redis_lock/locks.js`` writes the admin's live countdown the same way.
    """
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours}h{minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d{hours:02d}h"


def rate_use(info: RateLimitInfo) -> tuple[str, str]:
    """Return how much of a rate's window is used ("7/10") and when a slot frees ("now")."""
    free = "now" if info.free_in <= 0 else f"in {duration(info.free_in)}"
    return f"{info.used}/{info.rate.limit}", free


def task_id(info: LockInfo | WaiterInfo) -> str | None:
    """Return the task id (Celery's, or a ``django.tasks`` result id) a holder recorded, if any."""
    value = info.metadata.get("task_id")
    return value if isinstance(value, str) and value else None


def _task_name(info: LockInfo | WaiterInfo) -> str | None:
    value = info.metadata.get("task_name")
    return value if isinstance(value, str) and value else None


def _is_task(info: LockInfo | WaiterInfo) -> bool:
    return task_id(info) is not None or _task_name(info) is not None


def held_until(info: LockInfo) -> dt.datetime:
    """Return when the lease of ``info`` ends, on the backend's clock (UTC).

    Durations are kept to the millisecond, so two listings of one lease give one time.
    """
    return info.acquired_at + dt.timedelta(milliseconds=round((info.held_for + info.ttl) * 1000))


def describe_holder(info: LockInfo, *, readers: int | None = None) -> str:
    """Return who holds ``info``: the task when one does, else host, pid and thread.

    A holder of a read-write lock says how it holds it, after who it is (see
    :func:`describe_mode`): "web-1, pid 41, thread T (write)", or with ``readers``, how many
    readers hold the lock, "web-1, pid 41, thread T (read, 3 readers)". A plain lock's holder
    says nothing of a mode. A hold kept after its release for its ``min_hold`` window reads
    "held until <time> by min_hold", then who released it.
    """
    who, note = _with_mode(_who(info), describe_mode(info, readers)), min_hold_note(info)
    return who if note is None else f"{note} (released by {who})"


def describe_mode(info: LockInfo | WaiterInfo, readers: int | None = None) -> str | None:
    """Return how a holder holds a read-write lock, or how a waiter asks for it.

    "write", or "read"; for a reader, with ``readers`` (how many readers hold its lock, as
    :func:`reader_counts` counts them), "read, 3 readers". None for a plain lock.
    """
    if info.mode is None:
        return None
    if info.mode == "read" and readers:
        return f"read, {readers} reader{'' if readers == 1 else 's'}"
    return info.mode


def reader_counts(holders: Iterable[LockInfo]) -> dict[str, int]:
    """Return how many readers hold each read-write lock among ``holders``, by lock name.

    Give every holder of the locks counted, from one alias: a lock's ``lock_info()``, or a
    page of ``scan_page()``, which lists every holder of each lock it lists. A lock that no
    reader holds is left out.
    """
    return dict(Counter(info.name for info in holders if info.mode == "read"))


def min_hold_note(info: LockInfo) -> str | None:
    """Return "held until <time> UTC by min_hold" for a hold kept for its min_hold window.

    None for any other hold.
    """
    if info.min_hold_of is None:
        return None
    return f"held until {held_until(info):%Y-%m-%d %H:%M:%S} UTC by min_hold"


def describe_waiter(info: WaiterInfo) -> str:
    """Return who waits (as :func:`describe_holder` says who holds), its place and since when.

    For example "Celery task shop.bill [8f3c…] on worker-1, pid 41: next, fair, waiting 4.2s";
    a waiter for a read-write lock says what it waits to do, after who it is: "web-1, pid 41,
    thread T (write): next, waiting 4.2s".
    """
    place = "next" if info.next else f"#{info.position + 1} in line"
    order = {True: ", fair", False: "", None: ""}[info.fair]
    who = _with_mode(_who(info), describe_mode(info))
    return f"{who}: {place}{order}, waiting {duration(info.waited_for)}"


def _with_mode(who: str, mode: str | None) -> str:
    return who if mode is None else f"{who} ({mode})"


def _who(info: LockInfo | WaiterInfo) -> str:
    meta, run = info.metadata, task_id(info)
    if _is_task(info):
        runner = _RUNNERS.get(str(meta.get("runner", "celery")), "task")
        text = f"{runner} {_task_name(info) or '(unnamed)'}"
        text += "" if run is None else f" [{run}]"
        where = [str(meta["hostname"])] if meta.get("hostname") else []
        if meta.get("worker_pid") is not None:
            where.append(f"pid {meta['worker_pid']}")
        return f"{text} on {', '.join(where)}" if where else text
    where = [info.host] if info.host else []
    if info.pid is not None:
        where.append(f"pid {info.pid}")
    command = meta.get("command")
    if command:  # manage.py locked: what runs, and where ("migrate on web-3, pid 41")
        return f"{command} on {', '.join(where) or 'an unknown host'}"
    if info.thread:
        where.append(f"thread {info.thread}")
    return ", ".join(where) or "unknown"


def metadata_json(info: LockInfo | WaiterInfo, *, indent: int | None = None) -> str:
    """Return the metadata in full as JSON, keys sorted: one line, or indented by ``indent``."""
    return json.dumps(
        info.metadata, ensure_ascii=False, sort_keys=True, indent=indent, default=str
    )


def metadata_summary(info: LockInfo) -> str:
    """Return the metadata on one line, as sorted ``key=value`` pairs.

    A task holder's id, name, worker and pid are left out: :func:`describe_holder` shows them.
    """
    described = _DESCRIBED_KEYS if _is_task(info) else frozenset()
    return ", ".join(
        f"{key}={value if isinstance(value, str) else json.dumps(value, default=str)}"
        for key, value in sorted(info.metadata.items())
        if key not in described
    )


def shorten(text: str, width: int) -> str:
    """Return ``text``, cut to ``width`` characters with an ellipsis if it is longer."""
    return text if len(text) <= width else text[: width - 1] + "…"


def retry_after(holders: Iterable[LockInfo]) -> int:
    """Return the seconds until the first holder's lease ends, rounded up (at least 1)."""
    return max(1, math.ceil(min((h.ttl for h in holders), default=1.0)))
