"""What the Lua scripts take and answer: their arguments, and their replies as typed values.

Durations cross as whole milliseconds; each script's ``ARGV`` and reply are in its header
(``lua/*.lua``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..base import AcquireAllResult, AcquireRequest, AcquireResult, Grant, ReleaseRequest

__all__ = [
    "acquire_all_args",
    "acquire_args",
    "acquired",
    "acquired_all",
    "count",
    "extend_args",
    "ms",
    "release_args",
    "seconds",
    "send_together",
    "wake_up_call",
]

#: The acquire script's flags argument, by (fair, claim).
_FLAGS = {(False, False): b"-", (True, False): b"f", (False, True): b"c", (True, True): b"fc"}

#: The acquire script's "holds known" argument when the backend counts reentrant acquires.
COUNT_HERE = b""

#: The extend script's metadata argument when the hold keeps the metadata it has.
KEEP_METADATA = b""


def ms(seconds: float) -> int:
    """Return ``seconds`` as whole milliseconds, at least 1."""
    return max(1, round(seconds * 1000))


def acquire_args(owner: str, request: AcquireRequest, fencing_arg: bytes) -> list[Any]:
    """Return the acquire script's ARGV for ``request``."""
    return [
        owner,
        ms(request.ttl),
        request.limit,
        request.metadata,
        fencing_arg,
        ms(request.wait) if request.wait > 0 else 0,
        _FLAGS[request.fair, request.claim],
        COUNT_HERE if request.holds is None else request.holds,
        request.attempt,
    ]


def acquire_all_args(
    owner: str, request: AcquireRequest, holds: Sequence[int], fencing_arg: bytes
) -> list[Any]:
    """Return the acquire_all script's ARGV for ``request`` and each lock's known holds."""
    flag = b"f" if request.fair else b"-"
    head = [owner, ms(request.ttl), request.metadata, fencing_arg, flag, request.attempt]
    return [*head, *holds]


def acquired_all(names: Sequence[str], reply: list[Any]) -> AcquireAllResult:
    """Return the acquire_all script's reply as an AcquireAllResult (see its header)."""
    if reply[0] == 1:
        values = [int(value) for value in reply[1:]]
        per_lock = zip(values[::3], values[1::3], values[2::3], strict=True)
        return AcquireAllResult(
            tuple(
                AcquireResult(True, fencing_token=token, holds=holds, lease=lease / 1000)
                for token, holds, lease in per_lock
            )
        )
    refused = names[int(reply[1]) - 1]
    if reply[0] == 0:
        return AcquireAllResult(refused=refused, retry_after=max(int(reply[2]), 0) / 1000)
    return AcquireAllResult()


#: The release script's min_hold argument when there is none.
NO_MIN_HOLD = b"0"


def release_args(owner: str, request: ReleaseRequest, fencing_arg: bytes) -> list[Any]:
    """Return the release script's ARGV."""
    window = NO_MIN_HOLD if request.min_hold <= 0 else ms(request.min_hold)
    holds = COUNT_HERE if request.holds is None else request.holds
    return [owner, fencing_arg, holds, window]


def extend_args(
    owner: str, ttl: float, replace: bool, metadata: str | bytes | None = None
) -> list[Any]:
    """Return the extend script's ARGV (``metadata`` None: keep the hold's)."""
    meta = KEEP_METADATA if metadata is None else metadata
    return [owner, ms(ttl), "1" if replace else "0", meta]


def acquired(reply: list[Any]) -> AcquireResult:
    """Return the acquire script's reply as an AcquireResult.

    The reply is ``{1, fence, holds, lease ms}``, ``{0, ms until a lease ends}``, ``{-1}``
    for a known hold whose lease ended, or ``{-2}`` for a hold that the acquire would make
    stricter (a reader asking to write).
    """
    if reply[0] == -1:
        return AcquireResult(False, lost=True)
    if reply[0] == -2:
        return AcquireResult(False, stricter=True)
    if reply[0] == 1:
        return AcquireResult(
            True, fencing_token=int(reply[1]), holds=int(reply[2]), lease=int(reply[3]) / 1000
        )
    return AcquireResult(False, retry_after=max(int(reply[1]), 0) / 1000)


def count(reply: Any) -> int | None:
    """Return a hold count reply (negative: the owner held nothing) as a count or None."""
    holds = int(reply)
    return None if holds < 0 else holds


def seconds(reply: Any) -> float | None:
    """Return a lease reply in ms (negative: no lease) as seconds or None."""
    left = int(reply)
    return None if left < 0 else left / 1000


def wake_up_call(reply: Sequence[bytes] | None) -> tuple[str, Grant] | None:
    """Return a BLPOP reply on the wake-up lists as (owner, Grant); None on timeout.

    The reply is ``(key, b"<fencing token> <grant ms> <owner>")``: a call for that owner.
    """
    if not reply:
        return None
    fence, grant_ms, owner = reply[1].split(b" ", 2)
    return owner.decode(), Grant(int(fence), int(grant_ms) / 1000)


def send_together(
    pool: Any, commands: list[tuple[Any, ...]], error_reply: type[Exception]
) -> list[Any]:
    """Write ``commands`` at once on one connection of ``pool``; return their replies.

    An error reply stands in its command's place. Interrupted before every reply is read, the
    connection is dropped: a reply left unread would answer the next command sent on it.
    """
    try:
        connection: Any = pool.get_connection()
    except TypeError:  # redis-py < 5.3 wants the command's name
        connection = pool.get_connection(commands[0][0])
    try:
        connection.send_packed_command(connection.pack_commands(commands))
        return [_reply(connection, error_reply) for _ in commands]
    except BaseException:
        connection.disconnect()
        raise
    finally:
        pool.release(connection)


def _reply(connection: Any, error_reply: type[Exception]) -> Any:
    """Read the next reply on ``connection``; an error reply is returned, not raised."""
    try:
        return connection.read_response()
    except error_reply as error:
        return error
