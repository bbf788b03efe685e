"""The DLedger layouts against the upstream-written store, field by field: the declarations
(round trips, dtype = construct), `dump dledger-entries|dledger-index` and `info`'s DLedger view."""
from __future__ import annotations

import gzip
import json

import numpy as np
from hypothesis import given, strategies as st

from conftest import REFERENCE, dledger_store, reference_store, run_cli
from formats import dledger as dl

FIELDS = {"index": "index", "term": "term", "pos": "pos", "size": "size", "magic": "magic", "channel": "channel",
          "chain_crc": "chainCrc", "body_crc": "bodyCrc", "body_length": "bodyLength",
          "message_phy_offset": "messagePhyOffset"}


def _answers() -> dict:
    with gzip.open(REFERENCE / "answers" / "dledger.json.gz", "rt") as fh:
        return json.load(fh)


@given(st.integers(-(1 << 31), (1 << 31) - 1), st.integers(0, (1 << 31) - 1), st.integers(0, (1 << 63) - 1),
       st.integers(0, (1 << 63) - 1), st.integers(0, (1 << 63) - 1))
def test_declarations_round_trip_and_match_their_dtypes(magic, size, index, term, pos):
    head = dict(magic=magic, size=size, index=index, term=term, pos=pos, channel=size, chain_crc=magic,
                body_crc=-magic - 1, body_length=size)
    raw = dl.EntryHeader.build(head)
    assert len(raw) == dl.ENTRY_HEADER_SIZE == dl.ENTRY_BODY_OFFSET
    assert {k: v for k, v in dl.EntryHeader.parse(raw).items() if not k.startswith("_")} == head
    assert {k: int(np.frombuffer(raw, dl.ENTRY_HEADER_DTYPE)[0][k]) for k in head} == head
    unit = dict(magic=magic, pos=pos, size=size, index=index, term=term)
    raw = dl.IndexUnit.build(unit)
    assert len(raw) == dl.INDEX_UNIT_SIZE
    assert {k: v for k, v in dl.IndexUnit.parse(raw).items() if not k.startswith("_")} == unit
    assert {k: int(np.frombuffer(raw, dl.INDEX_UNIT_DTYPE)[0][k]) for k in unit} == unit


def test_every_entry_is_upstreams():
    r = run_cli("dump", "dledger-entries", dledger_store(), "-f", "jsonl")
    assert r.code == 0, r.err
    rows = [x for x in r.jsonl() if "index" in x]
    want = _answers()["dledger"]["entries"]
    assert len(rows) == len(want) == 400
    for got, e in zip(rows, want):
        assert {ours: got[ours] for ours in FIELDS} == {ours: e[theirs] for ours, theirs in FIELDS.items()}
    messages = {m["phyOffset"]: m for m in _answers()["messages"]}
    assert all(messages[x["message_phy_offset"]]["topic"] == x["topic"] for x in rows)
    ends = [x for x in r.jsonl() if "index" not in x]
    assert [x["kind"] for x in ends] == ["BLANK", "BLANK", "END"]


def test_the_entry_index_matches_the_entries():
    r = run_cli("dump", "dledger-index", dledger_store(), "-f", "jsonl")
    units = r.jsonl()
    want = _answers()["dledger"]["entries"]
    assert [(u["unit"], u["magic"], u["pos"], u["size"], u["index"], u["term"]) for u in units] == [
        (e["index"], 1, e["pos"], e["size"], e["index"], e["term"]) for e in want]


def test_info_shows_the_member_view():
    r = run_cli("info", dledger_store(), "-f", "json")
    d = json.loads(r.out)
    d = (d[0] if isinstance(d, list) else d)["dledger"]
    a = _answers()["dledger"]
    assert (d["self_id"], d["first_index"], d["last_index"], d["terms"]) == ("n0", a["ledgerBeginIndex"],
                                                                            a["ledgerEndIndex"], [a["ledgerEndTerm"]])
    assert d["checkpoint"] == {"committedIndex": str(a["committedIndex"]), "endIndex": str(a["ledgerEndIndex"])}
    assert d["data_end"]["offset"] == a["writePos"] and d["index_units"] == 400
    table = run_cli("info", dledger_store())
    assert "dledger member n0: entries 0 - 399" in table.err      # the text: stderr when piped


def test_dumps_refuse_a_classic_store():
    r = run_cli("dump", "dledger-entries", reference_store("basic"))
    assert r.code == 2 and "not a DLedger-mode store" in r.err
