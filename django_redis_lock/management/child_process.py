"""The process ``manage.py locked`` runs under its lock: started, signalled, waited for.

The child runs in a process group of its own, so a Ctrl-C reaches it once, through the
wrapper, which passes SIGINT, SIGTERM, SIGHUP and SIGQUIT on. On Linux it never outlives the
wrapper, even one killed with SIGKILL: a small launcher asks the kernel to kill it when its
parent dies (``PR_SET_PDEATHSIG``), checks that the parent is still the wrapper (it may have
died before the request), and then becomes the command with ``exec``. Elsewhere there is no
such request, and a wrapper killed with SIGKILL leaves its child running.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from types import FrameType

__all__ = ["FORWARDED", "exit_status", "run_child"]

#: The signals the wrapper passes on to its child.
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)

#: Run by a fresh interpreter as ``python -c LAUNCHER <wrapper pid> <program> <args...>``.
LAUNCHER = """\
import ctypes, os, signal, sys
wrapper = int(sys.argv[1])
os.setpgid(0, 0)  # a process group of its own: a terminal's Ctrl-C reaches it through the wrapper
if sys.platform.startswith("linux"):
    ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
if os.getppid() != wrapper:  # the wrapper died before the request: do not start at all
    os._exit(70)
try:
    os.execvp(sys.argv[2], sys.argv[2:])
except OSError as exc:  # as a shell says it: 127 not found, 126 not runnable
    sys.stderr.write(f"locked: cannot run {sys.argv[2]!r}: {exc.strerror}\\n")
    os._exit(127 if isinstance(exc, FileNotFoundError) else 126)
"""


def run_child(argv: Sequence[str], env: dict[str, str] | None = None) -> int:
    """Run ``argv`` to its end, passing the wrapper's signals on; return its exit status."""
    launcher = [sys.executable, "-c", LAUNCHER, str(os.getpid()), *argv]
    child = subprocess.Popen(launcher, env=env)  # noqa: S603

    def forward(signum: int, frame: FrameType | None) -> None:
        if child.poll() is None:
            child.send_signal(signum)

    previous = {signum: signal.signal(signum, forward) for signum in FORWARDED}
    try:
        while True:
            try:
                return exit_status(child.wait())
            except InterruptedError:  # pragma: no cover - wait() retries on EINTR itself
                continue
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def exit_status(returncode: int) -> int:
    """Return a child's exit status as a shell says it: 128 + N for a child killed by signal N."""
    return 128 - returncode if returncode < 0 else returncode
