"""The canonical record schema, declared once: dump, JSONL, Parquet and `write` share it.

``RECORD_FIELDS`` names every field of a decoded CommitLog MESSAGE, its type and
meaning. ``record_to_dict`` fills it from a ``RecordBatch``; ``write`` reads the same
names back (only ``topic`` and ``body`` are required there).
"""
from __future__ import annotations

import base64
import zlib
from dataclasses import dataclass

from formats import commitlog as cl
from rmqtool.broker.delay import tags_code_of
from rmqtool.output.kinds_fields import kind_fields
from rmqtool.output.system_topics import system_fields
from rmqtool.records.ids import decode_uniq_key, format_host, offset_msg_id


@dataclass(frozen=True)
class Field:
    name: str
    type: str            # int, str, bool, bytes (base64 in JSON), map, obj
    doc: str


RECORD_FIELDS: tuple[Field, ...] = (
    Field("store", "str", "store (broker) name; set by export over several stores"),
    Field("file", "str", "commitlog file path"),
    Field("position", "int", "byte position of the record inside its file"),
    Field("phy_offset", "int", "commitlog offset of the record (file base + position)"),
    Field("kind", "str", "MESSAGE"),
    Field("size", "int", "TOTALSIZE"),
    Field("magic", "str", "magic code, hex"),
    Field("version", "int", "1 (V1, 1-byte topic length) or 2 (V2, 2-byte)"),
    Field("body_crc", "int", "stored BODYCRC"),
    Field("queue_id", "int", "QUEUEID"),
    Field("flag", "int", "user FLAG"),
    Field("queue_offset", "int", "QUEUEOFFSET"),
    Field("stored_phy_offset", "int", "PHYSICALOFFSET field as stored"),
    Field("sys_flag", "int", "SYSFLAG"),
    Field("transaction_type", "int", "sys_flag & 0xC (0 NOT, 4 PREPARED, 8 COMMIT, 12 ROLLBACK)"),
    Field("born_timestamp", "int", "producer clock, epoch ms"),
    Field("born_host", "str", "ip:port ([ipv6]:port)"),
    Field("store_timestamp", "int", "broker clock, epoch ms"),
    Field("store_host", "str", "ip:port ([ipv6]:port)"),
    Field("reconsume_times", "int", "RECONSUMETIMES"),
    Field("prepared_transaction_offset", "int", "PREPARED TRANSACTION OFFSET"),
    Field("body_length", "int", "BODYLEN as stored (possibly compressed)"),
    Field("topic", "str", "topic"),
    Field("properties", "map", "parsed properties (upstream parser: last duplicate wins)"),
    Field("properties_raw", "bytes", "the exact properties bytes (base64 in JSON); write uses them verbatim"),
    Field("keys", "str", "KEYS property, raw"),
    Field("tags", "str", "TAGS property"),
    Field("uniq_key", "str", "UNIQ_KEY property (client message id)"),
    Field("tags_code", "int", "CQ tagsCode as the dispatcher computes it"),
    Field("offset_msg_id", "str", "offsetMsgId from store host and PHYSICALOFFSET"),
    Field("uniq_key_info", "obj", "decoded UNIQ_KEY: ip, pid, counter, timestamp"),
    Field("compression", "str", "zlib / lz4 / zstd when sysFlag says compressed"),
    Field("inflated_body_length", "int", "body length after decompression"),
    Field("body_encoding", "str", "raw (base64 of the stored bytes) / text / hex / base64 / none"),
    Field("body", "str", "the body, rendered per --body (text/hex/base64 inflate compressed bodies)"),
    Field("inner_num", "int", "INNER_NUM: messages in the record's inner batch (BatchCQ topics)"),
    Field("inner_base", "int", "INNER_BASE: the inner batch's first queue offset"),
    Field("lmq_queues", "str", "INNER_MULTI_DISPATCH: the light queues multi-dispatch names, comma-separated"),
    Field("timer_out_ms", "int", "TIMER_OUT_MS: when a timer message is due (epoch ms)"),
    Field("system_kind", "str", "the broker's own topic: transaction-half / transaction-op / schedule / timer / retry / dlq"),
    Field("real_topic", "str", "the topic the message belongs to (REAL_TOPIC; RETRY_TOPIC for retry/dlq)"),
    Field("real_queue_id", "int", "its queue (REAL_QID)"),
    Field("consumer_group", "str", "retry/dlq: the consumer group the topic is for"),
    Field("producer_group", "str", "transaction half: the producer group (PGROUP)"),
    Field("origin_msg_id", "str", "retry/dlq: the original message's id (ORIGIN_MESSAGE_ID)"),
    Field("delay_level", "int", "schedule: the DELAY level"),
    Field("op_offsets", "str", "transaction op: the half messages' queue offsets it settles (its body)"),
    Field("note", "str", "anything the decoder could not do (e.g. codec missing)"),
)
FIELD_NAMES = tuple(f.name for f in RECORD_FIELDS)
BODY_MODES = ("text", "hex", "base64", "none", "raw")
COMPRESSION_NAMES = {cl.COMPRESSION_LEGACY_ZLIB: "zlib", cl.COMPRESSION_ZLIB: "zlib",
                     cl.COMPRESSION_LZ4: "lz4", cl.COMPRESSION_ZSTD: "zstd"}


#: largest decompressed body rmqtool materializes (upstream's maxMessageSize is 4 MiB)
MAX_INFLATED_BODY = 64 << 20


def decompress(body: bytes, sys_flag: int) -> tuple[bytes | None, str | None, str | None]:
    """(inflated body, codec name, note). Only when sysFlag has COMPRESSED_FLAG."""
    if not sys_flag & cl.COMPRESSED_FLAG:
        return None, None, None
    ctype = cl.compression_type(sys_flag)
    name = COMPRESSION_NAMES.get(ctype)
    if name is None:
        return None, None, f"unknown compression type {ctype}"
    limit = MAX_INFLATED_BODY + 1          # a crafted body must not inflate without bound
    try:
        if name == "zlib":
            dec = zlib.decompressobj()
            out = dec.decompress(body, limit)
        elif name == "lz4":
            import lz4.frame
            dec = lz4.frame.LZ4FrameDecompressor()
            out = dec.decompress(body, max_length=limit)
        else:
            out, dec = _zstd_bounded(body, limit)
        if len(out) > MAX_INFLATED_BODY:
            return None, name, f"{name} body inflates beyond {MAX_INFLATED_BODY} bytes; not decompressed"
        if not dec.eof:
            return None, name, f"{name} decompression failed: truncated stream"
        return out, name, None
    except ImportError:
        return None, name, f"{name} codec not installed (pip install 'rmqtool[codecs]')"
    except Exception as exc:   # corrupt compressed data is a finding, not a crash
        return None, name, f"{name} decompression failed: {exc.__class__.__name__}"


def _zstd_bounded(body: bytes, limit: int):
    """zstd without a size bound of its own: feed 256 bytes at a time (each inflates to at most
    ~8 MiB), stop past ``limit``."""
    import zstandard
    dec = zstandard.ZstdDecompressor().decompressobj()
    parts, got = [], 0
    for pos in range(0, len(body), 256):
        part = dec.decompress(body[pos:pos + 256])
        parts.append(part)
        got += len(part)
        if got >= limit or dec.eof:
            break
    return b"".join(parts), dec


def render_body(body: bytes, mode: str) -> str | None:
    if mode == "none":
        return None
    if mode == "hex":
        return body.hex()
    if mode == "base64" or mode == "raw":
        return base64.b64encode(body).decode("ascii")
    return body.decode("utf-8", "replace")


def _b64(raw: bytes | None) -> str | None:
    return None if raw is None else base64.b64encode(raw).decode("ascii")


def record_to_dict(batch, i: int, body: str = "none") -> dict:
    """Every schema field of record ``i`` of a RecordBatch."""
    c = batch.columns
    sys_flag = int(c["sys_flag"][i])
    magic = int(c["magic"][i])
    topic = batch.topic(i)
    props = batch.properties(i)
    born_addr, born_port = batch.host("born", i)
    store_addr, store_port = batch.host("store", i)
    store_ts = int(c["store_timestamp"][i])
    born_ts = int(c["born_timestamp"][i])
    stored_phy = int(c["stored_phy_offset"][i])
    raw_body = batch.body(i)
    inflated, codec, note = decompress(raw_body, sys_flag)
    shown = inflated if (inflated is not None and body in ("text", "hex", "base64")) else raw_body
    if body == "text" and inflated is None and sys_flag & cl.COMPRESSED_FLAG:
        shown = None                    # compressed bytes are never passed off as text: ``note`` says why
    uniq = props.get(cl.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
    return {
        "store": None,
        "file": batch.path,
        "position": int(c["position"][i]),
        "phy_offset": int(c["phy_offset"][i]),
        "kind": "MESSAGE",
        "size": int(c["size"][i]),
        "magic": f"0x{magic:08X}",
        "version": 2 if magic == cl.MESSAGE_MAGIC_V2 else 1,
        "body_crc": int(c["body_crc"][i]),
        "queue_id": int(c["queue_id"][i]),
        "flag": int(c["flag"][i]),
        "queue_offset": int(c["queue_offset"][i]),
        "stored_phy_offset": stored_phy,
        "sys_flag": sys_flag,
        "transaction_type": cl.transaction_type(sys_flag),
        "born_timestamp": born_ts,
        "born_host": format_host(born_addr, born_port),
        "store_timestamp": store_ts,
        "store_host": format_host(store_addr, store_port),
        "reconsume_times": int(c["reconsume_times"][i]),
        "prepared_transaction_offset": int(c["prepared_transaction_offset"][i]),
        "body_length": int(c["body_length"][i]),
        "topic": topic,
        "properties": props,
        "properties_raw": _b64(batch.span("props", i)),
        "keys": props.get(cl.PROPERTY_KEYS),
        "tags": props.get(cl.PROPERTY_TAGS),
        "uniq_key": uniq,
        "tags_code": tags_code_of(topic, props, store_ts),
        "offset_msg_id": offset_msg_id(store_addr, store_port, stored_phy),
        "uniq_key_info": decode_uniq_key(uniq, born_ts, store_ts),
        "compression": codec,
        "inflated_body_length": None if inflated is None else len(inflated),
        "body_encoding": body,
        "body": None if shown is None else render_body(shown, body),
        **kind_fields(props),
        **system_fields(topic, props, raw_body),
        "note": note,
    }
