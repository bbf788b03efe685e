"""The simplified store of the "file storage with code" article (Java NIO, big-endian).

Three files in one directory, all pre-sized and zero-filled, all written with
``MappedByteBuffer`` (big-endian):

commitLog.txt — records back to back, record ``n+1`` at record ``n`` + its msgTotalLen::

    +-------------+--------+--------+-------------+----------+------+---------------+-----------------+--------+
    | msgTotalLen | msgId  | topic  | queueOffset | bodySize | body | transactionId | commitLogOffset |  gap   |
    |   long 8    | 64 B   | 64 B   |   long 8    |  long 8  |  n B |     64 B      |     long 8      | 56 B 0 |
    +-------------+--------+--------+-------------+----------+------+---------------+-----------------+--------+

  Strings are UTF-8, zero-padded to 64 bytes. The article computes
  ``msgTotalLen = 8+64+64+8+8+n+64+64`` (it counts commitLogOffset as 64 bytes) but
  writes an 8-byte long, so 56 zero bytes follow every record. Readers follow
  msgTotalLen, never the field sizes. The data ends at the first msgTotalLen of 0.

consumerQueue.txt — 20-byte units ``long commitLogOffset, int msgLength, long tagCode``,
  unit ``i`` at ``i*20``, ending at the first all-zero unit (unit 0 has offset 0).

index.txt — RocketMQ's 40-byte header, then 100 slots of 4 bytes, then 20-byte entries
  ``int keyHash, long phyOffset, int timeDiff (ms), int prevIndex (always 0)``. The key
  is the msgId, keyHash its Java ``String.hashCode`` (signed, not abs), slot
  ``abs(keyHash % 100)``, entries numbered from 0 and the slot holds the entry number:
  no chaining, a later key in the same slot overwrites the slot. The article's writer
  stores in each entry the commitlog offset *after* its record (it advances the
  offset before building the entry), and sets hashSlotCount = indexCount = entries.

Declarations only; no I/O, no logic beyond position arithmetic.
"""
from formats import declare as cs

from formats.derive import field_offsets, lazy_dtypes
from formats.indexfile import IndexHeader as _RocketMQIndexHeader

# --- file names and pre-sizes ------------------------------------------------------------
COMMITLOG_NAME = "commitLog.txt"
CONSUMER_QUEUE_NAME = "consumerQueue.txt"
INDEX_NAME = "index.txt"
FILE_NAMES = (COMMITLOG_NAME, CONSUMER_QUEUE_NAME, INDEX_NAME)
COMMITLOG_FILE_SIZE = 409_600
CONSUMER_QUEUE_FILE_SIZE = 4_096
INDEX_FILE_SIZE = 409_600

# --- commitLog.txt -------------------------------------------------------------------------
STRING_FIELD_SIZE = 64          # msgId, topic, transactionId: UTF-8, zero-padded
STRING_PAD = b"\x00"


def _string():
    return cs.Bytes(STRING_FIELD_SIZE)


RecordHead = cs.Struct(
    "msg_total_len" / cs.Int64sb,
    "msg_id" / _string(),
    "topic" / _string(),
    "queue_offset" / cs.Int64sb,
    "body_size" / cs.Int64sb,
)
RECORD_HEAD_SIZE = RecordHead.sizeof()
RECORD_HEAD_OFFSETS = field_offsets(RecordHead)

RecordTail = cs.Struct(
    "transaction_id" / _string(),
    "commit_log_offset" / cs.Int64sb,     # the record's own start offset
)
RECORD_TAIL_SIZE = RecordTail.sizeof()
RECORD_TAIL_OFFSETS = field_offsets(RecordTail)

#: bytes a record needs for its fields (body excluded); msgTotalLen below this is corrupt
RECORD_FIELDS_SIZE = RECORD_HEAD_SIZE + RECORD_TAIL_SIZE
#: what the article's formula counts for commitLogOffset, and the zero gap that results
ARTICLE_COMMIT_LOG_OFFSET_SIZE = 64
ARTICLE_GAP_SIZE = ARTICLE_COMMIT_LOG_OFFSET_SIZE - RecordTail.commit_log_offset.sizeof()

Record = cs.Struct(
    *RecordHead.subcons,
    "body" / cs.Bytes(cs.this.body_size),
    *RecordTail.subcons,
)


def article_total_len(body_len: int) -> int:
    """msgTotalLen as the article computes it: 8+64+64+8+8+bodyLen+64+64."""
    return RECORD_FIELDS_SIZE + body_len + ARTICLE_GAP_SIZE


def tail_position(body_len: int) -> int:
    """Offset of transactionId inside a record."""
    return RECORD_HEAD_SIZE + body_len


# --- consumerQueue.txt -----------------------------------------------------------------------
ConsumerQueueUnit = cs.Struct(
    "commit_log_offset" / cs.Int64sb,
    "msg_length" / cs.Int32sb,
    "tag_code" / cs.Int64sb,
)
CQ_UNIT_SIZE = ConsumerQueueUnit.sizeof()
ARTICLE_TAG_CODE = 100          # the article writes this constant for every unit

# --- index.txt ---------------------------------------------------------------------------------
IndexHeader = _RocketMQIndexHeader     # same 40 bytes; counts are entries written (see above)
INDEX_HEADER_SIZE = IndexHeader.sizeof()
INDEX_HEADER_OFFSETS = field_offsets(IndexHeader)

IndexSlot = cs.Int32sb                  # entry number of the last key hashed here (0 also = empty)
INDEX_SLOT_SIZE = IndexSlot.sizeof()
INDEX_SLOT_DTYPE = ">i4"
HASH_SLOTS = 100

IndexEntry = cs.Struct(
    "key_hash" / cs.Int32sb,            # String.hashCode(msgId), signed
    "phy_offset" / cs.Int64sb,          # the article writes the offset after the record
    "time_diff" / cs.Int32sb,           # milliseconds since header.begin_timestamp
    "prev_index" / cs.Int32sb,          # always 0: no chaining
)
INDEX_ENTRY_SIZE = IndexEntry.sizeof()
FIRST_ENTRY = 0


def slot_position(slot: int) -> int:
    return INDEX_HEADER_SIZE + slot * INDEX_SLOT_SIZE


def entry_position(entry: int, hash_slots: int = HASH_SLOTS) -> int:
    return INDEX_HEADER_SIZE + hash_slots * INDEX_SLOT_SIZE + entry * INDEX_ENTRY_SIZE


def index_capacity(file_size: int, hash_slots: int = HASH_SLOTS) -> int:
    """Whole entries that fit in an index file of this size."""
    return max(0, (file_size - entry_position(0, hash_slots)) // INDEX_ENTRY_SIZE)

#: numpy dtypes of the layouts above, built on first use (``derive.lazy_dtypes``)
__getattr__ = lazy_dtypes(globals(), RECORD_HEAD_DTYPE=RecordHead, RECORD_TAIL_DTYPE=RecordTail, CQ_UNIT_DTYPE=ConsumerQueueUnit, INDEX_HEADER_DTYPE=IndexHeader, INDEX_ENTRY_DTYPE=IndexEntry)
