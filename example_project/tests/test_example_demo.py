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


@pytest.fixture(scope="module")
def demo() -> str:
    """Run the whole demo once for the module; return its output."""
    result = run_demo()
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def test_demo__workers_take_turns_and_the_stale_write_is_refused(demo: str) -> None:
    out = demo
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


def test_demo__celery_task_runs_once_per_customer_and_skips_duplicates(demo: str) -> None:
    out = demo
    assert "3. A Celery task that never runs twice at once for one customer" in out
    assert re.search(r"A Celery worker \(2 prefork processes\) answered after [\d.]+ s", out)
    # The holder of customer 42's lock, as lock_info() reports it while the run lasts.
    holder = re.search(
        r'lock_info\("celery:shop\.tasks\.bill_customer:42"\)\n'
        r"\s+task id\s+([0-9a-f-]{36})\n"
        r"\s+task name\s+shop\.tasks\.bill_customer\n"
        r"\s+worker\s+example-demo-\d+@\S+, pid (\d+)\n"
        r"\s+args\s+customer_id=42\n",
        out,
    )
    assert holder, out
    task_id, pid = holder.groups()
    # The run that held the lock is the one that billed customer 42; the others were skipped.
    billed = re.findall(r"bill_customer\((\d+)\)\s+task (\w{8})  billed by worker pid (\d+)", out)
    assert sorted(customer for customer, _, _ in billed) == ["42", "7"]
    assert ("42", task_id[:8], pid) in billed
    assert out.count("None: skipped, customer 42 was being billed") == 2
    assert "Customers 42 and 7 were billed at the same time" in out
    assert out.count("nightly_report()  None: skipped") == 1
    assert "Stopped the worker" in out
    assert "customer 42: 1 run, 2 skipped; customer 7: 1 run\n" in out
    assert "nightly report: 1 run, 1 skipped" in out
    assert "celery:shop.tasks.bill_customer:42 is free" in out
    assert "celery:shop.tasks.bill_customer:7 is free" in out


def test_demo__more_workers_and_rounds_without_celery() -> None:
    result = run_demo("--workers", "3", "--rounds", "2", "--skip-celery")

    assert result.returncode == 0, result.stdout + result.stderr
    assert "counter = 6, expected 6: no lost update" in result.stdout
    assert set(re.findall(r"worker (\d) counter", result.stdout)) == {"1", "2", "3"}
    assert "Celery" not in result.stdout
