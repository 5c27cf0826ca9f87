"""Lock backends: the small atomic primitives a :class:`~django_redis_lock.lock.Lock` uses."""
