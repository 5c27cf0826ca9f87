"""The family of a lock name: the bounded part of it that labels its metrics.

The rule is the ``LOCKS_METRICS_FAMILY`` setting, the dotted path of a callable (or the
callable) that takes a lock name and returns its family; :func:`default_family` by default.
It is read on first use, and again after ``override_settings`` changes it.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.dispatch import receiver
from django.utils.module_loading import import_string

__all__ = ["NAMED_BY_CODE", "NO_FAMILY", "default_family", "family_of", "family_rule"]

logger = logging.getLogger("django_redis_lock")

#: The family of a name with no ``:`` in it, so a name is never a label.
NO_FAMILY = "-"

#: The family used when the configured rule raised.
FAILED = "error"


#: The package's own name prefixes whose second part (a task's or a view's name) is bounded.
NAMED_BY_CODE = ("celery", "task", "view")


def default_family(name: str) -> str:
    """Return the text of ``name`` before its first ``:`` (``-`` if it has none).

    The package's own names keep their second part, as it names code, not data:
    ``@single_instance``'s ``celery:<task name>:<key>`` has the family ``celery:<task name>``
    (``task:<task path>`` for ``django.tasks``), and ``@lock_view``'s
    ``view:<view name>:<key>`` the family ``view:<view name>``.
    """
    head, colon, rest = name.partition(":")
    if not colon:
        return NO_FAMILY
    if head in NAMED_BY_CODE:
        return f"{head}:{rest.partition(':')[0]}"
    return head


@functools.cache
def family_rule() -> Callable[[str], object]:
    """Return the rule that ``LOCKS_METRICS_FAMILY`` names (``default_family`` if unset)."""
    rule: Any = getattr(settings, "LOCKS_METRICS_FAMILY", None)
    if rule is None:
        return default_family
    if isinstance(rule, str):
        try:
            rule = import_string(rule)
        except ImportError as exc:
            raise ImproperlyConfigured(
                f"LOCKS_METRICS_FAMILY {rule!r} could not be imported: {exc}"
            ) from exc
    if not callable(rule):
        raise ImproperlyConfigured(
            f"LOCKS_METRICS_FAMILY must be a callable or its dotted path, got {rule!r}."
        )
    return rule  # type: ignore[no-any-return]


@functools.lru_cache(maxsize=4096)
def family_of(name: str) -> str:
    """Return the family of the lock ``name`` by the configured rule."""
    try:
        return str(family_rule()(name))
    except Exception:  # a metric label must never break a lock
        logger.exception("LOCKS_METRICS_FAMILY failed for a lock name; its family is %r.", FAILED)
        return FAILED


@receiver(setting_changed)
def _reset_rule(*, setting: str, **kwargs: object) -> None:
    if setting == "LOCKS_METRICS_FAMILY":
        family_rule.cache_clear()
        family_of.cache_clear()
