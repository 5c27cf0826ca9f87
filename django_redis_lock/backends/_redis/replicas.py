"""``wait_replicas``: a write, then ``WAIT``, on the connection that wrote."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ...exceptions import BackendUnavailableError
from .scripts import Scripts

__all__ = ["replica_problems", "replicated", "unreplicated"]


def replica_problems(replicas: object) -> list[str]:
    """Return what is wrong with a ``wait_replicas`` option (check E014), if anything."""
    if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 0:
        return [
            f"wait_replicas must be a whole number of replicas (0: do not wait), got {replicas!r}."
        ]
    return []


def replicated(
    client: Any, scripts: Scripts, wait_args: tuple[int, int], *command: Any
) -> tuple[Any, int]:
    """Send ``command`` and ``WAIT *wait_args`` in one pipeline; return its reply and the acks.

    One pipeline, so WAIT runs on the connection that wrote the lock. The acquire script is
    loaded first (a pipeline cannot fall back on NOSCRIPT). Redis errors propagate.
    """
    scripts.load(client, "acquire")
    pipe = client.pipeline(transaction=False)
    queue: Callable[..., Any] = pipe.execute_command
    queue(*command)
    queue("WAIT", *wait_args)
    try:
        reply, acks = pipe.execute()
    except scripts.no_script:
        scripts.lost("acquire")  # the server lost its scripts (a restart)
        raise
    return reply, int(acks)


def unreplicated(name: str, acks: int, wanted: int, timeout: float) -> BackendUnavailableError:
    """Return the error of an acquire that too few replicas acknowledged (it was undone)."""
    return BackendUnavailableError(
        f"Lock {name!r} was acquired, but only {acks} of the {wanted} replicas required "
        f"(wait_replicas) acknowledged it within {timeout}s: the acquire was undone.",
        lock_name=name,
    )
