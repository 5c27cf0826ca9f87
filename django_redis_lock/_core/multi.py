"""What :class:`~django_redis_lock.MultiLock` and its asyncio twin share.

A multi-lock is one single-name handle per name, held whole or not at all: how it takes them
is its plan (:mod:`.multi_steps`). Holding a name, renewing its lease and finding it lost are
each handle's own; this module only adds them up (the ``on_lost`` callback is called once,
for the first name lost), and says what an action on every name met.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import Iterable
from typing import TYPE_CHECKING, ClassVar, TypeVar

from ..conf import DEFAULT_ALIAS
from ..exceptions import (
    LockError,
    LockLostError,
    LockNotAcquiredError,
    LockNotOwnedError,
)
from .handle import LockHandle
from .lock_arguments import LockOptions, accept_options
from .multi_steps import AllOrNothing
from .validation import validate_flag, validate_names, validate_on_lost

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from ..backends.base import BaseLockBackend, ReleaseRequest
    from .holds import Hold

__all__ = ["Failures", "MultiLockBase"]

H = TypeVar("H", bound=LockHandle)

#: What an action on every name met: each name that failed, with its error.
Failures = list[tuple[str, BaseException]]


class MultiLockBase(AllOrNothing[H]):
    """The arguments, members and loss book-keeping of a multi-lock; subclasses do the I/O."""

    #: How users call the class, as an error about its arguments names it.
    _builder: ClassVar[str] = "lock_all()"

    def __init__(self, names: Iterable[str], **options: Unpack[LockOptions]) -> None:
        self.names = validate_names(names)
        # limit and min_hold are not a multi-lock's to give: it takes each name as a lock, and
        # a name given back because another could not be taken must be free at once.
        accept_options(options, caller=self._builder)
        self.on_lost = validate_on_lost(options.get("on_lost"))
        self.raise_on_lost = validate_flag(
            options.get("raise_on_lost", True), argument="raise_on_lost"
        )
        self.using = options.get("using", DEFAULT_ALIAS)
        self._bound = weakref.WeakKeyDictionary()
        self._binding = threading.Lock()
        each: LockOptions = {**options, "on_lost": self._on_member_lost}
        self._members = tuple(self._member(name, each) for name in self.names)

    def _member(self, name: str, options: LockOptions) -> H:
        """Return the single-name handle of ``name``, reporting its losses to this multi-lock."""
        raise NotImplementedError("subclasses of MultiLockBase must provide a _member() method")

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {list(self.names)!r} using={self.using!r}>"

    @property
    def locks(self) -> tuple[H, ...]:
        """Return the single-name handles, one per name, in the order they are acquired."""
        return self._members

    @property
    def fencing_tokens(self) -> dict[str, int]:
        """Return the fencing token of each name the calling owner holds, by name.

        Empty until an acquire succeeds, and again after release. Each name's token grows
        with each new holder of that name, as :attr:`.Lock.fencing_token` does.
        """
        tokens = {member.name: member.fencing_token for member in self._members}
        return {name: token for name, token in tokens.items() if token is not None}

    @property
    def lost(self) -> bool:
        """Return whether the calling owner's hold of any name (or its last one) was lost.

        Losing one name is losing the multi-lock: another owner may hold that name now.
        """
        return any(member.lost for member in self._members)

    def _on_member_lost(self, member: LockHandle) -> object:
        """Call ``on_lost(self)`` for the first lost hold of an acquisition; return its result.

        Each name's handle calls this with itself when one of its holds is lost (where its
        own ``on_lost`` would run), and records the lost hold before it does.
        """
        with self._binding:
            taken = {self._bound.get(hold) for hold in list(member._lost.values())}
        told = [acquisition.tell() for acquisition in taken if acquisition is not None]
        return self.on_lost(self) if any(told) and self.on_lost is not None else None

    def _prepared_releases(self, backend: BaseLockBackend) -> list[tuple[H, str, Hold | None]]:
        """Return every member, last name first, with its owner and the hold it is to drop.

        Each hold's renewal is stopped first, as a release of one lock does.
        """
        prepared = []
        for member in reversed(self._members):
            owner = member._owner_token()
            prepared.append((member, owner, member._before_release(backend, owner)))
        return prepared

    @staticmethod
    def _release_requests(
        prepared: list[tuple[H, str, Hold | None]],
    ) -> list[tuple[str, str, ReleaseRequest]]:
        """Return the backend's ``release_many`` requests for ``prepared`` releases."""
        return [
            (member.name, owner, member._release_request(hold)) for member, owner, hold in prepared
        ]

    @staticmethod
    def _release_failures(released: list[tuple[H, Hold | None, BaseException | None]]) -> Failures:
        """Return what the releases of ``released`` (member, hold, error) met."""
        return [(member.name, error) for member, _, error in released if error is not None]

    @staticmethod
    def _leave_failures(released: list[tuple[H, Hold | None, BaseException | None]]) -> Failures:
        """Leave every name as leaving a lock's block does, after its release; return failures.

        A name its owner no longer held is reported by ``_left()`` as a lost hold; any other
        error of its release (a cancellation too) is a failure of its own.
        """
        failures: Failures = []
        for member, hold, error in released:
            try:
                if error is not None and not isinstance(error, LockNotOwnedError):
                    raise error
                member._left(hold, None)
            except (LockError, asyncio.CancelledError) as failure:
                failures.append((member.name, failure))
        return failures

    def _not_acquired(self, refused: str) -> LockNotAcquiredError:
        first = self._members[0]
        wait = "at once" if not first.blocking else f"within {first.timeout}s"
        return LockNotAcquiredError(
            f"Could not acquire every lock of {list(self.names)!r} {wait}: {refused!r} could "
            "not be taken, so none of them was kept.",
            lock_name=refused,
        )

    def _raise_failures(self, action: str, failures: Failures) -> None:
        """Raise what ``action``, done on every name, met.

        An interruption (a cancelled task) first, then :class:`LockNotOwnedError` naming
        the names the caller does not hold, then the first other error.
        """
        _raise_interruption(failures)
        not_owned = sorted(
            name for name, error in failures if isinstance(error, LockNotOwnedError)
        )
        if not_owned:
            raise LockNotOwnedError(
                f"Cannot {action} lock(s) {not_owned!r} of {list(self.names)!r}: this "
                "owner does not hold them (never acquired, already released, or lost).",
                lock_name=not_owned[0],
            )
        if failures:
            raise failures[0][1]

    @staticmethod
    def _lost_in(failures: Failures) -> list[str]:
        """Return the names found lost among ``failures``, having raised any other failure.

        An interruption (a cancelled task) is raised first, then the first other error.
        """
        _raise_interruption(failures)
        for _, error in failures:
            if not isinstance(error, LockLostError):
                raise error
        return sorted(name for name, _ in failures)

    @staticmethod
    def _shortest(leases: list[float | None]) -> float | None:
        """Return the shortest of the names' leases; None if one of them is not held."""
        return None if None in leases else min(lease for lease in leases if lease is not None)

    def _lost_error(self, lost: list[str]) -> LockLostError:
        """Return the error of losing the names ``lost`` (sorted): losing the multi-lock."""
        return LockLostError(
            f"Lock(s) {lost!r} of {list(self.names)!r} were lost before the end of the hold, "
            "so another owner may have run at the same time.",
            lock_name=lost[0],
        )


def _raise_interruption(failures: Failures) -> None:
    """Raise the first failure that is no lock error (a cancellation), if there is one."""
    for _, error in failures:
        if not isinstance(error, LockError):
            raise error
