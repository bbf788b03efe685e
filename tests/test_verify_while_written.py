"""verify while the store is written: a broker appending in place, and `write` swapping the root.

Both are staged deterministically from verify's progress callback, which runs after each
CommitLog file has been walked, i.e. between reading the CommitLog and reading the rest.
"""
from __future__ import annotations

import shutil
from pathlib import Path

from rmqtool.io.store import Store
from rmqtool.ops.verify import VerifyOptions, verify
from rmqtool.ops.verify.runner import READ_ATTEMPTS
from rmqtool.ops.writer import Geometry, write_rows

GEOMETRY = Geometry(commitlog_file_size=1 << 16, cq_file_size=800, hash_slots=61, index_entries=350)
T0 = 1_790_000_000_000


def rows(start: int, count: int):
    return [(f"row {i}", {"topic": f"Live{i % 2}", "body": f"message {i}", "queue_id": i % 3,
                          "store_timestamp": T0 + 1000 * i, "properties": {"KEYS": f"k-{i}"}})
            for i in range(start, start + count)]


def errors(report) -> list:
    return [(f.check, f.file, f.offset, f.message) for f in report.findings if f.severity == "error"]


def test_broker_appending_in_place_never_shows_the_checkpoint_ahead(tmp_path):
    """The data grows in place after the CommitLog was walked, the checkpoint with it: the
    checkpoint (read first) is never later than the data read after it."""
    before, after = tmp_path / "before", tmp_path / "after"
    write_rows(before, rows(0, 10), GEOMETRY)
    shutil.copytree(before, after)
    write_rows(after, rows(10, 10), GEOMETRY)
    grown = [p.relative_to(after) for p in after.rglob("*") if p.is_file()]
    assert all((before / rel).is_file() for rel in grown if rel.parts[0] != "lock")  # all grow in place

    def broker_flushes(_nbytes):
        for rel in grown:
            with open(before / rel, "r+b") as fh:       # same inode: how a broker writes
                fh.write((after / rel).read_bytes())

    report = verify(Store(before), VerifyOptions(), progress=_once(broker_flushes))
    assert errors(report) == []
    assert report.summary["commitlog"]["records"] == 10          # walked before the flush
    assert report.summary["reread_after_replace"] == 0


def test_root_swapped_by_write_mid_run_is_read_again(tmp_path):
    root = tmp_path / "store"
    write_rows(root, rows(0, 12), GEOMETRY)
    first = Store(root).identity()
    report = verify(Store(root), VerifyOptions(level="deep"),
                    progress=_once(lambda _n: write_rows(root, rows(12, 12), GEOMETRY)))
    assert Store(root).identity() != first
    assert report.summary["reread_after_replace"] == 1
    assert report.summary["commitlog"]["records"] == 24
    assert errors(report) == [] and report.exit_code() == 0
    assert not [f for f in report.findings if f.check == "commitlog.replaced"]


def test_root_swapped_during_every_run_is_reported(tmp_path):
    root = tmp_path / "store"
    write_rows(root, rows(0, 6), GEOMETRY)
    written = [6]

    def keep_writing(_nbytes):
        write_rows(root, rows(written[0], 6), GEOMETRY)
        written[0] += 6

    report = verify(Store(root), VerifyOptions(), progress=keep_writing)
    assert report.summary["reread_after_replace"] == READ_ATTEMPTS - 1
    replaced = [f for f in report.findings if f.check == "commitlog.replaced"]
    assert len(replaced) == 1 and replaced[0].severity == "warning" and Path(replaced[0].file) == root
    assert report.summary["checks"]["commitlog.replaced:warning"] == 1
    assert report.summary["findings"]["warning"] >= 1


def _once(action):
    """A progress callback that runs ``action`` on its first call only."""
    done = []

    def progress(nbytes):
        if not done:
            done.append(True)
            action(nbytes)
    return progress
