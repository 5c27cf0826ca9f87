"""The server's instructions per uncontended cycle: ``python benchmarks/instructions.py``.

Wall-clock and ``INFO commandstats`` figures move by a quarter from run to run on a shared
machine; the number of instructions the server executes per cycle does not. This runs a
throw-away ``redis-server`` (or ``valkey-server``: ``--server PATH``) under valgrind's
callgrind, which counts every instruction the server runs, and, for each scenario, zeroes the
count, runs ``--cycles`` uncontended acquire+release cycles (a fresh lock object per cycle, as
user code makes it) and reads the count back. It prints the instructions per cycle and their
ratio to redis-py's ``Lock``: reading requests, running commands and scripts, writing replies,
the whole server, and nothing of the client. Needs valgrind (``apt-get install valgrind``);
under callgrind a server runs about fifty times slower, so the cycles are few.
"""

from __future__ import annotations

import argparse
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import redis
from libraries import LEASE, configure_django

from django_redis_lock.testing import find_redis_server


def free_port() -> int:
    """Return a TCP port free on loopback now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class CountedServer:
    """A ``redis-server`` under callgrind, whose instruction count can be zeroed and read."""

    def __init__(self, binary: str, directory: Path) -> None:
        self.port = free_port()
        self.out = directory / "callgrind.out"
        command = ["valgrind", "--tool=callgrind", "--trace-children=yes"]
        command += [f"--callgrind-out-file={self.out}.%p"]
        command += [binary, "--port", str(self.port), "--save", "", "--appendonly", "no"]
        self.process = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        self.client = redis.Redis(port=self.port)
        for _ in range(600):
            try:
                self.client.ping()
                return
            except redis.ConnectionError:
                time.sleep(0.1)
        raise RuntimeError(f"{binary} did not answer under valgrind")

    def _control(self, flag: str) -> None:
        subprocess.run(
            ["callgrind_control", flag, str(self.process.pid)], check=True, capture_output=True
        )

    def zero(self) -> None:
        self._control("-z")

    def count(self) -> int:
        """Return the instructions run since :meth:`zero` (callgrind writes them to a file)."""
        before = set(self.out.parent.glob(f"{self.out.name}.*"))
        self._control("-d")
        for _ in range(100):
            new = set(self.out.parent.glob(f"{self.out.name}.*")) - before
            if new:
                text = new.pop().read_text()
                found = re.search(r"^(?:summary|totals): (\d+)", text, re.MULTILINE)
                if found:
                    return int(found.group(1))
            time.sleep(0.1)
        raise RuntimeError("callgrind wrote no count")

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait()


def scenarios(client: redis.Redis[bytes]) -> dict[str, Callable[[], None]]:
    """Return one uncontended cycle of each scenario, by label."""
    from django_redis_lock import lock, lock_all, rwlock

    def ours() -> None:
        handle = lock("instructions:lock", ttl=LEASE)
        handle.acquire()
        handle.release()

    def theirs() -> None:
        handle = client.lock("instructions:redis-py", timeout=LEASE)
        handle.acquire()
        handle.release()

    def read() -> None:
        with rwlock("instructions:rw", ttl=LEASE).read():
            pass

    def all_three() -> None:
        with lock_all(["instructions:a", "instructions:b", "instructions:c"], ttl=LEASE):
            pass

    return {
        "redis-py Lock": theirs,
        "django-redis-lock lock()": ours,
        "rwlock read": read,
        "lock_all, 3 names": all_three,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", help="the redis-server or valkey-server binary")
    parser.add_argument("--cycles", type=int, default=1000, help="cycles per scenario (1000)")
    args = parser.parse_args()
    if not (shutil.which("valgrind") and shutil.which("callgrind_control")):
        print("valgrind is not installed: apt-get install valgrind", file=sys.stderr)
        return 1
    binary = args.server or find_redis_server()
    with tempfile.TemporaryDirectory() as directory:
        server = CountedServer(binary, Path(directory))
        try:
            version = server.client.info("server")
            configure_django(f"redis://127.0.0.1:{server.port}/0")
            counts = {}
            for label, cycle in scenarios(server.client).items():
                for _ in range(20):  # scripts loaded, connections open
                    cycle()
                server.zero()
                for _ in range(args.cycles):
                    cycle()
                counts[label] = server.count() / args.cycles
        finally:
            server.stop()
    name = "Valkey" if "valkey_version" in version else "Redis"
    print(
        f"{name} {version.get('valkey_version', version['redis_version'])}, "
        f"{args.cycles} cycles per scenario under callgrind\n"
    )
    print(f"{'scenario':<28}{'instructions':>14}{'vs redis-py':>13}")
    for label, count in counts.items():
        print(f"{label:<28}{count:>14,.0f}{count / counts['redis-py Lock']:>12.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
