"""Fast paths are proven equal to their reference.

The rule: a fast path skips work whose result is known (interpreter overhead, a sort when
nothing is out of order, a chunk's records instead of all of them); it never computes
something else. Each one here runs beside its reference on the reference stores and on
generated and mutated inputs, and the answers must be identical:

- the native core (``rmqtool/kernels/_native.c``) against the numpy path (``core=None``):
  CRC32 and Java hash of byte spans, whole walks and dispatches, whole verify reports;
- ``RMQTOOL_NATIVE=0`` (the numpy path forced) against the default, through the CLI.

Verify's chunked joins and windowed index chains have their own proofs
(``test_verify_chunks.py``, ``test_verify_speed.py``).
"""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import zlib

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from conftest import reference_store
from rmqtool.kernels import javahash, native
from rmqtool.kernels.crc import crc32_spans

needs_native = pytest.mark.skipif(native.core is None, reason=f"native core not in use: {native.path}")


@st.composite
def spans(draw, max_len=64):
    """A buffer and spans inside it (some empty, some overlapping, any order)."""
    raw = draw(st.binary(max_size=400))
    n = draw(st.integers(0, 30))
    starts, lengths = [], []
    for _ in range(n):
        s = draw(st.integers(0, len(raw)))
        starts.append(s)
        lengths.append(draw(st.integers(0, min(max_len, len(raw) - s))))
    return np.frombuffer(raw, np.uint8), np.array(starts, np.int64), np.array(lengths, np.int64)


@needs_native
@settings(max_examples=300, deadline=None)
@given(spans())
def test_crc32_spans_native_equals_zlib(case):
    buf, starts, lengths = case
    got = crc32_spans(buf, starts, lengths)
    assert got.tolist() == crc32_spans(buf, starts, lengths, core=None).tolist()
    assert got.tolist() == [zlib.crc32(buf[s:s + n].tobytes()) for s, n in zip(starts, lengths)]


@needs_native
@settings(max_examples=300, deadline=None)
@given(spans(), st.booleans())
def test_java_hash_spans_native_equals_numpy(case, utf8):
    buf, starts, lengths = case
    if utf8:      # valid multi-byte text too, not only random bytes
        text = "ké€𝄞 ".encode() * 20
        buf = np.frombuffer(text, np.uint8)
        starts = np.minimum(starts, len(text))
        lengths = np.minimum(lengths, len(text) - starts)
    h1, u1 = javahash.span_hashes(buf, starts, lengths)
    h2, u2 = javahash.span_hashes(buf, starts, lengths, core=None)
    assert h1.tolist() == h2.tolist() and u1.tolist() == u2.tolist()
    for s, n, h in zip(starts, lengths, h1):
        assert int(h) == javahash.java_string_hash(buf[s:s + n].tobytes().decode("utf-8", "replace"))


@needs_native
@pytest.mark.parametrize("bad", [(-1, 1), (0, -1), (5, 6), (11, 0), (2, 1 << 62)])
def test_spans_outside_the_buffer_are_refused_on_both_paths(bad):
    """A span outside the buffer is a ValueError naming it, never a read past the end."""
    buf = np.zeros(10, np.uint8)
    starts, lengths = np.array([0, bad[0]], np.int64), np.array([1, bad[1]], np.int64)
    for core in (native.core, None):
        with pytest.raises(ValueError, match="span 1"):
            crc32_spans(buf, starts, lengths, core=core)
    with pytest.raises(ValueError, match="span 1"):
        native.core.java_hash_spans(buf, starts, lengths, np.empty(2, np.uint32), np.empty(2, np.uint8))


@needs_native
@pytest.mark.parametrize("size", [513, 4099, 65536])
def test_spans_ending_at_the_buffer_end(size):
    """Spans that end on the last byte of a buffer the size of the data (a ``bytes`` from malloc,
    so an AddressSanitizer build sees any read past it)."""
    raw = bytes(range(256)) * (size // 256) + bytes(size % 256)
    starts = np.array([0, size - 1, size - 17, size, 3], np.int64)
    lengths = np.array([size, 1, 17, 0, size - 3], np.int64)
    assert crc32_spans(raw, starts, lengths).tolist() == [zlib.crc32(raw[s:s + n]) for s, n in zip(starts, lengths)]
    buf = np.frombuffer(raw, np.uint8)
    h1, u1 = javahash.span_hashes(buf, starts, lengths)      # np.frombuffer: the bytes object's memory
    h2, u2 = javahash.span_hashes(buf, starts, lengths, core=None)
    assert h1.tolist() == h2.tolist() and u1.tolist() == u2.tolist()


@needs_native
def test_native_entry_points_check_their_arguments():
    buf = np.zeros(10, np.uint8)
    one = np.zeros(1, np.int64)
    with pytest.raises(ValueError):
        native.core.crc32_spans(buf, one, np.zeros(2, np.int64), np.empty(1, np.uint32))
    with pytest.raises(ValueError):
        native.core.crc32_spans(buf, one, one, np.empty(2, np.uint32))
    with pytest.raises(BufferError):
        native.core.crc32_spans(buf, one, one, b"\0\0\0\0")          # read-only output
    with pytest.raises(ValueError):
        native.core.crc32_spans(buf, np.zeros(3, np.uint8), np.zeros(3, np.uint8), np.empty(0, np.uint32))


_PROPERTY_PIECES = [b"TAGS", b"KEYS", b"UNIQ_KEY", b"DELAY", b"TAG", b"KEYSX", b"a", b"", b"\x01", b"\x02",
                    "é".encode(), b" k1 k2 ", b"\x00"]


@needs_native
@settings(max_examples=400, deadline=None)
@given(st.lists(st.lists(st.sampled_from(_PROPERTY_PIECES), max_size=12), max_size=6), st.integers(0, 9),
       st.booleans())
def test_split_properties_native_equals_numpy(records, pad, pad_rows):
    """Property spans of TAGS/KEYS/UNIQ_KEY/DELAY (duplicates, empty values and keys, separators
    anywhere, non-ASCII), native split against the numpy byte-matrix search."""
    from rmqtool.records.scan import extract_properties
    blobs = [b"".join(r) for r in records]
    raw = bytes(pad) + b"".join(blobs)
    starts = np.array([pad + sum(map(len, blobs[:i])) for i in range(len(blobs))], np.int64)
    lens = np.array([len(b) if len(b) else -1 for b in blobs], np.int64)
    buf = np.frombuffer(raw, np.uint8)
    pad_to = len(blobs) + 2 if pad_rows else None
    got = extract_properties(buf, starts, lens, pad_to=pad_to)
    want = extract_properties(buf, starts, lens, pad_to=pad_to, core=None)
    assert {k: v.tolist() for k, v in got.items()} == {k: v.tolist() for k, v in want.items()}


@st.composite
def chained_windows(draw):
    """Windows of chained MESSAGE records (real encodings), some bytes then overwritten."""
    from rmqtool.records.encode import MessageFields, encode
    parts = []
    for i in range(draw(st.integers(0, 8))):
        body = draw(st.binary(max_size=40))
        parts.append(bytes(encode(MessageFields(topic=draw(st.sampled_from(["T", "TopicB" * 30])),
                                                        body=body, queue_offset=i))))
    raw = bytearray(b"".join(parts) + draw(st.binary(max_size=12)))
    for _ in range(draw(st.integers(0, 3))):
        if raw:
            at = draw(st.integers(0, len(raw) - 1))
            raw[at] = draw(st.integers(0, 255))
    return bytes(raw), draw(st.integers(-2, len(raw) + 3))


@needs_native
@settings(max_examples=400, deadline=None)
@given(chained_windows())
def test_message_run_native_equals_numpy(case):
    """The run of whole MESSAGE records from a window's start, before the scalar walk judges the rest."""
    from rmqtool.records.scan import _message_run
    window, limit = case
    run1, stop1 = _message_run(window, limit)
    run2, stop2 = _message_run(window, limit, core=None)
    assert (run1.tolist(), stop1) == (run2.tolist(), stop2)


@needs_native
@settings(max_examples=400, deadline=None)
@given(st.lists(st.binary(max_size=40).map(lambda b: b.replace(b"\x00", b" ")), max_size=30),
       st.integers(0, 8))
def test_keys_tokens_native_equal_numpy(values, pad):
    """KEYS values (spaces anywhere, runs of them, leading/trailing, empty values) split in C
    equal the numpy split: same records, token spans and ordinals."""
    from rmqtool.broker.dispatch import _keys_tokens
    blob = bytes(pad) + b"".join(values)
    lens = np.array([len(v) for v in values], dtype=np.int64)
    starts = pad + np.concatenate(([0], np.cumsum(lens)[:-1])).astype(np.int64) if len(values) else lens
    buf = np.frombuffer(blob, np.uint8)
    a = [x.tolist() for x in _keys_tokens(buf, starts, lens)]
    b = [x.tolist() for x in _keys_tokens(buf, starts, lens, core=None)]
    assert a == b


@st.composite
def dledger_windows(draw):
    """A window of the upstream-written DLedger data file (from any entry boundary, cut anywhere),
    with a few bytes changed, a window position and a limit."""
    from conftest import dledger_store
    data = (dledger_store() / "dledger-n0" / "data" / f"{0:020d}").read_bytes()
    lo = draw(st.sampled_from([0, 284, 332, 548]))
    raw = bytearray(data[lo:lo + draw(st.integers(0, 6000))])
    for _ in range(draw(st.integers(0, 3))):
        if raw:
            raw[draw(st.integers(0, len(raw) - 1))] = draw(st.integers(0, 255))
    base = draw(st.sampled_from([lo, lo + 1, 0]))
    return bytes(raw), base, draw(st.integers(-2, len(raw) + 3))


@needs_native
@settings(max_examples=400, deadline=None)
@given(dledger_windows())
def test_entry_run_native_equals_the_scalar_walk(case):
    """A DLedger window walked with the entries taken in C first, then judged by the loop,
    equals the loop alone: same record starts, same stop, same resume position."""
    from rmqtool.records.scan import _walk_entries
    window, base, limit = case
    results = []
    for core in (native.core, None):
        starts, stop, resume = _walk_entries(window, base, 0, base + len(window) + 7, base + limit, core=core)
        results.append((list(starts), stop and vars(stop), resume))
    assert results[0] == results[1]


@needs_native
@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, (1 << 31) - 1), max_size=60), st.integers(1, 12),
       st.lists(st.integers(-3, 40), min_size=12, max_size=12), st.integers(1, 30), st.booleans())
def test_index_chains_native_equal_numpy(hashes, hash_slots, old_slots, count, first_file):
    """putKey chains (prevIndex, slots, hashSlotCount, header) made key by key in C equal the
    numpy formulation (one ordering of the keys by slot), from slots holding any old values."""
    from formats.indexfile import INDEX_HEADER_DTYPE
    from rmqtool.broker.dispatch import append_index_keys
    results = []
    for core in (native.core, None):
        header = np.zeros(1, INDEX_HEADER_DTYPE)
        header["index_count"] = 1 if first_file else count
        header["begin_timestamp"] = 0 if first_file else 1_700_000_000_000
        header["hash_slot_count"] = 3
        slots = np.array(old_slots[:hash_slots], dtype=np.int32)
        ts = 1_700_000_000_000 + np.arange(len(hashes), dtype=np.int64) * 700
        new = append_index_keys(header, slots, 1 << 20, np.array(hashes, np.int64),
                                np.arange(len(hashes), dtype=np.int64) * 100, ts, core=core)
        results.append((new.tobytes(), slots.tolist(), header.tobytes()))
    assert results[0] == results[1]


def _cli(*args, native_env: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, RMQTOOL_NATIVE=native_env)
    return subprocess.run([sys.executable, "-m", "rmqtool", *map(str, args)], capture_output=True, text=True,
                          env=env, timeout=300)


@pytest.mark.parametrize("name", ["basic", "crashed", "mixed"])
def test_cli_answers_equal_with_and_without_the_native_core(name, store_copy, tmp_path):
    """Deep verify, a rebuild's files and dump, the native core on and off, on every reference store."""
    root = reference_store(name)
    for args in (["verify", root, "--level", "deep", "-f", "json"],
                 ["dump", "commitlog", root, "-f", "jsonl", "--limit", "200"]):
        on, off = _cli(*args, native_env="1"), _cli(*args, native_env="0")
        assert (on.returncode, on.stdout) == (off.returncode, off.stdout), args
    outputs = []
    for flag in ("1", "0"):
        out = tmp_path / f"out{flag}"
        proc = _cli("rebuild", "all", root, "--output", out, "-f", "json", native_env=flag)
        assert proc.returncode == 0, proc.stderr
        files = {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}
        index = [files.pop(k) for k in sorted(k for k in files if k.startswith("index/"))]   # named by build time
        outputs.append((files, index))
    assert outputs[0] == outputs[1] and outputs[0][0] and outputs[0][1]


def test_version_names_the_path_that_runs():
    on, off = _cli("--version", native_env="1"), _cli("--version", native_env="0")
    assert on.returncode == off.returncode == 0
    assert "numpy (RMQTOOL_NATIVE=0)" in off.stdout
    built = importlib.util.find_spec("rmqtool.kernels._native") is not None   # whatever this process runs
    assert ("native (C)" if built else "numpy (native core not built)") in on.stdout
    assert json.dumps(on.stdout)        # one line of text
