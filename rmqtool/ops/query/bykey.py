"""`query-key`: upstream IndexService lookup, confirmed on the CommitLog, plus un-indexed ranges.

Default mode: walk every index file for ``topic#key`` (every known topic when no topic
is given), read each hash hit's record and keep it only if its topic is the one
searched and its UNIQ_KEY or a KEYS token equals the key and its store time is in the
window. CommitLog ranges that no usable index file covers (before the first file,
between files, after the last entry, or the range of an unusable file) are scanned,
and what is found there is reported as not indexed. ``raw`` returns upstream's
unconfirmed hits in upstream's order.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from formats.indexfile import KEY_JOINER
from rmqtool.errors import RmqError, UnreadableError, UsageError
from rmqtool.output.schema import record_to_dict
from rmqtool.kernels.javastring import index_key_hash
from rmqtool.ops.query.indexwalk import IndexSet
from rmqtool.io.dledger_layout import is_entry_file
from rmqtool.io.fileio import ReadOnlyFile
from rmqtool.broker.indexkeys import match_kind, scan_batch
from rmqtool.records.single import ChainWalk, RecordReader
from rmqtool.io import storage

LONG_MAX = (1 << 63) - 1
GAP_CHUNK_MIN, GAP_CHUNK_MAX = 1 << 16, 8 << 20   # scan windows: small gaps read little
UPSTREAM_MAX_NUM = 64          # maxMsgsNumBatch: IndexService caps maxNum at this


@dataclass
class Hit:
    batch: object                 # one RecordBatch holding the record
    row: int
    phy_offset: int
    match: str                    # "uniq_key" or "keys"
    indexed: bool                 # found through the index (False: only by scanning)
    index_file: str | None = None

    def record(self, body: str = "none") -> dict:
        rec = record_to_dict(self.batch, self.row, body=body)
        rec["matched_by"] = self.match
        rec["indexed"] = self.indexed
        rec["index_file"] = self.index_file
        return rec


@dataclass
class KeyResult:
    hits: list[Hit] = field(default_factory=list)
    raw: list[dict] = field(default_factory=list)       # --raw: {topic, phy_offset}
    notes: list[str] = field(default_factory=list)      # for stderr
    topics: list[str] = field(default_factory=list)
    scanned_bytes: int = 0
    unconfirmed: int = 0                                # hash hits that were not the key


def store_topics(store) -> list[str]:
    """Topic names from consumequeue/ and batchconsumequeue/ directories and config/topics.json."""
    names = set()
    for base in (store.consumequeue_dir, store.batchconsumequeue_dir):
        try:
            names.update(e.name for e in storage.scandir(base) if e.is_dir(follow_symlinks=False))
        except (FileNotFoundError, NotADirectoryError):
            pass
    topics = store.config_file("topics.json")
    table = topics.get("topicConfigTable") if isinstance(topics, dict) else None
    if isinstance(table, dict):                 # else absent, unreadable or not the broker's shape
        names.update(table)
    return sorted(names)


def open_index(store, notes: list[str]) -> IndexSet | None:
    paths = store.index_files()
    if not paths:
        notes.append(f"no index files in {store.index_dir}")
        return None
    try:
        geometry = store.index_geometry
    except RmqError as exc:
        notes.append(f"index unusable ({exc})")
        return None
    index = IndexSet(paths, geometry.hash_slots, geometry.index_entries)
    for f in index.files:
        if f.problem:
            notes.append(f"index file {f.path} unusable: {f.problem}")
    return index


def query_key(store, key: str, topic: str | None = None, begin: int = 0, end: int = LONG_MAX,
              max_num: int | None = None, raw: bool = False, scan: bool = False,
              uniq_only: bool = False, rollback: bool = False, progress=None) -> KeyResult:
    """The records ``key`` names, through the index and by a scan of what it does not cover (or of
    everything: ``scan``). ``progress(done, total)``: CommitLog bytes of the scan walked so far."""
    if not key:
        raise UsageError("the key is empty")
    if max_num is not None and max_num <= 0:
        raise UsageError(f"--limit must be positive, not {max_num}")
    res = KeyResult()
    res.topics = [topic] if topic is not None else store_topics(store)
    index = None if scan and not raw else open_index(store, res.notes)
    try:
        if raw:
            if index is not None:
                cap = min(max_num, UPSTREAM_MAX_NUM) if max_num is not None else LONG_MAX
                for t in res.topics:
                    h = index_key_hash(t + KEY_JOINER + key)
                    res.raw += [{"topic": t, "phy_offset": p}
                                for p in index.upstream_query(h, cap, begin, end, res.notes)]
            return res
        reader = RecordReader(store)
        try:
            found: dict[int, Hit] = {}
            if index is not None:
                _index_hits(index, reader, res, key, begin, end, uniq_only, found)
                for name, why in index.damaged.items():
                    res.notes.append(f"index file {name} is damaged ({why}); scanning its range")
                gaps = uncovered_ranges(store, index)
            else:
                if not scan:
                    res.notes.append("falling back to a CommitLog scan")
                gaps = uncovered_ranges(store, None)
            advance = _meter(progress, sum(hi - lo for lo, hi in gaps))
            for lo, hi in gaps:
                res.scanned_bytes += _scan_range(store, lo, hi, key, topic, begin, end,
                                                 (uniq_only, rollback), found, res, advance)
        finally:
            reader.close()
    finally:
        if index is not None:
            index.close()
    hits = sorted(found.values(), key=lambda h: -h.phy_offset)
    if max_num is not None:
        hits = hits[:max_num]
    res.hits = hits
    not_indexed = sum(1 for h in hits if not h.indexed)
    if index is not None and not_indexed:
        res.notes.append(f"{not_indexed} match(es) are in the CommitLog but not in the index")
    return res


def _index_hits(index, reader, res, key, begin, end, uniq_only, found) -> None:
    for t in res.topics:
        h = index_key_hash(t + KEY_JOINER + key)
        for phy, f, _ in index.candidates(h, begin, end):
            if phy in found:
                continue
            batch = reader.read(phy)
            if batch is None:
                res.unconfirmed += 1
                continue
            kind = match_kind(batch, 0, key, t, uniq_only)
            ts = int(batch.store_timestamp[0])
            if kind and begin <= ts <= end:
                found[phy] = Hit(batch, 0, phy, kind, True, f.name)
            else:
                res.unconfirmed += 1


def uncovered_ranges(store, index: IndexSet | None) -> list[tuple[int, int]]:
    """CommitLog [lo, hi) ranges whose records no usable (undamaged) index file covers.

    A file covers [beginPhyOffset, endPhyOffset]; the record at endPhyOffset is scanned
    again (a record's keys can still be going in), and duplicates are merged.
    """
    cl = store.commitlog
    if not cl.files:
        return []
    lo_all, hi_all = cl.min_offset, cl.end_offset
    covered = sorted((f.begin_phy_offset, f.end_phy_offset) for f in (index.files if index else [])
                     if f.has_entries and f.name not in index.damaged)
    gaps, cursor = [], lo_all
    for b, e in covered:
        if b > cursor:
            gaps.append((cursor, min(b, hi_all)))
        cursor = max(cursor, e)
    if cursor < hi_all:
        gaps.append((cursor, hi_all))
    return [(lo, hi) for lo, hi in gaps if lo < hi]


def _meter(progress, total: int):
    """``advance(n)``: n more bytes walked, reported to ``progress(done, total)`` (None: nothing)."""
    done = 0

    def advance(n: int) -> None:
        nonlocal done
        done += n
        if progress is not None:
            progress(min(done, total), total)
    return advance


def _scan_range(store, lo, hi, key, topic, begin, end, how, found, res, advance) -> int:
    scanned = 0
    cl = store.commitlog
    for seg in cl.files:
        if seg.start + cl.file_size <= lo or seg.start >= hi:
            continue
        start = max(lo - seg.start, 0)
        stop = min(hi - seg.start, cl.file_size)
        try:
            n, last = _walk(seg, start, stop, key, topic, begin, end, how, found, advance)
            scanned += n
            if last is not None:                 # the bulk scan ran (it imported numpy already)
                from rmqtool.records.scan import END_CORRUPT, find_record_start
            if last is not None and last.kind == END_CORRUPT and last.position == start:
                again = find_record_start(seg.path, seg.start, start + 1, stop)
                if again is not None:
                    res.notes.append(f"{seg.path}@{start}: no record starts there; resumed at {again}")
                    scanned += _walk(seg, again, stop, key, topic, begin, end, how, found, advance)[0]
        except UnreadableError:
            raise                # a scan that skipped a file would be a partial answer
        except RmqError as exc:
            res.notes.append(f"scan stopped: {exc}")
    return scanned


def _walk(seg, start, stop, key, topic, begin, end, how, found, advance):
    """Scan [start, stop) of one file: a small first window (gaps are usually a few
    records, and the live tail is followed by zeros), then large windows if it goes on.

    The first window's chain of whole MESSAGE records is taken one record at a time with
    ``struct`` (``_chain_walk``), which needs no numpy; the bulk scan takes over wherever
    that walk stops short of a clean end (tests/test_query.py proves the two equal)."""
    scanned, pos, done = _chain_walk(seg, start, stop, key, topic, begin, end, how, found)
    advance(scanned)
    if done:
        return scanned, None
    from rmqtool.records.scan import END_RANGE, FileScan
    chunk = GAP_CHUNK_MIN
    while True:
        upto = stop if chunk == GAP_CHUNK_MAX else min(stop, pos + chunk)
        scan = FileScan(seg.path, seg.start, lo=pos, hi=upto, chunk_size=chunk)
        scanned += _consume(scan, key, topic, begin, end, how, found, advance)
        last = scan.end
        if last is None or last.kind != END_RANGE or last.position >= stop or chunk == GAP_CHUNK_MAX:
            return scanned, last
        pos, chunk = last.position, GAP_CHUNK_MAX


def _chain_walk(seg, start, stop, key, topic, begin, end, how, found) -> tuple[int, int, bool]:
    """Follow TOTALSIZE from ``start`` through at most ``GAP_CHUNK_MIN`` bytes below ``stop``,
    decoding each MESSAGE with ``struct`` and confirming it like an index hit; (bytes of the
    records taken, where it stopped, whether it reached a clean end: ``stop``, a BLANK or the
    zeros after the data). Anything else (a DLedger data file, a record past the window,
    bytes that are not a record) is left to the bulk scan from where it stopped."""
    if is_entry_file(seg.path):
        return 0, start, False
    uniq_only, rollback = how
    with ReadOnlyFile(seg.path) as fh:
        size = fh.size()
        window = fh.read(start, max(0, min(stop, start + GAP_CHUNK_MIN, size) - start), exact=False)
    chain = ChainWalk(window, start, str(seg.path), seg.start, limit=min(stop, size) - start)
    scanned = 0
    for rec in chain:
        phy = int(rec.phy_offset[0])
        if begin <= int(rec.store_timestamp[0]) <= end and phy not in found:
            kind = match_kind(rec, 0, key, topic, uniq_only, rollback)
            if kind:
                found[phy] = Hit(rec, 0, phy, kind, False)
        scanned += int(rec.size[0])
    if chain.end == "clean":
        return scanned, chain.position, True
    return scanned, chain.position, chain.end == "limit" and chain.position >= stop


def _consume(scan, key, topic, begin, end, how, found, advance) -> int:
    scanned = 0
    for batch in scan:
        for row, kind in scan_batch(batch, key, topic, begin, end, *how):
            phy = int(batch.phy_offset[row])
            if phy not in found:
                found[phy] = Hit(batch, row, phy, kind, False)
        if len(batch):
            n = int(batch.position[-1] + batch.size[-1] - batch.position[0])
            scanned += n
            advance(n)
    return scanned
