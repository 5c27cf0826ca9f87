"""The optional integrations' dependencies: a clear error naming the extra that brings each."""

from __future__ import annotations

__all__ = ["missing_extra"]


def missing_extra(exc: ImportError, *, feature: str, package: str, extra: str) -> ImportError:
    """Return the error to raise when ``feature`` cannot import ``package`` (``exc``).

    ``extra`` is this package's extra that installs it: the message says what to run.
    """
    return ImportError(
        f"{feature} needs {package}, which could not be imported ({exc}): "
        f'pip install "django-redis-lock[{extra}]"',
        name=exc.name,
        path=exc.path,
    )
