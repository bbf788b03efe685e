"""`compare` finds a planted divergence between two replicas at the exact entry and offset,
reports identical replicas as identical, and says which log a new DLedger leader keeps."""
from __future__ import annotations

import gzip
import json
import shutil
import struct

from conftest import REFERENCE, dledger_copy, reference_store, run_cli
from formats import dledger as dl

SIZE = 98304      # the reference stores' data / commitlog file size


def _entries() -> list[dict]:
    with gzip.open(REFERENCE / "answers" / "dledger.json.gz", "rt") as fh:
        return json.load(fh)["dledger"]["entries"]


def _set_term(root, entry: dict, term: int) -> None:
    base = entry["pos"] // SIZE * SIZE
    with open(root / "dledger-n0" / "data" / f"{base:020d}", "r+b") as fh:
        fh.seek(entry["pos"] - base + dl.ENTRY_HEADER_OFFSETS["term"])
        fh.write(struct.pack(">q", term))


def _compare(a, b):
    r = run_cli("compare", a, b, "-f", "json")
    return r.code, json.loads(r.out)[0]


def test_identical_members(tmp_path):
    code, c = _compare(dledger_copy(tmp_path / "a"), dledger_copy(tmp_path / "b"))
    assert (code, c["status"], c["agreed"], c["keeps"]) == (0, "identical", 400, "either")


def test_a_new_term_from_one_entry_on(tmp_path):
    """b's log was rewritten by a leader of term 1 from entry 300 on: they agree on 0-299, and a
    new leader comes from b (its last entry has the higher term); a truncates 100 entries."""
    a, b = dledger_copy(tmp_path / "a"), dledger_copy(tmp_path / "b")
    entries = _entries()
    for e in entries[300:]:
        _set_term(b, e, 1)
    code, c = _compare(a, b)
    assert code == 1 and c["status"] == "diverged" and c["differs_by"] == ["term"]
    assert c["agreed"] == 300 and c["agreed_index"] == 299
    assert c["a"]["first_past"]["index"] == 300 and c["a"]["first_past"]["phy_offset"] == entries[300]["messagePhyOffset"]
    assert (c["keeps"], c["a"]["past"], c["b"]["last_term"]) == ("b", 100, 1)
    assert "truncates its 100 entries after index 299" in c["reason"]


def test_a_member_that_is_behind(tmp_path):
    """b lost its last 50 entries (zeros from entry 350's position): a prefix of a; a keeps."""
    a, b = dledger_copy(tmp_path / "a"), dledger_copy(tmp_path / "b")
    e = _entries()[350]
    base = e["pos"] // SIZE * SIZE
    path = b / "dledger-n0" / "data" / f"{base:020d}"
    with open(path, "r+b") as fh:
        fh.seek(e["pos"] - base)
        fh.write(bytes(SIZE - (e["pos"] - base)))
    code, c = _compare(a, b)
    assert code == 1 and c["status"] == "prefix" and c["agreed"] == 350
    assert (c["a"]["past"], c["b"]["past"], c["keeps"]) == (50, 0, "a")


def test_classic_master_and_slave(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    shutil.copytree(reference_store("basic"), a)
    shutil.copytree(reference_store("basic"), b)
    assert _compare(a, b)[0] == 0
    answers = json.loads(gzip.open(REFERENCE / "answers" / "basic.json.gz", "rt").read())
    m = answers["messages"][1234]
    path = b / "commitlog" / f"{m['phyOffset'] // SIZE * SIZE:020d}"
    with open(path, "r+b") as fh:             # one byte of the body (the walk does not check CRCs here)
        fh.seek(m["phyOffset"] % SIZE + m["size"] - 1)
        last = fh.read(1)
        fh.seek(-1, 1)
        fh.write(bytes([last[0] ^ 0xFF]))
    code, c = _compare(a, b)
    assert code == 1 and c["status"] == "diverged" and c["differs_by"] == ["crc"] and c["agreed"] == 1234
    assert c["a"]["first_past"]["phy_offset"] == m["phyOffset"] and c["keeps"] is None


def test_mixed_kinds_are_refused(tmp_path):
    r = run_cli("compare", reference_store("basic"), dledger_copy(tmp_path / "d"))
    assert r.code == 2 and "DLedger-mode" in r.err
