"""Run ``manage.py demo`` of the example project end to end, as a newcomer would."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]


def run_demo(*args: str) -> subprocess.CompletedProcess[str]:
    # The demo must start its own throw-away Redis and use its own settings module.
    env = {
        name: value
        for name, value in os.environ.items()
        if name not in {"REDIS_URL", "DJANGO_SETTINGS_MODULE"}
    }
    return subprocess.run(
        [sys.executable, "example_project/manage.py", "demo", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_demo__workers_take_turns_and_the_stale_write_is_refused() -> None:
    result = run_demo()

    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "a throw-away server" in out
    acquired = re.findall(r"worker (\d) acquired invoice:42 with fencing token (\d+)\n", out)
    assert {worker for worker, _ in acquired} == {"1", "2"}
    tokens = [int(token) for _, token in acquired]
    assert tokens == sorted(set(tokens)), "fencing tokens must grow with every acquire"
    assert "counter = 6, expected 6: no lost update" in out
    assert "worker 1 storage refused the write" in out
    assert "worker 1 leaves its with block: LockLostError" in out
    refused = re.search(r"stale write refused: token (\d+) < (\d+)", out)
    assert refused, out
    stale, newest = map(int, refused.groups())
    assert stale < newest
    assert "invoice:42 is free" in out


def test_demo__more_workers_and_rounds() -> None:
    result = run_demo("--workers", "3", "--rounds", "2")

    assert result.returncode == 0, result.stdout + result.stderr
    assert "counter = 6, expected 6: no lost update" in result.stdout
    assert set(re.findall(r"worker (\d) counter", result.stdout)) == {"1", "2", "3"}
