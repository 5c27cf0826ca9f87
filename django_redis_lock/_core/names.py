"""Lock names built from values that may be long: past a limit, a digest stands in for them."""

from __future__ import annotations

import hashlib

__all__ = ["MAX_READABLE", "digest"]

#: Names (and view key parts) longer than this are shortened with :func:`digest`.
MAX_READABLE = 200


def digest(text: str) -> str:
    """Return the SHA-256 of ``text`` in 32 hexadecimal digits (128 bits), to stand in for it."""
    return hashlib.sha256(text.encode()).hexdigest()[:32]
