"""The lock name of a ``@single_instance`` run, built from its task name and arguments.

A name is ``<queue>:<task name>`` (``celery:`` or ``task:``), followed by ``:<key part>`` when
the decorator has a key. In the task name and in each argument value that goes into the key
part, ``%`` is written ``%25`` and ``:`` is written ``%3A`` (percent-encoding, as in URLs), so
a ``:`` that joins parts never comes from a value: ``("x:y", "z")`` and ``("x", "y:z")`` give
different names, while ints, slugs and e-mail addresses read as they are. A callable key's
result is used as it is. Names longer than :data:`MAX_READABLE_NAME` are hashed.
"""

from __future__ import annotations

import datetime as dt
import decimal
import inspect
import re
import string
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from .._core.names import MAX_READABLE, digest
from ..exceptions import InvalidLockArgumentError

__all__ = [
    "MAX_READABLE_NAME",
    "KeySpec",
    "arguments",
    "encode_key_value",
    "key_fields",
    "key_part",
    "key_signature",
    "lock_name",
]

KeySpec = str | Sequence[str] | Callable[..., object] | None

#: Lock names longer than this are hashed; the readable arguments go into the metadata.
MAX_READABLE_NAME = MAX_READABLE


def encode_key_value(text: str) -> str:
    """Percent-encode ``%`` and ``:`` in ``text``, one value of a lock name."""
    return text.replace("%", "%25").replace(":", "%3A")


class _KeyFormatter(string.Formatter):
    # Encodes each field once formatted, so that format specifications apply to the value
    # itself and the template's own text (its ':' included) is kept as written.
    def format_field(self, value: Any, format_spec: str) -> str:
        return encode_key_value(super().format_field(value, format_spec))


_formatter = _KeyFormatter()


def key_fields(key: KeySpec) -> list[str]:
    """Return the argument names a key reads: a list key's, or a template's fields."""
    if isinstance(key, (list, tuple)):
        return list(key)
    if not isinstance(key, str):
        return []
    fields = (field for _, field, _, _ in _formatter.parse(key) if field is not None)
    return [re.split(r"[.\[]", field, maxsplit=1)[0] for field in fields]


def key_signature(key: KeySpec, func: Callable[..., Any], *, decorator: str) -> inspect.Signature:
    """Return the signature of ``func``, whose arguments ``key`` reads.

    Raise :class:`~django_redis_lock.InvalidLockArgumentError` if a list key, or a template's
    fields, name arguments ``func`` does not have: when the task is defined, not at its first
    run. ``decorator`` names the decorator in the message.
    """
    signature = inspect.signature(func)
    unknown = [name for name in key_fields(key) if name not in signature.parameters]
    if unknown:
        raise InvalidLockArgumentError(
            f"{decorator} key names {unknown!r} are not arguments of "
            f"{func.__qualname__}{signature}."
        )
    return signature


def lock_name(queue: str, task_name: str, part: str | None) -> str:
    """Return the lock name of a run of ``task_name`` on ``queue`` with the key ``part``."""
    head = f"{queue}:{encode_key_value(task_name)}"
    name = head if part is None else f"{head}:{part}"
    if len(name) > MAX_READABLE_NAME:
        name = f"{head}:sha256:{digest(name)}"
    return name


def key_part(
    key: KeySpec, signature: inspect.Signature, args: Sequence[Any], kwargs: dict[str, Any]
) -> str | None:
    """Return the part of the lock name that the task's arguments give, if any."""
    if key is None:
        return None
    if callable(key):
        return str(key(*args, **kwargs))
    values = arguments(signature, args, kwargs)
    if isinstance(key, str):
        try:
            return _formatter.vformat(key, (), values)
        except (KeyError, IndexError, AttributeError) as exc:
            raise InvalidLockArgumentError(
                f"single_instance key {key!r} does not fit the task's arguments "
                f"({', '.join(values)}): {exc!r}. Use their names in braces, a list of "
                "names, or a callable taking the task's arguments."
            ) from exc
    return ":".join(encode_key_value(str(values[name])) for name in key)


def arguments(
    signature: inspect.Signature, args: Sequence[Any], kwargs: dict[str, Any]
) -> dict[str, object]:
    """Return the task's arguments by name, defaults applied, as key-friendly values."""
    bound = signature.bind(*args, **kwargs)
    bound.apply_defaults()
    return {name: _key_value(value) for name, value in bound.arguments.items()}


def _key_value(value: object) -> object:
    # Values that format predictably in a key: model instances by primary key, UUIDs and
    # decimals as text, dates in ISO 8601.
    pk = getattr(getattr(value, "_meta", None), "pk", None)
    if pk is not None:
        return getattr(value, "pk", value)
    if isinstance(value, (uuid.UUID, decimal.Decimal)):
        return str(value)
    if isinstance(value, (dt.date, dt.time)):
        return value.isoformat()
    return value
