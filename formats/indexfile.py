"""IndexFile: 40-byte header, 4-byte hash slots, 20-byte entries (format.md §5)."""
from formats import declare as cs

from formats import JAVA_INT_MAX
from formats.derive import lazy_dtypes, field_offsets

IndexHeader = cs.Struct(
    "begin_timestamp" / cs.Int64sb,
    "end_timestamp" / cs.Int64sb,
    "begin_phy_offset" / cs.Int64sb,
    "end_phy_offset" / cs.Int64sb,
    "hash_slot_count" / cs.Int32sb,
    "index_count" / cs.Int32sb,
)
INDEX_HEADER_SIZE = IndexHeader.sizeof()
INDEX_HEADER_OFFSETS = field_offsets(IndexHeader)

IndexSlot = cs.Int32sb           # entry number of the newest entry in the bucket; 0 = empty
INDEX_SLOT_SIZE = IndexSlot.sizeof()
INDEX_SLOT_DTYPE = ">i4"

IndexEntry = cs.Struct(
    "key_hash" / cs.Int32sb,     # abs(String.hashCode(topic#key)), MIN_VALUE -> 0
    "phy_offset" / cs.Int64sb,
    "time_diff" / cs.Int32sb,    # seconds since header.begin_timestamp
    "prev_index" / cs.Int32sb,   # previous entry in the same bucket; 0 = end of chain
)
INDEX_ENTRY_SIZE = IndexEntry.sizeof()

DEFAULT_HASH_SLOTS = 5_000_000
DEFAULT_INDEX_ENTRIES = 20_000_000
#: the largest index file there can be: the broker computes every slot and entry position as a
#: Java int (IndexFile.putKey/selectPhyOffset), so no position of a readable file reaches 2^31
MAX_INDEX_FILE_SIZE = JAVA_INT_MAX
INVALID_INDEX = 0
FIRST_INDEX = 1                  # indexCount starts at 1; entry 0 is never used
KEY_JOINER = "#"                 # IndexService.buildKey: topic + "#" + key


def index_file_size(hash_slots: int, index_entries: int) -> int:
    """Size in bytes of an index file with this geometry."""
    return INDEX_HEADER_SIZE + hash_slots * INDEX_SLOT_SIZE + index_entries * INDEX_ENTRY_SIZE


def slot_position(hash_slots: int, slot: int) -> int:
    return INDEX_HEADER_SIZE + slot * INDEX_SLOT_SIZE


def entry_position(hash_slots: int, entry: int) -> int:
    return INDEX_HEADER_SIZE + hash_slots * INDEX_SLOT_SIZE + entry * INDEX_ENTRY_SIZE

#: numpy dtypes of the layouts above, built on first use (``derive.lazy_dtypes``)
__getattr__ = lazy_dtypes(globals(), INDEX_HEADER_DTYPE=IndexHeader, INDEX_ENTRY_DTYPE=IndexEntry)
