"""``manage.py locked``: one run at a time of a command, with real processes and signals.

Each test starts ``python -m django locked ...`` processes with the settings of
:mod:`tests.support.locked_settings` (on the session's redis-server, under the test's key
prefix); the command they run, ``record_run`` (``tests/commands_app``), logs its start and end
on the machine's one monotonic clock.
"""

from __future__ import annotations

import itertools
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Sequence
from contextlib import closing
from pathlib import Path

import pytest

from django_redis_lock import lock, locks
from django_redis_lock.testing import RedisServer
from tests.support.helpers import eventually

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def django_command(
    redis_url: str, prefix: str, *args: str, db: Path | None = None
) -> subprocess.Popen[str]:
    """Start ``python -m django *args`` with the settings of these tests; output piped."""
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.support.locked_settings",
        "DRL_LOCKED_URL": redis_url,
        "DRL_LOCKED_PREFIX": prefix,
        "PYTHONPATH": str(ROOT),
    }
    if db is not None:
        env["DRL_LOCKED_DB"] = str(db)
    return subprocess.Popen(
        [sys.executable, "-m", "django", *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def locked(
    redis_url: str, prefix: str, *args: str, db: Path | None = None
) -> subprocess.Popen[str]:
    """Start ``python -m django locked *args``."""
    return django_command(redis_url, prefix, "locked", *args, db=db)


def finish(processes: Sequence[subprocess.Popen[str]]) -> list[tuple[int, str]]:
    """Wait for each process; return its exit status and stderr."""
    return [(p.wait(60), p.communicate()[1]) for p in processes]


def spans(log: Path) -> list[tuple[float, float]]:
    """Return the (start, end) times of each run the log records, by start."""
    starts: dict[str, float] = {}
    found = []
    for line in log.read_text(encoding="utf-8").splitlines():
        event, pid, at = line.split()
        if event == "start":
            starts[pid] = float(at)
        elif event == "end":
            found.append((starts[pid], float(at)))
    return sorted(found)


def held(name: str) -> bool:
    return bool(locks["default"].lock_info(name))


def test_five_at_once__one_runs_four_skip_naming_the_holder(
    redis_url: str, prefix: str, tmp_path: Path
) -> None:
    log = tmp_path / "runs.log"
    runs = [
        locked(redis_url, prefix, "--", "record_run", "--log", str(log), "--seconds", "2")
        for _ in range(5)
    ]
    outcomes = finish(runs)
    assert sorted(status for status, _ in outcomes) == [0] * 5
    assert len(spans(log)) == 1
    skipped = [err for _, err in outcomes if "skipped" in err]
    assert len(skipped) == 4
    for err in skipped:
        assert "locked: skipped record_run --log" in err
        assert "'command:record_run' is held by record_run --log" in err
        assert ", pid " in err
    assert not held("command:record_run")


def test_five_with_wait__all_run_in_turn(redis_url: str, prefix: str, tmp_path: Path) -> None:
    log = tmp_path / "runs.log"
    runs = [
        locked(
            redis_url, prefix, "--wait", "--", "record_run", "--log", str(log), "--seconds", "0.5"
        )
        for _ in range(5)
    ]
    assert [status for status, _ in finish(runs)] == [0] * 5
    found = spans(log)
    assert len(found) == 5
    for (_, end), (start, _) in itertools.pairwise(found):
        assert start >= end, "two runs overlapped"


def test_migrate_on_four_at_once__applied_once_every_process_exits_0(
    redis_url: str, prefix: str, tmp_path: Path
) -> None:
    db = tmp_path / "db.sqlite3"
    runs = [locked(redis_url, prefix, "--wait", "--", "migrate", db=db) for _ in range(4)]
    outcomes = [(p.wait(120), p.communicate()) for p in runs]
    assert [status for status, _ in outcomes] == [0] * 4, outcomes
    applying = [out for _, (out, _) in outcomes if "Applying " in out]
    assert len(applying) == 1, "one process applied the migrations, the others found none"
    with closing(sqlite3.connect(db)) as connection:
        rows = connection.execute("SELECT app, name FROM django_migrations").fetchall()
    assert len(rows) == len(set(rows))


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal__is_passed_on_and_the_lock_freed(
    redis_url: str, prefix: str, tmp_path: Path, signum: signal.Signals
) -> None:
    log = tmp_path / "runs.log"
    run = locked(redis_url, prefix, "--", "record_run", "--log", str(log), "--seconds", "30")
    eventually(lambda: log.exists() and "start" in log.read_text(), 30)
    run.send_signal(signum)
    status, _ = finish([run])[0]
    ended = time.monotonic()
    assert status == 3, "the command's own exit status, after its SIGTERM handler"
    assert f"signal-{int(signum)}" in log.read_text(), "the command got it, once"
    assert log.read_text().count("signal-") == 1
    eventually(lambda: not held("command:record_run"), 1)
    assert time.monotonic() - ended < 1


def test_sigkill__the_child_dies_and_the_lock_ends_with_its_lease(
    redis_url: str, prefix: str, tmp_path: Path
) -> None:
    log = tmp_path / "runs.log"
    run = locked(
        redis_url, prefix, "--ttl", "2", "--", "record_run", "--log", str(log), "--seconds", "60"
    )
    eventually(lambda: log.exists() and "start" in log.read_text(), 30)
    child = int(log.read_text().split()[1])
    run.kill()
    run.wait(10)
    killed = time.monotonic()
    # Not communicate(): a child that outlived the wrapper would hold its pipes open.
    for pipe in (run.stdout, run.stderr):
        assert pipe is not None
        pipe.close()

    def gone() -> bool:
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            return True
        return False

    eventually(gone, 5)
    eventually(lambda: not held("command:record_run"), 5)
    assert time.monotonic() - killed < 2.5, "free within the lease"


@pytest.mark.parametrize(
    "command_ends", ["after-the-resume", "during-the-pause"], ids=lambda when: when
)
def test_sigstop__a_wrapper_paused_past_its_lease_is_told_of_the_loss_and_exits_1(
    redis_url: str, prefix: str, tmp_path: Path, command_ends: str
) -> None:
    # The wrapper, not its command, is paused (a frozen host, a debugger): the lease ends, a
    # second run takes the lock. The price of a lease is that overlap; the promise is that
    # the first run is told, and that its success is not reported as one. Its renewal finds
    # the loss, or, when the command ended meanwhile, its release does.
    log = tmp_path / "runs.log"
    # Long enough that the command outlasts the second run's start on a loaded machine.
    seconds = "15" if command_ends == "after-the-resume" else "1.5"
    first = locked(
        redis_url,
        prefix,
        "--ttl",
        "1",
        "--",
        "record_run",
        "--log",
        str(log),
        "--seconds",
        seconds,
    )
    with first:  # waited for, its pipes closed, whatever the test finds
        eventually(lambda: log.exists() and "start" in log.read_text(), 30)
        first.send_signal(signal.SIGSTOP)
        try:
            eventually(lambda: not held("command:record_run"), 5)
            second = locked(
                redis_url, prefix, "--", "record_run", "--log", str(log), "--seconds", "0.2"
            )
            assert finish([second])[0][0] == 0, "the lock was free: the second run ran"
            if command_ends == "during-the-pause":
                eventually(lambda: len(spans(log)) == 2, 10)
            else:
                assert len(spans(log)) == 1, "the first command still runs"
        finally:
            first.send_signal(signal.SIGCONT)
        status, err = finish([first])[0]
    assert status == 1, "a command that did not run alone all along never exits 0"
    told = [line for line in err.splitlines() if line.startswith("locked: ")]
    assert len(told) == 1, err
    assert "locked: the lock 'command:record_run' was lost while record_run --log" in told[0]
    assert len(spans(log)) == 2
    assert not held("command:record_run")


def test_frozen_redis__a_lease_that_ends_while_the_server_is_frozen_makes_a_success_exit_1(
    own_server: RedisServer, prefix: str, tmp_path: Path
) -> None:
    # The server, not the wrapper, stops answering past the lease: renewal cannot keep it,
    # and another run may take the lock once the server is back. The command goes on; its
    # success is not reported as one.
    log = tmp_path / "runs.log"
    run = locked(
        own_server.url, prefix, "--ttl", "1", "--", "record_run", "--log", str(log),
        "--seconds", "5",
    )  # fmt: skip
    eventually(lambda: log.exists() and "start" in log.read_text(), 30)
    own_server.pause()
    try:
        time.sleep(2.5)  # the lease ends on the server's clock meanwhile
    finally:
        own_server.resume()
    status, err = finish([run])[0]
    assert status == 1, err
    told = [line for line in err.splitlines() if line.startswith("locked: ")]
    assert len(told) == 1, err
    assert "'command:record_run' was lost while record_run --log" in told[0]
    assert len(spans(log)) == 1, "the command itself ran to its end"


@pytest.mark.parametrize("code", [0, 1, 3])
def test_exec__runs_a_program_and_passes_its_exit_status(
    redis_url: str, prefix: str, tmp_path: Path, code: int
) -> None:
    script = tmp_path / "job.sh"
    script.write_text(f"#!/bin/sh\necho ran >> {tmp_path / 'out'}\nexit {code}\n")
    script.chmod(0o755)
    run = locked(redis_url, prefix, "--exec", "--name", "backup", "--", str(script))
    assert finish([run])[0][0] == code
    assert (tmp_path / "out").read_text() == "ran\n"


def test_skip_exit_code__is_the_status_of_a_skipped_run(redis_url: str, prefix: str) -> None:
    with lock("backup", ttl=30):
        run = locked(
            redis_url, prefix, "--exec", "--name", "backup", "--skip-exit-code", "75", "--",
            "true",
        )  # fmt: skip
        status, err = finish([run])[0]
    assert status == 75
    assert "locked: skipped true: the lock 'backup' is held by" in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--", "no_such_command"], "Unknown command: 'no_such_command'"),
        (["--ttl", "0", "--", "check"], "--ttl must be"),
        (["--timeout", "5", "--", "check"], "--timeout applies only with --wait"),
        (["--"], "Nothing to run"),
        ([], "Nothing to run"),
    ],
)
def test_bad_input__is_a_clear_error_and_holds_nothing(
    redis_url: str, prefix: str, args: list[str], message: str
) -> None:
    status, err = finish([locked(redis_url, prefix, *args)])[0]
    assert status == 2
    assert message in err
    assert list(locks["default"].iter_locks()) == []


def test_locked_command__three_at_once_one_runs_two_skip_with_its_code(
    redis_url: str, prefix: str, tmp_path: Path
) -> None:
    log = tmp_path / "runs.log"
    runs = [
        django_command(redis_url, prefix, "record_locked", "--log", str(log), "--seconds", "2")
        for _ in range(3)
    ]
    outcomes = finish(runs)
    assert sorted(status for status, _ in outcomes) == [0, 75, 75]
    assert len(spans(log)) == 1
    for status, err in outcomes:
        if status == 75:
            assert "Skipped: the lock 'command:record_locked' is held by record_locked on" in err
    assert not held("command:record_locked")


def test_exec__a_program_that_cannot_run_exits_as_a_shell_says(
    redis_url: str, prefix: str, tmp_path: Path
) -> None:
    status, err = finish([locked(redis_url, prefix, "--exec", "--", str(tmp_path / "nope"))])[0]
    assert status == 127
    assert "locked: cannot run" in err
    assert not held("command:nope")


def test_min_hold__one_run_per_window(redis_url: str, prefix: str, tmp_path: Path) -> None:
    log = tmp_path / "runs.log"
    # A window long enough for two Django processes to start one after the other on a
    # loaded machine (each takes a second or more to import).
    command = ["--min-hold", "15", "--", "record_run", "--log", str(log), "--seconds", "0.1"]
    assert finish([locked(redis_url, prefix, *command)])[0][0] == 0
    status, err = finish([locked(redis_url, prefix, *command)])[0]
    assert status == 0
    assert "skipped" in err
    assert len(spans(log)) == 1
    assert held("command:record_run"), "held on for its window, by nobody"


def test_locked_command__in_process_a_skipped_run_raises_its_exit_status(
    redis_url: str, prefix: str, tmp_path: Path
) -> None:
    from django.core.management import call_command
    from django.core.management.base import CommandError
    from django.test import override_settings

    from tests.settings import INSTALLED_APPS

    apps = [*INSTALLED_APPS, "tests.commands_app"]
    other = lock("command:record_locked", ttl=30, owner="another-run")  # not this thread
    with override_settings(INSTALLED_APPS=apps), other:
        with pytest.raises(CommandError, match="Skipped: the lock 'command:record_locked'") as e:
            call_command("record_locked", "--log", str(tmp_path / "log"))
    assert e.value.returncode == 75
    assert not (tmp_path / "log").exists()
