"""The worker's main process learns at once that a child died, and only that child.

Real child processes, watched by pidfd and, where there is none, by polling ``/proc``; a new
process that was given a watched pid is not the watched child.
"""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import time

import pytest

from django_redis_lock.celery import children


@pytest.fixture(params=["pidfd", "poll"])
def how(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Watch by pidfd (where the kernel has it), then as a system without one."""
    if request.param == "pidfd" and not hasattr(os, "pidfd_open"):
        pytest.skip("no pidfd on this system")
    if request.param == "poll":
        monkeypatch.delattr(os, "pidfd_open", raising=False)
    return str(request.param)


def sleeper() -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])


@pytest.mark.serial
def test_watch__calls_on_death_within_a_fraction_of_a_second(how: str) -> None:
    died: queue.Queue[float] = queue.Queue()
    child = sleeper()
    children.watch(child.pid, lambda: died.put(time.monotonic()))
    child.kill()
    killed_at = time.monotonic()
    assert died.get(timeout=5) - killed_at < 0.5
    child.wait()


def test_watch__of_a_zombie_or_a_reaped_child_calls_on_death_now(how: str) -> None:
    child = sleeper()
    child.kill()
    os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)  # dead, not reaped
    died: list[str] = []
    children.watch(child.pid, lambda: died.append("zombie"))
    child.wait()
    children.watch(child.pid, lambda: died.append("reaped"))
    assert died[-1] == "reaped", "a reaped child is dead already"
    if how == "poll":  # a pidfd of the zombie is ready at once, for the watcher's thread
        assert died == ["zombie", "reaped"], "a zombie is dead already"


def test_cancel__nothing_is_called_when_the_child_dies(how: str) -> None:
    died: queue.Queue[str] = queue.Queue()
    cancelled, watched = sleeper(), sleeper()
    children.watch(cancelled.pid, lambda: died.put("cancelled")).cancel()
    cancelled.kill()
    cancelled.wait()
    children.watch(watched.pid, lambda: died.put("watched"))
    watched.kill()
    assert died.get(timeout=5) == "watched"
    assert died.empty()
    watched.wait()


def test_then__after_the_death_calls_at_once(how: str) -> None:
    died: queue.Queue[str] = queue.Queue()
    child = sleeper()
    watch = children.watch(child.pid, lambda: died.put("first"))
    child.kill()
    assert died.get(timeout=5) == "first"
    watch.then(lambda: died.put("then"), 60)
    assert died.get_nowait() == "then"
    child.wait()


def test_poll__a_new_process_with_the_watched_pid_is_not_the_child() -> None:
    if not os.path.exists(f"/proc/{os.getpid()}/stat"):
        pytest.skip("no /proc here")
    started = children._start_time(os.getpid())
    assert not children._gone(os.getpid(), started)
    assert children._gone(os.getpid(), "0"), "another start time: another process"
