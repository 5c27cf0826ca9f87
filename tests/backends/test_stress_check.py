"""The stress run's checker: an overlap nobody was told of is found, and only the one fault
that nobody can report (a holder ran past the lease it was told of and died) is excused."""

from __future__ import annotations

from pathlib import Path

from tests.support import stress

MS = 1_000_000


def write(directory: Path, name: str, *lines: str) -> None:
    (directory / name).write_text("".join(f"{line}\n" for line in lines))


def test_check__an_overlap_nobody_was_told_of_is_unexplained(tmp_path: Path) -> None:
    write(tmp_path, "chaos.log")
    write(tmp_path, "worker-0.log", "pid 10", f"enter 1 {0 * MS} -", f"leave 1 {100 * MS}")
    write(tmp_path, "worker-1.log", "pid 11", f"enter 2 {50 * MS} -", f"leave 2 {150 * MS}")
    report = stress.check(tmp_path, 2, 1.0)
    assert report.overlaps == 1
    assert len(report.unexplained) == 1
    assert "tokens 1 (pid 10) and 2 (pid 11) ran at once" in report.unexplained[0]
    assert "+50.0ms" in report.unexplained[0]  # the timeline of the two sections


def test_check__a_reported_loss_explains_an_overlap(tmp_path: Path) -> None:
    write(tmp_path, "chaos.log")
    write(
        tmp_path,
        "worker-0.log",
        "pid 10",
        "enter 1 0 -",
        f"lost 1 {90 * MS}",
        f"leave 1 {100 * MS}",
    )
    write(tmp_path, "worker-1.log", "pid 11", f"enter 2 {50 * MS} -", f"leave 2 {150 * MS}")
    report = stress.check(tmp_path, 2, 1.0)
    assert (report.overlaps, report.unexplained) == (1, [])


def test_check__a_holder_killed_after_the_lease_it_was_told_of_is_excused(tmp_path: Path) -> None:
    # Holder 1 was told its lease ends at 300 ms; holder 2 came in after that; holder 1 died
    # at 400 ms before its exit could find the lease gone.
    write(tmp_path, "chaos.log", f"kill 10 {400 * MS}")
    write(tmp_path, "worker-0.log", "pid 10", f"enter 1 0 {300 * MS}")
    write(tmp_path, "worker-1.log", "pid 11", f"enter 2 {301 * MS} -", f"leave 2 {500 * MS}")
    report = stress.check(tmp_path, 2, 1.0)
    assert (report.overlaps, report.outlived, report.unexplained) == (1, 1, [])


def test_check__entering_before_the_lease_the_holder_was_told_of_is_unexplained(
    tmp_path: Path,
) -> None:
    write(tmp_path, "chaos.log", f"kill 10 {400 * MS}")
    write(tmp_path, "worker-0.log", "pid 10", f"enter 1 0 {300 * MS}")
    write(tmp_path, "worker-1.log", "pid 11", f"enter 2 {299 * MS} -", f"leave 2 {500 * MS}")
    report = stress.check(tmp_path, 2, 1.0)
    assert report.outlived == 0
    assert len(report.unexplained) == 1


def test_check__a_nested_acquire_moves_the_lease_end(tmp_path: Path) -> None:
    # The nested acquire at 250 ms took a lease to 550 ms: entering at 301 ms is an overlap.
    write(tmp_path, "chaos.log", f"kill 10 {400 * MS}")
    write(
        tmp_path,
        "worker-0.log",
        "pid 10",
        f"enter 1 0 {300 * MS}",
        f"lease 1 {550 * MS}",
    )
    write(tmp_path, "worker-1.log", "pid 11", f"enter 2 {301 * MS} -", f"leave 2 {500 * MS}")
    report = stress.check(tmp_path, 2, 1.0)
    assert len(report.unexplained) == 1
