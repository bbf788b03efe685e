"""Fast paths are proven equal to their reference.

The rule: a fast path skips work whose result is known (interpreter overhead, a sort when
nothing is out of order, a chunk's records instead of all of them); it never computes
something else. Each one here runs beside its reference on the reference stores and on
generated and mutated inputs, and the answers must be identical:

- the native core (``rmqtool/kernels/_native.c``) against the numpy path (``core=None``):
  CRC32 and Java hash of byte spans, whole walks and dispatches, whole verify reports;
- ``RMQTOOL_NATIVE=0`` (the numpy path forced) against the default, through the CLI.

Each comparison also proves which paths ran (``tests/native_calls.py`` counts every call into
the C functions): the native side called the C functions the test names, the numpy side none of
them. Most numpy sides call no C at all; the reference scan (``FileScan(core=None)``) and the
reference topic and index-key tables still use the span kernels (``message_run``, ``entry_run``,
``split_properties``, ``split_tokens``, ``java_hash_spans``, ``crc32_spans``) that the tests prove equal to
numpy, so those numpy sides are held to "not the kernel under test". Through the CLI,
``RMQTOOL_NATIVE=0`` is the whole numpy path: not one call into C.
Where the native core is not built the comparisons are skipped with the reason, and fail instead
under ``RMQTOOL_REQUIRE_NATIVE=1`` (CI, where a compiler exists).

Verify's chunked joins and windowed index chains have their own proofs
(``test_verify_chunks.py``, ``test_verify_speed.py``).
"""
from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from conftest import reference_store
from native_calls import CoreCalls
from rmqtool.kernels import javahash, native
from rmqtool.kernels.crc import crc32_spans

#: every call into the native core's C functions while this module's tests run
CALLS = CoreCalls()
#: the numpy side of a comparison: a block that must not call the native core
NUMPY = CALLS.none


def native_vs_numpy(*functions):
    """A test of the native core: it needs the core (the ``native_core`` fixture: skipped with the
    reason where it is not built, a failure under ``RMQTOOL_REQUIRE_NATIVE=1``) and fails unless
    each C function in ``functions`` was called during it."""
    def mark(test):
        return pytest.mark.usefixtures("native_core")(pytest.mark.native_calls(*functions)(test))
    return mark


@pytest.fixture(scope="module", autouse=True)
def _count_native_calls():
    CALLS.install(native.core)
    yield
    CALLS.uninstall()


@pytest.fixture(autouse=True)
def _the_native_side_ran(request):
    wanted = request.node.get_closest_marker("native_calls")
    before = CALLS.snapshot()
    yield
    if wanted is not None:
        called = CALLS.counts - before
        missing = [name for name in wanted.args if not called[name]]
        assert not missing, f"the native side never called {missing} (calls: {dict(called)})"


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


@native_vs_numpy("crc32_spans")
@settings(max_examples=300, deadline=None)
@given(spans())
def test_crc32_spans_native_equals_zlib(case):
    buf, starts, lengths = case
    got = crc32_spans(buf, starts, lengths)
    with NUMPY():
        assert got.tolist() == crc32_spans(buf, starts, lengths, core=None).tolist()
    assert got.tolist() == [zlib.crc32(buf[s:s + n].tobytes()) for s, n in zip(starts, lengths)]


@native_vs_numpy("java_hash_spans")
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
    with NUMPY():
        h2, u2 = javahash.span_hashes(buf, starts, lengths, core=None)
    assert h1.tolist() == h2.tolist() and u1.tolist() == u2.tolist()
    for s, n, h in zip(starts, lengths, h1):
        assert int(h) == javahash.java_string_hash(buf[s:s + n].tobytes().decode("utf-8", "replace"))


@native_vs_numpy("crc32_spans", "java_hash_spans")
@pytest.mark.parametrize("bad", [(-1, 1), (0, -1), (5, 6), (11, 0), (2, 1 << 62)])
def test_spans_outside_the_buffer_are_refused_on_both_paths(bad):
    """A span outside the buffer is a ValueError naming it, never a read past the end."""
    buf = np.zeros(10, np.uint8)
    starts, lengths = np.array([0, bad[0]], np.int64), np.array([1, bad[1]], np.int64)
    with pytest.raises(ValueError, match="span 1"):
        crc32_spans(buf, starts, lengths, core=native.core)
    with NUMPY(), pytest.raises(ValueError, match="span 1"):
        crc32_spans(buf, starts, lengths, core=None)
    with pytest.raises(ValueError, match="span 1"):
        native.core.java_hash_spans(buf, starts, lengths, np.empty(2, np.uint32), np.empty(2, np.uint8))


@native_vs_numpy("crc32_spans", "java_hash_spans")
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
    with NUMPY():
        h2, u2 = javahash.span_hashes(buf, starts, lengths, core=None)
    assert h1.tolist() == h2.tolist() and u1.tolist() == u2.tolist()


@native_vs_numpy("crc32_spans", "search_sorted")
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
    with pytest.raises(ValueError):
        native.core.search_sorted(np.zeros(3, np.int64), np.zeros(3, np.uint8), True, np.empty(3, np.int64))
    with pytest.raises(ValueError):
        native.core.search_sorted(np.zeros(3, np.int64), np.zeros(3, np.int64), True, np.empty(2, np.int64))


_PROPERTY_PIECES = [b"TAGS", b"KEYS", b"UNIQ_KEY", b"DELAY", b"TAG", b"KEYSX", b"a", b"", b"\x01", b"\x02",
                    "é".encode(), b" k1 k2 ", b"\x00"]


@native_vs_numpy("split_properties")
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
    with NUMPY():
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


@native_vs_numpy("message_run")
@settings(max_examples=400, deadline=None)
@given(chained_windows())
def test_message_run_native_equals_numpy(case):
    """The run of whole MESSAGE records from a window's start, before the scalar walk judges the rest."""
    from rmqtool.records.scan import _message_run
    window, limit = case
    run1, stop1 = _message_run(window, limit)
    with NUMPY():
        run2, stop2 = _message_run(window, limit, core=None)
    assert (run1.tolist(), stop1) == (run2.tolist(), stop2)


@native_vs_numpy("split_tokens")
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
    with NUMPY():
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


@native_vs_numpy("entry_run")
@settings(max_examples=400, deadline=None)
@given(dledger_windows())
def test_entry_run_native_equals_the_scalar_walk(case):
    """A DLedger window walked with the entries taken in C first, then judged by the loop,
    equals the loop alone: same record starts, same stop, same resume position."""
    from rmqtool.records.scan import _walk_entries
    window, base, limit = case
    results = []
    for core, path in ((native.core, contextlib.nullcontext), (None, NUMPY)):
        with path():
            starts, stop, resume = _walk_entries(window, base, 0, base + len(window) + 7, base + limit, core=core)
            results.append((list(starts), stop and vars(stop), resume))
    assert results[0] == results[1]


@native_vs_numpy("index_entries")
@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(-(1 << 31), (1 << 31) - 1),
                          st.one_of(st.integers(1_700_000_000_000, 1_700_000_900_000),
                                    st.integers(-(1 << 63), (1 << 63) - 1))), max_size=60),
       st.integers(1, 12), st.lists(st.integers(-3, 40), min_size=12, max_size=12), st.integers(1, 30),
       st.booleans(), st.sampled_from([np.int32, np.int64]), st.sampled_from([0, -5, 1_700_000_000_000]))
def test_index_entries_native_equal_numpy(keys, hash_slots, old_slots, count, first_file, hash_type, begin):
    """putKey's entries (prevIndex chains, keyHash, phyOffset, timeDiff), slots, hashSlotCount and
    header made key by key in C equal the numpy formulation (one ordering of the keys by slot), from
    slots holding any old values, for any hash and timestamp (negative, wrapping differences) and a
    begin timestamp that is unset, negative or set."""
    from formats.indexfile import INDEX_HEADER_DTYPE
    from rmqtool.broker.dispatch import append_index_keys
    hashes = np.array([h for h, _ in keys], hash_type)
    ts = np.array([t for _, t in keys], np.int64)
    results = []
    for core, path in ((native.core, contextlib.nullcontext), (None, NUMPY)):
        header = np.zeros(1, INDEX_HEADER_DTYPE)
        header["index_count"] = 1 if first_file else count
        header["begin_timestamp"] = begin
        header["hash_slot_count"] = 3
        slots = np.array(old_slots[:hash_slots], dtype=np.int32)
        with path():
            new = append_index_keys(header, slots, 1 << 20, hashes, np.arange(len(hashes), dtype=np.int64) * 100,
                                    ts, core=core)
        results.append((new.tobytes(), slots.tolist(), header.tobytes()))
    assert results[0] == results[1]


@native_vs_numpy("index_entries")
def test_index_entries_checks_its_arguments():
    from rmqtool.broker.dispatch import _index_entry_layout
    core, layout = native.core, _index_entry_layout()
    one, slots = np.zeros(1, np.int64), np.zeros(4, np.int32)
    out = np.zeros(int(layout[0]), np.uint8)
    assert core.index_entries(np.zeros(1, np.int32), one, one, slots, 1, 0, layout, out) == 1
    for bad in [(np.zeros(1, np.uint32), one, one, slots, layout, out),          # not a signed int
                (np.zeros(1, ">i4"), one, one, slots, layout, out),              # not native order
                (np.zeros(1, np.int32), np.zeros(2, np.int64), one, slots, layout, out),
                (np.zeros(1, np.int32), one, one, np.zeros(0, np.int32), layout, out),
                (np.zeros(1, np.int32), one, one, slots, layout[:4], out),
                (np.zeros(1, np.int32), one, one, slots, np.array([20, 0, 4, 12, 17], np.int64), out),
                (np.zeros(1, np.int32), one, one, slots, layout, out[:-1])]:
        with pytest.raises(ValueError):
            core.index_entries(*bad[:4], 1, 0, *bad[4:])


NATIVE_CALLS = Path(__file__).with_name("native_calls.py")
#: what the CLI's native side of a comparison must call in C, per command (in its main process:
#: rebuild's workers scan the CommitLog and make the index keys, the main process writes the entries)
CLI_NATIVE_CALLS = {"verify": {"scan_records", "search_sorted", "chain_replay"}, "dump": {"scan_records"},
                    "rebuild": {"index_entries"}}


def _cli(*args, native_env: str) -> subprocess.CompletedProcess:
    """``rmqtool ARGS`` with the native core on ("1") or off ("0"), and proof of the path that ran:
    on, the process runs the native core and called the C functions the command needs
    (``CLI_NATIVE_CALLS``); off, the numpy path and not one call into C."""
    import tempfile
    with tempfile.NamedTemporaryFile(suffix=".json") as record:
        env = dict(os.environ, RMQTOOL_NATIVE=native_env, RMQTOOL_TEST_CALLS=record.name)
        proc = subprocess.run([sys.executable, str(NATIVE_CALLS), *map(str, args)], capture_output=True, text=True,
                              env=env, timeout=300)
        ran = json.loads(Path(record.name).read_text())
    if native_env == "0":
        assert (ran["path"], ran["calls"]) == ("numpy (RMQTOOL_NATIVE=0)", {}), ran
    else:
        assert ran["path"].startswith("native (C)"), ran
        sanitized = os.environ.get("RMQTOOL_EXPECT_SANITIZED")      # CI's sanitizer step: its build, here too
        assert not sanitized or Path(ran["file"]).resolve().is_relative_to(Path(sanitized).resolve()), ran
        missing = CLI_NATIVE_CALLS[str(args[0])] - set(ran["calls"])
        assert not missing, f"{args[0]} with the native core never called {sorted(missing)} in C: {ran}"
    return proc


@pytest.mark.usefixtures("native_core")
@pytest.mark.parametrize("name", ["basic", "crashed", "mixed"])
def test_cli_answers_equal_with_and_without_the_native_core(name, store_copy, tmp_path):
    """Deep verify, a rebuild's files and dump, the native core on and off, on every reference store."""
    root = reference_store(name)
    for args in (["verify", root, "--level", "deep", "-f", "json"],
                 ["dump", "commitlog", root, "-f", "jsonl", "--limit", "200"]):
        on, off = _cli(*args, native_env="1"), _cli(*args, native_env="0")
        assert (on.returncode, on.stdout) == (off.returncode, off.stdout), args
        assert on.stdout and on.returncode in (0, 1), on.stderr
    outputs = []
    for flag in ("1", "0"):
        out = tmp_path / f"out{flag}"
        proc = _cli("rebuild", "all", root, "--output", out, "-f", "json", native_env=flag)
        assert proc.returncode == 0, proc.stderr
        files = {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}
        index = [files.pop(k) for k in sorted(k for k in files if k.startswith("index/"))]   # named by build time
        outputs.append((files, index))
    assert outputs[0] == outputs[1] and outputs[0][0] and outputs[0][1]


def _version(native_env: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, RMQTOOL_NATIVE=native_env)
    return subprocess.run([sys.executable, "-m", "rmqtool", "--version"], capture_output=True, text=True, env=env,
                          timeout=300)


def test_version_names_the_path_that_runs():
    """The first line of ``--version`` names the path exactly: the numpy path when forced; the
    native core (and its CRC loop) where it is built, which ``RMQTOOL_REQUIRE_NATIVE=1`` demands."""
    import rmqtool
    on, off = _version("1"), _version("0")
    assert on.returncode == off.returncode == 0
    assert off.stdout.splitlines()[0] == f"rmqtool {rmqtool.__version__} (numpy (RMQTOOL_NATIVE=0))"
    built = importlib.util.find_spec("rmqtool.kernels._native") is not None   # whatever this process runs
    if os.environ.get("RMQTOOL_REQUIRE_NATIVE") == "1":
        assert built, "RMQTOOL_REQUIRE_NATIVE=1 but the native core is not built"
    path = r"native \(C\), crc32 by (clmul|zlib)" if built else re.escape("numpy (native core not built)")
    assert re.fullmatch(rf"rmqtool {re.escape(rmqtool.__version__)} \({path}\)", on.stdout.splitlines()[0]), on.stdout


@st.composite
def commitlog_files(draw):
    """A CommitLog file of real MESSAGE encodings (V1 and V2, IPv4/IPv6 hosts, properties with the
    extracted names, empty and long bodies), ended by zeros, a BLANK, garbage or nothing, some bytes
    then overwritten (lengths, magics, CRCs, separators)."""
    from formats import commitlog as cl
    from rmqtool.records.encode import Host, MessageFields, encode
    parts = []
    for i in range(draw(st.integers(0, 12))):
        flags = draw(st.sampled_from([0, cl.BORNHOST_V6_FLAG, cl.STOREHOST_V6_FLAG,
                                      cl.BORNHOST_V6_FLAG | cl.STOREHOST_V6_FLAG]))
        host = lambda flag: Host(bytes(16 if flags & flag else 4), draw(st.integers(0, 65535)))
        props = b"".join(draw(st.lists(st.sampled_from(_PROPERTY_PIECES), max_size=8)))
        fields = MessageFields(topic=draw(st.sampled_from(["T", "TopicB" * 30, "é"])), body=draw(st.binary(max_size=300)),
                               properties=props, queue_id=draw(st.integers(0, 7)), queue_offset=i, sys_flag=flags,
                               born_host=host(cl.BORNHOST_V6_FLAG), store_host=host(cl.STOREHOST_V6_FLAG),
                               phy_offset=sum(map(len, parts)), born_timestamp=draw(st.integers(0, 1 << 41)),
                               store_timestamp=draw(st.integers(-1, 1 << 41)))
        parts.append(bytes(encode(fields)))
    raw = bytearray(b"".join(parts))
    end = draw(st.sampled_from(["zeros", "blank", "garbage", "none"]))
    if end == "zeros":
        raw += bytes(draw(st.integers(1, 64)))
    elif end == "blank":
        raw += (64).to_bytes(4, "big") + cl.BLANK_MAGIC.to_bytes(4, "big") + bytes(56)
    elif end == "garbage":
        raw += draw(st.binary(min_size=1, max_size=40))
    for _ in range(draw(st.integers(0, 3))):
        if raw:
            at = draw(st.integers(0, len(raw) - 1))
            raw[at] = draw(st.integers(0, 255))
    return bytes(raw)


def _scan_file(path, core, **kwargs):
    """A file's batches and end by FileScan; with ``core=None`` the reference path, which must not
    call the native window scan."""
    from rmqtool.records.scan import FileScan
    with contextlib.nullcontext() if core is not None else NUMPY("scan_records"):
        scan = FileScan(path, 0, core=core, **kwargs)
        batches = []
        for batch in scan:
            _check_known_hashes(batch)
            batches.append({k: (str(v.dtype), v.tolist()) for k, v in batch.columns.items()})
    return batches, vars(scan.end)


def _check_known_hashes(batch):
    """The hashes a native scan made in its pass (``RecordBatch.hashes``) are the reference hashes of
    the same spans, -1 exactly where a span holds a byte >= 0x80; and ``span_hashes(known=...)``
    returns what it returns without them."""
    from rmqtool.broker.dispatch import known_hashes
    from rmqtool.kernels.javahash import span_hashes
    for name, start, length in (("topic", "topic_start", "topic_len"), ("tags", "tags_start", "tags_len")):
        known = known_hashes(batch, name)
        if known is None:
            continue
        starts, lens = batch.columns[start], np.maximum(batch.columns[length], 0)
        want, units = span_hashes(batch.buf, starts, lens, core=None)
        ascii = np.array([bool((batch.buf[a:a + b] < 0x80).all()) for a, b in zip(starts.tolist(), lens.tolist())],
                         dtype=bool)
        assert known.tolist() == np.where(ascii, want.view(np.uint32).astype(np.int64), -1).tolist(), name
        got = span_hashes(batch.buf, starts, lens, known=known)
        assert got[0].tolist() == want.tolist() and got[1].tolist() == units.tolist()


@native_vs_numpy("scan_records")
@settings(max_examples=300, deadline=None)
@given(commitlog_files(), st.sampled_from([1 << 16, 200, 700]), st.sampled_from([None, 64, 333]), st.booleans(),
       st.booleans(), st.integers(0, 3))
def test_native_window_scan_equals_the_reference_scan(tmp_path_factory, raw, chunk, piece, check_crc, crc_column,
                                                      lo_pick):
    """FileScan with the native window scan (read piece by piece; walk, columns, property spans and
    CRC in one pass) gives the reference path's batches, column for column (dtypes too), and the
    same end; with ``crc_column`` every record's body CRC verdict as well."""
    path = tmp_path_factory.mktemp("scan") / "00000000000000000000"
    path.write_bytes(raw)
    lo = [0, 0, len(raw) // 3, max(len(raw) - 1, 0)][lo_pick]
    kwargs = dict(chunk_size=chunk, check_crc=check_crc, crc_column=crc_column, lo=lo)
    got = _scan_file(path, native.core, piece_size=piece, **kwargs)
    want = _scan_file(path, None, **kwargs)
    assert got == want


@native_vs_numpy("scan_records")
@pytest.mark.parametrize("name", ["basic", "crashed", "mixed", "propcrc-lmq-batchcq", "rocksdb-cq"])
def test_native_window_scan_equals_the_reference_on_reference_stores(name):
    from rmqtool.io.store import Store
    store = Store(reference_store(name))
    for seg in store.commitlog.files:
        for check_crc, crc_column in ((False, False), (True, False), (False, True)):
            assert _scan_file(seg.path, native.core, check_crc=check_crc, crc_column=crc_column, piece_size=4096) == \
                _scan_file(seg.path, None, check_crc=check_crc, crc_column=crc_column)


@native_vs_numpy("scan_records")
def test_scan_records_checks_its_arguments():
    from rmqtool.records.scan import _window_scan
    scan = _window_scan(native.core, False, False, None)
    core, names = native.core, scan.names
    assert len(set(core.SCAN_LAYOUT)) == len(core.SCAN_LAYOUT) and all(core.SCAN_LAYOUT)
    assert len(set(core.SCAN_COLUMNS)) == len(core.SCAN_COLUMNS) and all(core.SCAN_COLUMNS)
    window = bytes(256)
    cols = np.empty((len(core.SCAN_COLUMNS), 4), np.int64)
    props = np.empty((2 * len(names), 4), np.int64)
    assert core.scan_records(window, 0, 256, core.CRC_NONE, scan.layout, names, cols, props, 0) == (0, 0, core.SCAN_CHAIN)
    with pytest.raises(ValueError, match="layout"):
        core.scan_records(window, 0, 256, False, scan.layout[:-1], names, cols, props, 0)
    with pytest.raises(ValueError, match="props"):
        core.scan_records(window, 0, 256, False, scan.layout, names, cols, props[:-1], 0)
    with pytest.raises(ValueError, match="row"):
        core.scan_records(window, 0, 256, False, scan.layout, names, cols, props, 5)
    with pytest.raises(ValueError, match="start"):
        core.scan_records(window, 300, 256, False, scan.layout, names, cols, props, 0)
    with pytest.raises(ValueError, match="crc_mode"):
        core.scan_records(window, 0, 256, 3, scan.layout, names, cols, props, 0)
    for hash_prop in (-2, len(names)):
        with pytest.raises(ValueError, match="hash_prop"):
            core.scan_records(window, 0, 256, core.CRC_NONE, scan.layout, names, cols, props, 0, None, hash_prop)
    bad = scan.layout.copy()
    bad[core.SCAN_LAYOUT.index("head.sys_flag.at")] = 1 << 20
    with pytest.raises(ValueError, match="head field"):
        core.scan_records(window, 0, 256, False, bad, names, cols, props, 0)


def _xpow_mod(n: int, poly: int = 0x104C11DB7) -> int:
    """x^n mod P over GF(2)."""
    r = 1
    for _ in range(n):
        r <<= 1
        if r >> 32:
            r ^= poly
    return r


def _reflect(value: int, bits: int) -> int:
    return int(format(value, f"0{bits}b")[::-1], 2)


@pytest.mark.usefixtures("native_core")
@pytest.mark.skipif(native.core is not None and not hasattr(native.core, "CRC_FOLD_CONSTANTS"),
                    reason="no carry-less-multiply CRC on this CPU family")
def test_crc_fold_constants_follow_from_the_polynomial():
    """k(n) = reflect32(x^n mod P) << 1; P' and mu' = floor(x^64 / P), reflected over 33 bits."""
    poly = 0x104C11DB7
    k = [_reflect(_xpow_mod(n), 32) << 1 for n in (4 * 128 + 32, 4 * 128 - 32, 128 + 32, 128 - 32, 64, 32)]
    mu, rest = 0, 1 << 64
    while rest.bit_length() >= poly.bit_length():
        shift = rest.bit_length() - poly.bit_length()
        mu ^= 1 << shift
        rest ^= poly << shift
    assert list(native.core.CRC_FOLD_CONSTANTS) == k + [_reflect(poly, 33), _reflect(mu, 33)]


@native_vs_numpy("crc32_kernel", "crc32_spans")
@pytest.mark.parametrize("use_clmul", [True, False])
def test_crc32_kernels_equal_zlib_for_every_length_and_alignment(use_clmul):
    """Both CRC loops of the native core (carry-less multiply where the CPU has it, zlib's) give
    zlib.crc32 for spans of every length up to 700 bytes at 16 alignments, and long random spans."""
    before = native.core.crc32_kernel()
    try:
        native.core.crc32_kernel(use_clmul)
        raw = bytes((i * 131 + (i >> 7) * 17) & 0xFF for i in range(8192))
        buf = np.frombuffer(raw, np.uint8)
        starts = np.array([off for n in range(700) for off in range(16)], np.int64)
        lengths = np.array([n for n in range(700) for _ in range(16)], np.int64)
        rng = np.random.default_rng(7)
        s = rng.integers(0, 8192, 300)
        starts = np.concatenate([starts, s])
        lengths = np.concatenate([lengths, rng.integers(0, 8193 - s)])
        got = crc32_spans(buf, starts, lengths).tolist()
        assert got == [zlib.crc32(raw[a:a + n]) for a, n in zip(starts.tolist(), lengths.tolist())]
    finally:
        native.core.crc32_kernel(before == "clmul")


@native_vs_numpy("span_groups")
@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from([b"TopicA", b"TopicB", b"T", b"", b"\xff\xfe", b"TopicA ", b"Aa", b"BB"]),
                max_size=60), st.booleans())
def test_topic_groups_native_equal_numpy(topics, weak_hash):
    """Records grouped by topic bytes: the native hash-table grouping gives the numpy path's numbers
    and names, also when hashes collide ("Aa" and "BB" share Java's hash; ``weak_hash`` makes every
    topic of one length collide, which hands the batch to the numpy path)."""
    from rmqtool.broker.dispatch import _topic_groups
    raw = b"".join(topics)
    starts = np.array([sum(map(len, topics[:i])) for i in range(len(topics))], np.int64)
    lens = np.array([len(t) for t in topics], np.int64)
    buf = np.frombuffer(raw, np.uint8)
    hashes = np.zeros(len(topics), np.int32) if weak_hash else javahash.span_hashes(buf, starts, lens)[0]
    got = _topic_groups(buf, starts, lens, hashes)
    with NUMPY():
        want = _topic_groups(buf, starts, lens, hashes, core=None)
    assert (got[0].tolist(), got[1]) == (want[0].tolist(), want[1])


@native_vs_numpy("index_keys")
@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([b"T", b"TopicA", "é".encode()]),
                          st.one_of(st.none(), st.binary(max_size=12).map(lambda b: b.replace(b"\x00", b" "))),
                          st.one_of(st.none(), st.binary(max_size=30).map(lambda b: b.replace(b"\x00", b" "))),
                          st.sampled_from([0, 4, 8, 12])), max_size=25), st.booleans())
def test_index_keys_native_equal_numpy(records, ascii_only):
    """Every record's index keys (UNIQ_KEY, then the KEYS tokens; none for a ROLLBACK), record
    rows and keyHash: the native loop against the numpy formulation, non-ASCII keys included
    (which the native loop hands back to numpy)."""
    from types import SimpleNamespace
    from rmqtool.broker.dispatch import record_index_keys
    blob, cols = bytearray(b"x"), {k: [] for k in ("topic_start", "topic_len", "uniq_start", "uniq_len",
                                                     "keys_start", "keys_len", "sys_flag")}
    for topic, uniq, keys, tx in records:
        if ascii_only:
            uniq, keys = (None if v is None else bytes(c & 0x7F or 32 for c in v) for v in (uniq, keys))
        for name, value in (("topic", topic), ("uniq", uniq), ("keys", keys)):
            cols[f"{name}_start"].append(len(blob) if value is not None else 0)
            cols[f"{name}_len"].append(len(value) if value else (-1 if name != "topic" else 0))
            blob += value or b""
        cols["sys_flag"].append(tx)
    batch = SimpleNamespace(buf=np.frombuffer(bytes(blob), np.uint8),
                            **{k: np.array(v, np.int64) for k, v in cols.items()})
    got = [x.tolist() for x in record_index_keys(batch)]
    with NUMPY("index_keys"):
        want = [x.tolist() for x in record_index_keys(batch, core=None)]
    assert got == want


@native_vs_numpy("chain_replay")
@settings(max_examples=400, deadline=None)
@given(st.integers(1, 9), st.lists(st.integers(-1, 8), max_size=40), st.integers(1, 50), st.lists(st.integers(0, 60),
       max_size=3), st.lists(st.integers(0, 9), max_size=9))
def test_index_chain_replay_native_equals_numpy(slots, buckets, first, damage, newest_before):
    """An IndexFile window's chain check (every entry links to its slot's newest earlier entry):
    the native replay against the numpy test without a sort, on whole chains and damaged ones;
    same verdict and the same newest entry per slot afterwards."""
    from rmqtool.ops.verify.index import _Chains as IndexChainCheck
    buckets = [b % slots if b >= 0 else -1 for b in buckets]
    newest = np.zeros(slots, np.int32)
    newest[:len(newest_before)] = [min(v, first - 1) for v in newest_before[:slots]]
    state, prev = newest.copy(), []
    for i, b in enumerate(buckets):
        prev.append(int(state[b]) if b >= 0 else 0)
        if b >= 0:
            state[b] = first + i
    for at in damage:
        if prev:
            prev[at % len(prev)] = at
    bucket, prev = np.array(buckets, np.int64), np.array(prev, np.int64)
    num = np.arange(first, first + len(buckets), dtype=np.int64)
    results = []
    for core, path in ((native.core, contextlib.nullcontext), (None, NUMPY)):
        check = IndexChainCheck("f", slots, 100, np.zeros(slots, np.int32), None)
        check.newest = newest.copy()
        with path():
            results.append((check._consistent(bucket, prev, num, first, core=core), check.newest.tolist()))
    assert results[0] == results[1]


@native_vs_numpy("span_groups")
@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.sampled_from([b"TopicA", b"TopicB", b"T", b"", b"\xff\xfe", b"Aa", b"BB", b"x" * 70]),
                         max_size=30), max_size=4))
def test_verify_topic_ids_native_equal_numpy(batches):
    """verify's topic table over several batches: the same topic id for every record and the same
    names in the same order, native grouping or numpy (hash collisions and known topics included)."""
    from types import SimpleNamespace
    from rmqtool.ops.verify.records import TopicTable
    tables = [TopicTable(), TopicTable()]
    for topics in batches:
        raw = b"".join(topics)
        batch = SimpleNamespace(buf=np.frombuffer(raw, np.uint8),
                                topic_start=np.array([sum(map(len, topics[:i])) for i in range(len(topics))], np.int64),
                                topic_len=np.array([len(t) for t in topics], np.int64))
        got = tables[0].topic_ids(batch).tolist()
        with NUMPY("span_groups"):
            want = tables[1].topic_ids(batch, core=None).tolist()
        assert got == want and tables[0].names == tables[1].names


@native_vs_numpy("scan_records")
@settings(max_examples=300, deadline=None)
@given(dledger_windows(), st.sampled_from([1 << 16, 300, 1000]), st.sampled_from([None, 64, 500]),
       st.sampled_from([(False, False), (True, False), (False, True)]))
def test_native_window_scan_of_dledger_entries_equals_the_reference(tmp_path_factory, case, chunk, piece, crc):
    """A DLedger data file (the upstream-written one, cut and damaged) scanned entry by entry by the
    native window scan and by the reference entry walk: the same batches, columns and end."""
    raw, base, _ = case
    path = tmp_path_factory.mktemp("dl") / "dledger-n0" / "data" / f"{base:020d}"
    path.parent.mkdir(parents=True)
    path.write_bytes(raw)
    from rmqtool.records.scan import FileScan

    def scanned(core, **kwargs):
        scan = FileScan(path, base, core=core, chunk_size=chunk, check_crc=crc[0], crc_column=crc[1], **kwargs)
        return [{k: (str(v.dtype), v.tolist()) for k, v in b.columns.items()} for b in scan], vars(scan.end)
    got = scanned(native.core, piece_size=piece)
    with NUMPY("scan_records"):
        want = scanned(None)
    assert got == want


@native_vs_numpy("scan_records")
def test_native_window_scan_of_the_reference_dledger_store():
    from conftest import dledger_store
    from rmqtool.records.scan import FileScan
    data = dledger_store() / "dledger-n0" / "data"
    files = sorted(data.iterdir())
    assert files
    for f in files:
        for crc in ((False, False), (True, False), (False, True)):
            got, want = (FileScan(f, int(f.name), core=core, check_crc=crc[0], crc_column=crc[1], piece_size=512)
                         for core in (native.core, None))
            rows = [{k: v.tolist() for k, v in b.columns.items()} for b in got]
            with NUMPY("scan_records"):
                assert rows == [{k: v.tolist() for k, v in b.columns.items()} for b in want]
            assert vars(got.end) == vars(want.end) and sum(len(r["position"]) for r in rows) > 0


@native_vs_numpy("search_sorted")
@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(-40, 40), max_size=300), st.lists(st.integers(-50, 50), min_size=64, max_size=400),
       st.sampled_from(["any", "ascending", "descending", "runs"]), st.sampled_from(["left", "right"]),
       st.sampled_from([0, 1 << 40, -(1 << 62)]))
def test_search_sorted_native_equals_numpy(a, v, order, side, shift):
    """The galloping search gives numpy.searchsorted's answer for any order of values (the joins
    ask in nearly ascending order), with duplicates, values outside ``a`` and an empty ``a``."""
    from rmqtool.kernels.search import is_member, search_sorted
    a = np.sort(np.array(a, np.int64)) + shift
    v = np.array(v, np.int64) + shift
    if order == "ascending":
        v = np.sort(v)
    elif order == "descending":
        v = np.sort(v)[::-1]
    elif order == "runs":
        v = np.concatenate([np.sort(part) for part in np.array_split(v, 5)])
    got = search_sorted(a, v, side)
    assert got.dtype == np.int64 and got.tolist() == np.searchsorted(a, v, side=side).tolist()
    with NUMPY():
        assert search_sorted(a, v, side, core=None).tolist() == got.tolist()
    pool = np.random.default_rng(len(v)).permutation(a)
    with NUMPY():
        numpy_member = is_member(v, pool, core=None).tolist()
    assert is_member(v, pool).tolist() == np.isin(v, pool).tolist() == numpy_member


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4), st.sampled_from([-(1 << 31), -1, 0, 1, 2, (1 << 31) - 1]),
                          st.integers(0, 1 << 40)), max_size=60, unique_by=lambda r: r[2]),
       st.booleans())
def test_queue_order_equals_lexsort(rows, ascending):
    """QUEUEOFFSET continuity orders records by (topic, queue, offset): one stable sort when the
    offsets ascend, as in every walk's table; ``np.lexsort`` (the reference) when they do not."""
    from rmqtool.ops.verify.commitlog import _queue_order
    if ascending:
        rows = sorted(rows, key=lambda r: r[2])
    t, q, phy = (np.array(col, dtype) for col, dtype in zip(zip(*rows) if rows else ((), (), ()),
                                                             (np.int32, np.int32, np.int64)))
    assert _queue_order(t, q, phy).tolist() == np.lexsort((phy, q, t)).tolist()


# --- the one-loop dispatch (``core.dispatch_columns``) ----------------------------------------------
def _dispatched(batch, config=None, core=native.core):
    """``dispatch_batch`` of one batch as plain values, every field with its dtype."""
    import dataclasses
    from rmqtool.broker.dispatch import dispatch_batch
    with contextlib.nullcontext() if core is not None else NUMPY("dispatch_columns"):
        d = dispatch_batch(batch, config, core=core)
    return {f.name: (str(v.dtype), v.tolist()) if isinstance(v, np.ndarray) else v
            for f, v in ((f, getattr(d, f.name)) for f in dataclasses.fields(d))}


_TOPICS = ["TopicA", "TopicB", "Aa", "BB", "SCHEDULE_TOPIC_XXXX", "é-topic", ""]


@native_vs_numpy("dispatch_columns")
@settings(max_examples=300, deadline=None)
@given(st.lists(st.fixed_dictionaries({
    "topic": st.sampled_from(_TOPICS),
    "tags": st.one_of(st.none(), st.sampled_from(["", "TagA", "TagB", "标签"]), st.text(max_size=6)),
    "keys": st.one_of(st.none(), st.sampled_from(["", " ", "k1 k2", "  a  b ", "ключ x"]),
                      st.text(alphabet="ab é", max_size=12)),
    "uniq_key": st.one_of(st.none(), st.just(""), st.text(alphabet="0123456789ABCDEF", min_size=1, max_size=32)),
    "delay": st.one_of(st.none(), st.sampled_from(["0", "1", "3", "18", "40", "-2", "x", " 2"])),
    "sys_flag": st.sampled_from([0, 4, 8, 12, 4 | 1, 8 | 2]),
    "queue_id": st.integers(0, 7), "queue_offset": st.integers(0, 1 << 40),
    "store_timestamp": st.integers(0, 1 << 42), "size": st.integers(0, 4096)}), max_size=40),
    st.booleans(), st.integers(0, 20), st.booleans())
def test_dispatch_native_equals_numpy(records, index_enabled, levels, known):
    """A batch's whole dispatch (topics and their numbering, units with tagsCode and the delay rule
    up to a DELAY that stops dispatch, index keys with their offsets and timestamps): the one C loop
    against the numpy formulation, field for field and dtype for dtype. Non-ASCII spans and the
    colliding topics "Aa"/"BB" are in the mix (the loop hands those batches to numpy); ``known``
    gives the batch the in-pass hashes a native scan leaves."""
    from rmqtool.broker.delay import DEFAULT_LEVELS_MS
    from rmqtool.broker.dispatch import DispatchConfig, RecordColumns
    from rmqtool.kernels.javahash import span_hashes
    for i, r in enumerate(records):
        r["phy_offset"] = 1000 * i + 7
    batch = RecordColumns.from_records(records)
    if known:
        hashes = {}
        for name in ("topic", "tags"):
            start, length = getattr(batch, f"{name}_start"), np.maximum(getattr(batch, f"{name}_len"), 0)
            h = span_hashes(batch.buf, start, length, core=None)[0].view(np.uint32).astype(np.int64)
            ascii = np.array([bool((batch.buf[a:a + b] < 0x80).all()) for a, b in zip(start.tolist(), length.tolist())],
                             dtype=bool)
            hashes[name] = np.where(ascii, h, -1)
        batch.hashes = hashes
    config = DispatchConfig(delay_levels_ms=list(DEFAULT_LEVELS_MS)[:levels], index_enabled=index_enabled)
    assert _dispatched(batch, config) == _dispatched(batch, config, core=None)


@native_vs_numpy("dispatch_columns")
@pytest.mark.parametrize("name", ["basic", "crashed", "mixed", "propcrc-lmq-batchcq", "rocksdb-cq"])
def test_dispatch_native_equals_numpy_on_reference_stores(name):
    """Every batch of every reference store dispatched both ways (native scan's batches, with their
    in-pass hashes): equal field for field."""
    from rmqtool.io.store import Store
    from rmqtool.records.scan import FileScan
    from rmqtool.broker.dispatch import DispatchConfig, _dispatch_native, schedule_delays
    store = Store(reference_store(name))
    batches = in_loop = 0
    for seg in store.commitlog.files:
        for batch in FileScan(seg.path, seg.start, chunk_size=1 << 16):
            assert _dispatched(batch) == _dispatched(batch, core=None)
            batches += 1
            delays = schedule_delays(batch)
            n = len(batch) if delays.failed_row is None else delays.failed_row
            in_loop += _dispatch_native(native.core, batch, batch.buf, batch.stored_phy_offset[:n], n,
                                        DispatchConfig(), delays) is not None
    assert batches and in_loop           # the loop decided batches itself (not only handed them back)


@native_vs_numpy("dispatch_columns")
def test_dispatch_native_equals_numpy_with_many_topics():
    """Thousands of distinct topics in one batch (the loop's topic table grows past its first size, some
    topics repeat): the same groups, names and units as numpy."""
    from rmqtool.broker.dispatch import DispatchConfig, RecordColumns, _dispatch_native, schedule_delays
    records = [{"topic": f"t{(i * 7919) % 5000}", "tags": "TagA", "keys": f"k{i} x", "uniq_key": f"{i:032X}",
                "phy_offset": 100 * i, "size": 100, "queue_id": i % 3, "queue_offset": i} for i in range(6000)]
    batch = RecordColumns.from_records(records)
    assert _dispatched(batch) == _dispatched(batch, core=None)
    assert _dispatch_native(native.core, batch, batch.buf, batch.phy_offset, len(batch), DispatchConfig(),
                            schedule_delays(batch)) is not None


@native_vs_numpy("dispatch_columns")
def test_dispatch_columns_checks_its_arguments():
    """Wrong shapes, a span outside the buffer and unsorted overrides are ValueErrors before any byte
    is read; too little key room is -2 (the caller grows it)."""
    from rmqtool.broker.dispatch import _transaction_tables
    core, n = native.core, 3
    buf = np.frombuffer(b"TopicA" + b"k1 k2", np.uint8)
    z = np.zeros(n, np.int64)
    cols = [z.copy() for _ in range(14)]
    cols[7][:] = 6                                  # topic_len: "TopicA"
    cols[12][:], cols[13][:] = 6, 5                 # keys: "k1 k2"
    cols[11][:] = -1                                # no UNIQ_KEY
    none = (np.zeros(0, np.int64), np.zeros(0, np.int64))

    def call(cols=cols, room=8, overrides=none, tables=_transaction_tables()):
        keys = (np.empty(room, np.int64), np.empty(room, np.int32), np.empty(room, np.int64), np.empty(room, np.int64))
        return core.dispatch_columns(buf, tuple(cols), None, tables, overrides, True,
                                     tuple(np.empty(n, np.int64) for _ in range(6)), keys, (np.empty(n, np.int64),))
    assert call() == (3, 6, 1)
    assert call(room=5) == -2
    bad = [c.copy() for c in cols]
    bad[13][1] = 6                                  # KEYS one byte past the buffer
    with pytest.raises(ValueError, match="record 1 has a span outside"):
        call(bad)
    with pytest.raises(ValueError, match="one length"):
        call(cols[:13] + [z[:2]])
    with pytest.raises(ValueError, match="override"):
        call(overrides=(np.array([2, 1], np.int64), np.array([5, 6], np.int64)))
    with pytest.raises(ValueError, match="tables"):
        call(tables=(3, np.ones(2, np.uint8), np.ones(4, np.uint8), 35, 32))
