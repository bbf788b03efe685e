"""Local rebuild with files cut into pieces (few files, several workers): the output is the
sequential walk's, byte for byte, wherever the cuts fall, including inside records, after the
end of the data, and where the resync lands on a stray anchor inside a body."""
from __future__ import annotations

import json

import pytest

import rmqtool.ops.rebuild as rb
from rmqtool.engines import ordered
from conftest import load_answers, reference_store
from formats import commitlog as cl
from rmqtool.io.indexfile import IndexGeometry
from rmqtool.io.store import Store
from rmqtool.ops.writer import Geometry, write_rows
from test_rebuild import index_contents, tree

GEOMETRY = IndexGeometry(61, 350)


@pytest.mark.parametrize("name", ["basic", "mixed", "crashed"])
@pytest.mark.parametrize("piece", [4096, 20000])
def test_pieces_give_the_sequential_result(store_copy, tmp_path, monkeypatch, name, piece):
    root = store_copy(name)
    whole = rb.rebuild_all(Store(root), GEOMETRY, cq_file_size=800, output=tmp_path / "whole", workers=1)
    monkeypatch.setattr(ordered, "MIN_PIECE", piece)
    cut = rb.rebuild_all(Store(root), GEOMETRY, cq_file_size=800, output=tmp_path / "cut", workers=2)
    for a, b in zip(whole, cut):
        assert (a.records, a.range_end, a.end_kind) == (b.records, b.range_end, b.end_kind)
    assert tree(tmp_path / "cut" / "consumequeue") == tree(tmp_path / "whole" / "consumequeue")
    assert index_contents(tmp_path / "cut" / "index") == index_contents(tmp_path / "whole" / "index")
    if name != "crashed":
        assert tree(tmp_path / "cut" / "consumequeue") == tree(reference_store(name) / "consumequeue")


def test_pieces_split_files_only_when_workers_would_idle(monkeypatch):
    monkeypatch.setattr(ordered, "MAX_PIECE", 1 << 40)      # no cap: only idle workers cut files
    files = [(f"f{i}", i << 27, 0, None, 1 << 27) for i in range(6)]
    assert [p[4] for p in ordered.pieces(files, 1)] == [True] * 6
    many = ordered.pieces(files, 2)
    assert len(many) > 6 and sum(p[4] for p in many) == 6
    for path, _, _, hi, _ in files:          # pieces of a file tile it; the last keeps the file's own end
        mine = [p for p in many if p[0] == path]
        assert mine[0][2] == 0 and mine[-1][3] is hi
        assert all(a[3] == b[2] for a, b in zip(mine, mine[1:]))
    big = [(f"f{i}", i << 30, 0, None, 1 << 30) for i in range(40)]
    assert len(ordered.pieces(big, 2)) == 40      # enough files: whole files


def test_pieces_are_at_most_max_piece_whatever_the_store_size():
    """A piece's results wait whole for the consumer: with more than one worker no piece is larger than
    ``MAX_PIECE``, however many files there are (the consumer's memory does not grow with the store);
    the pieces still tile each file and only its first starts at a known record."""
    for count, size in ((1, 1 << 30), (8, 1 << 30), (40, 1 << 30), (3, 3 << 27)):
        files = [(f"f{i}", i * size, 0, None, size) for i in range(count)]
        got = ordered.pieces(files, 2)
        for path, _, _, hi, _ in files:
            mine = [p for p in got if p[0] == path]
            assert [p[4] for p in mine] == [True] + [False] * (len(mine) - 1)
            assert mine[0][2] == 0 and mine[-1][3] is hi and all(a[3] == b[2] for a, b in zip(mine, mine[1:]))
            ends = [p[3] if p[3] is not None else size for p in mine]
            assert max(e - p[2] for e, p in zip(ends, mine)) <= ordered.MAX_PIECE * 3 // 2   # the last takes a sliver


def _cut_once(monkeypatch, cut_at: int) -> list[int]:
    """Cut a one-file store in two at ``cut_at``; returns the start of every piece scanned again."""
    monkeypatch.setattr(ordered, "pieces", lambda files, workers: [
        (path, base, lo, cut_at, True) for path, base, lo, hi, size in files] + [
        (path, base, cut_at, hi, False) for path, base, lo, hi, size in files])
    rescans = []
    real = rb._dispatch_file

    def spy(args):
        if args[2] not in (0, cut_at):
            rescans.append(args[2])
        return real(args)
    monkeypatch.setattr(rb, "_dispatch_file", spy)
    return rescans


def test_a_stray_anchor_at_a_cut_is_rescanned(tmp_path, monkeypatch):
    """A body holding a record header whose PHYSICALOFFSET is its own position fools the
    resync; the piece is scanned again from where the chain arrived."""
    geometry = Geometry(commitlog_file_size=1 << 16, cq_file_size=800, hash_slots=61, index_entries=350)
    rows = [{"topic": "Cut", "body": f"{i:04d}" + "x" * 296, "queue_id": 0,
             "store_timestamp": 1_790_000_000_000 + i, "properties": {"KEYS": f"k{i}"}} for i in range(40)]
    probe = tmp_path / "probe"
    write_rows(probe, [("r", r) for r in rows], geometry)
    body_at = (probe / "commitlog" / f"{0:020d}").read_bytes().index(b"0020xxxx")   # same place below
    fake_at = body_at + 16
    fake = bytearray(cl.MESSAGE_HEAD_SIZE)
    for name, value, width in (("total_size", 200, 4), ("magic", cl.MESSAGE_MAGIC_V1, 4),
                               ("physical_offset", fake_at, 8)):
        at = cl.MESSAGE_HEAD_OFFSETS[name]
        fake[at:at + width] = value.to_bytes(width, "big")
    body = bytearray(rows[20]["body"].encode())
    body[16:16 + len(fake)] = fake
    rows[20] = dict(rows[20], body=body.hex(), body_encoding="hex")
    root = tmp_path / "store"
    write_rows(root, [("r", r) for r in rows], geometry)
    store = Store(root)
    whole = rb.rebuild_all(store, GEOMETRY, cq_file_size=800, output=tmp_path / "whole", workers=1)

    seg = store.commitlog.files[0]
    cut_at = fake_at - 8
    assert rb.find_record_start(seg.path, seg.start, cut_at) == fake_at   # the resync is fooled
    rescans = _cut_once(monkeypatch, cut_at)
    cut = rb.rebuild_all(store, GEOMETRY, cq_file_size=800, output=tmp_path / "cut", workers=1)
    assert len(rescans) == 1 and rescans[0] > fake_at    # again, from the record after the one holding the fake
    assert (cut[0].records, cut[0].range_end, cut[0].end_kind) == (whole[0].records, whole[0].range_end,
                                                                  whole[0].end_kind)
    assert whole[0].records == 40
    assert tree(tmp_path / "cut" / "consumequeue") == tree(tmp_path / "whole" / "consumequeue")
    assert index_contents(tmp_path / "cut" / "index") == index_contents(tmp_path / "whole" / "index")


def test_both_installs_finish_before_an_error_is_raised():
    import threading
    import time
    done = threading.Event()

    def slow_ok():
        time.sleep(0.2)
        done.set()
        return "cq"

    def fails():
        raise ValueError("index failed")

    assert rb._both(lambda: "cq", lambda: "ix") == ("cq", "ix")
    with pytest.raises(ValueError, match="index failed"):
        rb._both(slow_ok, fails)
    assert done.is_set()                       # the other install was not left running

    def cq_fails():
        time.sleep(0.1)
        raise OSError("cq failed")
    with pytest.raises(OSError, match="cq failed"):
        rb._both(cq_fails, lambda: "ix")


def test_an_interactive_rebuild_all_asks_one_question_at_a_time(store_copy, monkeypatch):
    import threading
    root = store_copy("basic")
    asked = []

    def confirm(result):
        asked.append((result.kind, threading.current_thread() is threading.main_thread()))
        return False                               # nothing is replaced

    cq, ix = rb.rebuild_all(Store(root), GEOMETRY, cq_file_size=800, confirm=confirm, workers=1)
    assert asked == [("consumequeue", True), ("index", True)]


@pytest.mark.parametrize("seed", range(16))
def test_pieces_equal_the_sequential_walk_on_mutated_commitlogs(store_copy, tmp_path, monkeypatch, seed):
    """Flips, zeroed ranges, garbage, absurd sizes in the CommitLog: cut into 4 KiB pieces, the
    rebuild ends where the sequential one does and writes the same bytes (or fails the same way)."""
    import random

    from fuzz import seeds as sd
    from fuzz.mutate import Mutator
    from rmqtool.errors import RmqError
    rng = random.Random(seed)
    root = store_copy(rng.choice(["basic", "mixed", "crashed"]))
    for path in rng.sample(sorted((root / "commitlog").iterdir()), 2):
        data = path.read_bytes()
        path.write_bytes(Mutator(rng).mutate(data, sd.record_hints(data)))

    def run(out, workers):
        try:
            cq, ix = rb.rebuild_all(Store(root), GEOMETRY, cq_file_size=800, output=out, workers=workers)
        except RmqError as exc:
            return type(exc).__name__, exc.message
        return ((cq.records, cq.range_end, cq.end_kind), tree(out / "consumequeue"), index_contents(out / "index"))

    whole = run(tmp_path / "whole", 1)
    monkeypatch.setattr(ordered, "MIN_PIECE", 4096)
    assert run(tmp_path / "cut", 2) == whole


def test_a_piece_starting_in_a_body_of_zeros_is_rescanned(tmp_path, monkeypatch):
    """A piece whose first 64 KiB are zero counts as past the data; when the chain arrives
    there anyway (a body of zeros across the cut) the piece is scanned again from it."""
    geometry = Geometry(commitlog_file_size=1 << 20, cq_file_size=800, hash_slots=61, index_entries=350)
    rows = [{"topic": "Zeros", "body": f"m{i}", "queue_id": 0, "store_timestamp": 1_790_000_000_000 + i,
             "properties": {"KEYS": f"z{i}"}} for i in range(30)]
    rows[10] = dict(rows[10], body=bytes(200_000).hex(), body_encoding="hex")
    root = tmp_path / "store"
    write_rows(root, [("r", r) for r in rows], geometry)
    store = Store(root)
    whole = rb.rebuild_all(store, GEOMETRY, cq_file_size=800, output=tmp_path / "whole", workers=1)
    data = store.commitlog.files[0].path.read_bytes()
    cut_at = data.index(bytes(100_000)) + 1000
    assert rb.past_data_end(store.commitlog.files[0].path, cut_at)
    rescans = _cut_once(monkeypatch, cut_at)
    cut = rb.rebuild_all(store, GEOMETRY, cq_file_size=800, output=tmp_path / "cut", workers=1)
    assert len(rescans) == 1
    assert whole[0].records == cut[0].records == 30
    assert (cut[0].range_end, cut[0].end_kind) == (whole[0].range_end, whole[0].end_kind)
    assert tree(tmp_path / "cut" / "consumequeue") == tree(tmp_path / "whole" / "consumequeue")
    assert index_contents(tmp_path / "cut" / "index") == index_contents(tmp_path / "whole" / "index")


@pytest.mark.parametrize("nth,inside", [(1, 0), (400, 0), (661, 0), (300, 7)])
def test_pieces_stop_at_to_offset_like_the_sequential_walk(store_copy, tmp_path, monkeypatch, nth, inside):
    """--to-offset at a record start, or inside a record (that record is still taken)."""
    root = store_copy("mixed")
    cut = load_answers("mixed")["messages"][nth]["phyOffset"] + inside
    whole = rb.rebuild_index(Store(root), GEOMETRY, to_offset=cut, output=tmp_path / "whole", workers=1)
    monkeypatch.setattr(ordered, "MIN_PIECE", 4096)
    piece = rb.rebuild_index(Store(root), GEOMETRY, to_offset=cut, output=tmp_path / "cut", workers=2)
    assert (piece.records, piece.range_end, piece.end_kind) == (whole.records, whole.range_end, whole.end_kind)
    assert whole.records == nth + (1 if inside else 0) and whole.range_end == cut
    assert index_contents(tmp_path / "cut") == index_contents(tmp_path / "whole")
