"""Write the article's three files from messages, as its code lays them out.

Each message is a mapping with ``topic`` and ``body`` (text, or ``body_encoding``
hex/base64; bytes accepted) and optionally ``msg_id`` (or ``uniq_key``),
``transaction_id`` (random UUIDs when absent, as the article does), ``queue_offset``
(default: the message's number) and ``store_timestamp`` (epoch ms, for the index
times; default: now). Files are pre-sized and zero-filled, built in temporary files
and renamed into place.
"""
from __future__ import annotations

import base64
import binascii
import os
import time
import uuid
from pathlib import Path
from typing import Iterable, Mapping

import numpy as np

from formats import simplified as fmt
from rmqtool.errors import RefusedError, UsageError
from rmqtool.io import ownership
from rmqtool.kernels.javahash import java_string_hash
from rmqtool.simplified.reader import pad_string

INDEX_POINTS_AT = ("end", "start")   # "end": the article's writer; "start": the record itself
ARTICLE_TOPIC = "Topic-test"
ARTICLE_BODY_PREFIX = "消息内容"
ARTICLE_BODY_FILLER = "msg" * 17        # the body appends its first 1..48 characters


def article_messages(count: int, seed: int = 1) -> list[dict]:
    """Messages like the article's generator: random UUIDs, body prefix + 1..48 filler characters."""
    import random
    rng = random.Random(seed)

    def uid() -> str:
        return str(uuid.UUID(int=rng.getrandbits(128), version=4))

    return [{"topic": ARTICLE_TOPIC, "msg_id": uid(), "transaction_id": uid(),
             "body": ARTICLE_BODY_PREFIX + ARTICLE_BODY_FILLER[:rng.randint(1, 48)]} for _ in range(count)]


def _body_bytes(msg: Mapping, n: str) -> bytes:
    body = msg.get("body")
    if body is None:
        raise UsageError(f"{n}: no body")
    if isinstance(body, (bytes, bytearray)):
        return bytes(body)
    if not isinstance(body, str):
        raise UsageError(f"{n}: body must be a string, not {type(body).__name__}")
    enc = msg.get("body_encoding") or "text"
    try:
        if enc == "text":
            return str(body).encode("utf-8")
        if enc == "hex":
            return bytes.fromhex(body)
        if enc == "base64":
            return base64.b64decode(body, validate=True)
    except (ValueError, binascii.Error) as exc:
        raise UsageError(f"{n}: body is not valid {enc}: {exc}") from None
    raise UsageError(f"{n}: body_encoding must be text, hex or base64, not {enc!r}")


def _long(msg: Mapping, name: str, n: str, default: int) -> int:
    value = msg.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise UsageError(f"{n}: {name} must be an integer, not {type(value).__name__}")
    try:
        value = int(value)
    except ValueError:
        raise UsageError(f"{n}: {name} {value!r} is not an integer") from None
    if not -(1 << 63) <= value < (1 << 63):
        raise UsageError(f"{n}: {name} {value} does not fit in a long")
    return value


def _text(msg: Mapping, names: tuple[str, ...], n: str, default=None) -> str:
    for name in names:
        if msg.get(name) is not None:
            return str(msg[name])
    if default is None:
        raise UsageError(f"{n}: no {names[0]}")
    return default()


def build(messages: Iterable[Mapping], *, index_points_at: str = "end", tag_code: int = fmt.ARTICLE_TAG_CODE,
          commitlog_size: int = fmt.COMMITLOG_FILE_SIZE, cq_size: int = fmt.CONSUMER_QUEUE_FILE_SIZE,
          index_size: int = fmt.INDEX_FILE_SIZE, now_ms=None,
          label=None) -> tuple[bytes, bytes, bytes, list[dict]]:
    """The three files' bytes and one summary row per message. ``label(n)`` names message ``n`` in
    errors (``write --from``: its file and line; default ``message N``)."""
    label = label or (lambda n: f"message {n}")
    if index_points_at not in INDEX_POINTS_AT:
        raise UsageError(f"index_points_at must be one of {INDEX_POINTS_AT}, not {index_points_at!r}")
    now_ms = now_ms or (lambda: int(time.time() * 1000))
    commitlog = bytearray(commitlog_size)
    cq = bytearray(cq_size)
    index = bytearray(index_size)
    if index_size < fmt.entry_position(0):
        raise UsageError(f"index size {index_size} is below the header and slots ({fmt.entry_position(0)})")
    rows, entries, offset = [], [], 0
    slots = np.zeros(fmt.HASH_SLOTS, dtype=fmt.INDEX_SLOT_DTYPE)
    for n, msg in enumerate(messages):
        if not isinstance(msg, Mapping):
            raise UsageError(f"{label(n)}: expected an object with topic and body, not {type(msg).__name__}")
        topic = _text(msg, ("topic",), label(n))
        msg_id = _text(msg, ("msg_id", "uniq_key"), label(n), lambda: str(uuid.uuid4()))
        txn = _text(msg, ("transaction_id",), label(n), lambda: str(uuid.uuid4()))
        body = _body_bytes(msg, label(n))
        queue_offset = _long(msg, "queue_offset", label(n), n)
        stamp = _long(msg, "store_timestamp", label(n), None) if msg.get("store_timestamp") is not None else now_ms()
        total = fmt.article_total_len(len(body))
        if offset + total > commitlog_size:
            raise UsageError(f"{label(n)}: commitLog.txt is {commitlog_size} bytes; "
                             f"{offset + total} needed")
        head = fmt.RecordHead.build({"msg_total_len": total, "msg_id": pad_string(msg_id, f"{label(n)} msg_id"),
                                     "topic": pad_string(topic, f"{label(n)} topic"),
                                     "queue_offset": queue_offset, "body_size": len(body)})
        tail = fmt.RecordTail.build({"transaction_id": pad_string(txn, f"{label(n)} transaction_id"),
                                     "commit_log_offset": offset})
        record = head + body + tail
        commitlog[offset:offset + len(record)] = record
        if (n + 1) * fmt.CQ_UNIT_SIZE > cq_size:
            raise UsageError(f"{label(n)}: consumerQueue.txt is {cq_size} bytes; no room for unit {n}")
        cq[n * fmt.CQ_UNIT_SIZE:(n + 1) * fmt.CQ_UNIT_SIZE] = fmt.ConsumerQueueUnit.build(
            {"commit_log_offset": offset, "msg_length": total, "tag_code": tag_code})
        key_hash = java_string_hash(msg_id)
        phy = offset + total if index_points_at == "end" else offset
        entries.append((key_hash, phy, stamp))
        rows.append({"position": offset, "size": total, "msg_id": msg_id, "topic": topic,
                     "queue_offset": queue_offset, "body_size": len(body), "index_phy_offset": phy})
        offset += total
    if len(entries) > fmt.index_capacity(index_size):
        raise UsageError(f"index.txt holds {fmt.index_capacity(index_size)} entries; {len(entries)} needed")
    if entries:
        begin = entries[0][2]
        for i, (key_hash, phy, stamp) in enumerate(entries):
            slots[abs(key_hash) % fmt.HASH_SLOTS] = i
            at = fmt.entry_position(i)
            diff = stamp - begin
            if diff < 0:        # verify calls a negative timeDiff an error: never write one
                raise UsageError(f"{label(i)}: store_timestamp {stamp} is before the first message's ({begin}); "
                                 f"timeDiff would be negative")
            if diff >= 1 << 31:
                raise UsageError(f"{label(i)}: store_timestamp is {diff} ms from the first; timeDiff is an int")
            index[at:at + fmt.INDEX_ENTRY_SIZE] = fmt.IndexEntry.build(
                {"key_hash": key_hash, "phy_offset": phy, "time_diff": diff, "prev_index": 0})
        index[:fmt.INDEX_HEADER_SIZE] = fmt.IndexHeader.build(
            {"begin_timestamp": begin, "end_timestamp": entries[-1][2], "begin_phy_offset": entries[0][1],
             "end_phy_offset": entries[-1][1], "hash_slot_count": len(entries), "index_count": len(entries)})
        index[fmt.slot_position(0):fmt.entry_position(0)] = slots.tobytes()
    return bytes(commitlog), bytes(cq), bytes(index), rows


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as fh:
            ownership.inherit(tmp, like=path, fd=fh.fileno())     # the owner and mode of what it replaces
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def write_store(out_dir, messages: Iterable[Mapping], *, force: bool = False, **options) -> list[dict]:
    """Write commitLog.txt, consumerQueue.txt and index.txt into ``out_dir``; one row per message."""
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise UsageError("the output must be a directory", out)
    existing = [name for name in fmt.FILE_NAMES if (out / name).exists()]
    if existing and not force:
        raise RefusedError(f"{', '.join(existing)} already exist (use --force to replace)", out)
    commitlog, cq, index, rows = build(messages, **options)
    ownership.makedirs(out)
    for name, data in zip(fmt.FILE_NAMES, (commitlog, cq, index)):
        _write_atomic(out / name, data)
    try:
        fd = os.open(out, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError:
        pass
    for row in rows:
        row["file"] = str(out / fmt.COMMITLOG_NAME)
    return rows
