"""Controller mode: the epoch file and broker identity are read as the broker reads them (files
built here the way upstream writes them), `info` shows them, and `compare` says where a slave
truncates (EpochFileCache.findConsistentPoint) and whether the bytes bear it out."""
from __future__ import annotations

import json
import shutil
import zlib
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from conftest import load_answers, reference_store, run_cli
from rmqtool.broker.epochs import EpochRange, consistent_point, epoch_ranges
from rmqtool.io.controller import ControllerFileError, read_broker_identity, read_epochs

SIZE = 98304                      # the reference stores' commitlog file size
END = 3728338                     # basic's valid end


# -- builders: upstream's writers, line by line ------------------------------------------------------

def checkpoint_text(entries) -> str:
    """CheckpointFile.write (CheckpointFile.java:77-95): each entry as EpochEntrySerializer.toLine
    ("%d-%d", EpochFileCache.java:310) plus System.lineSeparator; UtilAll.crc32 (the low 31 bits of
    CRC32, UtilAll.java:298-302) of those lines' UTF-8; then count, crc, lines."""
    body = "".join(f"{e}-{s}\n" for e, s in entries)
    crc = zlib.crc32(body.encode("utf-8")) & 0x7FFFFFFF
    return f"{len(entries)}\n{crc}\n{body}"


def append_epochs(root: Path, *entries) -> None:
    """EpochFileCache.appendEntry flushes the whole cache each time (:101-118, :291-297), through
    MixAll.string2File, which first copies the old content to ``.bak`` (MixAll.java:218-227)."""
    done = []
    for entry in entries:
        done.append(entry)
        main = root / "epochFileCheckpoint"
        if main.exists():
            (root / "epochFileCheckpoint.bak").write_bytes(main.read_bytes())
        main.write_text(checkpoint_text(done), encoding="utf-8")


def write_identity(root: Path, cluster: str, name: str, broker_id: int, code: str | None = None) -> None:
    """BrokerMetadata.encodeToStr (BrokerMetadata.java:44-50): fields joined by '#', no line end;
    TempBrokerMetadata adds the register check code (TempBrokerMetadata.java:47-54) in ``-temp``."""
    text = f"{cluster}#{name}#{broker_id}" + ("" if code is None else f"#{code}")
    (root / ("brokerIdentity" if code is None else "brokerIdentity-temp")).write_text(text, encoding="utf-8")


def offset(i: int) -> int:
    return load_answers("basic")["messages"][i]["phyOffset"]


# -- the epoch file --------------------------------------------------------------------------------

def test_upstream_example_bytes_and_read_back(tmp_path):
    """CheckpointFile's own example (CheckpointFile.java:38-42): 2 entries, crc 773307083."""
    assert checkpoint_text([(7, 7000), (8, 8000)]) == "2\n773307083\n7-7000\n8-8000\n"
    append_epochs(tmp_path, (7, 7000), (8, 8000))
    ef = read_epochs(tmp_path)
    assert (ef.used, ef.entries, ef.main.declared_count, ef.main.declared_crc) == ("main", [(7, 7000), (8, 8000)], 2, 773307083)
    assert ef.main.crc == 773307083 and ef.main.crc_checked and ef.bak.status == "unread"


def test_no_files_is_none(tmp_path):
    assert read_epochs(tmp_path) is None and read_broker_identity(tmp_path) is None


def test_bad_crc_falls_back_to_bak(tmp_path):
    append_epochs(tmp_path, (1, 0), (2, 500), (3, 900))
    main = tmp_path / "epochFileCheckpoint"
    main.write_text(main.read_text().replace("3-900", "3-901"))
    ef = read_epochs(tmp_path)
    assert ef.main.status == "crc" and ef.used == "bak" and ef.entries == [(1, 0), (2, 500)]
    assert "rejected" in ef.why and "crc32" in ef.why


def test_crc_zero_is_not_checked(tmp_path):
    (tmp_path / "epochFileCheckpoint").write_text("2\n0\n1-0\n2-500\n")
    ef = read_epochs(tmp_path)
    assert ef.used == "main" and not ef.main.crc_checked and ef.entries == [(1, 0), (2, 500)]


@pytest.mark.parametrize("main,why", [
    (None, "missing"),
    ("0\n0\n", "holds no entries"),
    ("3\n0\n1-0\n2-500\n", "declares 3 entries"),
    (b"2\n0\n1-0\n2-5\xff\n", "not UTF-8"),
])
def test_main_not_usable_goes_to_bak(tmp_path, main, why):
    append_epochs(tmp_path, (1, 0), (2, 500))      # .bak: [1]
    path = tmp_path / "epochFileCheckpoint"
    if main is None:
        path.unlink()
    else:
        path.write_bytes(main if isinstance(main, bytes) else main.encode())
    ef = read_epochs(tmp_path)
    assert ef.used == "bak" and ef.entries == [(1, 0)] and why in ef.why


def test_both_rejected_loads_nothing(tmp_path):
    (tmp_path / "epochFileCheckpoint").write_text("2\n5\n1-0\n2-500\n")
    (tmp_path / "epochFileCheckpoint.bak").write_text("1\n5\n1-0\n")
    ef = read_epochs(tmp_path)
    assert ef.used is None and ef.entries == [] and "logs the error" in ef.why


def test_lines_that_are_not_entries_are_skipped_but_counted_in_the_crc(tmp_path):
    """fromLine returns null unless the line splits into two fields (EpochFileCache.java:317-325);
    Java's split drops trailing empty fields, so "2-500-" is an entry; the CRC covers every line."""
    body = "1-0\n\n2-500-\n-3-7\n"
    crc = zlib.crc32(body.encode()) & 0x7FFFFFFF
    (tmp_path / "epochFileCheckpoint").write_text(f"2\n{crc}\n{body}")
    ef = read_epochs(tmp_path)
    assert ef.used == "main" and ef.entries == [(1, 0), (2, 500)] and ef.main.skipped_lines == [4, 6]


def test_bak_is_not_read_when_main_is_whole(tmp_path):
    append_epochs(tmp_path, (1, 0))
    (tmp_path / "epochFileCheckpoint.bak").write_text("garbage\n")
    assert read_epochs(tmp_path).entries == [(1, 0)]


@pytest.mark.parametrize("text,line", [
    ("", 1), ("2\n", 2), ("x\n0\n", 1), ("2\n0 \n", 2), ("1\n0\n1-x\n", 3),
    ("1\n0\n2147483648-0\n", 3), ("1\n0\n1-9223372036854775808\n", 3), ("1\n0\n1-0\n\n+-5\n", 5),
])
def test_unparseable_numbers_stop_with_file_and_line(tmp_path, text, line):
    """Integer/Long.parseInt throw NumberFormatException, which neither CheckpointFile.read nor
    initCacheFromFile catches (CheckpointFile.java:107-110,151; EpochFileCache.java:62)."""
    (tmp_path / "epochFileCheckpoint").write_text(text)
    with pytest.raises(ControllerFileError) as exc:
        read_epochs(tmp_path)
    assert str(exc.value).startswith(f"{tmp_path / 'epochFileCheckpoint'}:{line}: ")


@settings(max_examples=300, deadline=None)
@given(st.one_of(
    st.binary(max_size=200),
    st.lists(st.one_of(st.integers(-3, 2 ** 64).map(str), st.sampled_from(["", "-", "1-2", "+1-+2", "1-2-", "\r", "٣-4"])),
             max_size=8).map(lambda xs: "\n".join(xs).encode()),
))
def test_parser_raises_only_its_error(tmp_path_factory, data):
    root = tmp_path_factory.mktemp("fuzz")
    (root / "epochFileCheckpoint").write_bytes(data)
    try:
        ef = read_epochs(root)
    except ControllerFileError as exc:
        assert "\n" not in str(exc)
        return
    assert ef is None or ef.used in ("main", "bak", None)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(-2 ** 31, 2 ** 31 - 1), st.integers(0, 2 ** 63 - 1)), min_size=1, max_size=20))
def test_what_upstream_writes_reads_back(tmp_path_factory, entries):
    root = tmp_path_factory.mktemp("rt")
    (root / "epochFileCheckpoint").write_text(checkpoint_text(entries))
    ef = read_epochs(root)
    negative_epoch = any(e < 0 for e, _ in entries)  # "-1-5" splits into 3 fields: skipped, count fails
    if negative_epoch:
        assert ef.used is None and ef.main.status == "count"
    else:
        assert (ef.used, ef.entries, ef.main.crc) == ("main", entries, ef.main.declared_crc)


# -- the broker identity ---------------------------------------------------------------------------

def test_identity_and_temp(tmp_path):
    write_identity(tmp_path, "DefaultCluster", "broker-a", 2, code="10.0.0.1:30911;1700000000000")
    ident = read_broker_identity(tmp_path)
    assert ident.pending and ident.broker_id == 2 and ident.register_check_code == "10.0.0.1:30911;1700000000000"
    write_identity(tmp_path, "DefaultCluster", "broker-a", 3)
    ident = read_broker_identity(tmp_path)
    assert (ident.cluster_name, ident.broker_name, ident.broker_id, ident.pending) == ("DefaultCluster", "broker-a", 3, False)


@pytest.mark.parametrize("text", ["c#b", "c#b#x", "#b#1", "c#b#1\n", "c##1"])
def test_bad_identity(tmp_path, text):
    (tmp_path / "brokerIdentity").write_text(text)
    with pytest.raises(ControllerFileError, match="brokerIdentity:1: "):
        read_broker_identity(tmp_path)


# -- the rules: EpochFileCacheTest's samples --------------------------------------------------------

def _cache(entries, end=None):
    ranges = epoch_ranges(entries, 2 ** 62)
    if end is None:               # no setLastEpochEntryEndOffset: the last epoch stays open
        return ranges[:-1] + [EpochRange(ranges[-1].epoch, ranges[-1].start, None)]
    return epoch_ranges(entries, end)


@pytest.mark.parametrize("local,local_end,master,master_end,point", [
    ([(1, 100), (2, 300), (3, 500)], None, [(1, 100), (2, 300), (3, 450)], None, 450),   # Sample1
    ([(1, 100), (2, 300), (3, 500)], 700, [(1, 100), (2, 300), (3, 500)], 600, 600),     # Sample2
    ([(1, 100), (2, 300), (3, 500)], None, [(1, 200), (2, 500)], None, -1),              # Sample3
    ([(1, 100), (2, 300), (3, 500), (4, 800)], None, [(1, 100), (2, 300), (3, 500)], 700, 700),  # Sample4
])
def test_upstream_consistent_point_samples(local, local_end, master, master_end, point):
    """EpochFileCacheTest.testFindConsistentPointSample1-4 (sample 1 compares epoch 2: 300-500 vs 300-450)."""
    assert consistent_point(_cache(local, local_end), _cache(master, master_end))[1] == point


# -- the CLI: info and compare ---------------------------------------------------------------------

def _controller_store(tmp_path, name, *entries) -> Path:
    root = tmp_path / name
    shutil.copytree(reference_store("basic"), root)
    append_epochs(root, *entries)
    write_identity(root, "DefaultCluster", "broker-a", 1 if name == "a" else 2)
    return root


def test_info_json_and_table(tmp_path):
    root = _controller_store(tmp_path, "a", (1, 0), (2, offset(1000)))
    r = run_cli("info", root, "-f", "json")
    ctl = json.loads(r.out)[0]["controller"]
    assert ctl["broker_identity"]["broker_id"] == 1 and ctl["max_offset"] == END
    assert ctl["epochs"] == [{"epoch": 1, "start": 0, "end": offset(1000)}, {"epoch": 2, "start": offset(1000), "end": END}]
    assert ctl["epoch_file"]["used"] == "main" and ctl["epoch_file"]["main"]["crc_checked"]
    out = run_cli("info", root).err                # the text: on stderr when stdout is piped
    assert "controller cluster DefaultCluster  broker broker-a  id 1  registered" in out
    assert f"  epoch 2: {offset(1000)} - {END} (the CommitLog's valid end)" in out
    assert "entries, crc32" in out and "matches" in out


def test_info_on_a_malformed_epoch_file_is_one_line_exit_2(tmp_path):
    root = _controller_store(tmp_path, "a", (1, 0))
    (root / "epochFileCheckpoint").write_text("1\n0\n1-zero\n")
    r = run_cli("info", root)
    assert r.code == 2 and r.err.count("\n") == 1 and "epochFileCheckpoint:3: start offset 'zero'" in r.err


def _plant(root: Path, i: int) -> None:
    """A different byte in record i's body (the walk here does not check body CRCs)."""
    m = load_answers("basic")["messages"][i]
    with open(root / "commitlog" / f"{m['phyOffset'] // SIZE * SIZE:020d}", "r+b") as fh:
        fh.seek(m["phyOffset"] % SIZE + m["size"] - 1)
        last = fh.read(1)
        fh.seek(-1, 1)
        fh.write(bytes([last[0] ^ 0xFF]))


def _compare(a, b):
    r = run_cli("compare", a, b, "-f", "json")
    return r.code, json.loads(r.out)[0]


def test_compare_a_new_master_from_record_2000(tmp_path):
    """a led epoch 2 from record 1000 and wrote to the end; b followed to record 2000, was elected for
    epoch 3 there and wrote other records: b ranks first (last epoch 3), epoch 2 matches, and a
    truncates at b's end of epoch 2 (record 2000), exactly where the bytes stop agreeing."""
    a = _controller_store(tmp_path, "a", (1, 0), (2, offset(1000)))
    b = _controller_store(tmp_path, "b", (1, 0), (2, offset(1000)), (3, offset(2000)))
    _plant(b, 2000)
    code, c = _compare(a, b)
    v = c["epochs"]
    assert code == 1 and c["status"] == "diverged" and c["agreed"] == 2000
    assert (v["master"], v["last_agreed_epoch"], v["consistent_point"]) == ("b", 2, offset(2000))
    assert v["truncates"]["a"] == END - offset(2000) and v["bytes_agree_to"] == offset(2000) and v["agrees_with_bytes"]
    out = run_cli("compare", a, b).out
    assert f"consistent point {offset(2000)} (last agreed epoch 2), likely master b" in out


def test_compare_a_divergence_inside_an_epoch(tmp_path):
    """Same epochs, but the bytes differ from record 1500, inside epoch 2: the slave would keep
    bytes the master does not have; the epoch view says it disagrees with the bytes."""
    a = _controller_store(tmp_path, "a", (1, 0), (2, offset(1000)))
    b = _controller_store(tmp_path, "b", (1, 0), (2, offset(1000)), (3, offset(2000)))
    _plant(b, 1500)
    v = _compare(a, b)[1]["epochs"]
    assert v["consistent_point"] == offset(2000) and v["bytes_agree_to"] == offset(1500)
    assert v["agrees_with_bytes"] is False and "do not show it" in v["reason"]


def test_compare_no_common_epoch(tmp_path):
    a = _controller_store(tmp_path, "a", (1, 0), (2, offset(1000)))
    b = _controller_store(tmp_path, "b", (1, 0), (2, offset(900)))
    v = _compare(a, b)[1]["epochs"]
    assert v["last_agreed_epoch"] == 1 and v["consistent_point"] == offset(900)
    b2 = _controller_store(tmp_path, "b2", (1, 50))
    v = _compare(a, b2)[1]["epochs"]
    assert v["consistent_point"] == -1 and "no consistent point" in v["reason"]


def test_compare_without_epoch_files_is_unchanged(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    shutil.copytree(reference_store("basic"), a)
    shutil.copytree(reference_store("basic"), b)
    code, c = _compare(a, b)
    assert code == 0 and "epochs" not in c
    assert [line.split()[0] for line in run_cli("compare", a, b).out.splitlines()] == ["compare:", "a", "b"]
