"""What the Redis backends share: the Lua scripts and their keys, the protocol, the loops.

Private to :mod:`django_redis_lock.backends`: :class:`~.redis.RedisBackend`,
:class:`~.cluster.RedisClusterBackend` and :class:`~.redlock.RedlockBackend` are built on it.
"""
