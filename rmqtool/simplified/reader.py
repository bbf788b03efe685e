"""Read the article's three files with bounded preads; layouts from ``formats.simplified``.

The commitlog walk follows msgTotalLen from position 0 and stops at the first record
that cannot be one (zero length = end of data; negative, too short for its fields,
past the file, or a body that overflows its record = corrupt). Record fields are
decoded for a whole window at once with numpy gathers.
"""
from __future__ import annotations

import base64
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np

from formats import simplified as fmt
from formats.derive import member_struct
from rmqtool.errors import CorruptDataError
from rmqtool.io.fileio import CHUNK_SIZE, ReadOnlyFile, next_data
from rmqtool.kernels.gather import gather_records

_LONG = member_struct(fmt.RecordHead, "msg_total_len")
_BODY_SIZE_AT = fmt.RECORD_HEAD_OFFSETS["body_size"]
_LEN_SIZE = fmt.RecordHead.msg_total_len.sizeof()

END_ZERO = "zero"          # msgTotalLen 0: the end of the data
END_EOF = "eof"            # the file ends exactly after a record
END_TORN = "torn"          # a record (or its length field) runs past the end of the file
END_CORRUPT = "corrupt"    # a length that cannot be a record


def decode_string(raw: bytes) -> str:
    """A zero-padded UTF-8 field as text (trailing zeros dropped, bad bytes replaced)."""
    return raw.rstrip(fmt.STRING_PAD).decode("utf-8", "replace")


def pad_string(text: str, what: str) -> bytes:
    """Text as a 64-byte zero-padded UTF-8 field; longer text is refused, and so is text that
    cannot be UTF-8 (a lone surrogate from a JSON ``\\ud800`` escape) or that ends with NUL (the
    padding would swallow it: the field would read back as other text, with another hash)."""
    from rmqtool.errors import UsageError
    try:
        raw = text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise UsageError(f"{what} is not valid Unicode text ({exc.reason} at character {exc.start})") from None
    if len(raw) > fmt.STRING_FIELD_SIZE:
        raise UsageError(f"{what} is {len(raw)} UTF-8 bytes; the field holds {fmt.STRING_FIELD_SIZE}")
    if raw.endswith(fmt.STRING_PAD):
        raise UsageError(f"{what} ends with a NUL character, which the zero padding of its field cannot keep")
    return raw.ljust(fmt.STRING_FIELD_SIZE, fmt.STRING_PAD)


def render_body(raw: bytes, mode: str) -> str | None:
    if mode == "none":
        return None
    if mode == "hex":
        return raw.hex()
    if mode == "base64":
        return base64.b64encode(raw).decode("ascii")
    return raw.decode("utf-8", "replace")


@dataclass
class CommitLogEnd:
    """Where and why the walk stopped."""
    path: str
    file_size: int
    position: int
    kind: str
    detail: str = ""
    total_len: int | None = None

    @property
    def clean(self) -> bool:
        return self.kind in (END_ZERO, END_EOF)


@dataclass
class RecordBatch:
    """Records of one read window, as numpy columns."""
    path: str
    buf: bytes
    buf_base: int                 # file position of buf[0]
    position: np.ndarray          # int64 record starts (file positions)
    heads: np.ndarray             # RECORD_HEAD_DTYPE
    tails: np.ndarray             # RECORD_TAIL_DTYPE

    def __len__(self) -> int:
        return len(self.position)

    def body(self, i: int) -> bytes:
        start = int(self.position[i]) - self.buf_base + fmt.RECORD_HEAD_SIZE
        return self.buf[start:start + int(self.heads["body_size"][i])]

    def gap(self, i: int) -> bytes:
        """Bytes between the commitLogOffset field and the next record (56 zeros in the article)."""
        start = int(self.position[i]) - self.buf_base + fmt.RECORD_FIELDS_SIZE + int(self.heads["body_size"][i])
        return self.buf[start:int(self.position[i]) - self.buf_base + int(self.heads["msg_total_len"][i])]

    def row(self, i: int, body: str = "none") -> dict:
        h, t = self.heads[i], self.tails[i]
        size, body_size = int(h["msg_total_len"]), int(h["body_size"])
        raw = self.body(i)
        return {"file": self.path, "position": int(self.position[i]), "phy_offset": int(self.position[i]),
                "kind": "MESSAGE", "size": size, "msg_id": decode_string(h["msg_id"].tobytes()),
                "topic": decode_string(h["topic"].tobytes()), "queue_offset": int(h["queue_offset"]),
                "body_size": body_size, "transaction_id": decode_string(t["transaction_id"].tobytes()),
                "stored_commit_log_offset": int(t["commit_log_offset"]),
                "gap": size - fmt.RECORD_FIELDS_SIZE - body_size,
                "body_encoding": body, "body": render_body(raw, body)}


def _walk_window(window: bytes, base: int, file_size: int):
    """Follow msgTotalLen through one window: (starts, stop CommitLogEnd | None, resume position)."""
    starts = []
    p, n = 0, len(window)
    unpack = _LONG.unpack_from
    while True:
        pos = base + p
        if pos >= file_size:
            return starts, CommitLogEnd("", file_size, pos, END_EOF), pos
        if p + fmt.RECORD_FIELDS_SIZE > n and base + n < file_size:
            return starts, None, pos          # need the next window
        if p + _LEN_SIZE > n:
            if not any(window[p:]):
                return starts, CommitLogEnd("", file_size, pos, END_ZERO, total_len=0), pos
            return starts, CommitLogEnd("", file_size, pos, END_TORN,
                                        f"{file_size - pos} bytes left, too few for msgTotalLen"), pos
        total = unpack(window, p)[0]
        if total == 0:
            return starts, CommitLogEnd("", file_size, pos, END_ZERO, total_len=0), pos
        if total < 0 or total < fmt.RECORD_FIELDS_SIZE:
            return starts, CommitLogEnd("", file_size, pos, END_CORRUPT,
                                        f"msgTotalLen {total} is below the {fmt.RECORD_FIELDS_SIZE} bytes "
                                        f"of a record's fields", total), pos
        if pos + total > file_size:
            return starts, CommitLogEnd("", file_size, pos, END_TORN,
                                        f"msgTotalLen {total} runs past the end of the file "
                                        f"({file_size - pos} bytes left)", total), pos
        if p + total > n:
            return starts, None, pos          # record crosses the window: next window starts here
        body = unpack(window, p + _BODY_SIZE_AT)[0]
        if body < 0 or fmt.RECORD_FIELDS_SIZE + body > total:
            return starts, CommitLogEnd("", file_size, pos, END_CORRUPT,
                                        f"bodySize {body} does not fit in msgTotalLen {total}", total), pos
        starts.append(pos)
        p += total


def walk_commitlog(path: Path | str, chunk_size: int = CHUNK_SIZE) -> Iterator[RecordBatch | CommitLogEnd]:
    """Yield record batches, then one ``CommitLogEnd``."""
    path = str(path)
    with ReadOnlyFile(path) as fh:
        size = fh.size()
        pos, chunk = 0, max(chunk_size, fmt.RECORD_FIELDS_SIZE)
        while True:
            window = fh.read(pos, min(chunk, max(size - pos, 0)))
            starts, stop, resume = _walk_window(window, pos, size)
            if starts:
                arr = np.frombuffer(window, np.uint8)
                at = np.asarray(starts, dtype=np.int64)
                rel = at - pos
                heads = gather_records(arr, rel, fmt.RECORD_HEAD_DTYPE)
                tails = gather_records(arr, rel + fmt.RECORD_HEAD_SIZE + heads["body_size"].astype(np.int64),
                                fmt.RECORD_TAIL_DTYPE)
                yield RecordBatch(path, window, pos, at, heads, tails)
            if stop is not None:
                stop.path = path
                yield stop
                return
            if resume == pos:                 # one record larger than the window: widen it
                chunk = min(chunk * 2, size - pos)
            pos = resume


@dataclass
class CommitLog:
    """Every record of commitLog.txt as columns, plus where the data ends."""
    path: str
    position: np.ndarray
    heads: np.ndarray
    tails: np.ndarray
    end: CommitLogEnd

    def __len__(self) -> int:
        return len(self.position)

    @property
    def total_len(self) -> np.ndarray:
        return self.heads["msg_total_len"].astype(np.int64)

    @property
    def record_end(self) -> np.ndarray:
        return self.position + self.total_len

    def record_at(self, position: int) -> int | None:
        """Index of the record starting exactly at ``position``."""
        i = int(np.searchsorted(self.position, position))
        return i if i < len(self.position) and self.position[i] == position else None

    def containing(self, position: int) -> int | None:
        """Index of the record whose bytes include ``position``."""
        i = int(np.searchsorted(self.position, position, side="right")) - 1
        return i if i >= 0 and position < self.record_end[i] else None

    def batch(self, i: int) -> RecordBatch:
        """Record ``i`` re-read from the file as a one-record batch (for its body and gap)."""
        at = int(self.position[i])
        with ReadOnlyFile(self.path) as fh:
            raw = fh.read(at, int(self.heads["msg_total_len"][i]))
        return RecordBatch(self.path, raw, at, self.position[i:i + 1], self.heads[i:i + 1], self.tails[i:i + 1])

    def row(self, i: int, body: str = "none") -> dict:
        return self.batch(i).row(0, body)

    def msg_ids(self) -> list[str]:
        return [decode_string(v.tobytes()) for v in self.heads["msg_id"]]

    def msg_id_mask(self, msg_id: str) -> np.ndarray:
        """Records whose msgId field is exactly ``msg_id`` (zero-padded), vectorized."""
        raw = msg_id.encode("utf-8")
        if len(raw) > fmt.STRING_FIELD_SIZE:
            return np.zeros(len(self), bool)
        return self.heads["msg_id"] == np.void(raw.ljust(fmt.STRING_FIELD_SIZE, fmt.STRING_PAD))

    def msg_id_hashes(self) -> np.ndarray:
        """Java hashCode of every msgId (trailing zeros dropped), vectorized for ASCII ids."""
        from rmqtool.kernels.javahash import java_bytes_hash
        n = len(self)
        mat = np.ascontiguousarray(self.heads["msg_id"]).view(np.uint8).reshape(n, fmt.STRING_FIELD_SIZE)
        nonzero = mat != 0
        lengths = np.where(nonzero.any(axis=1),
                           fmt.STRING_FIELD_SIZE - np.argmax(nonzero[:, ::-1], axis=1), 0).astype(np.int64)
        h = np.zeros(n, np.uint32)               # Horner column by column over the fixed-width field
        with np.errstate(over="ignore"):
            for col in range(fmt.STRING_FIELD_SIZE):
                live = col < lengths
                h = np.where(live, h * np.uint32(31) + mat[:, col].astype(np.uint32), h)
        out = h.view(np.int32).astype(np.int64)
        cols = np.arange(fmt.STRING_FIELD_SIZE)
        non_ascii = ((mat >= 0x80) & (cols < lengths[:, None])).any(axis=1)
        for i in np.flatnonzero(non_ascii):
            out[i] = java_bytes_hash(mat[i, :lengths[i]].tobytes())
        return out


def read_commitlog(path: Path | str) -> CommitLog:
    """All record columns (window buffers are dropped; bodies are re-read on demand)."""
    batches, end = [], None
    for item in walk_commitlog(path):
        if isinstance(item, RecordBatch):
            item.buf = b""
            batches.append(item)
        else:
            end = item
    if batches:
        position = np.concatenate([b.position for b in batches])
        heads = np.concatenate([b.heads for b in batches])
        tails = np.concatenate([b.tails for b in batches])
    else:
        position = np.zeros(0, np.int64)
        heads, tails = np.zeros(0, fmt.RECORD_HEAD_DTYPE), np.zeros(0, fmt.RECORD_TAIL_DTYPE)
    return CommitLog(str(path), position, heads, tails, end)


# --- consumerQueue.txt ----------------------------------------------------------------------------
@dataclass
class ConsumerQueue:
    path: str
    file_size: int
    units: np.ndarray             # CQ_UNIT_DTYPE, up to the first all-zero unit
    stale_after_end: np.ndarray   # unit numbers of non-zero units after the end
    trailing: bytes               # the bytes after the last whole unit

    def __len__(self) -> int:
        return len(self.units)


def read_consumer_queue(path: Path | str, chunk_units: int = 1 << 20) -> ConsumerQueue:
    """Units up to the first all-zero unit; non-zero units after it are kept as stale."""
    path = str(path)
    parts, stale = [], []
    ended = False
    with ReadOnlyFile(path) as fh:
        size = fh.size()
        whole = size // fmt.CQ_UNIT_SIZE
        first = 0
        while first < whole:
            if ended:                         # past the end only stale units count: a hole has none
                first = max(first, next_data(fh, first * fmt.CQ_UNIT_SIZE, whole * fmt.CQ_UNIT_SIZE)
                            // fmt.CQ_UNIT_SIZE)
                if first >= whole:
                    break
            count = min(chunk_units, whole - first)
            raw = fh.read(first * fmt.CQ_UNIT_SIZE, count * fmt.CQ_UNIT_SIZE)
            units = np.frombuffer(raw, fmt.CQ_UNIT_DTYPE)
            zero = np.frombuffer(raw, np.uint8).reshape(count, fmt.CQ_UNIT_SIZE).any(axis=1) == 0
            if not ended:
                z = np.flatnonzero(zero)
                cut = int(z[0]) if len(z) else count
                parts.append(units[:cut])
                ended = bool(len(z))
                rest = ~zero[cut:]
                stale.append(np.flatnonzero(rest) + first + cut)
            else:
                stale.append(np.flatnonzero(~zero) + first)
            first += count
        trailing = fh.read(whole * fmt.CQ_UNIT_SIZE, size - whole * fmt.CQ_UNIT_SIZE)
    units = np.concatenate(parts) if parts else np.zeros(0, fmt.CQ_UNIT_DTYPE)
    stale_idx = np.concatenate(stale) if stale else np.zeros(0, np.int64)
    return ConsumerQueue(path, size, units, stale_idx.astype(np.int64), trailing)


# --- index.txt ------------------------------------------------------------------------------------
@dataclass
class Index:
    path: str
    file_size: int
    header: dict
    slots: np.ndarray             # int32, HASH_SLOTS values
    entries: np.ndarray           # INDEX_ENTRY_DTYPE, entries 0 .. min(indexCount, capacity)-1
    capacity: int
    hash_slots: int = fmt.HASH_SLOTS

    def __len__(self) -> int:
        return len(self.entries)

    def slot_of(self, key_hash) -> np.ndarray:
        """abs(keyHash % slots) with Java's remainder (sign of the dividend)."""
        return np.abs(np.asarray(key_hash, dtype=np.int64)) % self.hash_slots

    def slot_holds(self) -> np.ndarray:
        """Per entry: does its slot still point at it (False = overwritten by a later key)?"""
        if not len(self.entries):
            return np.zeros(0, bool)
        slots = self.slot_of(self.entries["key_hash"])
        return self.slots[slots] == np.arange(len(self.entries))

    def entry_position(self, n: int) -> int:
        return fmt.entry_position(n, self.hash_slots)


def read_index(path: Path | str, hash_slots: int = fmt.HASH_SLOTS) -> Index:
    path = str(path)
    with ReadOnlyFile(path) as fh:
        size = fh.size()
        first_entry = fmt.entry_position(0, hash_slots)
        if size < first_entry:
            raise CorruptDataError(f"index file is {size} bytes, shorter than its header and "
                                   f"{hash_slots} slots ({first_entry} bytes)", path, size)
        head = np.frombuffer(fh.read(0, fmt.INDEX_HEADER_SIZE), fmt.INDEX_HEADER_DTYPE)[0]
        header = {name: int(head[name]) for name in fmt.INDEX_HEADER_DTYPE.names}
        slots = np.frombuffer(fh.read(fmt.slot_position(0), hash_slots * fmt.INDEX_SLOT_SIZE),
                              fmt.INDEX_SLOT_DTYPE).astype(np.int64)
        capacity = fmt.index_capacity(size, hash_slots)
        count = min(max(header["index_count"], 0), capacity)
        entries = np.frombuffer(fh.read(first_entry, count * fmt.INDEX_ENTRY_SIZE), fmt.INDEX_ENTRY_DTYPE)
    return Index(path, size, header, slots, entries, capacity, hash_slots)
