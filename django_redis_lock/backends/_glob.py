"""Redis glob patterns, as listings take them: escape a name, or match names in Python."""

from __future__ import annotations

import re

__all__ = ["glob_escape", "glob_to_regex"]

_GLOB_SPECIAL = re.compile(r"([*?\[\]\\])")


def glob_escape(name: str) -> str:
    """Return a Redis glob pattern that matches exactly ``name``."""
    return _GLOB_SPECIAL.sub(r"\\\1", name)


def glob_to_regex(pattern: str) -> re.Pattern[str]:
    """Compile a Redis glob pattern (``*``, ``?``, ``[...]``, ``[^...]``, ``\\``) to a regex."""
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        char = pattern[i]
        if char == "\\" and i + 1 < n:
            out.append(re.escape(pattern[i + 1]))
            i += 2
            continue
        if char == "*":
            out.append(".*")
        elif char == "?":
            out.append(".")
        elif char == "[":
            end = pattern.find("]", i + 2 if pattern[i + 1 : i + 2] == "^" else i + 1)
            if end == -1:
                out.append(re.escape(char))
            else:
                body = pattern[i + 1 : end]
                negate = body.startswith("^")
                body = body[1:] if negate else body
                escaped = "".join(c if c == "-" else re.escape(c) for c in body.replace("\\", ""))
                if not escaped:  # "[]" matches nothing, "[^]" any one character (as Redis)
                    out.append("." if negate else "(?!)")
                else:
                    out.append(f"[{'^' if negate else ''}{escaped}]")
                i = end + 1
                continue
        else:
            out.append(re.escape(char))
        i += 1
    return re.compile("".join(out) + r"\Z", re.DOTALL)
