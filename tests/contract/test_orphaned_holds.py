"""``max_hold`` may be an alias's default.

A holder that lives but is stuck is bounded by ``max_hold``, which OPTIONS may set for every
lock of an alias.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from django.conf import settings
from django.test import override_settings

from django_redis_lock import LockLostError, lock, locks
from tests.support.helpers import eventually


def with_alias_option(using: str, **options: Any) -> override_settings:
    """Return LOCKS as it is, with ``options`` added to the OPTIONS of ``using``."""
    setting = copy.deepcopy(settings.LOCKS)
    setting[using]["OPTIONS"].update(options)
    return override_settings(LOCKS=setting)


def test_max_hold_option__bounds_renewal_of_every_lock_of_the_alias(using: str) -> None:
    with with_alias_option(using, max_hold=0.3):
        assert locks[using].default_max_hold == 0.3
        handle = lock("orphan:max-hold-option", ttl=0.2, using=using)
        with pytest.raises(LockLostError, match="max_hold"):
            with handle:
                eventually(lambda: handle.lost, timeout=5)
        assert not handle.locked()


def test_max_hold_option__a_lock_that_passes_max_hold_overrides_it(using: str) -> None:
    with with_alias_option(using, max_hold=0.2):
        handle = lock("orphan:max-hold-own", ttl=0.2, max_hold=60, using=using)
        with handle:
            assert handle._max_hold_on(locks[using]) == 60
        assert not handle.lost


def test_max_hold_option__none_means_no_bound(using: str) -> None:
    with with_alias_option(using, max_hold=None):
        assert locks[using].default_max_hold is None
