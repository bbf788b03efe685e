"""ConsumeQueueExt (4.x ``enableConsumeQueueExt=true``): ``consumequeue_ext/<topic>/<queueId>/``
files, and the addresses the ConsumeQueue units hold in their tagsCode field to point into them.

docs/format-cq-ext.md explains the rules; each constant names the upstream line it comes from
(apache/rocketmq tag rocketmq-all-4.9.7, ``S/`` = store/src/main/java/org/apache/rocketmq/store/;
the layout is the same in rocketmq-all-4.2.0).
"""
from formats import declare as cs

from formats.derive import field_offsets, lazy_dtypes

#: The fixed part of one ext unit (``ConsumeQueueExt.CqExtUnit``, S/ConsumeQueueExt.java:410-457;
#: written field by field in this order by ``CqExtUnit.write``, :507-529). The filter bitmap,
#: ``bitmap_size`` bytes, follows it.
CqExtUnitHeader = cs.Struct(
    "size" / cs.Int16sb,            # the whole unit: 20 + bitmap_size (a short: 32767 at most)
    "tags_code" / cs.Int64sb,       # the dispatcher's tagsCode of the record (TAGS hash / deliver time)
    "store_timestamp" / cs.Int64sb,  # the record's STORETIMESTAMP (DispatchRequest.getStoreTimestamp)
    "bitmap_size" / cs.Int16sb,     # bytes of filter bitmap after the header (0: none)
)
EXT_HEADER_SIZE = CqExtUnitHeader.sizeof()
EXT_HEADER_OFFSETS = field_offsets(CqExtUnitHeader)

#: CqExtUnit.MIN_EXT_UNIT_SIZE (S/ConsumeQueueExt.java:411-414): a unit without a bitmap
EXT_UNIT_MIN_SIZE = EXT_HEADER_SIZE
#: CqExtUnit.MAX_EXT_UNIT_SIZE = Short.MAX_VALUE (:416); ``put`` refuses a larger unit (:192-196)
EXT_UNIT_MAX_SIZE = 0x7FFF
#: END_BLANK_DATA_LENGTH (:50): bytes always left free at a file's end; a unit that does not fit in
#: ``file size - write position - 4`` makes ``put`` end the file instead (:217-225)
EXT_END_BLANK_LENGTH = 4
#: what ``fullFillToEnd`` writes at the write position of a file the next unit does not fit in
#: (``putShort((short) -1)``, :239-246); recovery takes any size <= 0 as the file's end (:282-298)
EXT_FILE_END_MARK = -1

#: MessageStoreConfig.mappedFileSizeConsumeQueueExt (S/config/MessageStoreConfig.java:48@4.9.7)
DEFAULT_EXT_FILE_SIZE = 48 * 1024 * 1024
#: MessageStoreConfig.bitMapLengthConsumeQueueExt, in bits (:51@4.9.7)
DEFAULT_BITMAP_BITS = 64

LONG_MIN = -(1 << 63)
#: ConsumeQueueExt.MAX_ADDR = Integer.MIN_VALUE - 1L (:55): tagsCode values at or below it are ext
#: addresses (a TAGS hash is an int, so it is never one)
EXT_ADDRESS_MAX = -(1 << 31) - 1
#: MAX_REAL_OFFSET = MAX_ADDR - Long.MIN_VALUE (:56): the largest offset in the ext byte space
EXT_MAX_REAL_OFFSET = EXT_ADDRESS_MAX - LONG_MIN


def is_ext_address(tags_code: int) -> bool:
    """``ConsumeQueueExt.isExtAddr`` (:98-100)."""
    return tags_code <= EXT_ADDRESS_MAX


def ext_offset(address: int) -> int:
    """An address's byte offset in the queue's ext byte space: ``unDecorate`` (:109-114),
    ``address - Long.MIN_VALUE``; the file is the one whose name (its first byte's offset) holds
    it, the position ``offset % file size`` (``get``, :151-170)."""
    return address - LONG_MIN


def ext_address(offset: int) -> int:
    """The address ``put`` returns for a unit written at ``offset`` (file base + write position):
    ``decorate`` (:125-130, :229), ``offset + Long.MIN_VALUE``."""
    return offset + LONG_MIN


#: numpy dtype of the unit header (a unit without bitmap is exactly one), built on first use
__getattr__ = lazy_dtypes(globals(), EXT_HEADER_DTYPE=CqExtUnitHeader)
