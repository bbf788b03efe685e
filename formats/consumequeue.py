"""ConsumeQueue (20-byte unit) and 5.x BatchConsumeQueue (46-byte unit), format.md §4."""
from formats import declare as cs

from formats import JAVA_INT_MAX
from formats.derive import lazy_dtypes, field_offsets

ConsumeQueueUnit = cs.Struct(
    "commitlog_offset" / cs.Int64sb,
    "size" / cs.Int32sb,          # TOTALSIZE of the whole commitlog record
    "tags_code" / cs.Int64sb,
)
CQ_UNIT_SIZE = ConsumeQueueUnit.sizeof()
CQ_UNIT_OFFSETS = field_offsets(ConsumeQueueUnit)

DEFAULT_CQ_FILE_SIZE = 300_000 * CQ_UNIT_SIZE
#: the largest ConsumeQueue (or BatchConsumeQueue) file there can be: its size
#: (mappedFileSizeConsumeQueue) and every position in it are Java ints
MAX_CQ_FILE_SIZE = JAVA_INT_MAX

#: Pre-blank filler unit written before the first real unit of a queue whose first
#: file does not start at queue offset 0 (format.md §4.3).
PRE_BLANK_COMMITLOG_OFFSET = 0
PRE_BLANK_SIZE = 0x7FFFFFFF
PRE_BLANK_TAGS_CODE = 0

BatchConsumeQueueUnit = cs.Struct(
    "commitlog_offset" / cs.Int64sb,
    "size" / cs.Int32sb,
    "tags_code" / cs.Int64sb,
    "store_timestamp" / cs.Int64sb,
    "msg_base_offset" / cs.Int64sb,
    "batch_size" / cs.Int16sb,
    "compacted_offset" / cs.Int32sb,   # written as -1 (INVALID_POS)
    "reserved" / cs.Int32sb,
)
BCQ_UNIT_SIZE = BatchConsumeQueueUnit.sizeof()
BCQ_UNIT_OFFSETS = field_offsets(BatchConsumeQueueUnit)
DEFAULT_BCQ_FILE_SIZE = 300_000 * BCQ_UNIT_SIZE

#: numpy dtypes of the layouts above, built on first use (``derive.lazy_dtypes``)
__getattr__ = lazy_dtypes(globals(), CQ_UNIT_DTYPE=ConsumeQueueUnit, BCQ_UNIT_DTYPE=BatchConsumeQueueUnit)
