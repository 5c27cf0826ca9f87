"""django.tasks tasks in every shape users write, for tests/integrations/test_tasks.py.

For each key kind (none, template, list of names, callable) there is a task that takes its
context and one that does not, each sync and async: ``shape_<kind>_<ctx|plain>_<sync|async>``,
named at module level as a worker imports them. Each run notes the ``task:`` locks held while
its body runs, with the task id each records, in :data:`seen`.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

from django_redis_lock import locks
from django_redis_lock.tasks import single_instance
from tests.settings import _TASKS

if _TASKS == "django.tasks":
    from django.tasks import task
else:
    from django_tasks import task

#: {lock name: recorded task id} of the ``task:`` locks held, for each body that ran.
seen: list[dict[str, Any]] = []

KEYS: dict[str, Any] = {
    "none": None,
    "template": "{customer_id}:{kind}",
    "list": ["customer_id", "kind"],
    "callable": lambda customer_id, kind="monthly": f"c{customer_id}-{kind}",
}


def _held() -> dict[str, Any]:
    return {
        info.name: info.metadata.get("task_id") for info in locks["default"].iter_locks("task:*")
    }


def _plain(customer_id: int, kind: str = "monthly") -> str:
    seen.append(_held())
    return f"{customer_id}/{kind}"


def _ctx(context: Any, customer_id: int, kind: str = "monthly") -> str:
    seen.append(_held())
    return f"{customer_id}/{kind}"


async def _aplain(customer_id: int, kind: str = "monthly") -> str:
    seen.append(_held())
    return f"{customer_id}/{kind}"


async def _actx(context: Any, customer_id: int, kind: str = "monthly") -> str:
    seen.append(_held())
    return f"{customer_id}/{kind}"


def _named(func: Callable[..., Any], name: str) -> Callable[..., Any]:
    # A copy of func under a module-level name of its own, as if written out here.
    copy = types.FunctionType(func.__code__, func.__globals__, name, func.__defaults__)
    copy.__qualname__ = copy.__name__ = name
    copy.__module__ = __name__
    copy.__annotations__ = dict(func.__annotations__)
    return copy


SHAPES: list[str] = []
for _kind, _key in KEYS.items():
    for _context, _body in (("plain", _plain), ("ctx", _ctx)):
        for _mode, _func in (
            ("sync", _body),
            ("async", _aplain if _context == "plain" else _actx),
        ):
            _name = f"shape_{_kind}_{_context}_{_mode}"
            globals()[_name] = task(takes_context=_context == "ctx")(
                single_instance(_key, ttl=5)(_named(_func, _name))
            )
            SHAPES.append(_name)
