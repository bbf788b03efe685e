"""The 5.x RocksDB ConsumeQueue (``storeType=defaultRocksDB``): ``consumequeue/`` is a RocksDB
database whose ``default`` column family holds one entry per unit and whose ``offset`` column
family holds each queue's min/max offsets. Keys and values with upstream citations:
docs/format-rocksdb-cq.md. Keys hold the topic's bytes, so they are variable-length structs.
"""
from formats import declare as cs

from formats.derive import field_offsets, struct_of

#: AbstractRocksDBStorage.CTRL_0/1/2: separators inside keys
CTRL_0, CTRL_1, CTRL_2 = b"\x00", b"\x01", b"\x02"
#: column families (ConsumeQueueRocksDBStorage.OFFSET_COLUMN_FAMILY; RocksDB's default)
DEFAULT_CF = "default"
OFFSET_CF = "offset"
#: the offset family's inner key for the max physical offset dispatched (TopicValidator.RMQ_SYS_ROCKSDB_OFFSET_TOPIC)
CHECKPOINT_TOPIC = "CHECKPOINT_TOPIC"
MAX, MIN = b"max", b"min"

UnitKey = cs.Struct(
    "topic_length" / cs.Int32sb,
    cs.Const(CTRL_1),
    "topic" / cs.Bytes(cs.this.topic_length),
    cs.Const(CTRL_1),
    "queue_id" / cs.Int32sb,
    cs.Const(CTRL_1),
    "queue_offset" / cs.Int64sb,
)
#: the key's bytes besides the topic (RocksDBConsumeQueueTable.CQ_KEY_LENGTH_WITHOUT_TOPIC_BYTES)
UNIT_KEY_FIXED = 4 + 1 + 1 + 4 + 1 + 8

UnitValue = cs.Struct(
    "commitlog_offset" / cs.Int64sb,
    "size" / cs.Int32sb,
    "tags_code" / cs.Int64sb,
    "store_timestamp" / cs.Int64sb,
)
UNIT_VALUE_SIZE = UnitValue.sizeof()
UNIT_VALUE_OFFSETS = field_offsets(UnitValue)
UNIT_VALUE_STRUCT = struct_of(UnitValue)

OffsetKey = cs.Struct(
    "topic_length" / cs.Int32sb,
    cs.Const(CTRL_1),
    "topic" / cs.Bytes(cs.this.topic_length),
    cs.Const(CTRL_1),
    "which" / cs.Bytes(3),             # MAX or MIN
    cs.Const(CTRL_1),
    "queue_id" / cs.Int32sb,
)
OFFSET_KEY_FIXED = 4 + 1 + 1 + 3 + 1 + 4

OffsetValue = cs.Struct(
    "commitlog_offset" / cs.Int64sb,
    "queue_offset" / cs.Int64sb,
)
OFFSET_VALUE_STRUCT = struct_of(OffsetValue)
