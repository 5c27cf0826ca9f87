"""Where an uncontended acquire+release spends its time, next to redis-py's ``Lock``.

Run it from the repository root, outside pytest (``PYTHONPATH=.`` to measure this checkout)::

    python benchmarks/profile_cycle.py                 # about two minutes
    python benchmarks/profile_cycle.py --cycles 20000 --rounds 5

Every cycle builds a fresh lock object, as user code does (``l = lock("x"); l.acquire();
l.release()``, ``with lock("x"): pass``, and ``client.lock("y", timeout=30)`` for redis-py;
the same with ``alock`` and redis-py's asyncio ``Lock``). It starts its own throw-away
``redis-server`` and prints three tables:

1. wall clock: cycles per second of each scenario, the scenarios taking turns in slices of
   500 cycles (so background load falls on all alike), the median of ``--rounds`` rounds, the
   ratio to redis-py's blocking or asyncio ``Lock``, and the server's own time per cycle
   (every command and script, from ``INFO commandstats``);
2. Python time alone: the same cycles on clients that answer at once with canned replies (no
   socket, no command packing or reply parsing), so what is left is each library's Python;
3. where a cycle's time goes, in microseconds: the server's time; each group of Python
   frames as its share of a cProfile of table 2's cycles, times table 2's time (the self
   time of a function outside the groups, such as the standard library, builtins or a
   dataclass ``__init__``, counts for its caller's group); and the rest of the wall clock,
   which is the client's socket I/O and redis-py's client (packing, parsing, pool).

On a loaded machine the wall clock moves from run to run; tables 2 and 3 move much less.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import itertools
import os
import platform
import pstats
import statistics
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import redis
import redis.asyncio
from libraries import configure_django

import django_redis_lock
from django_redis_lock.testing import RedisServer

LEASE = 30

#: The groups of the breakdown, in the order printed, by path fragment or function name.
GROUPS = (
    ("socket I/O (syscalls, selector)", ()),
    ("asyncio event loop", ()),
    ("redis-py (packing, parsing, pool)", ("/redis/",)),
    (
        "redis-py Lock (lock.py, commands)",
        ("/redis/lock.py", "/redis/asyncio/lock.py", "/redis/commands/"),
    ),
    ("backends/ (script args, EVALSHA, replies)", ("django_redis_lock/backends/",)),
    ("holder JSON", ()),
    ("handle loop (_core/handle.py)", ("django_redis_lock/_core/handle.py",)),
    ("Lock/AsyncLock drivers", ("django_redis_lock/lock.py", "django_redis_lock/aio.py")),
    (
        "arguments (_core/lock_arguments, validation)",
        ("django_redis_lock/_core/lock_arguments.py", "django_redis_lock/_core/validation.py"),
    ),
    ("holds and signals", ("django_redis_lock/_core/holds.py", "/django/dispatch/")),
    ("owner and attempt (_core/owner.py)", ("django_redis_lock/_core/owner.py",)),
    ("handler and settings", ("django_redis_lock/handler.py", "django_redis_lock/conf.py")),
    ("renewal registration", ("django_redis_lock/_core/renewal.py",)),
    ("logging", ("/logging/",)),
    ("benchmark loop, stand-in client", ("profile_cycle.py",)),
)
_SOCKET_CALLS = ("_socket.socket", "select.", "selectors.py", "socket.py")
_HOLDER_FUNCTIONS = ("_holder_json", "holder_metadata")


def group_of(func: tuple[str, int, str]) -> str | None:
    """Return the breakdown group of a profiled function, None for one counted by its caller."""
    filename, _, name = func
    if name in _HOLDER_FUNCTIONS:
        return "holder JSON"
    if any(part in filename or part in name for part in _SOCKET_CALLS):
        return GROUPS[0][0]
    if "/asyncio/" in filename:
        return GROUPS[1][0]
    for label, parts in reversed(GROUPS[2:]):
        if any(part in filename for part in parts):
            return label
    return None


def breakdown(profile: cProfile.Profile, cycles: int) -> dict[str, float]:
    """Return microseconds per cycle by group; a function of no group is counted by its callers."""
    stats: dict[Any, Any] = pstats.Stats(profile).stats  # type: ignore[attr-defined]
    totals: dict[str, float] = defaultdict(float)

    def count(func: Any, seconds: float, depth: int = 0) -> None:
        label = group_of(func)
        callers = stats[func][4] if func in stats else {}
        if label is None and callers and depth < 20:
            # Shared by the callers as the time spent in it for each of them.
            weights = {caller: entry[2] for caller, entry in callers.items()}
            total = sum(weights.values())
            for caller, weight in weights.items():
                share = weight / total if total else 1 / len(weights)
                count(caller, seconds * share, depth + 1)
            return
        totals[label or "other"] += seconds

    for func, (_, _, own, _, _) in stats.items():
        count(func, own)
    return {label: seconds / cycles * 1e6 for label, seconds in totals.items()}


# Scenarios: one cycle each, a fresh lock object every time ----------------------------------


def scenarios(client: redis.Redis[bytes], aclient: redis.asyncio.Redis) -> dict[str, Any]:
    """Return the cycles timed, by label: a function, or a coroutine function (asyncio)."""
    from django_redis_lock import alock, lock

    def ours() -> None:
        handle = lock("profile:ours", ttl=LEASE)
        handle.acquire()
        handle.release()

    def ours_with() -> None:
        with lock("profile:with", ttl=LEASE):
            pass

    def theirs() -> None:
        handle = client.lock("profile:redis-py", timeout=LEASE)
        handle.acquire()
        handle.release()

    async def aours() -> None:
        handle = alock("profile:aours", ttl=LEASE)
        await handle.acquire()
        await handle.release()

    async def aours_with() -> None:
        async with alock("profile:awith", ttl=LEASE):
            pass

    async def atheirs() -> None:
        handle = aclient.lock("profile:aredis-py", timeout=LEASE)
        await handle.acquire()
        await handle.release()

    return {
        "lock()": ours,
        "with lock()": ours_with,
        "redis-py": theirs,
        "alock()": aours,
        "async with alock()": aours_with,
        "redis-py asyncio": atheirs,
    }


REFERENCE = {False: "redis-py", True: "redis-py asyncio"}


def runner(op: Any, loop: asyncio.AbstractEventLoop) -> Callable[[int], float]:
    """Return what runs ``op`` n times and returns the seconds it took."""
    if asyncio.iscoroutinefunction(op):

        async def many(n: int) -> float:
            started = time.perf_counter()
            for _ in range(n):
                await op()
            return time.perf_counter() - started

        # One task per batch: for alock(), a new owner, as each request of an async view is.
        return lambda n: loop.run_until_complete(many(n))

    def run(n: int) -> float:
        started = time.perf_counter()
        for _ in range(n):
            op()
        return time.perf_counter() - started

    return run


def wall_clock(ops: dict[str, Any], loop: Any, cycles: int, rounds: int) -> dict[str, float]:
    """Return each scenario's median µs per cycle; they take turns in slices of 500 cycles."""
    runs = {label: runner(op, loop) for label, op in ops.items()}
    for run in runs.values():
        run(500)  # warm-up: connections, scripts, caches
    samples: dict[str, list[float]] = defaultdict(list)
    slices = max(1, cycles // 500)
    for _ in range(rounds):
        spent = dict.fromkeys(runs, 0.0)
        for index in range(slices):
            labels = list(runs)
            shift = index % len(labels)
            for label in labels[shift:] + labels[:shift]:
                spent[label] += runs[label](500)
        for label, seconds in spent.items():
            samples[label].append(seconds / (slices * 500) * 1e6)
    return {label: statistics.median(values) for label, values in samples.items()}


# No I/O: clients that answer at once --------------------------------------------------------


class _CannedReplies:
    """Answer our scripts as an uncontended server would: acquired, then released."""

    def __init__(self, shas: dict[str, str]) -> None:
        self._script = {sha: name for name, sha in shas.items()}
        self._fences = itertools.count(1)

    def reply(self, args: tuple[Any, ...]) -> Any:
        script = self._script[args[1]]
        if script == "acquire":
            return [1, next(self._fences), int(args[11] or 0) + 1, LEASE * 1000]
        return 0


class _StubRedis(redis.Redis):  # type: ignore[type-arg]
    def execute_command(self, *args: Any, **options: Any) -> Any:
        return True if args[0] == "SET" else 1


class _AsyncStubRedis(redis.asyncio.Redis):
    async def execute_command(self, *args: Any, **options: Any) -> Any:
        return True if args[0] == "SET" else 1


def without_io(backend: Any) -> tuple[redis.Redis[bytes], redis.asyncio.Redis]:
    """Give ``backend`` clients that answer at once; return such clients for redis-py's locks."""
    canned = _CannedReplies(backend._scripts.sha)

    class Client:
        def execute_command(self, *args: Any) -> Any:
            return canned.reply(args)

    class AsyncClient:
        async def execute_command(self, *args: Any) -> Any:
            return canned.reply(args)

    aclient = AsyncClient()

    async def get() -> AsyncClient:
        return aclient

    backend.client = Client()
    backend._async_clients.get = get
    return _StubRedis(), _AsyncStubRedis()


# Server time ---------------------------------------------------------------------------------


def server_micros(client: redis.Redis[bytes], run: Callable[[int], float], cycles: int) -> float:
    """Return the server's own time per cycle (every command, scripts included) of ``run``."""
    client.config_resetstat()
    run(cycles)
    stats = client.info("commandstats")
    spent = sum(entry["usec"] for key, entry in stats.items() if key != "cmdstat_config")
    return float(spent) / cycles


# Reporting ----------------------------------------------------------------------------------


def print_rates(title: str, micros: dict[str, float], server: dict[str, float]) -> None:
    """Print cycles per second and the ratio to redis-py, blocking and asyncio apart."""
    print(f"\n{title}\n")
    extra = f"{'server us':>11}" if server else ""
    print(f"{'scenario':<22}{'cycles/s':>10}{'us/cycle':>10}{'vs redis-py':>13}{extra}")
    print("-" * (55 + len(extra)))
    for label, us in micros.items():
        reference = micros[REFERENCE[label.startswith(("a", "redis-py a"))]]
        extra = f"{server[label]:>11.1f}" if server else ""
        print(f"{label:<22}{1e6 / us:>10,.0f}{us:>10.1f}{reference / us:>12.2f}x{extra}")


def print_breakdown(
    wall: dict[str, float],
    server: dict[str, float],
    python: dict[str, float],
    profiles: dict[str, dict[str, float]],
) -> None:
    """Print where a cycle's time goes, in microseconds, one column per scenario.

    The server's time is its own count; each Python group is its share of the profiled cycle
    without I/O, times the measured Python time; the client's I/O and redis-py's client is
    what is left of the wall-clock time.
    """
    names = list(wall)
    rows: dict[str, dict[str, float]] = defaultdict(dict)
    for name in names:
        shares = profiles[name]
        profiled = sum(shares.values())
        rows["server (commands, Lua scripts)"][name] = server[name]
        rows["client I/O and redis-py's client"][name] = wall[name] - python[name] - server[name]
        for label, _ in GROUPS:
            rows[label][name] = shares.get(label, 0.0) / profiled * python[name]
        rows["other"][name] = shares.get("other", 0.0) / profiled * python[name]
        rows["total (wall clock)"][name] = wall[name]
    print("\n3. Microseconds per cycle, by where the time goes (see the module docstring)\n")
    print(f"{'':<44}" + "".join(f"{name:>19}" for name in names))
    print("-" * (44 + 19 * len(names)))
    for label, cells in rows.items():
        if any(abs(value) >= 0.05 for value in cells.values()):
            print(f"{label:<44}" + "".join(f"{cells[name]:>19.1f}" for name in names))


def main() -> None:
    """Start a server, run the measurements, print them."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=10_000, help="cycles per round (10000)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds, median kept (3)")
    parser.add_argument("--profile-cycles", type=int, default=5_000, help="profiled (5000)")
    args = parser.parse_args()
    server = RedisServer().start()
    try:
        configure_django(server.url)
        from django_redis_lock import locks

        client = redis.Redis.from_url(server.url)
        print(
            f"Python {platform.python_version()}, redis-py {redis.__version__}, Redis "
            f"{client.info('server')['redis_version']}, load average "
            f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}, {args.cycles} cycles x "
            f"{args.rounds} rounds, from {django_redis_lock.__file__}"
        )
        loop = asyncio.new_event_loop()
        aclient = redis.asyncio.Redis.from_url(server.url)
        ops = scenarios(client, aclient)
        wall = wall_clock(ops, loop, args.cycles, args.rounds)
        spent = {
            label: server_micros(client, runner(op, loop), args.profile_cycles)
            for label, op in ops.items()
        }
        print_rates("1. Wall clock, real server (median of rounds)", wall, spent)
        stubs = scenarios(*without_io(locks["default"]))
        python = wall_clock(stubs, loop, args.cycles, args.rounds)
        print_rates(
            "2. Python time alone: clients answering at once with canned replies", python, {}
        )
        profiles = {}
        for label, op in stubs.items():
            run, profile = runner(op, loop), cProfile.Profile()
            run(200)
            profile.enable()
            run(args.profile_cycles)
            profile.disable()
            profiles[label] = breakdown(profile, args.profile_cycles)
        print_breakdown(wall, spent, python, profiles)
        loop.run_until_complete(aclient.aclose())
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()
    finally:
        server.stop()


if __name__ == "__main__":
    main()
