"""The chain of errors behind an error, as a traceback shows it."""

from __future__ import annotations

from collections.abc import Iterator

__all__ = ["caused_by", "causes"]


def causes(error: BaseException) -> Iterator[BaseException]:
    """Yield ``error``, then what it was raised from or while handling, outermost first."""
    link: BaseException | None = error
    while link is not None:
        yield link
        link = link.__cause__ or (None if link.__suppress_context__ else link.__context__)


def caused_by(
    error: BaseException, kind: type[BaseException] | tuple[type[BaseException], ...]
) -> bool:
    """Return whether ``error`` or any error behind it is a ``kind``."""
    return any(isinstance(link, kind) for link in causes(error))
