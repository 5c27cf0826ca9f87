"""leader(): a campaign that blocks or tries, terms that are renewed, lost, resigned."""

from __future__ import annotations

import time
from typing import Any

import pytest

from django_redis_lock import (
    Campaign,
    InvalidLockArgumentError,
    LockArgumentTypeError,
    LockLostError,
    LockNotAcquiredError,
    LockNotOwnedError,
    Term,
    leader,
    locks,
)
from tests.support.helpers import eventually, in_thread


def test_with_block__elects_and_resigns_on_leaving() -> None:
    with leader("elect") as term:
        assert isinstance(term, Term)
        assert not term.lost
        term.check()
        assert leader("elect").acquire(blocking=False) is None
    assert term.resigned
    assert not term.lost
    other = leader("elect").acquire(blocking=False)
    assert other is not None, "a resigned term frees the office at once"
    other.resign()


def test_acquire__non_blocking_returns_none_while_another_leads() -> None:
    first = leader("try", ttl=5).acquire(blocking=False)
    assert first is not None
    try:
        assert leader("try").acquire(blocking=False) is None
        started = time.monotonic()
        assert leader("try").acquire(timeout=0.3) is None
        assert time.monotonic() - started >= 0.3
    finally:
        first.resign()


def test_with_block__not_elected_in_time_raises_not_acquired() -> None:
    first = leader("busy").acquire()
    assert first is not None
    try:
        with pytest.raises(LockNotAcquiredError), leader("busy", timeout=0.2):
            pass
    finally:
        first.resign()


def test_acquire__again_while_leading_returns_the_same_term() -> None:
    campaign = leader("again")
    term = campaign.acquire()
    assert campaign.acquire(blocking=False) is term
    campaign.resign()
    assert term.resigned


def test_term_numbers__grow_strictly_from_term_to_term() -> None:
    numbers = []
    for _ in range(5):
        with leader("numbers") as term:
            numbers.append(term.number)
    assert numbers == sorted(set(numbers))


def test_leader__reads_who_leads_from_the_lock() -> None:
    campaign = leader("who", metadata={"role": "scheduler"})
    assert campaign.leader() is None
    with campaign as term:
        info = in_thread(lambda: leader("who").leader())
        assert info is not None
        assert info.owner == term.owner
        assert info.fencing_token == term.number
        assert info.metadata == {"role": "scheduler"}
        assert info.name == "leader:who"
    assert campaign.leader() is None


def test_term__renewed_while_it_lasts() -> None:
    with leader("renewed", ttl=0.3) as term:
        time.sleep(1.0)
        assert not term.lost
        term.check()
        assert 0 < term.remaining() <= 0.3


def test_term__taken_away__on_lost_lost_and_check() -> None:
    told: list[Term] = []
    campaign = leader("taken", ttl=0.6, on_lost=told.append)
    term = campaign.acquire()
    assert term is not None
    assert locks["default"].force_release("leader:taken") == 1
    eventually(lambda: bool(told), timeout=5)  # renewal finds the lease gone
    assert told == [term]
    assert term.lost
    with pytest.raises(LockLostError):
        term.check()
    assert told == [term], "on_lost is called once"
    successor = leader("taken").acquire(blocking=False)
    assert successor is not None
    assert successor.number > term.number
    successor.resign()


def test_term__lost_at_once_when_its_lease_ended_unrenewed(monkeypatch: Any) -> None:
    # The renewal thread is kept from running, as a paused process's would be: the term
    # must still say lost the moment its lease may have ended, with no round trip.
    term = leader("unrenewed", ttl=0.3).acquire()
    assert term is not None
    hold_ends = time.monotonic() + term.remaining()
    monkeypatch.setattr(time, "monotonic", lambda: hold_ends + 0.001)
    assert term.lost
    assert term.remaining() == 0
    monkeypatch.undo()
    with pytest.raises(LockLostError):
        term.check()


def test_with_block__leaving_after_the_term_was_lost_raises_lost() -> None:
    with pytest.raises(LockLostError), leader("lost-in-block", ttl=0.6) as term:
        locks["default"].force_release("leader:lost-in-block")
        eventually(lambda: term.lost, timeout=5)


def test_resign__twice_is_a_no_op_and_check_after_raises_not_owned() -> None:
    term = leader("resigned").acquire()
    assert term is not None
    term.resign()
    term.resign()
    with pytest.raises(LockNotOwnedError):
        term.check()


def test_acquire__after_a_lost_term_wins_a_new_one() -> None:
    campaign = leader("again-after-loss", ttl=0.6)
    first = campaign.acquire()
    assert first is not None
    locks["default"].force_release("leader:again-after-loss")
    eventually(lambda: first.lost, timeout=5)
    second = campaign.acquire(blocking=False)
    assert second is not None
    assert second is not first
    assert second.number > first.number
    second.resign()


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"name": ""}, InvalidLockArgumentError),
        ({"name": 3}, LockArgumentTypeError),
        ({"name": "x", "ttl": 0}, InvalidLockArgumentError),
        ({"name": "x", "ttl": "10"}, LockArgumentTypeError),
        ({"name": "x", "timeout": -1}, InvalidLockArgumentError),
        ({"name": "x", "on_lost": "print"}, LockArgumentTypeError),
        ({"name": "x", "metadata": {"at": object()}}, LockArgumentTypeError),
    ],
)
def test_leader__bad_arguments_raise_the_package_errors(
    kwargs: dict[str, Any], error: type[Exception]
) -> None:
    with pytest.raises(error):
        Campaign(**kwargs)
