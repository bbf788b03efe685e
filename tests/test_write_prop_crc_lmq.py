"""write as a 5.x broker with enabledAppendPropCRC (``--prop-crc``) and multi-dispatch
(``--multi-dispatch``), proven on the upstream-written store fixtures/reference/propcrc-lmq-batchcq."""
from __future__ import annotations

import base64
import json

from conftest import reference_store, run_cli

STORE = "propcrc-lmq-batchcq"
GEOMETRY = ["--commitlog-file-size", 98304, "--cq-file-size", 800, "--index-slots", 61, "--index-entries", 350]


def _rows_without_crc(tmp_path, keep=lambda row: True):
    r = run_cli("dump", "commitlog", reference_store(STORE), "-f", "jsonl")
    path = tmp_path / "rows.jsonl"
    with open(path, "w") as out:
        for row in map(json.loads, r.out.splitlines()):
            if row.get("kind") == "MESSAGE":
                raw = base64.b64decode(row["properties_raw"])
                assert raw[-20:-11] == b"__CRC32#\x01"
                row["properties_raw"] = base64.b64encode(raw[:-20]).decode()
            if keep(row):
                out.write(json.dumps(row) + "\n")
    return path


def test_prop_crc_is_computed_as_upstream_did(tmp_path):
    rows = _rows_without_crc(tmp_path)
    r = run_cli("write", tmp_path / "s", "--from", rows, "--prop-crc", *GEOMETRY)
    assert r.code == 0, r.err
    for name in ("00000000000000000000", "00000000000000098304"):
        assert (tmp_path / "s" / "commitlog" / name).read_bytes() == \
            (reference_store(STORE) / "commitlog" / name).read_bytes(), name


def test_synthetic_prop_crc_verifies_and_a_flipped_byte_is_found(tmp_path):
    store = tmp_path / "s"
    assert run_cli("write", store, "--synthetic", 300, "--prop-crc", *GEOMETRY).code == 0
    v = json.loads(run_cli("verify", store, "--level", "deep", "-f", "json").out)
    assert v["exit_code"] == 0, v["findings"][:3]
    rows = [json.loads(line) for line in run_cli("dump", "commitlog", store, "-f", "jsonl").out.splitlines()]
    msgs = [r for r in rows if r["kind"] == "MESSAGE"]
    assert len(msgs) == 300 and all("__CRC32#" in r["properties"] for r in msgs)
    victim = msgs[120]
    path = victim["file"]
    at = victim["position"] + 30                  # inside the fixed fields, covered by the property CRC
    data = bytearray(open(path, "rb").read())
    data[at] ^= 0x01
    open(path, "wb").write(bytes(data))
    found = [f for f in json.loads(run_cli("verify", store, "--level", "deep", "-f", "json").out)["findings"]
             if f["check"] == "commitlog.prop-crc"]
    assert [f["file"] for f in found] == [path]


def test_multi_dispatch_fills_the_light_queues(tmp_path):
    rows = _rows_without_crc(tmp_path, keep=lambda row: row.get("topic") != "BatchCqTopic")
    on, off = tmp_path / "on", tmp_path / "off"
    assert run_cli("write", on, "--from", rows, "--prop-crc", "--multi-dispatch", *GEOMETRY).code == 0
    assert run_cli("write", off, "--from", rows, "--prop-crc", *GEOMETRY).code == 0
    lmq = sorted(p.name for p in (on / "consumequeue").iterdir() if p.name.startswith("%LMQ%"))
    assert lmq == sorted(p.name for p in (reference_store(STORE) / "consumequeue").iterdir()
                         if p.name.startswith("%LMQ%"))
    assert not any(p.name.startswith("%LMQ%") for p in (off / "consumequeue").iterdir())
    v = json.loads(run_cli("verify", on, "--level", "deep", "-f", "json").out)
    assert v["exit_code"] == 0, v["findings"][:3]
    info = json.loads(run_cli("info", on, "-f", "json").out)[0]
    assert info["queue_kinds"]["multi_dispatch"] is True


from hypothesis import given, settings, strategies as st  # noqa: E402


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.text("abcXYZ_#", min_size=1, max_size=8), st.text(min_size=1, max_size=20), max_size=5),
       st.binary(max_size=64))
def test_reserved_crc_property_is_filled_and_replaced(props, body):
    """Any properties: the record ends in a __CRC32# property whose digits are the CRC of what
    precedes it, and writing the stored properties again replaces the property (not doubles it)."""
    import zlib
    from formats import commitlog as cl
    from rmqtool.records.encode import MessageFields, encode, fill_property_crc, reserve_property_crc
    raw_props = cl.encode_properties(props)
    f = MessageFields(topic="T", body=body, properties=reserve_property_crc(raw_props))
    rec = bytearray(encode(f))
    fill_property_crc(rec)
    n = cl.CRC32_RESERVED_LENGTH
    digits = rec[-n + len("__CRC32#") + 1:-1].decode()
    assert rec[-n:].startswith(b"__CRC32#\x01") and rec.endswith(b"\x02")
    assert digits == cl.crc32_property_digits(zlib.crc32(bytes(rec[:-n])) & cl.BODY_CRC_MASK)
    stored = f.properties[:-n] + bytes(rec[-n:])
    assert reserve_property_crc(stored) == f.properties


def _trees(root, subs=("commitlog", "consumequeue", "batchconsumequeue")):
    return {str(p.relative_to(root)): p.read_bytes() for sub in subs for p in (root / sub).rglob("*") if p.is_file()}


def test_dump_then_write_reproduces_the_whole_5x_store(tmp_path):
    """CommitLog (property CRCs), ConsumeQueues (light queues too), BatchConsumeQueues and IndexFiles of
    the upstream store, byte for byte, from its own dump (the CRC property stripped), in one write and
    in two (the second appending to the queues the first wrote)."""
    rows = _rows_without_crc(tmp_path)
    flags = ["--prop-crc", "--multi-dispatch", "--batch-cq-topic", "BatchCqTopic", "--bcq-file-size", 736, *GEOMETRY]
    one = tmp_path / "one"
    assert run_cli("write", one, "--from", rows, *flags).code == 0
    want = _trees(reference_store(STORE))
    assert _trees(one) == want
    index = lambda root: [p.read_bytes() for p in sorted((root / "index").iterdir())]  # noqa: E731
    assert index(one) == index(reference_store(STORE))
    lines = rows.read_text().splitlines()
    half = len(lines) // 2
    (tmp_path / "a.jsonl").write_text("\n".join(lines[:half]) + "\n")
    (tmp_path / "b.jsonl").write_text("\n".join(lines[half:]) + "\n")
    two = tmp_path / "two"
    assert run_cli("write", two, "--from", tmp_path / "a.jsonl", *flags).code == 0
    r = run_cli("write", two, "--from", tmp_path / "b.jsonl", "--prop-crc")     # kinds found in the store
    assert r.code == 0, r.err
    assert _trees(two) == want
