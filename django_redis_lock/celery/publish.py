"""Tell whether a publish that raised may still have put its message on the broker.

A publish that failed has not always sent nothing. A broker that froze after it read the
message answers nothing; the client gives up when its socket times out, and the broker queues
the message when it runs again. So an ``enqueue`` claim is freed after a failed publish only
when every attempt of it failed in a way that proves nothing was written:

- the connection was refused, the broker's host name did not resolve, or the connection
  never opened (a timeout or an unreachable host while connecting, as redis-py words it): no
  byte was sent;
- the error is not about the broker at all (a message that does not serialize, a queue that
  is not declared), raised before anything is written.

Any other broker error (a timeout, a connection reset or closed, an error reply) or an
interruption (a time limit, ``KeyboardInterrupt``) leaves the message possibly sent, and the
claim held.
"""

from __future__ import annotations

import re
import socket
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from celery import Celery
from celery.exceptions import SoftTimeLimitExceeded, TimeLimitExceeded
from kombu.exceptions import OperationalError

from .._core.causes import causes

__all__ = ["may_have_sent", "watch_attempts"]

#: Errors of a connection that never opened: nothing went to the broker.
NOTHING_SENT = (ConnectionRefusedError, socket.gaierror)

#: How redis-py (and kombu, quoting it) words an error of its connect(), before any write.
#: A connect that timed out says so alone: the type is the one a read timeout has.
CONNECT_PHASE = re.compile(r"(Timeout connecting to server|Error \d+ connecting to )")

#: Errors that may interrupt a publish anywhere, after its message was written too.
INTERRUPTIONS = (SoftTimeLimitExceeded, TimeLimitExceeded)


def watch_attempts(options: dict[str, Any], default_policy: Mapping[str, Any]) -> list[Any]:
    """Record the error of each attempt that kombu retries, in the list returned.

    The publish's ``retry_policy`` in ``options`` gets an ``errback`` that records, then calls
    the one the send or the app's ``task_publish_retry_policy`` gave. The last attempt's error
    is raised, not recorded: the caller adds it.
    """
    seen: list[BaseException] = []
    policy = dict(options.get("retry_policy") or {})
    given: Callable[[BaseException, float], object] | None = policy.get(
        "errback", default_policy.get("errback")
    )

    def errback(exc: BaseException, interval: float) -> None:
        seen.append(exc)
        if given is not None:
            given(exc, interval)

    policy["errback"] = errback
    options["retry_policy"] = policy
    return seen


def may_have_sent(app: Celery, errors: Iterable[BaseException]) -> bool:
    """Return whether a publish whose attempts raised ``errors`` may have sent its message."""
    broker_errors = _broker_errors(app)
    return any(_may_have_sent(error, broker_errors) for error in errors)


def _may_have_sent(error: BaseException, broker_errors: tuple[type[BaseException], ...]) -> bool:
    if not isinstance(error, Exception) or isinstance(error, INTERRUPTIONS):
        return True
    links = list(causes(error))
    for link in links:
        if CONNECT_PHASE.match(str(link)):
            return False  # the connection never opened, so nothing went through it
        # The socket's own error, under the client's and kombu's, says what the socket did.
        if isinstance(link, OSError):
            return not isinstance(link, NOTHING_SENT)
    return any(isinstance(link, (OperationalError, *broker_errors)) for link in links)


def _broker_errors(app: Celery) -> tuple[type[BaseException], ...]:
    # What the broker's transport raises for a connection or a channel that failed.
    try:
        with app.connection_for_write() as connection:
            return (*connection.connection_errors, *connection.channel_errors)
    except Exception:
        return ()
