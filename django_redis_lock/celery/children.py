"""Learn, in a Celery worker's main process, the moment a pool child dies.

Celery's prefork pool learns that a child died when its maintenance next looks, seconds later at
times, and the lock of the run in that child would be held until then. Here one thread of the
main process watches the child of each running run instead: a pidfd (Linux 5.3 and later) wakes
it as the child exits; elsewhere it looks at each watched pid every :data:`POLL_INTERVAL`. It
never reaps a child (``waitpid`` is the pool's), and it never takes a new process that was given
a dead child's pid for the child: a pidfd names one process, and the poll compares the start time
that ``/proc`` gave when the watch began. A watch begins when the pool reports that the child
accepted the run, before the pool can have reaped it.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import select
import threading
import time
from collections.abc import Callable

__all__ = ["POLL_INTERVAL", "ChildWatch", "watch"]

logger = logging.getLogger("django_redis_lock")

#: Seconds between two looks at a child that no pidfd watches (before Linux 5.3, or no /proc).
POLL_INTERVAL = 0.05


class ChildWatch:
    """The watch of one child process: what to call when it dies, and until when to watch."""

    def __init__(self, pid: int, on_death: Callable[[], None]) -> None:
        self.pid = pid
        self.dead = False
        self._on_death: Callable[[], None] | None = on_death
        self._until = math.inf
        self._fd: int | None = None
        self._started: str | None = None
        try:
            self._fd = os.pidfd_open(pid)
        except ProcessLookupError:
            self.dead = True
        except (AttributeError, OSError):  # no pidfd here: poll, knowing the child by its start
            self._started = _start_time(pid)
            self.dead = _gone(pid, self._started)

    def then(self, on_death: Callable[[], None], within: float) -> None:
        """Call ``on_death`` instead when the child dies (now if it has), for ``within`` s."""
        with _watcher.mutex:
            dead = self.dead  # else the watcher's thread calls it: never both
            if not dead:
                self._on_death, self._until = on_death, time.monotonic() + within
        if dead:
            on_death()
        else:
            _watcher.wake()

    def cancel(self) -> None:
        """Stop watching; nothing is called when the child dies."""
        with _watcher.mutex:
            self._on_death = None
        _watcher.wake()

    def _gone(self, ready: set[int]) -> bool:
        # Only from the watcher's thread.
        return self._fd in ready if self._fd is not None else _gone(self.pid, self._started)

    def _die(self) -> None:
        with _watcher.mutex:
            self.dead, on_death, self._on_death = True, self._on_death, None
        if on_death is not None:
            try:
                on_death()
            except Exception:
                logger.exception("Could not act on the death of process %s.", self.pid)


def watch(pid: int, on_death: Callable[[], None]) -> ChildWatch:
    """Call ``on_death`` (in a thread of this process) when the child ``pid`` dies.

    If it is gone already, ``on_death`` is called now, in this thread. Return the watch, which
    :meth:`~ChildWatch.cancel` ends.
    """
    child = ChildWatch(pid, on_death)
    if child.dead:
        child._die()
    else:
        _watcher.add(child)
    return child


class _Watcher:
    # The thread that polls every watched child; a forked process starts its own.

    def __init__(self) -> None:
        self.mutex = threading.Lock()
        self._watches: set[ChildWatch] = set()
        self._pid = 0
        self._woken = self._wake_fd = -1

    def forget(self) -> None:
        # In a forked child: the parent's thread, watches and mutex are not this process's.
        for fd in [self._woken, self._wake_fd, *(child._fd for child in self._watches)]:
            if fd is not None and fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self.__init__()  # type: ignore[misc]

    def add(self, child: ChildWatch) -> None:
        with self.mutex:
            if self._pid != os.getpid():
                self._start()
            self._watches.add(child)
        self.wake()

    def wake(self) -> None:
        # A full pipe wakes the thread anyway.
        with contextlib.suppress(OSError):
            os.write(self._wake_fd, b"\0")

    def _start(self) -> None:
        self._woken, self._wake_fd = os.pipe()
        for fd in (self._woken, self._wake_fd):
            os.set_blocking(fd, False)
        self._pid = os.getpid()
        thread = threading.Thread(target=self._run, args=(self._woken,), name="drl-children")
        thread.daemon = True
        thread.start()

    def _run(self, woken: int) -> None:
        while True:
            try:
                self._look(woken)
            except Exception:  # the thread must outlive any one failure: nothing else watches
                logger.exception("Watching the pool's children failed; watching again.")
                time.sleep(POLL_INTERVAL)

    def _look(self, woken: int) -> None:
        # Wait until a child dies, a watch gives up, or the pipe wakes the thread; act on it.
        with self.mutex:
            # A pidfd is closed here only, never while this thread polls it.
            for ended in [child for child in self._watches if child._on_death is None]:
                self._watches.discard(ended)
                if ended._fd is not None:
                    os.close(ended._fd)
            watches = list(self._watches)
        poller = select.poll()
        poller.register(woken, select.POLLIN)
        for child in watches:
            if child._fd is not None:
                poller.register(child._fd, select.POLLIN)
        ready = {fd for fd, _ in poller.poll(_timeout_ms(watches))}
        if woken in ready:
            while _drained(woken):
                pass
        now = time.monotonic()
        for child in watches:
            if child._gone(ready):
                child._die()
            elif now >= child._until:
                child.cancel()


_watcher = _Watcher()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_watcher.forget)


def _timeout_ms(watches: list[ChildWatch]) -> int | None:
    # Until the next poll of a child with no pidfd, or the next watch to give up.
    next_at = min((child._until for child in watches), default=math.inf)
    if any(child._fd is None for child in watches):
        next_at = min(next_at, time.monotonic() + POLL_INTERVAL)
    return None if next_at == math.inf else max(0, math.ceil((next_at - time.monotonic()) * 1000))


def _drained(fd: int) -> bool:
    try:
        return bool(os.read(fd, 4096))
    except BlockingIOError:
        return False


def _stat_fields(pid: int) -> list[str] | None:
    # The fields of /proc/<pid>/stat after the command name; [] if the pid is gone, None if
    # there is no /proc to ask.
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return stat.read().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return []
    except OSError:
        return None


def _start_time(pid: int) -> str | None:
    fields = _stat_fields(pid)
    return fields[19] if fields else None  # field 22 of stat: start time, in clock ticks


def _gone(pid: int, started: str | None) -> bool:
    fields = _stat_fields(pid)
    if fields is not None:
        # Dead but not reaped yet, reaped, or a new process with the dead one's pid.
        return not fields or fields[0] in ("Z", "X") or fields[19] != (started or fields[19])
    try:
        os.kill(pid, 0)  # no /proc: ask the kernel (a zombie still answers here)
    except ProcessLookupError:
        return True
    except OSError:
        return False
    return False
