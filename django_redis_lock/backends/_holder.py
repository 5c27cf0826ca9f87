"""The holder details a lock records: where its holder runs, and the user's own data, as JSON."""

from __future__ import annotations

import json
from typing import Any

__all__ = ["holder_metadata", "parse_holder_metadata"]


def holder_metadata(
    *,
    host: str,
    pid: int,
    thread: str,
    data: dict[str, Any] | None = None,
    mode: str | None = None,
) -> bytes:
    """Return the JSON a holder records (UTF-8): where it runs, and the user's own ``data``.

    ``mode`` is ``"read"`` or ``"write"`` for a side of a read-write lock (None: a lock).
    """
    holder = {"host": host, "pid": pid, "thread": thread, "data": data or {}}
    if mode is not None:
        holder["mode"] = mode
    return json.dumps(holder).encode()


def parse_holder_metadata(text: str | bytes) -> dict[str, Any]:
    """Return the holder details recorded by :func:`holder_metadata` (plain JSON, no pickle)."""
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
