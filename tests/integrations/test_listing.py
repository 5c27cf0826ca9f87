"""The one presentation of a holder: durations, descriptions, metadata summaries, Retry-After."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from django_redis_lock.backends.base import LockInfo, holder_metadata
from django_redis_lock.listing import (
    TaskRecord,
    describe_holder,
    duration,
    held_until,
    metadata_json,
    metadata_summary,
    retry_after,
    shorten,
    task_id,
)


def info(metadata: bytes = b"", *, ttl: float = 1.0) -> LockInfo:
    """Return a holder of lock ``n`` that recorded ``metadata``."""
    return LockInfo.from_record(
        name="n",
        owner="o",
        holds=1,
        ttl=ttl,
        fencing_token=1,
        acquired_at=0,
        now=0,
        metadata=metadata,
    )


def with_data(data: dict[str, Any]) -> LockInfo:
    return info(holder_metadata(host="h", pid=7, thread="T", data=data))


def test_duration() -> None:
    seconds = (0, 0.9, 4.25, 59, 60, 61, 3599, 3600, 86399, 90061)
    assert [duration(s) for s in seconds] == [
        "0.0s",
        "0.9s",
        "4.2s",
        "59.0s",
        "1m00s",
        "1m01s",
        "59m59s",
        "1h00m",
        "23h59m",
        "1d01h",
    ]


@pytest.mark.parametrize(
    ("metadata", "described"),
    [
        (b"", "unknown"),
        (holder_metadata(host="web-1", pid=7, thread="T"), "web-1, pid 7, thread T"),
        (holder_metadata(host="", pid=7, thread=""), "pid 7"),
        (holder_metadata(host="h", pid=7, thread="T", data={"task_name": "t"}), "Celery task t"),
        (
            holder_metadata(host="h", pid=7, thread="T", data={"task_id": "i", "worker_pid": 9}),
            "Celery task (unnamed) [i] on pid 9",
        ),
        (
            holder_metadata(
                host="h",
                pid=7,
                thread="T",
                data={"task_id": "i", "task_name": "t", "hostname": "celery@w", "worker_pid": 9},
            ),
            "Celery task t [i] on celery@w, pid 9",
        ),
    ],
)
def test_describe_holder(metadata: bytes, described: str) -> None:
    assert describe_holder(info(metadata)) == described


def test_task_id__only_a_non_empty_string_is_one() -> None:
    assert task_id(with_data({"task_id": "abc"})) == "abc"
    assert task_id(with_data({"task_id": 42})) is None
    assert task_id(with_data({"task_id": ""})) is None
    assert task_id(with_data({})) is None


def test_metadata_summary__sorted_pairs_without_what_the_description_shows() -> None:
    plain = with_data({"b": "two", "a": [1, 2], "task_id": 3})
    record = TaskRecord(
        task_id="i",
        task_name="t",
        hostname="celery@w",
        worker_pid=9,
        args="customer_id=42",
        started_at="2026-01-31T09:30:00+00:00",
    )

    assert metadata_summary(plain) == "a=[1, 2], b=two, task_id=3"
    assert metadata_summary(with_data(record.as_metadata())) == (
        "args=customer_id=42, started_at=2026-01-31T09:30:00+00:00"
    )
    assert metadata_summary(info()) == ""


def test_task_record__keys_in_the_order_celery_records_them() -> None:
    record = TaskRecord(
        task_id=None, task_name="t", hostname=None, worker_pid=1, args="", started_at="now"
    )
    assert list(record.as_metadata()) == [
        "task_id",
        "task_name",
        "hostname",
        "worker_pid",
        "args",
        "started_at",
        "runner",
    ]


def test_metadata_json__sorted_keys_unicode_kept() -> None:
    holder = with_data({"b": "ключ", "a": 1})

    assert metadata_json(holder) == '{"a": 1, "b": "ключ"}'
    assert metadata_json(holder, indent=2) == '{\n  "a": 1,\n  "b": "ключ"\n}'
    assert metadata_json(info()) == "{}"


def test_shorten() -> None:
    assert shorten("abcd", 4) == "abcd"
    assert shorten("abcde", 4) == "abc…"


def test_retry_after__the_first_lease_to_end_rounded_up_and_at_least_one() -> None:
    assert retry_after([info(ttl=6.2), info(ttl=3.1)]) == 4
    assert retry_after([info(ttl=0.2)]) == 1
    assert retry_after([]) == 1


def test_describe_holder__a_min_hold_window_says_until_when_and_who_released_it() -> None:
    kept = LockInfo.from_record(
        name="n",
        owner="min_hold:celery:run-1",
        holds=0,
        ttl=2.5,
        fencing_token=1,
        acquired_at=1_800_000_000,
        now=1_800_000_001.5,
        metadata=holder_metadata(host="h", pid=7, thread="T"),
    )

    assert kept.min_hold_of == "celery:run-1"
    assert held_until(kept) == dt.datetime(2027, 1, 15, 8, 0, 4, tzinfo=dt.timezone.utc)
    assert describe_holder(kept) == (
        "held until 2027-01-15 08:00:04 UTC by min_hold (released by h, pid 7, thread T)"
    )
    assert info().min_hold_of is None
