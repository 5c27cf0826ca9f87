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


def prose(out: str) -> str:
    """Return ``out`` with its paragraphs unwrapped: every run of whitespace one space."""
    return " ".join(out.split())


@pytest.fixture(scope="module")
def demo() -> subprocess.CompletedProcess[str]:
    """Run the whole demo once for the module; return what it printed."""
    result = run_demo()
    assert result.returncode == 0, result.stdout + result.stderr
    return result


def test_demo__workers_take_turns_and_the_stale_write_is_refused(
    demo: subprocess.CompletedProcess[str],
) -> None:
    out = demo.stdout
    assert "a throw-away server" in out
    assert "1. Mutual exclusion: 2 processes, one lock\n" in out
    held = re.findall(r"worker (\d) holds invoice:42 \(fencing token (\d+)\): counter", out)
    assert len(held) == 6
    assert {worker for worker, _ in held} == {"1", "2"}
    tokens = [int(token) for _, token in held]
    assert tokens == sorted(set(tokens)), "fencing tokens must grow with every acquire"
    assert "no addition was lost. Each new holder got a larger fencing token" in prose(out)
    assert "2. Fencing: a holder whose lease ended cannot write\n" in out
    stale = re.search(r"worker 1 takes invoice:42 with a 0.5 s lease, fencing token (\d+)\n", out)
    newer = re.search(
        r"worker 2 waits [\d.]+ s, then takes invoice:42 with fencing token (\d+)", out
    )
    assert stale, out
    assert newer, out
    assert f"worker 2 writes with token {newer.group(1)}: accepted" in out
    assert re.search(r"worker 1 wakes up [\d.]+ s later, sure it still holds the lock\n", out)
    assert f"worker 1 writes with token {stale.group(1)}: refused, a newer token" in out
    assert "worker 1 leaves its with block, and LockLostError tells it the lease had ended" in out
    assert "So: the storage refused the late write of worker 1" in prose(out)
    assert "1. counter = 6, expected 6: no lost update\n" in out
    refused = re.search(r"2. stale write refused: token (\d+) < (\d+)", out)
    assert refused, out
    assert refused.groups() == (stale.group(1), newer.group(1))
    assert int(stale.group(1)) < int(newer.group(1))
    assert "every lock the demo took is free again (4 locks)" in out


def test_demo__tells_a_story_without_log_lines(demo: subprocess.CompletedProcess[str]) -> None:
    # Every line is the demo's own: nothing on stderr (where a logger's records would go),
    # nothing wider than 88 columns; four numbered parts, each ending with what it showed.
    assert demo.stderr == ""
    for line in demo.stdout.splitlines():
        assert len(line) <= 88, line
    parts = re.findall(r"^(\d)\. (.+)$", demo.stdout, flags=re.MULTILINE)
    assert [number for number, _ in parts] == ["1", "2", "3", "4"]
    assert len(re.findall(r"^   So: ", demo.stdout, flags=re.MULTILINE)) == 4


def test_demo__celery_task_runs_once_per_customer_and_skips_duplicates(
    demo: subprocess.CompletedProcess[str],
) -> None:
    out = demo.stdout
    assert "3. Celery: a task that never runs twice at once for one customer" in out
    assert re.search(r"Started a Celery worker with 2 prefork processes; it answered after", out)
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
    reports = re.findall(r"nightly_report\(\)  task (\w{8})  (.+)\n", out)
    assert [about for _, about in reports] == [
        "made it",
        "not sent: the first one's result, as it was queued",
    ]
    assert reports[0][0] == reports[1][0], "the second send returned the first's task id"
    assert "billing runs" not in out
    assert "Stopped the worker as an operator would" in out
    assert "So: each customer was billed once, however many duplicates" in prose(out)
    assert (
        "3. customer 42: 1 run, 2 skipped; customer 7: 1 run; nightly report: 1 run, 1 not sent\n"
        in out
    )


def test_demo__django_task_enqueued_from_its_own_body_is_skipped(
    demo: subprocess.CompletedProcess[str],
) -> None:
    out = demo.stdout
    enqueue = r'refresh_catalog\.enqueue\("acme"'
    assert "4. Django tasks: a task that never runs twice at once for one supplier\n" in out
    first = re.search(enqueue + r", notify=True\): result (\w{8}), ran\n", out)
    assert first, out
    # The lock's holder, while the first run ran, is that run, named by its result id.
    holder = re.search(r"Django task shop\.jobs\.refresh_catalog \[(\w+)\] on", prose(out))
    assert holder, out
    assert holder.group(1)[:8] == first.group(1)
    assert re.search(r"from its body, " + enqueue + r"\): result \w{8}, skipped\n", out)
    skipped = "the skipped run logged: Skipped a run of task:shop.jobs.refresh_catalog:acme"
    assert skipped in prose(out)
    assert re.search(enqueue + r"\) once it had ended: result \w{8}, ran\n", out)
    assert "4. refresh_catalog(acme): 2 runs, the one enqueued from inside a run skipped\n" in out


def test_demo__more_workers_and_rounds_without_celery() -> None:
    result = run_demo("--workers", "3", "--rounds", "2", "--skip-celery")

    assert result.returncode == 0, result.stdout + result.stderr
    assert "The django-redis-lock demo, in 3 parts" in result.stdout
    assert "counter = 6, expected 6: no lost update" in result.stdout
    assert "3 workers x 2 additions" in result.stdout
    assert set(re.findall(r"worker (\d) holds invoice:42", result.stdout)) == {"1", "2", "3"}
    assert "every lock the demo took is free again (2 locks)" in result.stdout
    assert "3. Django tasks: a task that never runs twice at once" in result.stdout
    assert "3. refresh_catalog(acme): 2 runs" in result.stdout
    assert "Celery" not in result.stdout
