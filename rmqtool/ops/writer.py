"""`write`: append exact broker records to a store (new or existing), then dispatch them.

Records come from JSONL rows in the schema of ``rmqtool/output/schema.py`` (what ``dump
--format jsonl`` prints; only ``topic`` and ``body`` are required) or from the
``synthetic`` generator. Each record is placed like ``CommitLog.doAppend``: a BLANK ends
a file when the record plus 8 bytes does not fit; files are created at the configured
size. Queue offsets continue per topic/queue; the new records are dispatched to the
ConsumeQueue and IndexFiles with ``rmqtool.broker.dispatch`` (appending to the existing last
files like the broker) and the checkpoint is written.

Crash safety: nothing is written into the store itself. The run stages the whole new store
in the sibling ``<root>.rmqtool-tmp-<ts>`` (a hard-link mirror of the root; a file is
copied, holes kept, just before its first write: the last commitlog file, the last CQ file
of each queue appended to, the live index file, the checkpoint), then swaps it in with
``rmqtool.io.install`` (fsync, journal, atomic exchange); the old root becomes
``<root>.backup-<UTC ts>``, then ``rmqtool.io.writebackup.shrink`` reduces it to the old bytes of
the ranges this run wrote (each write is noted: ``_note``) and a manifest that puts them back
(``write --undo``). A new store is staged and renamed into place. A failed run removes its stage.

Memory does not grow with the store: the open index file is appended to through rebuild's
``IndexBuilder`` and ``IndexFileWriter`` (``broker/dispatch``) without being loaded (``open_index_image``), and the
store's end is found with one small CommitLog window and one ConsumeQueue file at a time.

The run holds the rmqtool writer lock (``rmqtool.io.storelock``: the broker's ``lock`` file,
which the stage shares by hard link so the lock survives the swap, plus a side file beside
the root) from before it recovers leftovers until the new root is in place. A store holding a
symlink is refused: the stage would write through it and the backup would share it.
"""
from __future__ import annotations

import base64
import binascii
import os
import random
import struct
import time
from dataclasses import dataclass, replace, field
from pathlib import Path
from typing import Callable, Iterable, Iterator

import numpy as np

from formats import commitlog as cl
from formats.checkpoint import CHECKPOINT_FILE_SIZE, Checkpoint
from formats.consumequeue import CQ_UNIT_SIZE, DEFAULT_BCQ_FILE_SIZE, DEFAULT_CQ_FILE_SIZE
from formats.derive import struct_of
from formats.indexfile import DEFAULT_HASH_SLOTS, DEFAULT_INDEX_ENTRIES
from rmqtool.broker.cqbuild import BcqBuilder, CqBuilder
from rmqtool.broker.dispatch import (DispatchConfig, goes_to_consumequeue, IndexBuilder, IndexFileImage,
                              IndexFileWriter, RecordColumns, dispatch_batch, index_file_names,
                              open_index_image, queue_groups)
from rmqtool.records.encode import (Host, MessageFields, effective_sys_flag, encode, encode_blank, fill_property_crc,
                                    reserve_property_crc, magic_for, needs_blank,
                            patch_phy_offset)
from rmqtool.io import install as inst, ownership
from rmqtool.io.fileio import read_file, regular_file_present
from rmqtool.broker.queuekinds import QueueKinds, detect as detect_queue_kinds
from rmqtool.errors import RefusedError, RmqError, UsageError
from formats import dledger as dl
from rmqtool.io.dledger_layout import DATA_DIR as DLEDGER_DATA_DIR, INDEX_DIR as DLEDGER_INDEX_DIR
from rmqtool.io.dledger_layout import members as dledger_members
from rmqtool.io.topicpath import queue_dir, topic_path_problem
from rmqtool.io.indexfile import IndexGeometry
from rmqtool.io.consumequeue_ext import ext_file_size
from rmqtool.io import writebackup

DEFAULT_COMMITLOG_FILE_SIZE = 1 << 30
DEFAULT_STORE_HOST = "127.0.0.1:10911"
DEFAULT_BORN_HOST = "127.0.0.1:0"
DISPATCH_CHUNK = 65536
#: the CommitLog window of the walk that finds an existing store's end (its read buffer and
#: columns are most of what the walk holds; a small window keeps a write's memory the same
#: whatever the store's size: into a 2M-message store 1,000 messages cost the RSS of a
#: 3k-message one)
STATE_WINDOW = 2 << 20
PROGRESS_EVERY = 1024             # records between progress callbacks (a dispatch chunk is too coarse)


@dataclass
class Geometry:
    commitlog_file_size: int = DEFAULT_COMMITLOG_FILE_SIZE
    cq_file_size: int = DEFAULT_CQ_FILE_SIZE
    hash_slots: int = DEFAULT_HASH_SLOTS
    index_entries: int = DEFAULT_INDEX_ENTRIES
    bcq_file_size: int | None = None          # BatchConsumeQueue files (None: the store's, else upstream's default)
    #: ConsumeQueueExt files (mappedFileSizeConsumeQueueExt): set = a broker with enableConsumeQueueExt,
    #: whose CQ units hold ext addresses (docs/format-cq-ext.md); None = off (a store holding
    #: consumequeue_ext/ turns it on by itself, at that store's file size)
    cq_ext_file_size: int | None = None


@dataclass
class WriteSummary:
    store: str
    created: bool
    records: int = 0
    bytes: int = 0
    first_offset: int = 0
    end_offset: int = 0
    commitlog_files: list[str] = field(default_factory=list)
    cq_units: int = 0
    cq_files: int = 0
    index_entries: int = 0
    index_files: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    backup: str | None = None
    backup_files: int = 0                  # files the backup's manifest lists (changed or created by the run)
    backup_bytes: int = 0                  # disk space the backup takes (allocated blocks)
    recovered: list[str] = field(default_factory=list)
    seconds: float = 0.0
    geometry: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        d = dict(self.__dict__)
        d["messages_per_second"] = round(self.records / self.seconds) if self.seconds else None
        return d


# --- UNIQ_KEY ---------------------------------------------------------------------------------
class UniqKeyGenerator:
    """Client message ids in the Java client's format (format.md §2.7):
    IP || short pid || int classloader hash || int ms-since-month-start || short counter."""

    def __init__(self, ip: bytes = bytes([127, 0, 0, 1]), pid: int | None = None, salt: int | None = None,
                 counter: int = 0):
        pid = os.getpid() if pid is None else pid
        salt = random.getrandbits(32) if salt is None else salt
        self.fix = ip + struct.pack(">hI", (pid & 0xFFFF) - ((pid & 0x8000) << 1), salt & 0xFFFFFFFF)
        self.counter = counter
        self._month: tuple[int, int] | None = None

    def _month_start(self, now_ms: int) -> int:
        t = time.localtime(now_ms / 1000)
        return int(time.mktime((t.tm_year, t.tm_mon, 1, 0, 0, 0, 0, 0, -1)) * 1000)

    def next(self, now_ms: int | None = None) -> str:
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        if self._month is None or not self._month[0] <= now_ms < self._month[1]:
            start = self._month_start(now_ms)
            t = time.localtime(now_ms / 1000)
            y, m = (t.tm_year + 1, 1) if t.tm_mon == 12 else (t.tm_year, t.tm_mon + 1)
            self._month = (start, int(time.mktime((y, m, 1, 0, 0, 0, 0, 0, -1)) * 1000))
        diff = now_ms - self._month[0]
        raw = self.fix + struct.pack(">IH", diff & 0xFFFFFFFF, self.counter & 0xFFFF)
        self.counter += 1
        return raw.hex().upper()


# --- rows -> fields ---------------------------------------------------------------------------
def _body_of(row: dict, where: str) -> bytes:
    """The stored body bytes; a row whose body_length disagrees (a lossy text rendering,
    or the inflated body of a compressed record) is refused rather than written wrong."""
    raw = _decode_body(row, where)
    stored = row.get("body_length")
    if isinstance(stored, int) and stored >= 0 and row.get("body") is not None and len(raw) != stored:
        what = ("the inflated body of a compressed record" if row.get("compression")
                else "a lossy rendering")
        raise UsageError(f"{where}: body has {len(raw)} bytes but body_length is {stored} ({what}); "
                         "write needs the stored bytes: dump with a lossless raw body (base64 of the "
                         "stored bytes)")
    return raw


def _decode_body(row: dict, where: str) -> bytes:
    body = row.get("body")
    enc = row.get("body_encoding") or "text"
    if body is None:
        if (row.get("body_length") or 0) > 0:
            raise UsageError(f"{where}: the row has no body but body_length {row['body_length']} "
                             "(dump with --body base64 to carry bodies)")
        return b""
    if enc == "text":
        return body.encode("utf-8", "surrogateescape")
    if enc == "hex":
        return bytes.fromhex(body)
    if enc in ("base64", "raw"):
        return _b64decode(body, "body", where)
    raise UsageError(f"{where}: unknown body_encoding {enc!r}")


def _b64decode(text, name: str, where: str) -> bytes:
    """Strict base64 (a typo is an error, not bytes silently dropped)."""
    if not isinstance(text, str):
        raise UsageError(f"{where}: {name} must be a base64 string, not {type(text).__name__}")
    try:
        return base64.b64decode(text, validate=True)
    except binascii.Error as exc:
        raise UsageError(f"{where}: {name} is not valid base64 ({exc})") from None


def _properties_of(row: dict, uniq: UniqKeyGenerator | None, now_ms: int, where: str) -> bytes:
    raw = row.get("properties_raw")
    if raw is not None:
        return _b64decode(raw, "properties_raw", where)
    props = row.get("properties")
    if props is not None and not isinstance(props, dict):
        raise UsageError(f"{where}: properties must be an object of names to values")
    for name, value in (props or {}).items():
        if not isinstance(value, str):
            raise UsageError(f"{where}: property {name!r} must be a string, not {type(value).__name__}")
    if props is None:
        props = {}
        if uniq is not None:
            props[cl.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX] = uniq.next(now_ms)
    else:
        props = dict(props)
    for field_name, prop in (("keys", cl.PROPERTY_KEYS), ("tags", cl.PROPERTY_TAGS),
                             ("uniq_key", cl.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)):
        if row.get(field_name) is not None and prop not in props:
            props[prop] = row[field_name]
    return cl.encode_properties(props)


def fields_from_row(row: dict, where: str, uniq: UniqKeyGenerator | None, now_ms: int) -> MessageFields:
    """A JSONL row -> MessageFields (queue offset and commitlog offset assigned later)."""
    if not isinstance(row, dict) or not isinstance(row.get("topic"), str) or not row["topic"]:
        raise UsageError(f"{where}: a row needs a non-empty string 'topic'")
    problem = topic_path_problem(row["topic"])
    if problem is not None:
        raise UsageError(f"{where}: {problem}; refused: it cannot name a ConsumeQueue directory")
    if "body" not in row:
        raise UsageError(f"{where}: a row needs 'body'")
    ints = {name: _int_field(row, name, where) for name in FIXED_WIDTH_FIELDS}
    try:
        store_ts = ints["store_timestamp"] if ints["store_timestamp"] is not None else now_ms
        return _in_range(MessageFields(
            topic=row["topic"], body=_body_of(row, where), properties=_properties_of(row, uniq, store_ts, where),
            queue_id=ints["queue_id"] or 0, flag=ints["flag"] or 0,
            queue_offset=ints["queue_offset"] if ints["queue_offset"] is not None else -1,
            sys_flag=ints["sys_flag"] or 0,
            born_timestamp=ints["born_timestamp"] if ints["born_timestamp"] is not None else store_ts,
            born_host=_host_of(row, "born_host", DEFAULT_BORN_HOST, where),
            store_timestamp=store_ts, store_host=_host_of(row, "store_host", DEFAULT_STORE_HOST, where),
            reconsume_times=ints["reconsume_times"] or 0,
            prepared_transaction_offset=ints["prepared_transaction_offset"] or 0))
    except (ValueError, TypeError, KeyError, AttributeError, OverflowError) as exc:
        raise UsageError(f"{where}: {exc}") from None
    except OSError as exc:             # a time the C library cannot convert (EOVERFLOW)
        raise UsageError(f"{where}: {exc.strerror or exc} (a time field out of the calendar's range?)") from None


#: the record's fixed-width integer fields a row may give, with their declared byte width
FIXED_WIDTH_FIELDS = {name: cl.Message.subcons[[sc.name for sc in cl.Message.subcons].index(name)].sizeof()
                      for name in ("queue_id", "flag", "queue_offset", "sys_flag", "born_timestamp",
                                   "store_timestamp", "reconsume_times", "prepared_transaction_offset")}
#: a host's port: the broker stores 4 bytes, but Java's InetSocketAddress takes 0..65535 on decode
MAX_PORT = 65535


def _int_field(row: dict, name: str, where: str) -> int | None:
    """A fixed-width integer of the record: an integer (not a float, a bool or a string)."""
    value = row.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise UsageError(f"{where}: {name} {value!r} is not an integer")
    bits = 8 * FIXED_WIDTH_FIELDS[name]
    if not -(1 << (bits - 1)) <= value < 1 << (bits - 1):      # before anything computes with it
        raise UsageError(f"{where}: {name} {value} does not fit a {bits}-bit field")
    return value


def _host_of(row: dict, name: str, default: str, where: str) -> Host:
    text = row.get(name) or default
    if not isinstance(text, str):
        raise UsageError(f"{where}: {name} must be a string 'ip:port', not {type(text).__name__}")
    try:
        host = Host.parse(text)
    except ValueError as exc:
        raise UsageError(f"{where}: {name} {text!r} is not 'ip:port' ({exc})") from None
    if not 0 <= host.port <= MAX_PORT:
        raise UsageError(f"{where}: {name} port {host.port} is outside 0..{MAX_PORT}")
    return host


def _in_range(f: MessageFields) -> MessageFields:
    """Reject values the record's fixed-width fields cannot hold (ValueError, reported per row)."""
    for name, width in FIXED_WIDTH_FIELDS.items():
        value, bits = getattr(f, name), 8 * width
        if not -(1 << (bits - 1)) <= value < 1 << (bits - 1):
            raise ValueError(f"{name} {value} does not fit a {bits}-bit field")
    for host in (f.born_host, f.store_host):
        if not 0 <= host.port <= MAX_PORT:
            raise ValueError(f"port {host.port} is outside 0..{MAX_PORT}")
    topic = f.topic.encode("utf-8")
    limit = 0x7FFF if magic_for(f.topic) == cl.MESSAGE_MAGIC_V2 else 0x7F
    if len(topic) > limit or len(f.properties) > cl.PROPERTIES_MAX_LENGTH:
        raise ValueError(f"topic ({len(topic)} bytes, at most {limit}) or properties ({len(f.properties)} "
                         f"bytes, at most {cl.PROPERTIES_MAX_LENGTH}) too long for the record")
    return f


# --- synthetic --------------------------------------------------------------------------------
@dataclass
class SyntheticSpec:
    count: int
    topics: int = 4
    queues: int = 8
    key_cardinality: int = 200_000
    body_min: int = 400
    body_max: int = 600
    tags: tuple[str, ...] = ("TagA", "TagB")
    seed: int = 1
    topic_prefix: str = "BenchTopic"
    start_ms: int | None = None


def synthetic_fields(spec: SyntheticSpec) -> Iterator[MessageFields]:
    """Messages shaped like baselines.md: round-robin topics x queues, random-size bodies,
    alternating tags, a UNIQ_KEY on every message, key ``bk-(i mod K)`` and on odd
    messages also ``order-(i/3)``."""
    rnd = np.random.default_rng(spec.seed)
    pool = rnd.integers(0x21, 0x7F, size=1 << 20, dtype=np.uint8).tobytes()
    sizes = rnd.integers(spec.body_min, spec.body_max + 1, size=spec.count)
    starts = rnd.integers(0, len(pool) - spec.body_max - 1, size=spec.count)
    start_ms = spec.start_ms if spec.start_ms is not None else int(time.time() * 1000)
    uniq = UniqKeyGenerator(pid=spec.seed, salt=spec.seed * 2654435761)
    store_host, born_host = Host.parse(DEFAULT_STORE_HOST), Host(bytes([10, 0, 0, 1]), 50000)
    topics = [f"{spec.topic_prefix}{t}" for t in range(spec.topics)]
    enc = cl.encode_properties
    for i in range(spec.count):
        ts = start_ms + i // 200
        keys = f"bk-{i % spec.key_cardinality}"
        if i % 2:
            keys += f" order-{i // 3}"
        props = {cl.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX: uniq.next(ts), cl.PROPERTY_KEYS: keys}
        if spec.tags:
            props[cl.PROPERTY_TAGS] = spec.tags[i % len(spec.tags)]
        props[cl.PROPERTY_WAIT_STORE_MSG_OK] = "true"
        s = int(starts[i])
        f = MessageFields(topic=topics[i % spec.topics], body=pool[s:s + int(sizes[i])],
                          properties=enc(props), queue_id=(i // spec.topics) % spec.queues,
                          queue_offset=-1, born_timestamp=ts - 3, born_host=born_host,
                          store_timestamp=ts, store_host=store_host)
        f.parsed_properties = props          # what decode_properties would return
        yield f


# --- the writer -------------------------------------------------------------------------------
class _CommitLogAppender:
    """Appends records to commitlog files like CommitLog.doAppend (BLANK at file end)."""

    def __init__(self, directory: Path, file_size: int, start_offset: int):
        self.dir, self.file_size = directory, file_size
        self.base = start_offset - start_offset % file_size
        self.pos = start_offset - self.base
        self.fd = -1
        self.pending: list[bytes] = []
        self.pending_from = self.pos
        self.pending_len = 0
        self.files: list[str] = []
        self.on_write = None              # (path, offset, length): hears every write
        self._open()

    def _open(self) -> None:
        path = self.path = self.dir / f"{self.base:020d}"
        inst.make_private(path)
        self.fd = ownership.open_file(path, os.O_RDWR)
        if os.fstat(self.fd).st_size < self.file_size:
            os.ftruncate(self.fd, self.file_size)     # a new mapped file: all zeros
        self.files.append(path.name)
        self.pending_from = self.pos

    def _flush(self) -> None:
        if self.pending:
            data = b"".join(self.pending)
            inst.pwrite_all(self.fd, data, self.pending_from)
            if self.on_write is not None:
                self.on_write(self.path, self.pending_from, len(data))
            self.pending, self.pending_len = [], 0
            if 0 < self.pos < self.file_size:
                inst.crash_point("mid-file")
        self.pending_from = self.pos

    def place(self, length: int) -> int:
        """Commitlog offset where a record of ``length`` bytes goes (writing a BLANK first if needed)."""
        if length + cl.END_FILE_MIN_BLANK_LENGTH > self.file_size:
            raise UsageError(f"a {length}-byte record cannot fit a {self.file_size}-byte commitlog file")
        if needs_blank(length, self.file_size - self.pos):
            self._roll(encode_blank(self.file_size - self.pos))
        return self.base + self.pos

    def _roll(self, filler: bytes) -> None:
        """Fill the rest of the file with ``filler`` and continue in the next file."""
        self._append(filler)
        self.pos = self.file_size
        self._flush()
        os.close(self.fd)
        inst.crash_point("build")
        self.base += self.file_size
        self.pos = 0
        self._open()

    def record_offset(self, length: int) -> int:
        """Where the next record of a placed put goes."""
        return self.base + self.pos

    def write(self, raw: bytes) -> None:
        self._append(raw)

    def _append(self, raw: bytes) -> None:
        self.pending.append(raw)
        self.pending_len += len(raw)
        self.pos += len(raw)
        if self.pending_len >= (8 << 20):
            self._flush()

    def close(self) -> None:
        self._flush()
        if self.fd >= 0:
            os.fsync(self.fd)
            os.close(self.fd)
            self.fd = -1

    @property
    def offset(self) -> int:
        return self.base + self.pos


_ENTRY_HEADER = struct_of(dl.EntryHeader)      # packed positionally, in the declaration's order:
assert tuple(dl.ENTRY_HEADER_OFFSETS) == ("magic", "size", "index", "term", "pos", "channel", "chain_crc",
                                          "body_crc", "body_length")


class _DLedgerAppender(_CommitLogAppender):
    """Appends records as a DLedger member of a RocketMQ broker does (docs/format-dledger.md):
    each record is the body of one entry (index counting from 0, term 0, its own pos, channel
    and CRCs 0 as DLedger writes them), so its offset is the entry's pos + ENTRY_BODY_OFFSET; an
    entry that leaves less than MIN_BLANK_LEN of its data file goes to the next file behind the
    DLedger blank. ``close`` writes the entry index (one unit per entry) and the member's
    ``checkpoint`` and ``currterm``."""

    def __init__(self, member: Path, file_size: int, self_id: str):
        self.member, self.self_id = member, self_id
        (member / DLEDGER_DATA_DIR).mkdir(parents=True, exist_ok=True)
        (member / DLEDGER_INDEX_DIR).mkdir(exist_ok=True)
        super().__init__(member / DLEDGER_DATA_DIR, file_size, 0)
        self.entries: list[tuple[int, int]] = []       # (pos, size) of every entry

    def place(self, length: int) -> int:
        return self.base + self.pos                     # each entry is placed by record_offset

    def record_offset(self, length: int) -> int:
        size = dl.ENTRY_BODY_OFFSET + length
        if size + dl.MIN_BLANK_LEN > self.file_size:
            raise UsageError(f"a {length}-byte record cannot fit a {self.file_size}-byte DLedger data file")
        if size + dl.MIN_BLANK_LEN > self.file_size - self.pos:
            rest = self.file_size - self.pos
            self._roll(dl.BlankHeader.build(dict(magic=dl.BLANK_MAGIC, size=rest)) + bytes(rest - dl.BLANK_HEADER_SIZE))
        return self.base + self.pos + dl.ENTRY_BODY_OFFSET

    def write(self, raw: bytes) -> None:
        pos, size = self.base + self.pos, dl.ENTRY_BODY_OFFSET + len(raw)
        self._append(_ENTRY_HEADER.pack(dl.ENTRY_MAGIC, size, len(self.entries), 0, pos, 0, 0, 0, len(raw)) + raw)
        self.entries.append((pos, size))

    def close(self) -> None:
        super().close()
        units = np.zeros(len(self.entries), dtype=dl.INDEX_UNIT_DTYPE)
        if len(units):
            pos, size = np.asarray(self.entries, dtype=np.int64).T
            units["magic"], units["pos"], units["size"] = dl.ENTRY_MAGIC, pos, size
            units["index"], units["term"] = np.arange(len(units)), 0
        per_file = dl.DEFAULT_INDEX_FILE_SIZE // dl.INDEX_UNIT_SIZE
        for k in range(max(1, -(-len(units) // per_file))):
            path = self.member / DLEDGER_INDEX_DIR / f"{k * dl.DEFAULT_INDEX_FILE_SIZE:020d}"
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                os.ftruncate(fd, dl.DEFAULT_INDEX_FILE_SIZE)   # a mapped file: zeros (sparse) past the units
                inst.pwrite_all(fd, units[k * per_file:(k + 1) * per_file].tobytes(), 0)
                os.fsync(fd)
            finally:
                os.close(fd)
        last = len(self.entries) - 1
        texts = {"checkpoint": f"committedIndex={last}\nendIndex={last}\n",
                 "checkpoint.bak": f"committedIndex={last}\nendIndex={last}\n",
                 "currterm": f"voteLeader={self.self_id}\ncurrTerm=0\n"}
        for name, text in texts.items():
            fd = os.open(self.member / name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                os.write(fd, text.encode("ascii"))
                os.fsync(fd)
            finally:
                os.close(fd)


def _existing_state(store, geometry: Geometry):
    """(valid end, next queue offsets, last store timestamp) of an existing store."""
    from rmqtool.io.consumequeue import queue_tail
    from rmqtool.records.scan import FileEnd, walk_store
    next_off: dict[tuple[str, int], int] = {}
    max_phy = 0
    for ref in store.queues():               # memory: one ConsumeQueue file, one CommitLog window
        next_off[(ref.topic, ref.queue_id)], queue_max = queue_tail(store.queue(ref.topic, ref.queue_id))
        max_phy = max(max_phy, queue_max)
    end, last_ts = 0, 0
    if store.commitlog.files:
        end = store.commitlog.min_offset
        for item in walk_store(store, check_crc=True, stop_at_break=True, reuse_buffer=True,
                               chunk_size=STATE_WINDOW):
            if isinstance(item, FileEnd):
                end = item.log_end
                continue
            last_ts = int(item.store_timestamp[-1])
            lag = item.phy_offset >= max_phy         # records the CQ has not seen yet
            tx = item.sys_flag & cl.TRANSACTION_MASK
            for i in np.flatnonzero(lag & goes_to_consumequeue(tx)).tolist():
                key = (item.topic(i), int(item.queue_id[i]))
                next_off[key] = max(next_off.get(key, 0), int(item.queue_offset[i]) + 1)
    return end, next_off, last_ts


class StoreWriter:
    """Append records to ``root`` (created if missing), dispatch them, write the checkpoint.

    Everything is written into a stage beside ``root`` (module docstring); ``close``
    installs it, ``abort`` throws it away."""

    def __init__(self, root: Path, geometry: Geometry | None = None, config: DispatchConfig | None = None,
                 progress: Callable[[int, int], None] | None = None, command: str = "rmqtool write",
                 dledger_id: str | None = None, prop_crc: bool = False):
        self.t0 = time.perf_counter()
        self.prop_crc = prop_crc          # enabledAppendPropCRC: every record ends in a __CRC32# property
        self.dledger_id = dledger_id      # make a new DLedger-mode store: this member's entries
        self.command = command            # named by refusals of other runs while this one holds the lock
        self.given = Path(root)
        self.root = Path(os.path.realpath(root))      # stage beside the real directory, not a symlink
        self.config = config or DispatchConfig()
        self.progress = progress
        self.expected = 0                 # records expected in total, when known (progress)
        self._progress_at = 0             # records at the last progress callback
        self.out: Path | None = None      # the stage
        self._lock = None                 # rmqtool.io.storelock.WriterLock, held from _stage to close/abort
        try:
            self._stage()
            self._setup(geometry)
        except BaseException:
            self.abort()
            raise

    def _stage(self) -> None:
        """Take the writer lock (refused while a broker or another rmqtool holds it), finish
        what a crashed run left, refuse symlinks in the store, stage the root."""
        from rmqtool.io.storelock import LOCK_NAME, WriterLock
        from rmqtool.io.store import Store
        root = self.root
        ownership.makedirs(root.parent)
        if root.exists() and not root.is_dir():
            raise UsageError("the store path exists and is not a directory", root)
        self._lock = WriterLock(root, self.command).acquire()
        self.recovered = inst.recover_leftovers(root)    # only ever under the lock
        if root.is_dir():
            self._lock.take_store_lock()                 # the root may have been moved into place just now
            for sub in ("consumequeue", "index"):        # an interrupted rebuild inside the store
                self.recovered += inst.recover_leftovers(root / sub)
            regular_file_present(root / "checkpoint")    # a directory or FIFO there: named in the store
            links = inst.symlinks_under(root)
            if links:
                path, dest = links[0]
                more = f" (and {len(links) - 1} more)" if len(links) > 1 else ""
                raise RefusedError(f"the store holds a symlink to {dest!r}{more}; write never writes "
                                   "through links (the backup would share it): replace it by what it "
                                   "points to", path)
        from rmqtool.io.rocksdb_cq import is_rocksdb_dir
        if (root / "consumequeue").is_dir() and is_rocksdb_dir(root / "consumequeue"):
            raise RefusedError("the store keeps its ConsumeQueues in RocksDB, which rmqtool never writes: write "
                               "appends ConsumeQueue files", root / "consumequeue")
        if root.is_dir() and not (root / "commitlog").is_dir() and dledger_members(root):
            raise RefusedError("a DLedger-mode store (its commit log is "
                               f"{dledger_members(root)[0].name}/data): write appends plain CommitLog "
                               "records and would fork the log; it does not write DLedger entries", root)
        if root.is_dir() and os.stat(root).st_dev != os.stat(root.parent).st_dev:
            raise RefusedError("the store root is a mount point: write stages the new store beside it "
                               "and swaps the two, which needs one filesystem", root)
        if os.path.lexists(root / "commitlog") and not (root / "commitlog").is_dir():
            raise UsageError("the store's commitlog is not a directory", root / "commitlog")
        self.created = not (root / "commitlog").is_dir()
        if self.dledger_id is not None and root.is_dir() and any(
                (root / sub).exists() for sub in ("commitlog", "consumequeue", "index")):
            raise UsageError("write --layout dledger makes a new store; this one already holds data", root)
        self.out = inst.new_build_dir(root)
        if root.is_dir():
            inst.link_tree(root, self.out)
            staged = self.out / LOCK_NAME              # the same inode, so the lock survives the swap
            if not os.path.samestat(os.stat(root / LOCK_NAME), os.stat(staged)):
                raise RefusedError("the store lock could not be hard-linked into the stage", root / LOCK_NAME)
        else:
            self._lock.hold(self.out / LOCK_NAME)      # a new store gets the broker's lock file, held
        if self.dledger_id is None:
            ownership.makedirs(self.out / "commitlog")
        else:
            (self.out / f"{dl.MEMBER_DIR_PREFIX}{self.dledger_id}" / DLEDGER_DATA_DIR).mkdir(parents=True, exist_ok=True)
        inst.crash_point("staged")
        # read the existing state from the root itself (errors name its files), write the stage
        self.store = Store(self.out if self.created else root)

    def _setup(self, geometry: Geometry | None) -> None:
        created = self.created
        self.geometry = geometry or self.infer_geometry()
        g = self.geometry
        if g.cq_file_size % CQ_UNIT_SIZE:
            raise UsageError(f"--cq-file-size {g.cq_file_size} is not a multiple of {CQ_UNIT_SIZE}")
        if not created and self.store.commitlog.files and self.store.commitlog.file_size != g.commitlog_file_size:
            raise UsageError(f"the store's commitlog files are {self.store.commitlog.file_size} bytes, "
                             f"not {g.commitlog_file_size}", self.store.commitlog.files[-1].path)
        end, self.next_offset, self.last_ts = (0, {}, 0) if created else _existing_state(self.store, g)
        self._queue_ends = dict(self.next_offset)     # each queue's end as found (where _write_cq appends)
        if not created:                   # dispatch as the broker that wrote the store did
            kinds = detect_queue_kinds(self.store, self.config.kinds.multi_dispatch or None)
            self.config = replace(self.config, kinds=replace(
                kinds, batch_cq_topics=kinds.batch_cq_topics | self.config.kinds.batch_cq_topics))

        self.summary = WriteSummary(str(self.given), created, first_offset=end, end_offset=end,
                                    geometry={k: v for k, v in g.__dict__.items()
                                              if not (k == "cq_ext_file_size" and v is None)},
                                    recovered=list(self.recovered))
        self._written: dict[str, list[tuple[int, int]]] = {}     # stage file -> ranges written (the backup's)
        if self.dledger_id is None:
            self.appender = _CommitLogAppender(self.out / "commitlog", g.commitlog_file_size, end)
        else:
            self.appender = _DLedgerAppender(self.out / f"{dl.MEMBER_DIR_PREFIX}{self.dledger_id}",
                                             g.commitlog_file_size, self.dledger_id)
        self.appender.on_write = self._note
        # the queues' units appended as they are dispatched, by rebuild's builders (``broker/cqbuild``)
        files = {"open_fd": self._open_staged, "makedirs": ownership.makedirs, "on_write": self._note, "sync": True}
        self.cq = CqBuilder(g.cq_file_size, build=self.out / "consumequeue", starts=self._cq_start, **files)
        self._bcq = BcqBuilder(g.bcq_file_size or DEFAULT_BCQ_FILE_SIZE, build=self.out / "batchconsumequeue",
                               starts=self._bcq_start, **files)
        self._rows: list[dict] = []
        self._index = self._index_builder()
        self._ext = self._ext_builder()
        self._last_cq_ts = 0              # store time of the last record dispatched to a CQ
        self._dispatch_stopped = False

    def infer_geometry(self) -> Geometry:
        g = Geometry()
        if self.store.commitlog.files:
            g.commitlog_file_size = self.store.commitlog.file_size
        g.cq_file_size = self.store.cq_file_size() or g.cq_file_size
        g.cq_ext_file_size = ext_file_size(self.store.root)
        if self.store.index_files():
            ig = self.store.index_geometry
            g.hash_slots, g.index_entries = ig.hash_slots, ig.index_entries
        return g

    def _index_builder(self) -> IndexBuilder:
        """rebuild's IndexBuilder, writing each file as it fills (``IndexFileWriter``); the last file,
        when not full, is appended to without being loaded (``open_index_image``: its header and
        the slot pages the new keys reach)."""
        g = self.geometry
        files = self.store.index_files()
        open_image, seed_phy, seed_ts, self._open_path, self._pages = None, 0, 0, None, None
        if files:
            last, pages = open_index_image(files[-1], g.hash_slots, g.index_entries)
            if not last.full:
                open_image, self._open_path, self._pages = last, files[-1], pages
            else:
                seed_phy = int(last.header["end_phy_offset"][0])
                seed_ts = int(last.header["end_timestamp"][0])
        self._names = index_file_names([p.name for p in files])
        return IndexBuilder(g.hash_slots, g.index_entries, self._sink, seed_phy, seed_ts, open_image=open_image,
                            open_file=self._open_index_file,
                            load_slots=self._pages.load if self._pages is not None else None)

    def _ext_builder(self):
        """``cqbuild.ExtBuilder`` into the stage when the store keeps ConsumeQueueExt files (or
        ``--cq-ext`` makes it one), each queue appended at its files' data end (the write position
        ``ConsumeQueueExt.recover`` finds, S/ConsumeQueueExt.java:268-306@4.9.7)."""
        from rmqtool.broker.cqbuild import ExtBuilder
        from rmqtool.io.consumequeue_ext import EXT_DIR, ExtQueue, ext_queues
        g = self.geometry
        if g.cq_ext_file_size is None and not self.created:
            g.cq_ext_file_size = ext_file_size(self.store.root)
        if g.cq_ext_file_size is None:
            return None
        starts = {} if self.created else {(t, q): ExtQueue(d, g.cq_ext_file_size).end_offset()
                                          for t, q, d in ext_queues(self.store.root)}

        def open_fd(path):
            inst.make_private(path)                  # a staged file is a link to the store's until then
            return ownership.open_file(path, os.O_RDWR)
        ownership.makedirs(self.out / EXT_DIR)
        return ExtBuilder(g.cq_ext_file_size, self.out / EXT_DIR, open_fd, self._note, starts)

    def _put_ext(self, d, rows: list[dict]) -> None:
        """Each CQ unit of batch ``d`` puts its ext unit first and keeps the address it gets in
        place of its tagsCode (``putMessagePositionInfoWrapper``, S/ConsumeQueue.java:388-404@4.9.7):
        the unit holds the dispatcher's tagsCode and the record's store time (:391-393); its filter
        bitmap is empty, as it is from a broker without ``enableCalcFilterBitMap`` or consumer
        filters (B/filter/CommitLogDispatcherCalcBitMap.java:49-58@4.9.7 leaves it null). A light
        queue's unit keeps the tagsCode (``doDispatchLmqQueue``, :460-462)."""
        if self._ext is None or not len(d.cq_topic):
            return
        phys = np.fromiter((r["phy_offset"] for r in rows), np.int64, len(rows))     # increasing
        times = np.fromiter((r["store_timestamp"] for r in rows), np.int64, len(rows))
        ts = times[np.searchsorted(phys, np.asarray(d.cq_phy_offset, dtype=np.int64))]
        tags = np.array(d.cq_tags_code, dtype=np.int64)
        lmq = self.config.kinds.multi_dispatch
        for (topic, qid), grp in queue_groups(d):
            if lmq and topic.startswith(cl.LMQ_TOPIC_PREFIX):
                continue
            tags[grp] = self._ext.put_many(topic, qid, tags[grp], ts[grp])
        d.cq_tags_code = tags

    def _open_index_file(self) -> IndexFileWriter:
        index_dir = self.out / "index"
        ownership.makedirs(index_dir)
        pages = None
        if self._open_path is not None:
            path, self._open_path = index_dir / self._open_path.name, None
            inst.make_private(path)
            pages, self._pages = self._pages, None
        else:
            path = index_dir / next(self._names)
        self.summary.index_files.append(path.name)
        return IndexFileWriter(path, IndexGeometry(self.geometry.hash_slots, self.geometry.index_entries), pages,
                             on_write=lambda offset, length: self._note(path, offset, length))

    def _sink(self, image: IndexFileImage) -> None:
        """An index file is complete (``IndexFileWriter.close`` wrote it)."""
        self._last_index_end_ts = int(image.header["end_timestamp"][0])

    def _note(self, path: Path, offset: int, length: int) -> None:
        """``path`` (in the stage) got ``length`` bytes at ``offset``: the backup keeps what was there."""
        ranges = self._written.setdefault(os.path.relpath(path, self.out), [])
        if ranges and ranges[-1][0] + ranges[-1][1] == offset:
            ranges[-1] = (ranges[-1][0], ranges[-1][1] + length)
        else:
            ranges.append((offset, length))

    # -- appending ------------------------------------------------------------------------------
    def append(self, f: MessageFields) -> int:
        return self.append_batch([f])[0]

    def append_batch(self, batch: list[MessageFields]) -> list[int]:
        """Append records that the broker writes as one put: if together they do not fit
        the current file (plus 8 bytes), all of them move to the next file."""
        lengths = []
        for f in batch:
            tx = f.sys_flag & cl.TRANSACTION_MASK
            key = (f.topic, f.queue_id)
            if not goes_to_consumequeue(tx):
                if f.queue_offset < 0:
                    f.queue_offset = 0
            else:
                if f.queue_offset < 0:
                    f.queue_offset = self.next_offset.get(key, 0)
                self.next_offset[key] = max(self.next_offset.get(key, 0), f.queue_offset + 1)
        if self.prop_crc:
            for f in batch:
                f.properties = reserve_property_crc(f.properties)
                f.parsed_properties = None
        raws = [bytearray(encode(f)) for f in batch]
        lengths = [len(r) for r in raws]
        self.appender.place(sum(lengths))
        offsets = []
        for f, raw, length in zip(batch, raws, lengths):
            f.phy_offset = self.appender.record_offset(length)
            patch_phy_offset(raw, f.phy_offset)
            if self.prop_crc:
                fill_property_crc(raw)
            self.appender.write(bytes(raw))
            offsets.append(f.phy_offset)
            if not self._dispatch_stopped:    # the broker dispatches nothing after a failed record
                props = f.parsed_properties if f.parsed_properties is not None else (
                    cl.decode_properties(f.properties) if f.properties else {})
                self._rows.append({
                    "props": f.properties if (self.config.kinds.multi_dispatch
                                              or self.config.kinds.batch_cq_topics) else None,
                    "phy_offset": f.phy_offset, "size": length, "store_timestamp": f.store_timestamp,
                    "sys_flag": effective_sys_flag(f), "queue_id": f.queue_id, "queue_offset": f.queue_offset,
                    "topic": f.topic, "tags": props.get(cl.PROPERTY_TAGS), "keys": props.get(cl.PROPERTY_KEYS),
                    "uniq_key": props.get(cl.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX),
                    "delay": props.get(cl.PROPERTY_DELAY_TIME_LEVEL)})
            self.summary.records += 1
            self.summary.bytes += length
            self.last_ts = f.store_timestamp
        if len(self._rows) >= DISPATCH_CHUNK:
            self._dispatch()
        elif self.progress and self.summary.records - self._progress_at >= PROGRESS_EVERY:
            self._progress_at = self.summary.records
            self.progress(self.summary.records, self.expected)
        return offsets

    def _dispatch(self) -> None:
        if not self._rows:
            return
        rows, self._rows = self._rows, []
        d = dispatch_batch(RecordColumns.from_records(rows), self.config)
        if d.stop:
            self._dispatch_stopped = True
            self.summary.warnings.append(d.stop)
        last_cq = next((r for r in reversed(rows[:d.records])
                        if goes_to_consumequeue(r["sys_flag"] & cl.TRANSACTION_MASK)), None)
        if last_cq is not None:
            self._last_cq_ts = last_cq["store_timestamp"]
        self._put_ext(d, rows)
        self.cq.add(d)
        self._bcq.add(d)
        self._index.add(d.key_hash, d.key_phy_offset, d.key_store_timestamp, d.record_phy_offset)
        if self.progress:
            self.progress(self.summary.records, self.expected)

    def append_all(self, items: Iterable[MessageFields]) -> None:
        for f in items:
            self.append(f)

    # -- finishing ------------------------------------------------------------------------------
    def close(self) -> WriteSummary:
        """Finish the stage and swap it in (crash-safe, ``rmqtool.io.install``)."""
        try:
            self._dispatch()
            self.appender.close()
            self.summary.end_offset = self.appender.offset
            self.summary.commitlog_files = self.appender.files
            self._index.finish()
            self.summary.index_entries = self._index.entries
            self._finish_queues()
            if self._ext is not None:
                self._ext.finish()
            self._write_checkpoint()
            done = inst.install(self.root, self.out, drop_empty_backup=True)
        except BaseException:
            self.abort()
            raise
        self.out = None
        if done.backup and self.created and os.listdir(done.backup) == ["lock"]:
            os.unlink(os.path.join(done.backup, "lock"))   # an empty root: only the lock file taken in it
            os.rmdir(done.backup)
            done.backup = None
        self.summary.backup = done.backup
        if done.backup:
            try:                          # the old root -> the old bytes of what this run changed
                self.summary.backup_files, self.summary.backup_bytes = writebackup.shrink(
                    Path(done.backup), self.root, self._written)
            except (OSError, RmqError) as exc:    # the store is the new one; the backup stays whole
                self.summary.warnings.append(f"the backup {done.backup} is the whole old store root "
                                             f"(its manifest could not be written: {exc})")
                self.summary.backup_files, self.summary.backup_bytes = inst.copied_cost(done.backup)
        self._release()
        self.summary.seconds = time.perf_counter() - self.t0
        return self.summary

    def abort(self) -> None:
        """Throw the stage away; the store is left as it was."""
        if getattr(self, "_ext", None) is not None:
            self._ext.close()
        appender = getattr(self, "appender", None)
        if appender is not None and appender.fd >= 0:
            os.close(appender.fd)
            appender.fd = -1
        if self.out is not None and self.out.exists():
            import shutil
            shutil.rmtree(self.out, ignore_errors=True)
        self.out = None
        self._release()

    def _release(self) -> None:
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    @staticmethod
    def _open_staged(path: Path) -> int:
        inst.make_private(path)                  # a staged file is a link to the store's until then
        return ownership.open_file(path, os.O_RDWR)

    def _cq_start(self, topic: str, queue_id: int) -> int | None:
        """An existing queue's write position in units (the broker appends there), or None."""
        from rmqtool.io.consumequeue import queue_tail
        qdir = queue_dir(self.out / "consumequeue", topic, queue_id)
        if not (qdir.is_dir() and any(qdir.iterdir())):
            return None
        existing = self._queue_ends.get((topic, queue_id))     # _existing_state read its tail already
        if existing is None:
            existing, _ = queue_tail(self.store.queue(topic, queue_id))
        return existing

    def _bcq_start(self, topic: str, queue_id: int):
        """An existing BatchConsumeQueue's (units, last CommitLog offset, file size), or None:
        ``BatchConsumeQueue.putBatchMessagePositionInfo`` appends after its last unit."""
        from rmqtool.io.store import QueueRef
        from rmqtool.io.consumequeue import read_batch_queue
        if self.store is None:
            return None
        qdir = queue_dir(self.store.batchconsumequeue_dir, topic, queue_id)
        if not qdir.is_dir():
            return None
        count, max_phy = 0, -1
        for _, _, have in read_batch_queue(self.store, QueueRef(topic, queue_id, qdir)):
            count += len(have)
            if len(have):
                max_phy = int(have["commitlog_offset"][-1])
        files = self.store.queue(topic, queue_id, batch=True).files
        return count, max_phy, max((f.size for f in files), default=self._bcq.file_size)

    def _finish_queues(self) -> None:
        for builder in (self.cq, self._bcq):
            builder.finish()
            self.summary.cq_units += builder.units
            self.summary.cq_files += builder.files_touched
            self.summary.warnings += builder.warnings()

    def _write_checkpoint(self) -> None:
        path = self.out / "checkpoint"
        inst.make_private(path)
        values = {sc.name: 0 for sc in Checkpoint.subcons}
        if regular_file_present(path):
            old = read_file(path, 0, Checkpoint.sizeof(), exact=False)     # the fields only, never the whole file
            if len(old) == Checkpoint.sizeof():
                values.update({k: v for k, v in Checkpoint.parse(old).items() if k in values})
        if self.summary.records:
            values["physic_msg_timestamp"] = self.last_ts
            if self._last_cq_ts:
                values["logics_msg_timestamp"] = self._last_cq_ts
            end_ts = getattr(self, "_last_index_end_ts", 0)
            if end_ts:
                values["index_msg_timestamp"] = end_ts
        data = Checkpoint.build(values)
        data += bytes(CHECKPOINT_FILE_SIZE - len(data))
        fd = ownership.open_file(path, os.O_WRONLY)
        try:
            inst.pwrite_all(fd, data, 0)
            os.fsync(fd)
        finally:
            os.close(fd)
        self._note(path, 0, len(data))


_BATCH_KEY = ("topic", "queue_id", "sys_flag", "born_timestamp", "born_host", "store_timestamp",
              "store_host", "reconsume_times")


def _batch_key(row: dict):
    """Rows of one batch put share topic, queue, flags, born/store time and hosts and have
    consecutive queue offsets (format.md §8.10); rows without stored times never group."""
    if row.get("store_timestamp") is None or row.get("queue_offset") is None:
        return None
    if not all(isinstance(row.get(k) or 0, int) for k in ("sys_flag", "queue_offset")):
        return None                    # not a batch member; fields_from_row reports the bad value
    if (row.get("sys_flag") or 0) & cl.TRANSACTION_MASK or row.get("prepared_transaction_offset"):
        return None
    return tuple(row.get(k) for k in _BATCH_KEY)


def group_batches(rows: Iterable[tuple[str, dict]], detect: bool = True) -> Iterator[list[tuple[str, dict]]]:
    """Consecutive MESSAGE rows grouped into the puts that wrote them."""
    group: list[tuple[str, dict]] = []
    key = None
    for where, row in rows:
        if isinstance(row, dict) and row.get("kind") not in (None, "MESSAGE"):
            continue
        k = _batch_key(row) if detect and isinstance(row, dict) else None
        if group and k is not None and k == key and \
                row["queue_offset"] == group[-1][1]["queue_offset"] + 1:
            group.append((where, row))
            continue
        if group:
            yield group
        group, key = [(where, row)], k
    if group:
        yield group


def _kinds_config(multi_dispatch: bool, batch_cq_topics=()) -> DispatchConfig | None:
    """``--multi-dispatch`` and ``--batch-cq-topic``: how a new store's broker dispatches."""
    if not multi_dispatch and not batch_cq_topics:
        return None
    return DispatchConfig(kinds=QueueKinds(multi_dispatch, multi_dispatch, frozenset(batch_cq_topics),
                                           "--multi-dispatch / --batch-cq-topic"))


def write_rows(root: Path, rows: Iterable[tuple[str, dict]], geometry: Geometry | None = None,
               generate_uniq_key: bool = True, progress=None, detect_batches: bool = True,
               dledger_id: str | None = None, prop_crc: bool = False, multi_dispatch: bool = False,
               batch_cq_topics=()) -> WriteSummary:
    """Append JSONL rows (``(where, row)`` pairs); non-MESSAGE rows (BLANK, ends) are skipped.
    ``dledger_id``: make a new DLedger-mode store (that member's entries) instead; ``prop_crc``:
    append the ``__CRC32#`` property as a broker with ``enabledAppendPropCRC``; ``multi_dispatch``:
    dispatch to the light queues records name (on by itself for a store holding light queues)."""
    w = StoreWriter(root, geometry, progress=progress, dledger_id=dledger_id, prop_crc=prop_crc,
                    config=_kinds_config(multi_dispatch, batch_cq_topics))
    uniq = UniqKeyGenerator() if generate_uniq_key else None
    now = int(time.time() * 1000)
    try:
        for group in group_batches(rows, detect_batches):
            fields = [fields_from_row(row, where, uniq, now) for where, row in group]
            try:
                w.append_batch(fields)
            except UsageError as exc:           # a record the store cannot take: name its row
                if exc.path is not None:
                    raise
                raise UsageError(f"{group[0][0]}: {exc.message}") from None
    except BaseException:
        w.abort()
        raise
    return w.close()


def write_synthetic(root: Path, spec: SyntheticSpec, geometry: Geometry | None = None,
                    progress=None, dledger_id: str | None = None, prop_crc: bool = False) -> WriteSummary:
    w = StoreWriter(root, geometry, progress=progress, dledger_id=dledger_id, prop_crc=prop_crc)
    w.expected = spec.count
    try:
        w.append_all(synthetic_fields(spec))
    except BaseException:
        w.abort()
        raise
    return w.close()
