"""Leader election: :func:`leader` returns a :class:`Campaign`, which wins :class:`Term` s.

A campaign is a lock named ``leader:<name>``, held with renewal: a leader that lives keeps
it, a leader that dies loses it when its lease ends, and the next campaign to try wins. Each
term is one hold of that lock, by an owner of its own, and its number is the hold's fencing
token, which grows strictly from term to term.

A term knows when its lease ends (renewal moves that on), so ``term.lost`` turns true the
moment the lease may have ended, without a round trip: a leader resumed after a pause longer
than its lease finds it lost before it acts, even if the renewal thread has not yet run.
"""

from __future__ import annotations

import logging
import os
import secrets
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any

from ._core.holds import held
from ._core.validation import validate_name, validate_on_lost
from .backends.base import LockInfo
from .conf import DEFAULT_ALIAS
from .exceptions import LockError, LockLostError, LockNotAcquiredError, LockNotOwnedError
from .lock import Lock

__all__ = ["Campaign", "Term", "leader"]

logger = logging.getLogger("django_redis_lock")

#: The lock of campaign ``name`` is ``LOCK_PREFIX + name``.
LOCK_PREFIX = "leader:"


class Term:
    """One term of office won by a :class:`Campaign`: held until resigned, lost or ended.

    ``number`` is the term's fencing token: a later term of the same campaign name always has
    a greater one, so a resource can refuse a leader whose term is over.
    """

    def __init__(
        self, campaign: Campaign, handle: Lock, on_lost: Callable[[Term], object] | None
    ) -> None:
        token = handle.fencing_token
        assert token is not None
        assert handle.owner is not None
        self.name = campaign.name
        self.number: int = token
        self.owner: str = handle.owner
        self.lock = handle
        self._on_lost = on_lost
        self._guard = threading.Lock()
        self._state = "live"  # then "lost" or "resigned", once
        self._pid = os.getpid()

    def __repr__(self) -> str:
        return f"<Term {self.number} of leader {self.name!r}>"

    @property
    def resigned(self) -> bool:
        """Return whether :meth:`resign` ended the term."""
        return self._state == "resigned"

    @property
    def lost(self) -> bool:
        """Return whether the term ended without being resigned (its lease ended, or was taken).

        Read locally, at once: true as soon as the lease may have ended, even when renewal
        has not found out yet, and true from then on. The first time it turns true, the term
        gives up what is left of its lock, so another campaign can be elected.
        """
        if self._state == "live" and (self.lock.lost or self._lease_left() <= 0):
            self._end()
        return self._state == "lost"

    def remaining(self) -> float:
        """Return the seconds left of the term's lease as this process knows it (0: ended).

        The estimate errs early, never late; renewal moves it on while the term lasts.
        """
        return self._lease_left() if self._state == "live" else 0.0

    def _lease_left(self) -> float:
        hold = held.get((self.lock.backend, self.lock.name, self.owner))
        if hold is None or hold.lost_reason is not None:
            return 0.0
        ends = hold.ends if hold.lease is None else hold.lease.ends
        return max(0.0, ends - time.monotonic())

    def check(self) -> None:
        """Raise :class:`~django_redis_lock.LockLostError` if the term is lost; ask before acting.

        Raises :class:`~django_redis_lock.LockNotOwnedError` after :meth:`resign`.
        """
        if self.resigned:
            raise LockNotOwnedError(
                f"Term {self.number} of leader {self.name!r} was resigned.",
                lock_name=self.lock.name,
            )
        if self.lost:
            raise LockLostError(
                f"Term {self.number} of leader {self.name!r} is lost: its lease ended, so "
                "another process may lead now.",
                lock_name=self.lock.name,
            )

    def resign(self) -> None:
        """Give up the term, so another campaign can be elected at once; a no-op if it ended."""
        if self.lost or not self._leave("resigned"):
            return
        self._release()

    def _end(self) -> None:
        """End a lost term: free what is left of its lock, and call ``on_lost(term)``, once."""
        if not self._leave("lost") or os.getpid() != self._pid:
            return  # a forked child neither frees nor reports its parent's term
        self._release()  # also lets the lock forget the hold, if the lease had ended
        logger.warning("%r ended: it is no longer the leader.", self)
        if self._on_lost is not None:
            try:
                self._on_lost(self)
            except Exception:
                logger.exception("The on_lost callback of %r failed.", self)

    def _leave(self, state: str) -> bool:
        """Move the live term to ``state``; return False if it had ended already."""
        with self._guard:
            if self._state != "live":
                return False
            self._state = state
            return True

    def _release(self) -> None:
        if os.getpid() != self._pid:
            return  # the owner token is the parent's: a forked child must not free its term
        try:
            self.lock.release()
        except LockNotOwnedError:
            pass  # the lease ended: the lock reported it, and nothing is left to free
        except LockError as exc:
            logger.warning("Could not free the lock of %r: %s; it ends with its lease.", self, exc)


class Campaign:
    """A campaign to lead ``name``: each win is a :class:`Term`, renewed while it lasts.

    ``ttl`` is the term's lease in seconds (default: the backend's ``ttl`` option): the
    longest a dead leader keeps the others waiting. ``timeout`` bounds the wait of a
    blocking :meth:`acquire` or of the ``with`` block (None: wait for ever). ``on_lost(term)``
    is called when a term ends without being resigned. ``metadata`` is shown with the
    leader in listings and by :meth:`leader`.
    """

    def __init__(
        self,
        name: str,
        *,
        ttl: float | None = None,
        timeout: float | None = None,
        using: str = DEFAULT_ALIAS,
        metadata: dict[str, Any] | None = None,
        on_lost: Callable[[Term], object] | None = None,
    ) -> None:
        self.name = validate_name(name)
        self.using = using
        self.on_lost = validate_on_lost(on_lost, lock_name=self.lock_name)
        # Checks every other argument, once, here.
        self._template = Lock(
            self.lock_name, ttl=ttl, timeout=timeout, using=using, metadata=metadata
        )
        self._ttl, self.timeout, self.metadata = ttl, timeout, metadata
        self.term: Term | None = None

    def __repr__(self) -> str:
        return f"<Campaign {self.name!r} using={self.using!r}>"

    @property
    def lock_name(self) -> str:
        """Return the name of the lock this campaign holds while it leads."""
        return LOCK_PREFIX + self.name

    def acquire(self, blocking: bool = True, timeout: float | None = None) -> Term | None:
        """Run for office; return the term won, or None if another process leads.

        Blocking (the default) waits until elected, or at most ``timeout`` seconds (None:
        the campaign's timeout). A campaign that leads already returns its current term.
        """
        term = self.term
        if term is not None and not term.resigned and not term.lost:
            return term
        if term is not None:
            term.resign()  # a lost term frees what is left of its hold first
        won: list[Term] = []  # the term, once there is one, for the lock's loss report

        def lost(_lock: Lock) -> None:
            for elected in won:
                elected._end()

        handle = Lock(
            self.lock_name,
            ttl=self._ttl,
            timeout=self.timeout,
            using=self.using,
            metadata=self.metadata,
            auto_renew=True,
            on_lost=lost,
            # An owner per term: a lost term's leftovers never stand in a new one's way.
            owner=f"leader.{secrets.token_hex(12)}",
        )
        if not handle.acquire(blocking=blocking, timeout=timeout):
            return None
        term = self.term = Term(self, handle, self.on_lost)
        won.append(term)
        logger.info("Elected: %r.", term)
        if handle.lost:  # found lost before the term existed to be told
            term._end()
        return term

    def resign(self) -> None:
        """Give up the current term, if any."""
        if self.term is not None:
            self.term.resign()

    def leader(self) -> LockInfo | None:
        """Return who leads now (owner, host, pid, term number as ``fencing_token``), or None."""
        infos = self._template.backend.lock_info(self.lock_name)
        return infos[0] if infos else None

    def __enter__(self) -> Term:
        term = self.acquire()
        if term is None:
            raise LockNotAcquiredError(
                f"Not elected leader of {self.name!r} within {self.timeout}s.",
                lock_name=self.lock_name,
            )
        return term

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        term = self.term
        if term is None:
            return
        lost = term.lost
        term.resign()
        if lost and exc is None:
            raise LockLostError(
                f"Term {term.number} of leader {self.name!r} was lost before the block ended.",
                lock_name=self.lock_name,
            )


#: ``leader(name, ...)`` builds a :class:`Campaign`: it reads well in ``with leader(...):``.
leader = Campaign
