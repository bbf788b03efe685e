"""StoreCheckpoint: the 4096-byte ``checkpoint`` file (format.md §6)."""
from formats import declare as cs

from formats.derive import field_offsets, lazy_dtypes

CHECKPOINT_FILE_SIZE = 4096  # OS_PAGE_SIZE; unused bytes are zero

#: All five big-endian longs written by 5.1.1+. 4.9.x writes only the first three,
#: 5.0.x the first four; the rest of the page is zero.
Checkpoint = cs.Struct(
    "physic_msg_timestamp" / cs.Int64sb,
    "logics_msg_timestamp" / cs.Int64sb,
    "index_msg_timestamp" / cs.Int64sb,
    "master_flushed_offset" / cs.Int64sb,
    "confirm_phy_offset" / cs.Int64sb,
)
CHECKPOINT_OFFSETS = field_offsets(Checkpoint)
CHECKPOINT_FIELDS_V4_9 = 3
CHECKPOINT_FIELDS_V5_0 = 4
CHECKPOINT_FIELDS_V5_1_1 = 5
#: upstream's getMinTimestamp() backs off this many milliseconds
MIN_TIMESTAMP_SLACK_MS = 3000

#: numpy dtypes of the layouts above, built on first use (``derive.lazy_dtypes``)
__getattr__ = lazy_dtypes(globals(), CHECKPOINT_DTYPE=Checkpoint)
