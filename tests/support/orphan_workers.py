"""Code run in a spawned process whose thread ends holding a renewed lock."""

from __future__ import annotations

from typing import Any

from .workers import setup_django


def acquire_in_a_thread_that_raises(url: str, prefix: str, name: str, ttl: float) -> None:
    """Acquire ``name`` with renewal in a thread that raises; live on, reporting what it hears.

    Every report goes to the list "<prefix>:reports": ``signal <reason>`` for the lock_lost
    signal, ``on_lost`` for the handle's callback, ``log <message>`` for each warning. The
    thread's fencing token goes to "<prefix>:holding" once it has ended; the process exits
    when "<prefix>:may-exit" is pushed.
    """
    setup_django(url, prefix)
    import logging
    import threading

    import redis

    from django_redis_lock import lock
    from django_redis_lock.signals import lock_lost

    client = redis.Redis.from_url(url, socket_timeout=None)
    reports = f"{prefix}:reports"

    def on_signal(**kwargs: Any) -> None:
        client.rpush(reports, f"signal {kwargs['reason']}")

    class Forward(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            client.rpush(reports, f"log {record.getMessage()}")

    lock_lost.connect(on_signal, weak=False)
    logging.getLogger("django_redis_lock").addHandler(Forward(logging.WARNING))
    handle = lock(
        name, ttl=ttl, auto_renew=True, on_lost=lambda _: client.rpush(reports, "on_lost")
    )
    tokens: list[int | None] = []

    def work() -> None:
        handle.acquire()
        tokens.append(handle.fencing_token)
        raise RuntimeError("the work failed before its release")

    thread = threading.Thread(target=work, name="failing-worker")
    thread.start()
    thread.join()
    client.rpush(f"{prefix}:holding", str(tokens[0]))
    client.blpop([f"{prefix}:may-exit"], timeout=60)
