"""CommitLog records: MESSAGE (V1/V2, IPv4/IPv6 hosts) and BLANK, format.md §2.

The layout is declared once here. ``MessageHead`` is the fixed prefix every
MESSAGE shares; after it come the born host (8 or 20 bytes by sysFlag), the store
timestamp, the store host, ``MessageTail`` and the variable parts. ``Message``
strings these pieces together; bulk readers compute positions from the same pieces.
"""
from formats import declare as cs

from formats.derive import field_offsets, lazy_dtypes

# --- magic codes (format.md §2.1) -----------------------------------------------
MESSAGE_MAGIC_V1 = 0xDAA320A7
MESSAGE_MAGIC_V2 = 0xDAA320AB   # 5.1.0+: 2-byte topic length, used for topics > 127 chars
BLANK_MAGIC = 0xCBD43194
MESSAGE_MAGICS = (MESSAGE_MAGIC_V1, MESSAGE_MAGIC_V2)
END_FILE_MIN_BLANK_LENGTH = 8
V1_MAX_TOPIC_LENGTH = 127       # Byte.MAX_VALUE, counted in Java chars

# --- sysFlag bits (format.md §2.3) -----------------------------------------------
COMPRESSED_FLAG = 0x1
MULTI_TAGS_FLAG = 0x2
TRANSACTION_MASK = 0xC
TRANSACTION_NOT_TYPE = 0x0
TRANSACTION_PREPARED_TYPE = 0x4
TRANSACTION_COMMIT_TYPE = 0x8
TRANSACTION_ROLLBACK_TYPE = 0xC
BORNHOST_V6_FLAG = 0x10
STOREHOST_V6_FLAG = 0x20
NEED_UNWRAP_FLAG = 0x40
INNER_BATCH_FLAG = 0x80
#: the topic prefix of a light message queue, filled by multi-dispatch (MixAll.LMQ_PREFIX)
LMQ_TOPIC_PREFIX = "%LMQ%"
COMPRESSION_TYPE_MASK = 0x700
COMPRESSION_TYPE_SHIFT = 8
COMPRESSION_LZ4 = 1
COMPRESSION_ZSTD = 2
COMPRESSION_ZLIB = 3
COMPRESSION_LEGACY_ZLIB = 0      # 0 in the type bits also means zlib

# --- properties (format.md §2.4, §2.5) ---------------------------------------------
NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"
KEY_SEPARATOR = " "
PROPERTY_KEYS = "KEYS"
PROPERTY_TAGS = "TAGS"
PROPERTY_WAIT_STORE_MSG_OK = "WAIT"
PROPERTY_DELAY_TIME_LEVEL = "DELAY"
PROPERTY_REAL_TOPIC = "REAL_TOPIC"
PROPERTY_REAL_QUEUE_ID = "REAL_QID"
PROPERTY_TRANSACTION_PREPARED = "TRAN_MSG"
PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX = "UNIQ_KEY"
PROPERTY_ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
PROPERTY_INNER_NUM = "INNER_NUM"
PROPERTY_INNER_BASE = "INNER_BASE"
PROPERTY_CLUSTER = "CLUSTER"
#: BODYCRC (and the __CRC32# digits) hold crc32 & this mask (UtilAll.crc32)
BODY_CRC_MASK = 0x7FFFFFFF
PROPERTY_CRC32 = "__CRC32#"
CRC32_RESERVED_LENGTH = len(PROPERTY_CRC32) + 1 + 10 + 1
PROPERTIES_MAX_LENGTH = 0x7FFF   # Short.MAX_VALUE
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"

# --- layout ------------------------------------------------------------------------
RecordPrefix = cs.Struct(
    "total_size" / cs.Int32sb,
    "magic" / cs.Int32ub,
)
RECORD_PREFIX_SIZE = RecordPrefix.sizeof()

Blank = cs.Struct(
    "total_size" / cs.Int32sb,   # every byte left in the file
    "magic" / cs.Const(BLANK_MAGIC, cs.Int32ub),
)

MessageHead = cs.Struct(
    "total_size" / cs.Int32sb,
    "magic" / cs.Int32ub,
    "body_crc" / cs.Int32sb,
    "queue_id" / cs.Int32sb,
    "flag" / cs.Int32sb,
    "queue_offset" / cs.Int64sb,
    "physical_offset" / cs.Int64sb,
    "sys_flag" / cs.Int32sb,
    "born_timestamp" / cs.Int64sb,
)
MESSAGE_HEAD_SIZE = MessageHead.sizeof()
MESSAGE_HEAD_OFFSETS = field_offsets(MessageHead)

HostV4 = cs.Struct("address" / cs.Bytes(4), "port" / cs.Int32sb)
HostV6 = cs.Struct("address" / cs.Bytes(16), "port" / cs.Int32sb)
HOST_V4_SIZE = HostV4.sizeof()
HOST_V6_SIZE = HostV6.sizeof()
StoreTimestamp = cs.Int64sb
STORE_TIMESTAMP_SIZE = StoreTimestamp.sizeof()

MessageTail = cs.Struct(
    "reconsume_times" / cs.Int32sb,
    "prepared_transaction_offset" / cs.Int64sb,
    "body_length" / cs.Int32sb,
)
MESSAGE_TAIL_SIZE = MessageTail.sizeof()
MESSAGE_TAIL_OFFSETS = field_offsets(MessageTail)
TopicLengthV1 = cs.Int8sb
TopicLengthV2 = cs.Int16sb
PropertiesLength = cs.Int16sb


def _host(flag):
    return cs.IfThenElse(lambda ctx: ctx.sys_flag & flag, HostV6, HostV4)


Message = cs.Struct(
    *MessageHead.subcons,
    "born_host" / _host(BORNHOST_V6_FLAG),
    "store_timestamp" / StoreTimestamp,
    "store_host" / _host(STOREHOST_V6_FLAG),
    *MessageTail.subcons,
    "body" / cs.Bytes(lambda ctx: max(ctx.body_length, 0)),
    "topic_length" / cs.IfThenElse(cs.this.magic == MESSAGE_MAGIC_V2, TopicLengthV2, TopicLengthV1),
    "topic" / cs.Bytes(cs.this.topic_length),  # negative fails, as upstream's copy does
    "properties_length" / PropertiesLength,
    "properties" / cs.Bytes(lambda ctx: max(ctx.properties_length, 0)),
)


def host_size(sys_flag: int, v6_flag: int) -> int:
    return HOST_V6_SIZE if sys_flag & v6_flag else HOST_V4_SIZE


def topic_length_size(magic: int) -> int:
    return TopicLengthV2.sizeof() if magic == MESSAGE_MAGIC_V2 else TopicLengthV1.sizeof()


#: bytes of a MESSAGE that are not host, body, topic-length field, topic or properties
MESSAGE_FIXED_SIZE = (MESSAGE_HEAD_SIZE + STORE_TIMESTAMP_SIZE + MESSAGE_TAIL_SIZE
                      + PropertiesLength.sizeof())


def message_length(magic: int, sys_flag: int, body_length: int, topic_length: int,
                   properties_length: int) -> int:
    """TOTALSIZE the broker computes (calMsgLength), format.md §2.2."""
    return (MESSAGE_FIXED_SIZE + host_size(sys_flag, BORNHOST_V6_FLAG)
            + host_size(sys_flag, STOREHOST_V6_FLAG) + topic_length_size(magic)
            + max(body_length, 0) + topic_length + max(properties_length, 0))


def store_timestamp_position(sys_flag: int) -> int:
    """Offset of STORETIMESTAMP inside a record (after the born host)."""
    return MESSAGE_HEAD_SIZE + host_size(sys_flag, BORNHOST_V6_FLAG)


def tail_position(sys_flag: int) -> int:
    """Offset of RECONSUMETIMES (start of MessageTail) inside a record."""
    return (store_timestamp_position(sys_flag) + STORE_TIMESTAMP_SIZE
            + host_size(sys_flag, STOREHOST_V6_FLAG))


def body_position(sys_flag: int) -> int:
    return tail_position(sys_flag) + MESSAGE_TAIL_SIZE


# --- properties codec ------------------------------------------------------------------
def decode_properties(raw: bytes) -> dict[str, str]:
    """Parse a properties blob exactly like MessageDecoder.string2messageProperties.

    UTF-8 with replacement; segments split on 0x02; the key runs to the first 0x01
    at or after the segment start; empty keys or values drop the segment; a later
    duplicate key overwrites an earlier one.
    """
    text = raw.decode("utf-8", "replace")
    props: dict[str, str] = {}
    index, length = 0, len(text)
    while index < length:
        end = text.find(PROPERTY_SEPARATOR, index)
        if end < 0:
            end = length
        if end - index >= 3:
            kv = text.find(NAME_VALUE_SEPARATOR, index)
            if index < kv < end - 1:
                props[text[index:kv]] = text[kv + 1:end]
        index = end + 1
    return props


def encode_properties(props) -> bytes:
    """Encode a mapping (or (name, value) pairs) as the broker does; None values skipped."""
    items = props.items() if hasattr(props, "items") else props
    out = "".join(f"{k}{NAME_VALUE_SEPARATOR}{v}{PROPERTY_SEPARATOR}"
                  for k, v in items if v is not None)
    return out.encode("utf-8")


def split_keys(keys: str | None) -> list[str]:
    """KEYS value split on single spaces, empty tokens skipped (IndexService.buildIndex)."""
    if not keys:
        return []
    return [k for k in keys.split(KEY_SEPARATOR) if k]


def crc32_property_digits(crc: int) -> str:
    """MessageDecoder.createCrc32: decimal digits least-significant first, padded to 10."""
    return str(crc)[::-1].ljust(10, "0")


def transaction_type(sys_flag: int) -> int:
    return sys_flag & TRANSACTION_MASK


def compression_type(sys_flag: int) -> int:
    return (sys_flag & COMPRESSION_TYPE_MASK) >> COMPRESSION_TYPE_SHIFT

#: numpy dtypes of the layouts above, built on first use (``derive.lazy_dtypes``)
__getattr__ = lazy_dtypes(globals(), MESSAGE_HEAD_DTYPE=MessageHead)
