"""One request at a time per key: the engine behind ``@lock_view`` and ``LockMixin``.

``keys`` turns a key spec (``"user"``, ``"url:order_id"``, a callable…) into the part of the
lock name a request gives; ``engine`` takes the lock around the view, sync or async, and
answers a concurrent duplicate with ``409 Conflict``. The public faces are
:func:`django_redis_lock.decorators.lock_view` and :class:`django_redis_lock.mixins.LockMixin`.
"""
