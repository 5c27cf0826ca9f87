"""``manage.py locks`` and ``manage.py locked``, and :class:`LockedCommand` for command authors.

Django imports this package to find the commands; :class:`LockedCommand` is loaded when its
name is first asked for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .locked_commands import LockedCommand

__all__ = ["LockedCommand"]


def __getattr__(name: str) -> Any:
    """Load ``LockedCommand`` on first use."""
    if name == "LockedCommand":
        from .locked_commands import LockedCommand

        return LockedCommand
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
