"""A pytest plugin: how the suite shares out its tests among pytest-xdist's workers.

Each module's tests run on one worker (an xdist group per module, ``--dist loadgroup``), so a
module's costly fixtures (a Celery worker, a Cluster, the demo's run) start once, as they do
without xdist. A module may name its group itself (``pytest.mark.xdist_group``): the modules
that run many processes at once share one, and run one after another. The workers write each
test's group to a file that the controller's scheduler reads.

A test marked ``serial`` bounds how long something took (a handoff, a failover, a dead
holder's lease) closely enough that a machine busy with other tests could break the bound: it
runs while no other test runs. Each worker takes a lock file shared around every test it runs;
a serial test takes it exclusive, so it starts once the tests running elsewhere have ended,
and the others wait for it. The serial tests form one group, collected first: one worker runs
them back to back at the start, holding the exclusive lock from the first to the last. A
second lock file keeps a stream of shared takers from starving the exclusive one.

Without xdist, or with ``-n 0``, nothing is grouped, reordered or locked.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pytest

#: The key of the lock files' directory in the input the controller gives each xdist worker.
_DIRECTORY = "serial_lock_directory"


def is_serial(item: pytest.Item | None) -> bool:
    return item is not None and item.get_closest_marker("serial") is not None


def group_of(item: pytest.Item) -> str:
    """Return the group of ``item``: "serial", the name its module gave, or its module's path."""
    if is_serial(item):
        return "serial"
    names = sorted({str(mark.args[0]) for mark in item.iter_markers("xdist_group") if mark.args})
    return "_".join(names) or item.nodeid.split("::")[0].split("@")[0]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under xdist, collect the serial tests first, so their group is handed out first."""
    if getattr(config, "workerinput", None) is not None:
        items.sort(key=lambda item: not is_serial(item))  # stable: the order is kept otherwise


@pytest.hookimpl(tryfirst=True)  # before the worker sends its collection to the controller
def pytest_collection_finish(session: pytest.Session) -> None:
    """Write each test's group where the controller's scheduler reads it."""
    workerinput: dict[str, Any] | None = getattr(session.config, "workerinput", None)
    if workerinput is None or _DIRECTORY not in workerinput:
        return
    groups = {item.nodeid: group_of(item) for item in session.items}
    directory = Path(workerinput[_DIRECTORY])
    written = directory / f"groups-{os.getpid()}.json"
    written.write_text(json.dumps(groups))
    written.replace(directory / "groups.json")  # every worker writes the same: the last stays


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Share out the tests by group (``--dist loadgroup``), as the workers wrote them down.

    pytest-xdist's own loadgroup puts a group in the test ids it reads, in a way pytest 9.2
    no longer honours (each test then goes its own way): the groups are read from a file here.
    """
    directory = config.stash.get(_directory_key, None)
    if directory is None or config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):
        groups: dict[str, str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self.groups is None:
                self.groups = json.loads(Path(directory, "groups.json").read_text())
            return self.groups.get(nodeid, nodeid)

    return GroupScheduling(config, log)


class _Locks:
    """The two lock files of one run, opened by one process."""

    def __init__(self, directory: Path) -> None:
        self.gate: IO[bytes] = open(directory / "gate", "ab")  # noqa: SIM115
        self.tests: IO[bytes] = open(directory / "tests", "ab")  # noqa: SIM115
        self.exclusive = False

    @contextlib.contextmanager
    def shared(self) -> Iterator[None]:
        fcntl.flock(self.gate, fcntl.LOCK_SH)
        fcntl.flock(self.tests, fcntl.LOCK_SH)
        fcntl.flock(self.gate, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(self.tests, fcntl.LOCK_UN)

    def take_exclusive(self) -> None:
        if not self.exclusive:
            fcntl.flock(self.gate, fcntl.LOCK_EX)  # no test starts from now on...
            fcntl.flock(self.tests, fcntl.LOCK_EX)  # ...and the running ones have ended
            self.exclusive = True

    def give_back(self) -> None:
        if self.exclusive:
            fcntl.flock(self.tests, fcntl.LOCK_UN)
            fcntl.flock(self.gate, fcntl.LOCK_UN)
            self.exclusive = False

    def close(self) -> None:
        self.give_back()
        self.gate.close()
        self.tests.close()


_locks: _Locks | None = None
_directory_key = pytest.StashKey[str]()


def pytest_configure(config: pytest.Config) -> None:
    global _locks  # noqa: PLW0603  (one pair of lock files per process)
    workerinput: dict[str, Any] | None = getattr(config, "workerinput", None)
    if workerinput is not None and _DIRECTORY in workerinput:
        _locks = _Locks(Path(workerinput[_DIRECTORY]))
    elif workerinput is None and config.pluginmanager.hasplugin("xdist"):
        config.stash[_directory_key] = tempfile.mkdtemp(prefix="drl-serial-")


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """Tell each xdist worker where the lock files are (the controller made the directory)."""
    directory = node.config.stash.get(_directory_key, None)
    if directory is not None:
        node.workerinput[_DIRECTORY] = directory


def pytest_unconfigure(config: pytest.Config) -> None:
    global _locks  # noqa: PLW0603
    if _locks is not None:
        _locks.close()
        _locks = None
    directory = config.stash.get(_directory_key, None)
    if directory is not None:
        shutil.rmtree(directory, ignore_errors=True)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[Any]:
    """Run a serial test alone, and every other test beside the others only."""
    if _locks is None:
        return (yield)
    if not is_serial(item):
        with _locks.shared():
            return (yield)
    _locks.take_exclusive()
    try:
        return (yield)
    finally:
        if not is_serial(nextitem):
            _locks.give_back()
