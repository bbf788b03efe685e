"""Encode exact broker CommitLog records (format.md §2.2, §2.6).

``encode_reference`` builds a record with the construct ``formats.commitlog.Message``
declaration; ``encode`` is the fast path (``struct`` formats derived from the same
declaration), proven equal to it by tests. The version is V2 when the topic is longer
than 127 Java chars; the host flags follow the address sizes; BODYCRC is
``crc32(body) & 0x7FFFFFFF`` (0 for an empty body).
"""
from __future__ import annotations

import ipaddress
import zlib
from dataclasses import dataclass

from formats import commitlog as cl
from rmqtool.records.layout import (HEAD, PHYSICAL_OFFSET, PORT, PROPERTIES_LEN, STORE_TIMESTAMP, TAIL,
                                    TOPIC_LEN_V1, TOPIC_LEN_V2)


@dataclass
class Host:
    address: bytes          # 4 (IPv4) or 16 (IPv6) bytes
    port: int

    @classmethod
    def parse(cls, text: str) -> "Host":
        """``ip:port`` or ``[ipv6]:port`` (the form dump prints)."""
        text = text.strip()
        if text.startswith("["):
            addr, _, port = text[1:].partition("]:")
        else:
            addr, _, port = text.rpartition(":")
        ip = ipaddress.ip_address(addr)
        return cls(ip.packed, int(port))

    @property
    def v6(self) -> bool:
        return len(self.address) == 16


@dataclass
class MessageFields:
    topic: str
    body: bytes = b""
    properties: bytes = b""
    queue_id: int = 0
    flag: int = 0
    queue_offset: int = 0
    phy_offset: int = 0
    sys_flag: int = 0
    born_timestamp: int = 0
    born_host: Host = None
    store_timestamp: int = 0
    store_host: Host = None
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0
    parsed_properties: dict | None = None      # optional: decode_properties(properties), if known

    def __post_init__(self):
        if self.born_host is None:
            self.born_host = Host(bytes(4), 0)
        if self.store_host is None:
            self.store_host = Host(bytes(4), 0)


def java_length(text: str) -> int:
    """String.length(): UTF-16 code units."""
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


def effective_sys_flag(f: MessageFields) -> int:
    flag = f.sys_flag & ~(cl.BORNHOST_V6_FLAG | cl.STOREHOST_V6_FLAG)
    if f.born_host.v6:
        flag |= cl.BORNHOST_V6_FLAG
    if f.store_host.v6:
        flag |= cl.STOREHOST_V6_FLAG
    return flag


def magic_for(topic: str) -> int:
    return cl.MESSAGE_MAGIC_V2 if java_length(topic) > cl.V1_MAX_TOPIC_LENGTH else cl.MESSAGE_MAGIC_V1


def patch_phy_offset(raw: bytearray, phy_offset: int) -> None:
    """Set PHYSICALOFFSET of an encoded record (the broker patches it during append too)."""
    PHYSICAL_OFFSET.pack_into(raw, PHYSICAL_OFFSET_POSITION, phy_offset)


#: the property the broker appends with ``enabledAppendPropCRC`` (format.md §2.5): name, separator,
#: 10 digits, separator; it covers the record without these last bytes
_CRC_PROPERTY = (cl.PROPERTY_CRC32 + cl.NAME_VALUE_SEPARATOR).encode("ascii")


def reserve_property_crc(properties: bytes) -> bytes:
    """The properties as a broker with ``enabledAppendPropCRC`` stores them
    (``CommitLog.MessageExtEncoder``): a trailing ``__CRC32#`` property of an earlier write
    removed (the broker deletes the property), a property separator appended when the last byte
    is not one, then ``CRC32_RESERVED_LENGTH`` bytes that ``fill_property_crc`` writes."""
    n = cl.CRC32_RESERVED_LENGTH
    if len(properties) >= n and properties[-n:-n + len(_CRC_PROPERTY)] == _CRC_PROPERTY \
            and properties[-n - 1:-n] in (b"", cl.PROPERTY_SEPARATOR.encode("ascii")):
        properties = properties[:-n]
    if properties and not properties.endswith(cl.PROPERTY_SEPARATOR.encode("ascii")):
        properties += cl.PROPERTY_SEPARATOR.encode("ascii")
    return properties + bytes(n)


def fill_property_crc(raw: bytearray) -> None:
    """Write the ``__CRC32#`` property into the reserved tail of a finished record (every other
    field final: the CRC covers the record up to the property)."""
    n = cl.CRC32_RESERVED_LENGTH
    crc = zlib.crc32(memoryview(raw)[:len(raw) - n]) & cl.BODY_CRC_MASK
    raw[len(raw) - n:] = (_CRC_PROPERTY + cl.crc32_property_digits(crc).encode("ascii")
                          + cl.PROPERTY_SEPARATOR.encode("ascii"))


def body_crc(body: bytes) -> int:
    return zlib.crc32(body) & cl.BODY_CRC_MASK if body else 0


def record_length(f: MessageFields, topic_bytes: bytes | None = None) -> int:
    topic_bytes = f.topic.encode("utf-8") if topic_bytes is None else topic_bytes
    return cl.message_length(magic_for(f.topic), effective_sys_flag(f), len(f.body), len(topic_bytes),
                             len(f.properties))


def _check(f: MessageFields, topic_bytes: bytes) -> None:
    if len(f.properties) > cl.PROPERTIES_MAX_LENGTH:
        raise ValueError(f"properties are {len(f.properties)} bytes, more than {cl.PROPERTIES_MAX_LENGTH}")
    limit = 0x7FFF if magic_for(f.topic) == cl.MESSAGE_MAGIC_V2 else 0x7F
    if len(topic_bytes) > limit:
        raise ValueError(f"topic is {len(topic_bytes)} bytes; the length field holds at most {limit}")


_FIXED = {(m, b6, s6): cl.message_length(m, (cl.BORNHOST_V6_FLAG if b6 else 0)
                                          | (cl.STOREHOST_V6_FLAG if s6 else 0), 0, 0, 0)
          for m in cl.MESSAGE_MAGICS for b6 in (False, True) for s6 in (False, True)}
#: where PHYSICALOFFSET sits, for patching a record placed after encoding
PHYSICAL_OFFSET_POSITION = cl.MESSAGE_HEAD_OFFSETS["physical_offset"]


def encode(f: MessageFields) -> bytes:
    """The record bytes (fast path)."""
    topic = f.topic.encode("utf-8")
    magic = cl.MESSAGE_MAGIC_V1 if len(f.topic) <= cl.V1_MAX_TOPIC_LENGTH // 2 else magic_for(f.topic)
    if len(f.properties) > cl.PROPERTIES_MAX_LENGTH or len(topic) > 0x7F:
        _check(f, topic)
    sys_flag = effective_sys_flag(f)
    total = (_FIXED[magic, f.born_host.v6, f.store_host.v6] + len(f.body) + len(topic)
             + len(f.properties))
    topic_len = (TOPIC_LEN_V2 if magic == cl.MESSAGE_MAGIC_V2 else TOPIC_LEN_V1).pack(len(topic))
    return b"".join((
        HEAD.pack(total, magic, body_crc(f.body), f.queue_id, f.flag, f.queue_offset, f.phy_offset,
                   sys_flag, f.born_timestamp),
        f.born_host.address, PORT.pack(f.born_host.port),
        STORE_TIMESTAMP.pack(f.store_timestamp),
        f.store_host.address, PORT.pack(f.store_host.port),
        TAIL.pack(f.reconsume_times, f.prepared_transaction_offset, len(f.body)),
        f.body, topic_len, topic, PROPERTIES_LEN.pack(len(f.properties)), f.properties,
    ))


def encode_reference(f: MessageFields) -> bytes:
    """The record bytes built by the construct declaration (the reference path)."""
    topic = f.topic.encode("utf-8")
    _check(f, topic)
    magic = magic_for(f.topic)
    sys_flag = effective_sys_flag(f)
    return cl.Message.build(dict(
        total_size=cl.message_length(magic, sys_flag, len(f.body), len(topic), len(f.properties)),
        magic=magic, body_crc=body_crc(f.body), queue_id=f.queue_id, flag=f.flag,
        queue_offset=f.queue_offset, physical_offset=f.phy_offset, sys_flag=sys_flag,
        born_timestamp=f.born_timestamp,
        born_host=dict(address=f.born_host.address, port=f.born_host.port),
        store_timestamp=f.store_timestamp,
        store_host=dict(address=f.store_host.address, port=f.store_host.port),
        reconsume_times=f.reconsume_times, prepared_transaction_offset=f.prepared_transaction_offset,
        body_length=len(f.body), body=f.body, topic_length=len(topic), topic=topic,
        properties_length=len(f.properties), properties=f.properties))


def encode_blank(space_left: int) -> bytes:
    """The 8-byte BLANK that ends a file: TOTALSIZE = every byte left, then the magic."""
    return cl.Blank.build(dict(total_size=space_left))


def needs_blank(record_length: int, space_left: int) -> bool:
    """doAppend: a message goes to the next file unless 8 bytes remain after it."""
    return record_length + cl.END_FILE_MIN_BLANK_LENGTH > space_left
