"""``manage.py locks``: list, show and release held locks; exit codes, JSON, redaction."""

from __future__ import annotations

import datetime as dt
import getpass
import io
import json
import logging
import os
import re
import secrets
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest.mock import ANY

import pytest
import redis as redis_py
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import override_settings

from django_redis_lock import locks, rwlock
from django_redis_lock._core.lock_arguments import HOST
from django_redis_lock.backends.base import (
    AcquireRequest,
    AcquireResult,
    BaseLockBackend,
    ReleaseRequest,
    holder_metadata,
)
from django_redis_lock.backends.redis import RedisBackend
from django_redis_lock.management import output
from django_redis_lock.management.commands.locks import Command
from django_redis_lock.testing import RedisServer
from tests.support.helpers import eventually, locks_setting, read_write_holds

REPO = Path(__file__).resolve().parents[2]
TASK_ID = "5d9e6c3a-1f2b-4c1d-9e8f-0a1b2c3d4e5f"
CELERY = {
    "task_id": TASK_ID,
    "task_name": "billing.bill",
    "hostname": "celery@worker-1",
    "worker_pid": 4242,
    "args": "customer_id=42",
    "started_at": "2026-01-31T09:30:00+00:00",
}
#: How the table, and the release and audit lines, describe the holder recording CELERY.
CELERY_HOLDER = f"Celery task billing.bill [{TASK_ID}] on celery@worker-1, pid 4242"
PASSWORD = "s3cret-pw"
#: Names that are hard to list, show or release exactly, with decoys their globs also match.
ODD_NAMES = [
    "a*b",
    "a?b",
    "a[bc]d",
    "back\\slash",
    "two words",
    "line\nbreak",
    "tab\there",
    "naïve:日本:ключ",
    " padded ",
    "-leading-dash",
]
DECOYS = ["aXb", "abd", "backslash", "a"]
LOCK_FIELDS = {
    "alias": str,
    "name": str,
    "owner": str,
    "min_hold_of": (str, type(None)),
    "task_id": (str, type(None)),
    "holds": int,
    "ttl": float,
    "held_until": str,
    "held_for": float,
    "acquired_at": str,
    "fencing_token": int,
    "host": (str, type(None)),
    "pid": (int, type(None)),
    "thread": (str, type(None)),
    "metadata": dict,
    "waiting": int,
    "mode": (str, type(None)),
}


@dataclass
class Result:
    """What one run of the command did: its exit status, stdout, and stderr (with the error)."""

    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


def run(*args: str) -> Result:
    """Run ``manage.py locks *args`` as call_command does; an error's message joins stderr."""
    out, err = io.StringIO(), io.StringIO()
    try:
        call_command("locks", *args, stdout=out, stderr=err)
    except CommandError as exc:
        return Result(exc.returncode, out.getvalue(), err.getvalue() + str(exc))
    return Result(0, out.getvalue(), err.getvalue())


def hold(
    backend: BaseLockBackend,
    name: str,
    owner: str | None = None,
    *,
    data: dict[str, Any] | None = None,
    limit: int = 1,
    host: str = "web-1",
    pid: int = 4242,
    thread: str = "MainThread",
) -> AcquireResult:
    """Take ``name`` for ``owner`` (a new one by default) directly on the backend, for 60 s."""
    meta = holder_metadata(host=host, pid=pid, thread=thread, data=data)
    result = backend.acquire(
        name, owner or secrets.token_hex(16), AcquireRequest(ttl=60.0, limit=limit, metadata=meta)
    )
    assert result.acquired, name
    return result


def cells(line: str) -> list[str]:
    """Return the cells of a table line (columns are two spaces apart, at least)."""
    return re.split(r" {2,}", line.strip())


def names_of(result: Result) -> list[str]:
    return [item["name"] for item in result.json()["locks"]]


def held(backend: BaseLockBackend, name: str) -> list[str]:
    return [info.owner for info in backend.lock_info(name)]


@pytest.fixture
def tty(monkeypatch: pytest.MonkeyPatch) -> Callable[[str], list[str]]:
    """Make stdin a terminal whose user answers ``answer``; return the prompts shown."""

    def answering(answer: str | Callable[[], str]) -> list[str]:
        prompts: list[str] = []

        def fake_input(prompt: str = "") -> str:
            prompts.append(prompt)
            return answer() if callable(answer) else answer

        monkeypatch.setattr(sys.stdin, "isatty", lambda: True)
        monkeypatch.setattr("builtins.input", fake_input)
        return prompts

    return answering  # type: ignore[return-value]


@pytest.fixture
def password_server() -> Iterator[RedisServer]:
    """A server of this test that knows the user alice, whose password is PASSWORD."""
    with RedisServer() as server:
        client = redis_py.Redis.from_url(server.url)
        client.acl_setuser(
            "alice", enabled=True, passwords=[f"+{PASSWORD}"], keys=["*"], commands=["+@all"]
        )
        client.close()
        yield server


def with_password(url: str) -> str:
    return url.replace("redis://", f"redis://alice:{PASSWORD}@")


# list: the table -----------------------------------------------------------------------------


def test_list__table_has_a_row_per_holder_on_every_alias() -> None:
    hold(locks["default"], "reports:daily", data=CELERY)
    hold(locks["locmem"], "import:42", data={"user": 7}, host="web-2", pid=99, thread="T-1")

    result = run("list")

    assert result.code == 0, result.err
    lines = result.out.splitlines()
    assert lines[0].split() == [
        "ALIAS", "NAME", "OWNER", "HOLDS", "TTL", "HELD", "FOR", "FENCING", "WAITING", "METADATA"
    ]  # fmt: skip
    rows = {line.split()[1]: line for line in lines[1:-1]}
    assert rows["reports:daily"].startswith("default ")
    assert CELERY_HOLDER in rows["reports:daily"]
    assert "  args=customer_id=42, started_at=2026-01…" in rows["reports:daily"]
    assert rows["import:42"].startswith("locmem ")
    assert "web-2, pid 99, thread T-1" in rows["import:42"]
    assert rows["import:42"].rstrip().endswith("user=7")
    assert lines[-1] == "2 holders listed."
    assert result.err == ""


def test_locks_alone_is_locks_list() -> None:
    hold(locks["default"], "reports:daily")
    out = io.StringIO()

    call_command("locks", stdout=out)

    assert out.getvalue().splitlines()[1].split()[:2] == ["default", "reports:daily"]
    assert out.getvalue().splitlines()[-1] == "1 holder listed."


@pytest.mark.parametrize(
    "args",
    [
        ["--json", "--using", "default"],
        ["--using", "default", "--json"],
        ["--json", "--using=default"],
        ["--js", "--using", "default"],  # argparse's abbreviations, as after `list`
        ["--verbosity", "2", "--json", "--using", "default"],  # options of every command first
        ["-v2", "--skip-checks", "--json", "--using", "default"],
        ["--skip-checks", "list", "--json", "--using", "default"],
    ],
)
def test_locks_with_options_of_list_is_locks_list(args: list[str]) -> None:
    hold(locks["default"], "reports:daily")
    hold(locks["locmem"], "import:42")

    result = run(*args)

    assert result.code == 0, result.err
    assert [(one["alias"], one["name"]) for one in result.json()["locks"]] == [
        ("default", "reports:daily")
    ]
    assert result.json()["errors"] == []


def test_locks_with_options_of_list__from_a_shell(capsys: pytest.CaptureFixture[str]) -> None:
    hold(locks["default"], "reports:daily")

    code, out, err = run_from_shell(capsys, "--using", "default", "--limit", "1")

    assert (code, err) == (0, "")
    assert out.splitlines()[1].split()[:2] == ["default", "reports:daily"]
    assert out.splitlines()[-1] == "1 holder listed."


def test_locks_with_options_of_list__through_manage_py(redis_url: str) -> None:
    # The example project's manage.py, its settings on the suite's server: the exact words
    # of the report.
    name = f"manage-py:{secrets.token_hex(4)}"
    backend = RedisBackend(url=redis_url, key_prefix="example")
    hold(backend, name)
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    env |= {"REDIS_URL": redis_url, "PYTHONPATH": str(REPO)}
    try:
        done = subprocess.run(
            [sys.executable, "example_project/manage.py", "locks", "--json", "--using", "default"],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        backend.force_release(name)
        backend.close()

    assert (done.returncode, done.stderr) == (0, "")
    document = json.loads(done.stdout)
    assert (document["errors"], document["truncated"]) == ([], False)
    assert name in [one["name"] for one in document["locks"]]
    assert {one["alias"] for one in document["locks"]} == {"default"}


def test_list__nothing_held(using: str) -> None:
    result = run("list", "--using", using)

    assert (result.code, result.out) == (0, "No matching locks are held.\n")


def test_list__row_shows_holds_lease_and_fencing_token(using: str) -> None:
    backend = locks[using]
    owner = secrets.token_hex(16)
    hold(backend, "job", owner)
    token = hold(backend, "job", owner).fencing_token  # reentrant: a second hold

    row = cells(run("list", "--using", using).out.splitlines()[1])

    assert row[:3] == [using, "job", "web-1, pid 4242, thread MainThread"]
    assert row[3] == "2"
    assert row[4] in {"1m00s", "60.0s", "59.9s", "59.8s"}
    assert row[5].endswith("s")
    assert row[6] == str(token)


def test_list__owner_is_unknown_without_details(using: str) -> None:
    backend = locks[using]
    backend.acquire("bare", "owner-token-1", AcquireRequest(ttl=60.0, metadata=b"{}"))

    row = run("list", "--using", using).out.splitlines()[1]

    assert cells(row)[:3] == [using, "bare", "unknown"]


def test_list__long_metadata_is_cut_to_a_short_summary(using: str) -> None:
    hold(locks[using], "meta", data={"note": "x" * 200, "line": "a\nb"})

    row = run("list", "--using", using).out.splitlines()[1]

    summary = row.split("  ")[-1]
    assert summary.startswith("line=a\\nb, note=xxx")
    assert summary.endswith("…")
    assert len(summary) == 40


def test_list__odd_names_are_shown_as_literals_in_the_table(using: str) -> None:
    for name in ["line\nbreak", " padded ", "back\\slash", "naïve:日本:ключ"]:
        hold(locks[using], name)

    out = run("list", "--using", using).out

    assert "'line\\nbreak'" in out
    assert "' padded '" in out
    assert "'back\\\\slash'" in out
    assert " naïve:日本:ключ " in out
    assert len(out.splitlines()) == 6  # header, four rows, total: no name broke a line


def test_list__pattern_is_a_redis_glob(using: str) -> None:
    for name in ["reports:daily", "reports:weekly", "imports:daily", "report"]:
        hold(locks[using], name)

    assert sorted(names_of(run("list", "--json", "--pattern", "reports:*"))) == [
        "reports:daily",
        "reports:weekly",
    ]
    assert names_of(run("list", "--json", "--pattern", "report?:weekly")) == ["reports:weekly"]
    assert sorted(names_of(run("list", "--json", "--pattern", "[ir]*:daily"))) == [
        "imports:daily",
        "reports:daily",
    ]


def test_list__backslash_escapes_a_glob_character(using: str) -> None:
    for name in ["a*b", "a?b", "aXb"]:
        hold(locks[using], name)

    assert sorted(names_of(run("list", "--json", "--pattern", "a*b"))) == ["a*b", "a?b", "aXb"]
    assert names_of(run("list", "--json", "--pattern", "a\\*b")) == ["a*b"]
    assert names_of(run("list", "--json", "--pattern", "a\\?b")) == ["a?b"]


def test_list__pattern_and_exact_exclude_each_other() -> None:
    result = run("list", "--pattern", "a*", "--exact", "a")

    assert result.code == 2
    assert "not allowed with argument" in result.err


@pytest.mark.parametrize("name", ODD_NAMES)
def test_odd_name__listed_shown_and_released_exactly(using: str, name: str) -> None:
    backend = locks[using]
    for other in [*ODD_NAMES, *DECOYS]:
        hold(backend, other)

    listed = run("list", "--json", f"--exact={name}", "--using", using)
    shown = run("show", "--json", "--using", using, "--", name)
    released = run("release", "--yes", "--using", using, "--", name)

    assert (listed.code, names_of(listed)) == (0, [name])
    assert (shown.code, names_of(shown)) == (0, [name])
    assert shown.json()["name"] == name
    assert released.code == 0, released.err
    assert held(backend, name) == []
    survivors = [other for other in [*ODD_NAMES, *DECOYS] if held(backend, other)]
    assert sorted(survivors) == sorted(set(ODD_NAMES + DECOYS) - {name})


# list: JSON ----------------------------------------------------------------------------------


def test_list__json_schema_field_by_field(using: str) -> None:
    backend = locks[using]
    owner = secrets.token_hex(16)
    before = dt.datetime.now(dt.timezone.utc)
    first = hold(backend, "billing:42", owner, data=CELERY, host="worker-1", pid=77, thread="T")
    hold(backend, "billing:42", owner, data=CELERY)

    document = run("list", "--json", "--using", using).json()

    assert list(document) == ["version", "locks", "truncated", "errors"]
    assert document["version"] == 4
    assert document["truncated"] is False
    assert document["errors"] == []
    [item] = document["locks"]
    assert set(item) == set(LOCK_FIELDS)
    for field, kind in LOCK_FIELDS.items():
        assert isinstance(item[field], kind), field
    assert item["alias"] == using
    assert item["name"] == "billing:42"
    assert item["owner"] == owner
    assert item["min_hold_of"] is None
    assert item["task_id"] == TASK_ID
    assert item["holds"] == 2
    assert 59.0 < item["ttl"] <= 60.0
    assert 0.0 <= item["held_for"] < 5.0
    acquired = dt.datetime.fromisoformat(item["acquired_at"])
    assert acquired.utcoffset() == dt.timedelta(0)
    assert before - dt.timedelta(seconds=1) <= acquired <= dt.datetime.now(dt.timezone.utc)
    until = dt.datetime.fromisoformat(item["held_until"])
    assert until.utcoffset() == dt.timedelta(0)
    assert abs((until - acquired).total_seconds() - 60.0) < 0.01
    assert item["fencing_token"] == first.fencing_token
    assert (item["host"], item["pid"], item["thread"]) == ("worker-1", 77, "T")
    assert item["metadata"] == CELERY
    assert item["waiting"] == 0
    assert item["mode"] is None


def test_list__json_without_details_gives_nulls(using: str) -> None:
    locks[using].acquire("bare", "owner-1", AcquireRequest(ttl=60.0, metadata=b"not json"))

    [item] = run("list", "--json", "--using", using).json()["locks"]

    assert item["task_id"] is None
    assert (item["host"], item["pid"], item["thread"]) == (None, None, None)
    assert item["metadata"] == {}


def test_list__json_writes_one_lock_per_line(using: str) -> None:
    for index in range(3):
        hold(locks[using], f"job:{index}")

    lines = run("list", "--json", "--using", using).out.splitlines()

    assert lines[0] == '{"version": 4, "locks": ['
    assert [line.endswith(",") for line in lines[1:4]] == [True, True, False]
    rows = [json.loads(line.rstrip(",")) for line in lines[1:4]]
    assert sorted(row["name"] for row in rows) == ["job:0", "job:1", "job:2"]
    assert lines[4] == '], "truncated": false, "errors": []}'
    assert len(lines) == 5


def test_list__json_when_nothing_is_held() -> None:
    result = run("list", "--json")

    assert result.code == 0
    assert result.json() == {"version": 4, "locks": [], "truncated": False, "errors": []}


def test_list__json_keeps_non_ascii_and_newlines_exact(using: str) -> None:
    hold(locks[using], "naïve\n日本", data={"note": "ключ\t1"})

    [item] = run("list", "--json", "--using", using).json()["locks"]

    assert item["name"] == "naïve\n日本"
    assert item["metadata"] == {"note": "ключ\t1"}


# list: --limit, --older-than, --fail -----------------------------------------------------------


def test_list__limit_stops_after_n_holders(using: str) -> None:
    for index in range(5):
        hold(locks[using], f"job:{index}")

    two = run("list", "--limit", "2", "--using", using)
    two_json = run("list", "--json", "--limit", "2", "--using", using).json()
    five_json = run("list", "--json", "--limit", "5", "--using", using).json()
    ten_json = run("list", "--json", "--limit", "10", "--using", using).json()

    assert len(two.out.splitlines()) == 4
    assert two.out.splitlines()[-1] == "2 holders listed (stopped at --limit 2)."
    assert (len(two_json["locks"]), two_json["truncated"]) == (2, True)
    assert (len(five_json["locks"]), five_json["truncated"]) == (5, False)
    assert (len(ten_json["locks"]), ten_json["truncated"]) == (5, False)


def test_list__limit_counts_across_aliases() -> None:
    hold(locks["default"], "one")
    hold(locks["locmem"], "two")

    first = run("list", "--json", "--limit", "1").json()
    both = run("list", "--json", "--limit", "2").json()

    assert (names_of_doc(first), first["truncated"]) == (["one"], True)
    assert (names_of_doc(both), both["truncated"]) == (["one", "two"], False)


def names_of_doc(document: dict[str, Any]) -> list[str]:
    return [item["name"] for item in document["locks"]]


def spy_on_pages(
    monkeypatch: pytest.MonkeyPatch, backend: BaseLockBackend, out: io.StringIO
) -> list[tuple[int, int, int]]:
    """Record (count asked, locks returned, output written so far) for each scan_page call."""
    calls: list[tuple[int, int, int]] = []
    real = backend.scan_page

    def scan_page(pattern: str = "*", cursor: str | None = None, count: int = 50) -> Any:
        written = len(out.getvalue())
        next_cursor, page = real(pattern, cursor, count)
        calls.append((count, len(page), written))
        return next_cursor, page

    monkeypatch.setattr(backend, "scan_page", scan_page)
    return calls


def test_list__writes_each_page_before_reading_the_next(
    using: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = locks[using]
    for index in range(1200):
        hold(backend, f"job:{index}")
    out = io.StringIO()
    calls = spy_on_pages(monkeypatch, backend, out)

    call_command("locks", "list", "--json", "--using", using, stdout=out)

    assert len(json.loads(out.getvalue())["locks"]) == 1200
    assert len(calls) >= 2
    assert {count for count, _, _ in calls} == {output.PAGE_SIZE}
    written = [before for _, _, before in calls]
    assert written == sorted(set(written))  # output grew before every further read
    assert max(returned for _, returned, _ in calls) < 1200


def test_list__limit_reads_no_more_than_it_needs(
    using: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = locks[using]
    for index in range(1200):
        hold(backend, f"job:{index}")
    out = io.StringIO()
    calls = spy_on_pages(monkeypatch, backend, out)

    call_command("locks", "list", "--json", "--limit", "3", "--using", using, stdout=out)

    assert len(json.loads(out.getvalue())["locks"]) == 3
    assert [count for count, _, _ in calls] == [4]


def test_list__older_than_lists_only_long_holders_and_fail_exits_1(using: str) -> None:
    backend = locks[using]
    hold(backend, "stuck", data=CELERY)
    eventually(lambda: backend.lock_info("stuck")[0].held_for > 0.5)
    hold(backend, "fresh")

    checked = run("list", "--older-than", "0.5", "--fail", "--using", using)
    quiet = run("list", "--older-than", "3600", "--fail", "--using", using)
    without_fail = run("list", "--older-than", "0.5", "--using", using)

    assert checked.code == 1
    assert [line.split()[1] for line in checked.out.splitlines()[1:-1]] == ["stuck"]
    assert checked.err.startswith(f"1 lock holder held longer than 0.5s: {using} 'stuck' (")
    assert "\n" not in checked.err
    assert (quiet.code, quiet.out) == (0, "No matching locks are held.\n")
    assert without_fail.code == 0
    assert "stuck" in without_fail.out
    assert "fresh" not in without_fail.out


def test_list__fail_without_older_than_fails_on_any_lock(using: str) -> None:
    assert run("list", "--fail", "--using", using).code == 0
    for index in range(7):
        hold(locks[using], f"job:{index}")

    result = run("list", "--json", "--fail", "--using", using)

    assert result.code == 1
    assert len(result.json()["locks"]) == 7
    assert result.err.startswith("7 lock holders listed: ")
    assert result.err.endswith(" and 2 more.")
    assert result.err.count(f"{using} 'job:") == 5


@pytest.mark.parametrize(
    ("args", "complaint"),
    [
        (["--limit", "0"], "argument --limit: expected a whole number >= 1, got '0'"),
        (["--limit", "many"], "argument --limit: expected a whole number >= 1, got 'many'"),
        (["--older-than", "-1"], "argument --older-than: expected a number of seconds >= 0"),
        (["--older-than", "nan"], "argument --older-than: expected a number of seconds >= 0"),
        (["--older-than", "soon"], "argument --older-than: expected a number of seconds >= 0"),
        (["--exact="], "argument --exact: Lock name must not be empty."),
        (["--bogus"], "unrecognized arguments: --bogus"),
    ],
)
def test_list__bad_option_values_exit_2(args: list[str], complaint: str) -> None:
    result = run("list", *args)

    assert result.code == 2
    assert complaint in result.err


def test_unknown_subcommand_exits_2() -> None:
    result = run("frob")

    assert result.code == 2
    assert "invalid choice: 'frob'" in result.err


def test_unknown_alias_exits_2_naming_the_aliases() -> None:
    for args in (["list"], ["show", "x"], ["release", "x", "--yes"]):
        result = run(*args, "--using", "nope")

        assert result.code == 2
        assert result.err == (
            "Could not find config for 'nope' in settings.LOCKS (aliases: 'default', 'locmem')."
        )


def test_bad_locks_setting_exits_2() -> None:
    with override_settings(LOCKS={"default": {"BACKEND": "no.such.Backend"}}):
        result = run("list")

    assert result.code == 2
    assert "no.such.Backend" in result.err
    assert "\n" not in result.err


# show ----------------------------------------------------------------------------------------


def test_show__prints_every_field_and_the_full_metadata(using: str) -> None:
    backend = locks[using]
    owner = secrets.token_hex(16)
    token = hold(backend, "billing:42", owner, data=CELERY, host="worker-1", pid=77).fencing_token

    result = run("show", "billing:42")

    assert result.code == 0, result.err
    lines = result.out.splitlines()
    kind = "RedisBackend at redis://" if using == "default" else "LocMemBackend"
    assert lines[0].startswith(f"Lock 'billing:42' on alias '{using}' ({kind}")
    assert lines[0].endswith("): 1 holder, 0 waiting")
    fields = dict(line.strip().split(":", 1) for line in lines[1:12])
    assert fields["owner"].strip() == owner
    assert fields["task id"].strip() == TASK_ID
    assert fields["holds"].strip() == "1"
    assert fields["ttl"].strip().endswith("s)")
    assert fields["held for"].strip().endswith("s)")
    assert dt.datetime.fromisoformat(fields["acquired at"].strip()).tzinfo is not None
    assert fields["fencing token"].strip() == str(token)
    assert (fields["host"].strip(), fields["pid"].strip()) == ("worker-1", "77")
    assert fields["thread"].strip() == "MainThread"
    metadata = "\n".join([fields["metadata"], *lines[12:]])
    assert json.loads(metadata) == CELERY


#: Text a client can put in a lock's metadata (a view lock records request.path) or its
#: name: C0 controls, a C1 control (U+009B, a CSI on terminals that read it), ANSI escapes
#: that clear the screen and recolour it, and Unicode line and bidi controls.
HOSTILE = "a\x07b\x1b[2J\x1b[31mc\x9b31md\u2028e\u202ef\x00g\x85h\x1b]0;title\x07"


def assert_terminal_safe(text: str) -> None:
    """Fail if ``text`` holds a character a terminal could act on, other than line ends."""
    acted_on = sorted({c for c in text if not c.isprintable() and c != "\n"})
    assert not acted_on, f"raw control characters {acted_on!r} in {text!r}"


def test_show_list_and_release__escape_control_characters(
    using: str, caplog: pytest.LogCaptureFixture
) -> None:
    name = f"job{HOSTILE}"
    owner = f"own{HOSTILE}er"
    data = {"path": f"/pay/{HOSTILE}/", f"key{HOSTILE}": [HOSTILE], "task_id": HOSTILE}
    hold(locks[using], name, owner, data=data, host=f"web{HOSTILE}", thread=f"T{HOSTILE}")
    caplog.set_level(logging.WARNING, logger="django_redis_lock.audit")

    shown = run("show", name, "--using", using)
    document = run("show", name, "--using", using, "--json")
    table = run("list", "--using", using)
    listed = run("list", "--using", using, "--json")
    failed = run("list", "--using", using, "--fail")
    released = run("release", name, "--using", using, "--yes")

    assert [r.code for r in (shown, document, table, listed, failed, released)] == [
        0, 0, 0, 0, 1, 0
    ]  # fmt: skip
    for result in (shown, document, table, listed, failed, released):
        assert_terminal_safe(result.out + result.err)
    for record in caplog.records:
        assert_terminal_safe(record.getMessage())
    assert "\\x9b31m" in shown.out
    assert "\\x1b[2J" in shown.out
    assert f"  owner:          {owner!r}" in shown.out.splitlines()
    # JSON gives every value exactly.
    [item] = document.json()["locks"]
    assert (item["name"], item["owner"], item["metadata"]) == (name, owner, data)
    assert (item["host"], item["thread"]) == (f"web{HOSTILE}", f"T{HOSTILE}")
    assert listed.json()["locks"] == [item | {"ttl": ANY, "held_for": ANY}]


def test_show__lists_every_holder_of_a_semaphore(using: str) -> None:
    backend = locks[using]
    hold(backend, "pool", "owner-a", limit=2)
    hold(backend, "pool", "owner-b", limit=2)

    text = run("show", "pool", "--using", using)
    document = run("show", "pool", "--json", "--using", using).json()

    assert text.out.splitlines()[0].endswith(": 2 holders, 0 waiting")
    assert text.out.count("  owner:") == 2
    assert sorted(item["owner"] for item in document["locks"]) == ["owner-a", "owner-b"]


def test_show__json_has_the_name_and_the_list_schema(using: str) -> None:
    hold(locks[using], "job", data={"k": [1, 2]})

    document = run("show", "job", "--json").json()

    assert list(document) == ["version", "name", "locks", "waiters", "truncated", "errors"]
    assert (document["version"], document["name"], document["waiters"]) == (4, "job", [])
    [item] = document["locks"]
    assert set(item) == set(LOCK_FIELDS)
    assert (item["alias"], item["metadata"]) == (using, {"k": [1, 2]})


def test_show__not_held_exits_1(using: str) -> None:
    hold(locks[using], "other")

    anywhere = run("show", "job")
    on_alias = run("show", "job", "--using", using)
    as_json = run("show", "job", "--json")

    assert (anywhere.code, anywhere.out, anywhere.err) == (1, "", "Lock 'job' is not held.")
    assert (on_alias.code, on_alias.err) == (1, f"Lock 'job' is not held on alias '{using}'.")
    assert as_json.code == 1
    assert as_json.json()["locks"] == []


def test_show__empty_name_is_a_usage_error() -> None:
    result = run("show", "")

    assert result.code == 2
    assert "Lock name must not be empty." in result.err


# release -------------------------------------------------------------------------------------


def test_release__yes_frees_every_holder_and_says_so(using: str) -> None:
    backend = locks[using]
    hold(backend, "pool", "owner-a", limit=2, data=CELERY)
    hold(backend, "pool", "owner-b", limit=2)

    result = run("release", "pool", "--yes")

    assert result.code == 0, result.err
    lines = result.out.splitlines()
    assert lines[0] == "Force-releasing lock 'pool' frees 2 holders:"
    assert any(line.startswith(f"  {using}: owner owner-a, {CELERY_HOLDER}, ") for line in lines)
    assert any(
        line.startswith(f"  {using}: owner owner-b, web-1, pid 4242, thread MainThread, held for ")
        for line in lines
    )
    assert lines[-1].startswith(f"Released lock 'pool' on alias '{using}': owner owner-")
    assert held(backend, "pool") == []


def test_release__not_held_exits_1() -> None:
    result = run("release", "job", "--yes")

    assert (result.code, result.out) == (1, "")
    assert result.err == "Lock 'job' is not held; nothing was released."


def test_release__owner_frees_only_that_owner(using: str) -> None:
    backend = locks[using]
    hold(backend, "pool", "owner-a", limit=2)
    hold(backend, "pool", "owner-b", limit=2)

    result = run("release", "pool", "--owner", "owner-a", "--yes", "--using", using)

    assert result.code == 0, result.err
    assert held(backend, "pool") == ["owner-b"]


def test_release__stale_owner_frees_nothing_and_exits_1(using: str) -> None:
    backend = locks[using]
    hold(backend, "job", "owner-new")

    result = run("release", "job", "--owner", "owner-old", "--yes")

    assert result.code == 1
    assert result.err == (
        f"Owner 'owner-old' does not hold lock 'job' (it is held by {using} owner-new); "
        "nothing was released."
    )
    assert held(backend, "job") == ["owner-new"]
    assert run("release", "free", "--owner", "x", "--yes").err.endswith(
        "(nobody holds it); nothing was released."
    )


def test_release__refuses_without_a_terminal_or_yes(using: str) -> None:
    backend = locks[using]
    hold(backend, "job", "owner-a")

    result = run("release", "job")  # pytest's stdin is not a terminal

    assert result.code == 2
    assert result.err.endswith(
        "Refusing to force-release without confirmation: stdin is not a terminal "
        "(pass --yes to release anyway)."
    )
    assert held(backend, "job") == ["owner-a"]


@pytest.mark.parametrize("answer", ["y", "yes", " YES "])
def test_release__confirmed_at_the_terminal(
    using: str, tty: Callable[[str], list[str]], answer: str
) -> None:
    backend = locks[using]
    hold(backend, "job", "owner-a")
    prompts = tty(answer)

    result = run("release", "job")

    assert result.code == 0, result.err
    assert prompts == ["Release lock 'job'? The holders are not told. [y/N] "]
    assert held(backend, "job") == []


@pytest.mark.parametrize("answer", ["", "n", "no", "yes please"])
def test_release__declined_at_the_terminal(
    using: str, tty: Callable[[str], list[str]], answer: str
) -> None:
    backend = locks[using]
    hold(backend, "job", "owner-a")
    tty(answer)

    result = run("release", "job")

    assert (result.code, result.err) == (1, "Release declined; nothing was released.")
    assert held(backend, "job") == ["owner-a"]


def test_release__end_of_input_declines(using: str, tty: Callable[[Any], list[str]]) -> None:
    backend = locks[using]
    hold(backend, "job", "owner-a")

    def eof() -> str:
        raise EOFError

    tty(eof)

    assert run("release", "job").code == 1
    assert held(backend, "job") == ["owner-a"]


def test_release__keeps_a_holder_that_took_the_lock_during_the_prompt(
    using: str, tty: Callable[[Any], list[str]]
) -> None:
    backend = locks[using]
    hold(backend, "job", "owner-old")

    def old_lets_go_and_new_takes_it() -> str:
        backend.release("job", "owner-old")
        hold(backend, "job", "owner-new")
        return "y"

    tty(old_lets_go_and_new_takes_it)

    result = run("release", "job")

    assert result.code == 1
    assert f"Owner owner-old on {using} had let go already." in result.out
    assert result.err == "Nothing was released: the holders of 'job' let go of it meanwhile."
    assert held(backend, "job") == ["owner-new"]


def test_release__writes_an_audit_line(
    using: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(getpass, "getuser", lambda: "alice")
    hold(locks[using], "billing:42", "celery:run-1", data=CELERY)
    caplog.set_level(logging.WARNING, logger="django_redis_lock.audit")

    run("release", "billing:42", "--yes")

    [record] = [r for r in caplog.records if r.name == "django_redis_lock.audit"]
    assert record.levelno == logging.WARNING
    message = record.getMessage()
    assert message.startswith(
        f"OS user 'alice' force-released lock 'billing:42' on alias '{using}', freeing "
        f"owner celery:run-1, {CELERY_HOLDER}, held for "
    )
    assert "\n" not in message
    assert record.os_user == "alice"
    assert (record.lock_alias, record.lock_name) == (using, "billing:42")
    assert (record.lock_owners, record.task_ids) == (["celery:run-1"], [TASK_ID])


def test_release__audit_line_escapes_a_newline_in_the_name(
    caplog: pytest.LogCaptureFixture,
) -> None:
    hold(locks["default"], "fake\nOS user 'root' force-released")
    caplog.set_level(logging.WARNING, logger="django_redis_lock.audit")

    run("release", "fake\nOS user 'root' force-released", "--yes")

    [record] = [r for r in caplog.records if r.name == "django_redis_lock.audit"]
    assert "\n" not in record.getMessage()


def test_release__audit_names_the_uid_when_getuser_fails(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_name() -> str:
        raise OSError("No username set in the environment")

    monkeypatch.setattr(getpass, "getuser", no_name)
    hold(locks["default"], "job")
    caplog.set_level(logging.WARNING, logger="django_redis_lock.audit")

    assert run("release", "job", "--yes").code == 0

    [record] = [r for r in caplog.records if r.name == "django_redis_lock.audit"]
    assert record.os_user == f"uid {os.getuid()}"


def test_release__nothing_logged_when_nothing_is_freed(caplog: pytest.LogCaptureFixture) -> None:
    hold(locks["default"], "job", "owner-a")
    caplog.set_level(logging.WARNING, logger="django_redis_lock.audit")

    run("release", "job", "--owner", "owner-b", "--yes")
    run("release", "job")

    assert [r for r in caplog.records if r.name == "django_redis_lock.audit"] == []


def test_release__on_every_alias_that_holds_it_unless_using() -> None:
    hold(locks["default"], "job", "owner-a")
    hold(locks["locmem"], "job", "owner-b")

    only_locmem = run("release", "job", "--yes", "--using", "locmem")
    everywhere = run("release", "job", "--yes")

    assert only_locmem.code == 0
    assert "owner-a" not in only_locmem.out
    assert everywhere.code == 0
    assert everywhere.out.splitlines()[0] == "Force-releasing lock 'job' frees 1 holder:"
    assert held(locks["default"], "job") == held(locks["locmem"], "job") == []


# Unreachable backends and passwords ------------------------------------------------------------


def down_setting(server: RedisServer, prefix: str) -> dict[str, Any]:
    """Return LOCKS with 'default' on ``server`` (with a password in its URL), then stop it."""
    setting = locks_setting(with_password(server.url), prefix)
    server.stop()
    return setting


@pytest.mark.parametrize(
    "args",
    [
        ["list"],
        ["list", "--json", "--using", "default"],
        ["show", "job", "--using", "default"],
        ["release", "job", "--yes"],
    ],
)
def test_stopped_server__exit_2_with_one_line_and_no_password(
    own_server: RedisServer, prefix: str, args: list[str]
) -> None:
    url = own_server.url
    with override_settings(LOCKS=down_setting(own_server, prefix)):
        result = run(*args)

    assert result.code == 2
    message = result.err.splitlines()[-1]
    assert "is unavailable" in message
    assert with_password(url).replace(PASSWORD, "***") in message
    assert PASSWORD not in result.out + result.err


def test_stopped_server__other_aliases_are_still_listed(
    own_server: RedisServer, prefix: str
) -> None:
    with override_settings(LOCKS=down_setting(own_server, prefix)):
        hold(locks["locmem"], "job")
        table = run("list")
        document = run("list", "--json")

    assert table.code == 2
    assert table.out.splitlines()[1].split()[:2] == ["locmem", "job"]
    assert table.err.startswith("alias 'default': Redis at redis://alice:***@")
    assert document.json()["locks"][0]["name"] == "job"
    [error] = document.json()["errors"]
    assert error["alias"] == "default"
    assert error["error"].startswith("Redis at redis://alice:***@")
    assert PASSWORD not in table.out + table.err + document.out + document.err


def test_password_in_url_never_printed(password_server: RedisServer, prefix: str) -> None:
    with override_settings(LOCKS=locks_setting(with_password(password_server.url), prefix)):
        hold(locks["default"], "job", data=CELERY)
        outputs = [
            run("list"),
            run("list", "--json"),
            run("show", "job"),
            run("show", "job", "--json"),
            run("release", "job", "--yes"),
        ]

    assert [result.code for result in outputs] == [0, 0, 0, 0, 0]
    assert "redis://alice:***@127.0.0.1:" in outputs[2].out
    for result in outputs:
        assert PASSWORD not in result.out + result.err


def test_one_line_redacts_any_url_in_a_message() -> None:
    error = RuntimeError(f"failed\n  at redis://bob:{PASSWORD}@10.0.0.1:6379/0 (see log)")

    assert output.one_line(error) == "failed at redis://bob:***@10.0.0.1:6379/0 (see log)"


# From a shell: exit statuses and help --------------------------------------------------------


def run_from_shell(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """Run the command as manage.py would; return its exit status, stdout and stderr."""
    try:
        Command().run_from_argv(["manage.py", "locks", "--skip-checks", *args])
    except SystemExit as exc:
        code = exc.code
    else:
        code = 0
    captured = capsys.readouterr()
    assert isinstance(code, int)
    return code, captured.out, captured.err


def test_shell__exit_statuses(
    capsys: pytest.CaptureFixture[str], own_server: RedisServer, prefix: str
) -> None:
    hold(locks["default"], "job")

    listed = run_from_shell(capsys, "list")
    failed = run_from_shell(capsys, "list", "--fail")
    missing = run_from_shell(capsys, "show", "nope")
    usage = run_from_shell(capsys, "list", "--limit", "0")
    with override_settings(LOCKS=down_setting(own_server, prefix)):
        down = run_from_shell(capsys, "list", "--using", "default")

    assert listed[0] == 0
    assert "job" in listed[1]
    assert failed[0] == 1
    assert failed[2].startswith("CommandError: 1 lock holder listed: default 'job' (")
    assert missing == (1, "", "CommandError: Lock 'nope' is not held.\n")
    assert usage[0] == 2
    assert "error: argument --limit: expected a whole number >= 1, got '0'" in usage[2]
    assert down[0] == 2
    assert len(down[2].splitlines()) == 1
    assert down[2].startswith("CommandError: alias 'default': Redis at redis://alice:***@")
    assert PASSWORD not in down[1] + down[2]


def test_help__every_subcommand_and_option_is_described() -> None:
    parser = Command().create_parser("manage.py", "locks")
    [subparsers] = [a for a in parser._actions if a.dest == "subcommand"]
    assert set(subparsers.choices) == {"list", "show", "release", "rates"}
    assert all(choice.help for choice in subparsers._choices_actions)
    for name, sub in subparsers.choices.items():
        assert sub.description, name
        for action in sub._actions:
            assert len(action.help or "") > 10, (name, action.dest)
    list_help = subparsers.choices["list"].format_help()
    for field in LOCK_FIELDS:
        assert f"\n  {field} " in list_help
    assert "--exact" in subparsers.choices["list"].format_help()
    assert "exit status: 0 done; 1 a check failed" in " ".join(parser.format_help().split())
    rates_help = subparsers.choices["rates"].format_help()
    for field in ("alias", "name", "rate", "limit", "period", "used", "free_in"):
        assert f"\n  {field} " in rates_help


@pytest.mark.parametrize("subcommand", [[], ["list"], ["show"], ["release"], ["rates"]])
def test_help__is_printed_and_exits_0(
    capsys: pytest.CaptureFixture[str], subcommand: list[str]
) -> None:
    code, out, _ = run_from_shell(capsys, *subcommand, "--help")

    assert code == 0
    assert out.startswith(f"usage: manage.py locks {' '.join(subcommand)}".rstrip())


def test_help__says_that_options_of_list_need_no_subcommand(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = run_from_shell(capsys, "--help")
    listed, list_help, _ = run_from_shell(capsys, "--json", "--help")

    assert code == listed == 0
    assert out.startswith("usage: manage.py locks [-h]")
    assert "{list,show,release,rates} ..." in out
    assert "`locks --json` is `locks list --json`" in " ".join(out.split())
    assert list_help.startswith("usage: manage.py locks list [-h]")
    assert "`locks` alone, or followed by these options, runs `locks list`" in " ".join(
        list_help.split()
    )


# A hold kept for its min_hold window --------------------------------------------------------


def kept_for_min_hold(backend: BaseLockBackend, name: str, owner: str) -> None:
    """Take ``name`` for ``owner`` as CELERY's run, and release it with a 60 s min_hold."""
    hold(backend, name, owner, data=CELERY)
    assert backend.release(name, owner, ReleaseRequest(holds=1, min_hold=60.0)) == 0


def test_min_hold__the_table_says_held_until_by_min_hold(using: str) -> None:
    kept_for_min_hold(locks[using], "nightly", "celery:run-1")
    before = dt.datetime.now(dt.timezone.utc)

    result = run("list", "--using", using)

    row = cells(result.out.splitlines()[1])
    until = before + dt.timedelta(seconds=60)
    assert row[1] == "nightly"
    assert re.fullmatch(
        r"held until (\S+ \S+) UTC by min_hold \(released by " + re.escape(CELERY_HOLDER) + r"\)",
        row[2],
    ), row
    shown_until = dt.datetime.strptime(row[2][11:30], "%Y-%m-%d %H:%M:%S")
    assert abs((shown_until.replace(tzinfo=dt.timezone.utc) - until).total_seconds()) < 2
    assert row[3] == "0"  # holds: nobody holds it


def test_min_hold__json_names_the_owner_that_released_it(using: str) -> None:
    kept_for_min_hold(locks[using], "nightly", "celery:run-1")

    [item] = run("list", "--json", "--using", using).json()["locks"]

    assert item["owner"] == "min_hold:celery:run-1"
    assert item["min_hold_of"] == "celery:run-1"
    assert item["holds"] == 0
    assert item["task_id"] == TASK_ID
    until = dt.datetime.fromisoformat(item["held_until"])
    acquired = dt.datetime.fromisoformat(item["acquired_at"])
    assert abs((until - acquired).total_seconds() - 60.0) < 0.01


def test_min_hold__show_says_held_until_and_released_by(using: str) -> None:
    kept_for_min_hold(locks[using], "nightly", "celery:run-1")

    lines = run("show", "nightly", "--using", using).out.splitlines()

    fields = dict(line.strip().split(":", 1) for line in lines[1:4])
    assert fields["owner"].strip() == "min_hold:celery:run-1"
    assert re.fullmatch(r"held until \S+ \S+ UTC by min_hold", fields["held"].strip())
    assert fields["released by"].strip() == "celery:run-1"


def test_min_hold__release_frees_the_window(using: str) -> None:
    backend = locks[using]
    kept_for_min_hold(backend, "nightly", "celery:run-1")

    result = run("release", "nightly", "--owner", "min_hold:celery:run-1", "--yes")

    assert result.code == 0, result.err
    assert "held until" in result.out
    assert held(backend, "nightly") == []


# Read-write locks: each holder's and waiter's mode, and how many readers hold the lock --------


def thread_holder(thread: str) -> str:
    """Return how listings describe a holder that is a thread of this process."""
    return f"{HOST}, pid {os.getpid()}, thread {thread}"


def test_table__read_write_lock_shows_mode_and_readers(using: str) -> None:
    hold(locks[using], "plain")
    with read_write_holds("report:42", using=using, readers=3, waiting_writer=True):
        with rwlock("report:43", using=using).write():
            result = run("list", "--using", using)

    assert result.code == 0, result.err
    lines = result.out.splitlines()
    assert lines[0].split()[:3] == ["ALIAS", "NAME", "OWNER"]  # no column of its own
    rows = sorted(cells(line) for line in lines[1:-1])
    assert [row[1:3] for row in rows] == [
        ["plain", "web-1, pid 4242, thread MainThread"],
        ["report:42", thread_holder("reader-0") + " (read, 3 readers)"],
        ["report:42", thread_holder("reader-1") + " (read, 3 readers)"],
        ["report:42", thread_holder("reader-2") + " (read, 3 readers)"],
        ["report:43", thread_holder("MainThread") + " (write)"],
    ]
    assert [row[7] for row in rows] == ["0", "1", "1", "1", "0"]  # WAITING: the writer
    assert lines[-1] == "5 holders listed."
    assert_terminal_safe(result.out)


def test_table__one_reader_is_counted_too(using: str) -> None:
    with read_write_holds("report:42", using=using, readers=1):
        row = cells(run("list", "--using", using).out.splitlines()[1])

    assert row[2] == thread_holder("reader-0") + " (read, 1 reader)"


def test_json__read_write_lock_has_mode_for_holders_and_waiters(using: str) -> None:
    hold(locks[using], "plain")
    with read_write_holds("report:42", using=using, readers=2, waiting_writer=True):
        listed = run("list", "--json", "--using", using).json()
        shown_json = run("show", "report:42", "--json", "--using", using).json()
        with rwlock("report:43", using=using).write():
            written = run("list", "--json", "--exact", "report:43", "--using", using).json()

    by_name = sorted((item["name"], item["thread"], item["mode"]) for item in listed["locks"])
    assert by_name == [
        ("plain", "MainThread", None),
        ("report:42", "reader-0", "read"),
        ("report:42", "reader-1", "read"),
    ]
    assert sorted((i["thread"], i["mode"]) for i in shown_json["locks"]) == [
        ("reader-0", "read"),
        ("reader-1", "read"),
    ]
    [waiter] = shown_json["waiters"]
    assert (waiter["thread"], waiter["mode"], waiter["next"]) == ("writer", "write", True)
    [writer] = written["locks"]
    assert (writer["thread"], writer["mode"]) == ("MainThread", "write")


def test_show__read_write_lock_shows_each_holders_and_waiters_mode(using: str) -> None:
    with read_write_holds("report:42", using=using, readers=2, waiting_writer=True):
        result = run("show", "report:42", "--using", using)

    assert result.code == 0, result.err
    lines = result.out.splitlines()
    assert lines[0].endswith("): 2 holders, 1 waiting")
    modes = [line for line in lines if line.startswith("  mode:")]
    assert modes == ["  mode:           read, 2 readers"] * 2
    for index, line in enumerate(lines):
        if line.startswith("  owner:"):
            assert lines[index + 1].startswith("  mode:")  # right after the owner
    assert lines[-2] == "Waiting, in queue order:"
    assert lines[-1].startswith(f"  1. {thread_holder('writer')} (write): next, waiting ")
    assert_terminal_safe(result.out)


def test_show__plain_lock_has_no_mode_line(using: str) -> None:
    hold(locks[using], "plain")

    lines = run("show", "plain", "--using", using).out.splitlines()

    assert not [line for line in lines if line.lstrip().startswith("mode:")]


def test_release__names_a_readers_mode(using: str) -> None:
    with read_write_holds("report:42", using=using, readers=1):
        [reader] = locks[using].lock_info("report:42")
        result = run("release", "report:42", "--using", using, "--yes")

    assert result.code == 0, result.err
    assert f"owner {reader.owner}, {thread_holder('reader-0')} (read), held for " in result.out
