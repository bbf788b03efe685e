"""Short fuzz run for CI: every parser entry point, seeded byte mutations and hypothesis structures.

The property everywhere: a parser returns (possibly with findings) or raises ``RmqError``;
never another exception, never a hang, never an allocation the size of a corrupt length
field. The long campaign is ``python bench/fuzz.py --per-parser 1000000``.
"""
from __future__ import annotations

import os
import re
import struct
import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from formats import commitlog as cl
from formats import indexfile as ix
from fuzz import harness, seeds as sd, strategies as fst
from fuzz.targets import TARGETS, Target, run_commitlog, run_consumequeue, run_index
from rmqtool.output.schema import record_to_dict
from native_calls import CoreCalls

ROOT = Path(__file__).resolve().parent.parent
MASTER = int(os.environ.get("RMQ_FUZZ_SEED", "20261121"))
CI_INPUTS = {"commitlog": 600, "native": 600, "dispatch": 400, "dledger": 600, "timer": 600, "kinds": 1500, "consumequeue": 600, "index": 600, "checkpoint": 1500, "properties": 1500,
             "jsonl": 600, "simplified-commitlog": 200, "simplified-consumequeue": 250, "simplified-index": 250,
             "simplified-jsonl": 800}
HYP = settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
INT32_MAX = (1 << 31) - 1


@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    return tmp_path_factory.mktemp("fuzz")


def _assert_clean(counts):
    assert not counts.failures, "\n".join(f.line() for f in counts.failures)


#: the C functions a target's CI run must reach where the native core is in use (each compares them
#: with numpy or the scalar loop: a run that compared numpy with numpy, or returned early, proves
#: nothing). ``native`` needs the core: skipped without it, a failure under RMQTOOL_REQUIRE_NATIVE=1.
NATIVE_CALLS = {"native": {"crc32_spans", "java_hash_spans", "message_run", "entry_run", "index_entries",
                           "scan_records", "span_groups", "index_keys"},
                "dispatch": {"dispatch_columns", "scan_records"},
                "dledger": {"entry_run", "scan_records"}, "properties": {"split_properties", "split_tokens"}}


@pytest.mark.parametrize("target", sorted(CI_INPUTS))
def test_seeded_mutations(target, scratch, request):
    from rmqtool.kernels import native
    calls, wanted = CoreCalls(), set()
    required = os.environ.get("RMQTOOL_REQUIRE_NATIVE") == "1"
    if target in NATIVE_CALLS and (target in ("native", "dispatch") or native.core is not None or required):
        calls.install(request.getfixturevalue("native_core"))
        wanted = NATIVE_CALLS[target]
    try:
        counts = harness.campaign(target, MASTER, 0, CI_INPUTS[target], scratch)
    finally:
        calls.uninstall()
    _assert_clean(counts)
    assert counts.inputs == CI_INPUTS[target]
    missing = wanted - set(calls.counts)
    assert not missing, f"{target}: the native core's {sorted(missing)} never ran ({dict(calls.counts)})"


def test_every_parser_has_a_ci_run():
    assert set(CI_INPUTS) == set(TARGETS)


# --- the harness itself catches what it must ----------------------------------------------------
def test_harness_flags_exceptions_and_hangs(scratch, monkeypatch):
    def crashes(data, seed, path):
        raise ValueError("boom")

    def hangs(data, seed, path):
        while True:
            pass
    seeds = sd.checkpoint_seeds
    monkeypatch.setitem(TARGETS, "crash", Target("crash", seeds, crashes))
    monkeypatch.setitem(TARGETS, "hang", Target("hang", seeds, hangs))
    crash = harness.campaign("crash", 1, 0, 3, scratch)
    assert [f.kind for f in crash.failures] == ["ValueError"] * 3
    hang = harness.campaign("hang", 1, 0, 1, scratch, timeout=0.3)
    assert [f.kind for f in hang.failures] == ["hang"]


def test_replay_is_deterministic():
    a = harness.make_input("commitlog", 5, 17)[1]
    b = harness.make_input("commitlog", 5, 17)[1]
    assert a == b and a != harness.make_input("commitlog", 5, 18)[1]


# --- structured (hypothesis) ---------------------------------------------------------------------
def _run(target, data, scratch, seed=None):
    status, kind, msg = harness.run_input(target, seed or sd.Seed(b""), data, scratch, 20.0)
    assert status != "fail", f"{kind}: {msg}"
    return status


@HYP
@given(data=fst.commitlog_file())
def test_structured_commitlog(data, scratch):
    _run("commitlog", data, scratch)


@HYP
@given(data=fst.consumequeue_units())
def test_structured_consumequeue(data, scratch):
    _run("consumequeue", data, scratch)


@HYP
@given(data=fst.index_file(sd.REF_INDEX_SLOTS, sd.REF_INDEX_ENTRIES))
def test_structured_index(data, scratch):
    _run("index", data, scratch)


@HYP
@given(data=fst.checkpoint_file())
def test_structured_checkpoint(data, scratch):
    _run("checkpoint", data, scratch)


@HYP
@given(data=st.binary(max_size=300))
def test_structured_properties(data, scratch):
    _run("properties", data, scratch)


@HYP
@given(data=fst.simplified_commitlog())
def test_structured_simplified_commitlog(data, scratch):
    _run("simplified-commitlog", data, scratch)


@HYP
@given(data=fst.simplified_consumequeue())
def test_structured_simplified_consumequeue(data, scratch):
    _run("simplified-consumequeue", data, scratch)


@HYP
@given(data=fst.simplified_index())
def test_structured_simplified_index(data, scratch):
    _run("simplified-index", data, scratch)


_SAFE_TEXT = st.text(st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)),
                     min_size=1, max_size=20)


@HYP
@given(props=st.dictionaries(_SAFE_TEXT, _SAFE_TEXT, max_size=6))
def test_properties_round_trip(props):
    assert cl.decode_properties(cl.encode_properties(props)) == props


# --- absurd sizes never become allocations --------------------------------------------------------
def _peak_bytes(fn) -> int:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _absurd_commitlog(field: str) -> bytes:
    img = bytearray(sd.commitlog_image([dict(topic=b"T", body=b"abc", props=sd.props(KEYS="k"))] * 3, 4096))
    second = cl.message_length(cl.MESSAGE_MAGIC_V1, 0, 3, 1, len(sd.props(KEYS="k")))
    if field == "total":
        struct.pack_into(">i", img, second, INT32_MAX)
    elif field == "body":
        struct.pack_into(">i", img, second + cl.tail_position(0) + cl.MESSAGE_TAIL_OFFSETS["body_length"], INT32_MAX)
    else:
        struct.pack_into(">i", img, 0, INT32_MAX)
        struct.pack_into(">i", img, cl.tail_position(0) + cl.MESSAGE_TAIL_OFFSETS["body_length"], INT32_MAX)
    return bytes(img)


@pytest.mark.parametrize("field", ["total", "body", "both"])
def test_absurd_commitlog_lengths_do_not_allocate(field, scratch):
    data = _absurd_commitlog(field)
    peak = _peak_bytes(lambda: run_commitlog(data, sd.Seed(b""), scratch))
    assert peak < 16 << 20, f"peak {peak} bytes for a 4 KB file claiming 2^31-1"


def test_absurd_index_counts_do_not_allocate(scratch):
    data = bytearray(sd.index_seeds()[0].data)
    struct.pack_into(">i", data, ix.INDEX_HEADER_OFFSETS["index_count"], INT32_MAX)
    struct.pack_into(">i", data, ix.INDEX_HEADER_OFFSETS["hash_slot_count"], INT32_MAX)
    for e in range(1, 40):
        struct.pack_into(">i", data, ix.entry_position(sd.REF_INDEX_SLOTS, e) + 16, INT32_MAX)
    peak = _peak_bytes(lambda: run_index(bytes(data), sd.Seed(b""), scratch))
    assert peak < 16 << 20


def test_absurd_consumequeue_sizes_do_not_allocate(scratch):
    from formats.consumequeue import ConsumeQueueUnit
    data = b"".join(ConsumeQueueUnit.build(dict(commitlog_offset=(1 << 63) - 1, size=INT32_MAX,
                                                tags_code=-(1 << 63))) for _ in range(40))
    peak = _peak_bytes(lambda: run_consumequeue(data, sd.Seed(b""), scratch))
    assert peak < 16 << 20


LONG_MAX = (1 << 63) - 1


@pytest.mark.parametrize("field", ["total", "body", "both", "index"])
def test_absurd_simplified_lengths_do_not_allocate(field, scratch):
    """msgTotalLen / bodySize of 2^63-1 in commitLog.txt, indexCount 2^31-1 in index.txt: checked
    against the bytes that exist, never allocated (every simplified entry point runs)."""
    from formats import simplified as sf
    from fuzz.targets import run_simplified_commitlog, run_simplified_index
    seed = sd.simplified_commitlog_seeds()[0]            # the article's example, its 409,600-byte files
    if field == "index":       # a 40-entry file: rows for the entries it holds are the target's, not the claim's
        seed = sd.simplified_index_seeds()[1]
        data = bytearray(seed.data)
        struct.pack_into(">i", data, sf.INDEX_HEADER_OFFSETS["index_count"], INT32_MAX)
        struct.pack_into(">i", data, sf.INDEX_HEADER_OFFSETS["hash_slot_count"], INT32_MAX)
        run = run_simplified_index
    else:
        data = bytearray(seed.data)
        second = 338
        if field in ("total", "both"):
            struct.pack_into(">q", data, second, LONG_MAX)
        if field in ("body", "both"):
            struct.pack_into(">q", data, second + sf.RECORD_HEAD_OFFSETS["body_size"], LONG_MAX)
        run = run_simplified_commitlog
    run(bytes(data), seed, scratch)                      # warm: imports and caches are not the input's
    peak = _peak_bytes(lambda: run(bytes(data), seed, scratch))
    assert peak < 16 << 20, f"peak {peak} bytes for a {len(data)}-byte file claiming 2^63-1 (2^31-1)"


def test_pread_of_absurd_length_allocates_only_the_file(tmp_path):
    from rmqtool.io.fileio import ReadOnlyFile
    p = tmp_path / "f"
    p.write_bytes(b"x" * 100)
    with ReadOnlyFile(p) as fh:
        peak = _peak_bytes(lambda: fh.read(0, INT32_MAX, exact=False))
    assert peak < 4 << 20


@pytest.mark.parametrize("codec", ["zlib", "lz4", "zstd"])
def test_decompression_bomb_is_bounded(codec, scratch, monkeypatch):
    """A compressed body inflating past the cap (1 MiB here, 64 MiB in use) is reported, not materialized."""
    import zlib
    from rmqtool.output import schema
    monkeypatch.setattr(schema, "MAX_INFLATED_BODY", 1 << 20)
    comp = {"zlib": (cl.COMPRESSION_ZLIB, zlib.compress)}
    if codec == "lz4":
        lz4 = pytest.importorskip("lz4.frame")
        comp["lz4"] = (cl.COMPRESSION_LZ4, lz4.compress)
    if codec == "zstd":
        zstd = pytest.importorskip("zstandard")
        comp["zstd"] = (cl.COMPRESSION_ZSTD, zstd.ZstdCompressor().compress)
    ctype, fn = comp[codec]
    bomb = fn(bytes(64 << 20))
    img = sd.commitlog_image([dict(topic=b"B", body=bomb,
                                   sys_flag=cl.COMPRESSED_FLAG | (ctype << cl.COMPRESSION_TYPE_SHIFT))],
                             len(bomb) + 4096)
    from rmqtool.records.scan import FileScan
    path = scratch / f"bomb-{codec}"
    path.write_bytes(img)
    rows = []
    peak = _peak_bytes(lambda: rows.extend(record_to_dict(b, 0, body="none") for b in FileScan(path, 0)))
    assert peak < len(img) + (12 << 20), f"peak {peak} for a body inflating to 64 MiB"
    assert rows[0]["inflated_body_length"] is None and "beyond" in rows[0]["note"]


def test_truncated_compressed_body_is_a_note_not_data():
    import zlib
    from rmqtool.output.schema import decompress
    body = zlib.compress(b"payload" * 100)
    out, name, note = decompress(body[:len(body) // 2], cl.COMPRESSED_FLAG | (cl.COMPRESSION_ZLIB << 8))
    assert out is None and "truncated" in note


# --- the long-campaign driver works (address-space limit, workers, exit status) ------------------
def test_bench_driver_runs(tmp_path):
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "fuzz.py"), "--per-parser", "150",
                           "--jobs", "2", "--slice", "75", "--seed", "3"],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for name in TARGETS:
        assert re.search(rf"^{name} +inputs= +150 ", proc.stdout, re.M), proc.stdout


# --- regressions found by the fuzzer ------------------------------------------------------------------
@pytest.mark.parametrize("line", [
    b'{"topic":"t","body":"x","queue_id":1099511627776}',
    b'{"topic":"t","body":"x","store_timestamp":99999999999999999999999}',
    b'{"topic":"t","body":"x","born_host":5}',
    b'{"topic":"t","body":{"a":1}}',
    b'{"topic":"t","body":"x","sys_flag":"a","queue_offset":1,"store_timestamp":5}',
    b'{"topic":"t","body":"x","queue_offset":"x","store_timestamp":5}',
    b'{"topic":"' + b"t" * 40000 + b'","body":"x"}',
    b'{"topic":"t","body":"x","properties":{"k":"' + b"v" * 40000 + b'"}}',
    b'{"topic":"t","body":"\xff\xfe"}',
])
def test_write_rejects_hostile_rows_with_one_line(tmp_path, line):
    from conftest import run_cli
    src = tmp_path / "rows.jsonl"
    src.write_bytes(b'{"topic":"t","body":"ok","queue_offset":0,"store_timestamp":5}\n' + line + b"\n")
    res = run_cli("write", tmp_path / "store", "--from", src, "--commitlog-file-size", 65536,
                  "--cq-file-size", 800, "--index-slots", 61, "--index-entries", 350)
    assert res.code == 2, res.out + res.err
    assert res.err.startswith("error:") and "internal error" not in res.err and str(src) in res.err
