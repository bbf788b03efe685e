"""DLedger commit log (RocketMQ's enableDLegerCommitLog=true): entries, index units, checkpoint.

The layouts and the rules behind them, with upstream citations: docs/format-dledger.md.
A DLedger group member keeps ``dledger-<selfId>/data/`` (entries: this header, then the
body, which in RocketMQ is one MESSAGE record whose PHYSICALOFFSET is ``pos + ENTRY_BODY_OFFSET``),
``dledger-<selfId>/index/`` (one fixed-size unit per entry index) and two small Java
properties files, ``checkpoint`` and ``currterm``.
"""
from formats import declare as cs

from formats.derive import field_offsets, lazy_dtypes

#: every entry and index unit written by DLedger carries this magic
ENTRY_MAGIC = 1
#: the filler DLedger writes over the rest of a data file that an entry does not fit
BLANK_MAGIC = -1

EntryHeader = cs.Struct(
    "magic" / cs.Int32sb,
    "size" / cs.Int32sb,          # the whole entry: this header and the body
    "index" / cs.Int64sb,
    "term" / cs.Int64sb,
    "pos" / cs.Int64sb,           # the entry's own position in the data file queue
    "channel" / cs.Int32sb,       # reserved
    "chain_crc" / cs.Int32sb,
    "body_crc" / cs.Int32sb,
    "body_length" / cs.Int32sb,
)
ENTRY_HEADER_SIZE = EntryHeader.sizeof()
ENTRY_HEADER_OFFSETS = field_offsets(EntryHeader)
#: where the body starts: the RocketMQ record's physical offset is the entry's pos plus this
ENTRY_BODY_OFFSET = ENTRY_HEADER_SIZE

#: the blank's fixed part: magic and the size it covers (the rest of the file)
BlankHeader = cs.Struct(
    "magic" / cs.Int32sb,
    "size" / cs.Int32sb,
)
BLANK_HEADER_SIZE = BlankHeader.sizeof()
#: an entry goes to the next data file unless it leaves room for at least a blank header
MIN_BLANK_LEN = BLANK_HEADER_SIZE

IndexUnit = cs.Struct(
    "magic" / cs.Int32sb,
    "pos" / cs.Int64sb,           # the entry's pos in the data files
    "size" / cs.Int32sb,          # the entry's size
    "index" / cs.Int64sb,
    "term" / cs.Int64sb,
)
INDEX_UNIT_SIZE = IndexUnit.sizeof()

#: DLedgerConfig defaults: data files of 1 GiB, index files of 5,242,880 units
DEFAULT_DATA_FILE_SIZE = 1 << 30
DEFAULT_INDEX_FILE_SIZE = INDEX_UNIT_SIZE * 5 * 1024 * 1024

#: the keys of ``dledger-<selfId>/checkpoint`` and ``currterm`` (Java properties text)
CHECKPOINT_KEYS = ("committedIndex", "endIndex")
CURRTERM_KEYS = ("currTerm", "voteLeader")
#: the directory of one group member under the store root
MEMBER_DIR_PREFIX = "dledger-"

#: numpy dtypes of the layouts above, built on first use (``derive.lazy_dtypes``)
__getattr__ = lazy_dtypes(globals(), ENTRY_HEADER_DTYPE=EntryHeader, INDEX_UNIT_DTYPE=IndexUnit)
