"""Django signals sent by locks, for metrics, tracing and alerts.

Every signal is sent with ``sender`` the :class:`~django_redis_lock.Lock` class and these
keyword arguments: ``lock`` (the handle), ``name``, ``using`` (the alias), ``owner`` (the
owner token) and ``fencing_token``. Then:

``lock_acquired``
    ``waited``: seconds spent acquiring, the round trips included. Sent for a new hold, not
    for a reentrant acquire of a lock the owner holds already.
``lock_released``
    ``held_for``: seconds between acquire and release. Sent when the owner's last hold is
    dropped, so it pairs with ``lock_acquired``.
``lock_lost``
    ``held_for`` and ``reason`` (a sentence). Sent once per lost hold, from the thread that
    found out: the renewal thread, or the one that released.
``rate_limited``
    Sent with ``sender`` the :class:`~django_redis_lock.RateLimit` class and ``rate_limit``
    (the handle), ``name``, ``using``, ``cost`` and ``retry_after`` (seconds until a slot
    frees), when a hit was refused: it found no room, or none within its timeout.

Signals are sent robustly: a receiver that raises is logged (ERROR, logger
``django_redis_lock``) and never changes what the lock does.
"""

from __future__ import annotations

from django.dispatch import Signal

__all__ = ["lock_acquired", "lock_lost", "lock_released", "rate_limited"]

lock_acquired = Signal()
lock_released = Signal()
lock_lost = Signal()
rate_limited = Signal()
