"""One resource per running event loop, closed when that loop shuts down.

An asyncio client's connections belong to the loop that opened them, and a process may run
several loops, one after another (``asyncio.run`` per command, Django running an async view
under WSGI) or side by side (one per thread). Each loop gets its own resource. It is closed
when the loop shuts down its async generators, as ``asyncio.run``, ``asyncio.Runner`` and
asgiref do before closing a loop: an async generator started on the loop holds the resource
and closes it from its ``finally`` clause.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Generic, TypeVar

__all__ = ["PerLoop"]

T = TypeVar("T")


class PerLoop(Generic[T]):
    """Build a resource with ``factory`` for each running loop; ``closer`` closes it."""

    def __init__(self, factory: Callable[[], T], closer: Callable[[T], Awaitable[None]]) -> None:
        self._factory = factory
        self._closer = closer
        self._items: dict[asyncio.AbstractEventLoop, tuple[T, AsyncGenerator[None, None]]] = {}
        self._lock = threading.Lock()

    async def get(self) -> T:
        """Return the resource of the running loop, built on first use."""
        loop = asyncio.get_running_loop()
        entry = self._items.get(loop)
        if entry is not None:
            return entry[0]
        item = self._factory()
        keeper = self._keep(loop, item)
        with self._lock:
            # Loops closed without shutting down their generators leave their entry behind.
            for gone in [other for other in self._items if other.is_closed()]:
                del self._items[gone]
            self._items[loop] = (item, keeper)
        await keeper.__anext__()  # started on this loop: its shutdown will finalise it
        return item

    async def _keep(self, loop: asyncio.AbstractEventLoop, item: T) -> AsyncGenerator[None, None]:
        try:
            yield
        finally:
            with self._lock:
                if self._items.get(loop, (None,))[0] is item:
                    del self._items[loop]
            await self._closer(item)

    async def aclose(self) -> None:
        """Close the running loop's resource now (it is built again if used again)."""
        entry = self._items.get(asyncio.get_running_loop())
        if entry is not None:
            await entry[1].aclose()

    def __len__(self) -> int:
        return len(self._items)
