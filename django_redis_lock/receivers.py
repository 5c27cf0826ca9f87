"""Receivers that keep lazily read settings in step with ``override_settings``."""

from __future__ import annotations

from typing import Any

from django.core.signals import setting_changed
from django.dispatch import receiver

from .conf import get_locks_setting
from .handler import locks


@receiver(setting_changed)
def reset_locks(*, setting: str, **kwargs: Any) -> None:
    """Rebuild backends from the new value when ``LOCKS`` changes."""
    if setting == "LOCKS":
        get_locks_setting.cache_clear()
        locks.reset()
