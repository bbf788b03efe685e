"""A rebuild whose CommitLog walk stops before the last data never shrinks the queues silently.

A corrupt record in a middle file (the upstream-written ``basic`` store, 3000 messages)
ends the broker's recovery walk. ``rebuild`` shows the stop, the counts before and after and
the restart forecast; it refuses with exit 3 unless ``--allow-truncate``; ``--skip-corrupt``
rebuilds past the damage with the resync, keeping every record it recovers.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from conftest import load_answers, run_cli
from formats.consumequeue import CQ_UNIT_DTYPE, PRE_BLANK_SIZE

FILE_SIZE = 98304
VICTIM = 1000                  # the message whose record is broken


def _tree(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def _store_dir_names(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir())


@pytest.fixture
def damaged(store_copy):
    """``basic`` with message VICTIM's magic overwritten (as `dd` would do it)."""
    root = store_copy("basic")
    victim = load_answers("basic")["messages"][VICTIM]
    seg = root / "commitlog" / f"{victim['phyOffset'] // FILE_SIZE * FILE_SIZE:020d}"
    with open(seg, "r+b") as fh:
        fh.seek(victim["phyOffset"] % FILE_SIZE + 4)
        fh.write(b"\xde\xad\xbe\xef")
    return root, victim, seg


def _units(root: Path) -> dict[tuple[str, int], np.ndarray]:
    out = {}
    for qdir in sorted((root / "consumequeue").glob("*/*")):
        raw = b"".join(p.read_bytes() for p in sorted(qdir.iterdir()))
        units = np.frombuffer(raw, CQ_UNIT_DTYPE)
        out[(qdir.parent.name, int(qdir.name))] = units[units["size"] > 0]
    return out


def test_rebuild_refuses_with_exit_3_and_changes_nothing(damaged):
    root, victim, seg = damaged
    before = {d: _tree(root / d) for d in ("consumequeue", "index")}
    names = _store_dir_names(root)
    for kind in ("consumequeue", "index", "all"):
        r = run_cli("rebuild", kind, root, "--yes")
        assert r.code == 3, (kind, r.out, r.err)
        err = [line for line in r.err.splitlines() if line.startswith("error:")]
        assert len(err) == 1 and f"{seg}@{victim['phyOffset'] % FILE_SIZE}" in err[0], r.err
        assert "--skip-corrupt" in err[0] and "--allow-truncate" in err[0]
        assert "internal error" not in r.err
    assert {d: _tree(root / d) for d in ("consumequeue", "index")} == before
    assert _store_dir_names(root) == names              # no build or backup left behind


def test_dry_run_shows_the_stop_and_the_counts(damaged):
    root, victim, seg = damaged
    r = run_cli("rebuild", "consumequeue", root, "--dry-run")
    assert r.code == 0, r.err
    assert f"{seg}@{victim['phyOffset'] % FILE_SIZE}" in r.out
    assert "units: 3000 now -> 1000 after the rebuild (-2000)" in r.out
    assert "truncates the CommitLog at" in r.out
    plan = json.loads(run_cli("rebuild", "all", root, "--dry-run", "-f", "json").out)
    cq, ix = plan
    assert cq["damage"][0]["offset"] == victim["phyOffset"] and cq["damage"][0]["check"] == "commitlog.magic"
    assert (cq["before"], cq["after"], cq["tail_records"]) == (3000, 1000, 1999)
    assert cq["restart"]["valid_end"] == victim["phyOffset"] and cq["restart"]["truncated_bytes"] > 0
    assert ix["before"] > ix["after"] > 0
    # a dry run changes nothing either
    assert not [n for n in os.listdir(root) if "rmqtool" in n or "backup" in n]


def test_selective_plan_counts_only_the_selected_queues(damaged):
    root, victim, _ = damaged
    msgs = load_answers("basic")["messages"]
    topic = victim["topic"]
    r = run_cli("rebuild", "consumequeue", root, "--topic", topic, "--dry-run", "-f", "json")
    assert r.code == 0, r.err
    plan = json.loads(r.out)[0]
    assert plan["before"] == sum(1 for m in msgs if m["topic"] == topic)
    assert plan["after"] == sum(1 for m in msgs[:VICTIM] if m["topic"] == topic)


def test_allow_truncate_rebuilds_what_the_broker_would(damaged):
    root, victim, _ = damaged
    r = run_cli("rebuild", "consumequeue", root, "--yes", "--allow-truncate", "-f", "json")
    assert r.code == 0, r.err
    got = json.loads(r.out)[0]
    assert (got["range_end"], got["end_kind"], got["units"]) == (victim["phyOffset"], "corrupt", 1000)
    assert sum(len(u) for u in _units(root).values()) == 1000


def test_skip_corrupt_keeps_every_recovered_record(damaged):
    root, victim, seg = damaged
    r = run_cli("rebuild", "all", root, "--yes", "--skip-corrupt", "-f", "json")
    assert r.code == 0, r.err
    cq, ix = json.loads(r.out)
    assert cq["skipped"] and cq["damage"][0]["offset"] == victim["phyOffset"]
    resumed = cq["damage"][0]["resumed_at"]
    assert resumed == victim["phyOffset"] + victim["size"]
    assert cq["units"] == 2999 and cq["restart"]["truncated_bytes"] == 0
    # every message but the victim sits at its own queue offset; the victim's slot is a filler
    units = _units(root)
    for m in load_answers("basic")["messages"]:
        q = units[(m["topic"], m["queueId"])]
        unit = q[m["queueOffset"]]
        if m is victim or m["phyOffset"] == victim["phyOffset"]:
            assert int(unit["size"]) == PRE_BLANK_SIZE
        else:
            assert (int(unit["commitlog_offset"]), int(unit["size"])) == (m["phyOffset"], m["size"])
    # verify names only the skipped range (its walk stop, the carved records after it, the filler)
    rep = json.loads(run_cli("verify", root, "--level", "deep", "-f", "json").out)
    errors = [f for f in rep["findings"] if f["severity"] == "error"]
    assert [(f["check"], f["file"], f["offset"]) for f in errors] == \
        [("commitlog.magic", str(seg), victim["phyOffset"] % FILE_SIZE)]
    warnings = {f["check"] for f in rep["findings"] if f["severity"] == "warning"}
    assert warnings <= {"commitlog.carved", "cq.filler"}, rep["findings"]


def test_table_plan_of_skip_corrupt_lists_the_skipped_range(damaged):
    root, victim, _ = damaged
    r = run_cli("rebuild", "index", root, "--yes", "--skip-corrupt")
    assert r.code == 0, r.err
    assert f"[{victim['phyOffset']}, {victim['phyOffset'] + victim['size']})" in r.out


@pytest.mark.parametrize("how", ["empty-file", "zeroed-range"])
def test_zeros_before_later_data_are_an_early_stop(store_copy, how):
    """A 0-byte middle file, or zeros over a record with data after them, end the walk early."""
    root = store_copy("basic")
    files = sorted((root / "commitlog").iterdir())
    mid = files[len(files) // 2]
    if how == "empty-file":
        os.truncate(mid, 0)
    else:
        with open(mid, "r+b") as fh:
            fh.seek(0)
            fh.write(bytes(4096))
    before = _tree(root / "consumequeue")
    r = run_cli("rebuild", "all", root, "--yes")
    assert r.code == 3, (r.out, r.err)
    assert "early-end" in r.err and _tree(root / "consumequeue") == before
    r = run_cli("rebuild", "consumequeue", root, "--yes", "--skip-corrupt", "-f", "json")
    assert r.code == 0, r.err
    got = json.loads(r.out)[0]
    assert got["skipped"] and got["units"] > 2900


def test_clean_store_has_no_damage_and_reports_the_whole_run(store_copy):
    root = store_copy("mixed")
    r = run_cli("rebuild", "all", root, "--yes", "-f", "json")
    assert r.code == 0, r.err
    cq, ix = json.loads(r.out)
    assert cq["damage"] == [] and cq["before"] is None
    assert cq["seconds"] == ix["seconds"] > 0              # both name the whole run
    assert cq["messages_per_second"] == round(cq["records"] / cq["seconds"])


@pytest.mark.parametrize("data_at", [0, 1, 4095, 4096, 70_000, (64 << 20) + 5])
def test_first_nonzero_skips_holes_like_reading_them(tmp_path, data_at):
    """The SEEK_DATA fast path of first_nonzero gives what reading every zero gives."""
    from rmqtool.io.fileio import first_nonzero
    path = tmp_path / "sparse"
    with open(path, "wb") as fh:
        fh.truncate(data_at + (1 << 20))
        fh.seek(data_at)
        fh.write(b"\x00\x00\x07")
    want = data_at + 2
    assert first_nonzero(path, 0) == want
    assert first_nonzero(path, want) == want
    assert first_nonzero(path, want + 1) is None
    assert first_nonzero(path, 0, want) is None


def test_skip_corrupt_through_engine_tasks_equals_the_local_walk(damaged, tmp_path):
    """The walk past damage works with any walker: engine tasks (the Spark path) give the same bytes."""
    from rmqtool.ops.rebuild import rebuild_consumequeue
    from rmqtool.io.store import Store
    from test_engines import task_engine
    root, victim, _ = damaged
    want = rebuild_consumequeue(Store(root), output=tmp_path / "want", skip_corrupt=True, workers=1)
    with task_engine(2) as eng:
        got = rebuild_consumequeue(Store(root), output=tmp_path / "got", skip_corrupt=True, engine=eng,
                                   split_size=20_000)
    assert (got.records, got.units, got.damage) == (want.records, want.units, want.damage)
    assert _tree(tmp_path / "got") == _tree(tmp_path / "want")
