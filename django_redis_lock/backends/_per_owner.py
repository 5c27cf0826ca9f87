"""What a backend remembers per (name, owner) in this process: bounded, oldest forgotten first.

Redlock keeps three such memories (fencing tokens, retry counts, the id of the last try); each
is an LRU of at most :data:`SIZE` entries, safe to use from any thread.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Generic, TypeVar

__all__ = ["SIZE", "PerOwner"]

V = TypeVar("V")

#: How many (name, owner) entries one memory keeps at most.
SIZE = 65536


class PerOwner(Generic[V]):
    """A value per (name, owner); the least recently stored is dropped past :data:`SIZE`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values: OrderedDict[tuple[str, str], V] = OrderedDict()

    def get(self, name: str, owner: str) -> V | None:
        """Return the value stored for ``(name, owner)``, if any."""
        with self._lock:
            return self._values.get((name, owner))

    def put(self, name: str, owner: str, value: V) -> None:
        """Store ``value`` for ``(name, owner)``, as the most recent."""
        with self._lock:
            self._values[name, owner] = value
            self._values.move_to_end((name, owner))
            while len(self._values) > SIZE:
                self._values.popitem(last=False)

    def forget(self, name: str, owner: str | None = None) -> None:
        """Drop what is stored for ``(name, owner)``; for every owner of ``name`` if None."""
        with self._lock:
            if owner is not None:
                self._values.pop((name, owner), None)
                return
            for key in [key for key in self._values if key[0] == name]:
                del self._values[key]
