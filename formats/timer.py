"""The 5.x timer store (``timerWheelEnable=true``): timer log units, wheel slots, the timer
checkpoint. Layouts and rules with upstream citations: docs/format-timer.md.

A timer message is written to the CommitLog under ``rmq_sys_wheel_timer`` queue 0; the timer
service appends one ``TimerLogUnit`` per message to ``timerlog/`` (files of
``mappedFileSizeTimerLog`` bytes, a ``TimerLogBlank`` filling a file's tail) and keeps, per
wheel slot (one per ``timerPrecisionMs``), the first and last unit of the slot's chain (units
link back through ``prev_pos``) in ``timerwheel``.
"""
from formats import declare as cs

from formats import JAVA_INT_MAX
from formats.derive import field_offsets, lazy_dtypes, struct_of

#: TimerMessageStore.TIMER_TOPIC: the topic timer messages are parked in
TIMER_TOPIC = "rmq_sys_wheel_timer"
#: unit magic bits (TimerMessageStore.MAGIC_*)
MAGIC_DEFAULT = 1
MAGIC_ROLL = 1 << 1
MAGIC_DELETE = 1 << 2
#: TimerLog.BLANK_MAGIC_CODE (Java: 0xBBCCDDEE ^ (1880681586 + 8), as an int)
BLANK_MAGIC = ((0xBBCCDDEE ^ (1880681586 + 8)) + (1 << 31)) % (1 << 32) - (1 << 31)
#: the wheel holds TIMER_WHEEL_TTL_DAY days of slots, twice over (TimerWheel: slotsTotal * 2)
WHEEL_TTL_DAYS = 7
SLOTS_TOTAL = WHEEL_TTL_DAYS * 24 * 3600
#: timer properties of a parked message (MessageConst)
PROPERTY_TIMER_OUT_MS = "TIMER_OUT_MS"
PROPERTY_TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
PROPERTY_TIMER_DELAY_SEC = "TIMER_DELAY_SEC"
PROPERTY_TIMER_DELAY_MS = "TIMER_DELAY_MS"
PROPERTY_TIMER_ROLL_TIMES = "TIMER_ROLL_TIMES"
PROPERTY_TIMER_DEL_UNIQKEY = "TIMER_DEL_UNIQKEY"
PROPERTY_TIMER_ENQUEUE_MS = "TIMER_ENQUEUE_MS"
PROPERTY_TIMER_DEQUEUE_MS = "TIMER_DEQUEUE_MS"

TimerLogUnit = cs.Struct(
    "size" / cs.Int32sb,               # always UNIT_SIZE
    "prev_pos" / cs.Int64sb,           # the slot's previous unit (-1: first)
    "magic" / cs.Int32sb,              # MAGIC_* bits
    "enqueue_time_ms" / cs.Int64sb,    # the timer's write time when the unit was appended
    "delay_ms" / cs.Int32sb,           # slot time - enqueue time
    "offset_py" / cs.Int64sb,          # the parked message's CommitLog offset
    "size_py" / cs.Int32sb,            # and its size
    "real_topic_hash" / cs.Int32sb,    # String.hashCode of REAL_TOPIC (0 when absent)
    "reserved" / cs.Int64sb,
)
UNIT_SIZE = TimerLogUnit.sizeof()
UNIT_OFFSETS = field_offsets(TimerLogUnit)
UNIT_STRUCT = struct_of(TimerLogUnit)

#: what fills a timer log file's tail when a unit (plus this) does not fit
TimerLogBlank = cs.Struct(
    "size" / cs.Int32sb,               # the bytes left in the file
    "zero" / cs.Int64sb,
    "magic" / cs.Int32sb,              # BLANK_MAGIC
)
BLANK_SIZE = TimerLogBlank.sizeof()
BLANK_STRUCT = struct_of(TimerLogBlank)

WheelSlot = cs.Struct(
    "time" / cs.Int64sb,               # slot time / precisionMs
    "first_pos" / cs.Int64sb,          # first unit of the chain in the timer log
    "last_pos" / cs.Int64sb,           # last unit (the chain runs back from here)
    "num" / cs.Int32sb,                # units (delete units count -1)
    "magic" / cs.Int32sb,              # unused, 0
)
SLOT_SIZE = WheelSlot.sizeof()
SLOT_STRUCT = struct_of(WheelSlot)
WHEEL_FILE_SIZE = SLOTS_TOTAL * 2 * SLOT_SIZE

TimerCheckpoint = cs.Struct(
    "last_read_time_ms" / cs.Int64sb,
    "last_timer_log_flush_pos" / cs.Int64sb,
    "last_timer_queue_offset" / cs.Int64sb,
    "master_timer_queue_offset" / cs.Int64sb,
    "state_version" / cs.Int64sb,      # dataVersion
    "data_version_timestamp" / cs.Int64sb,
    "data_version_counter" / cs.Int64sb,
)
CHECKPOINT_STRUCT = struct_of(TimerCheckpoint)
#: the file is one OS page (MappedFile.OS_PAGE_SIZE)
CHECKPOINT_FILE_SIZE = 4096


def slot_index(time_ms: int, precision_ms: int, slots_total: int = SLOTS_TOTAL) -> int:
    """TimerWheel.getSlotIndex."""
    return time_ms // precision_ms % (slots_total * 2)


def last_unit_offset(file_size: int) -> int:
    """TimerLog.getOffsetForLastUnit: where the last unit of a file can start."""
    return file_size - (file_size - BLANK_SIZE) % UNIT_SIZE - BLANK_SIZE - UNIT_SIZE


__getattr__ = lazy_dtypes(globals(), UNIT_DTYPE=TimerLogUnit, SLOT_DTYPE=WheelSlot)

#: the largest timer log file there can be (mappedFileSizeTimerLog and its positions are Java ints)
MAX_TIMER_LOG_FILE_SIZE = JAVA_INT_MAX
