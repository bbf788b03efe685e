"""Read the ``checkpoint`` file (format.md §6)."""
from __future__ import annotations

from dataclasses import dataclass, asdict
from pathlib import Path

from formats.checkpoint import Checkpoint, CHECKPOINT_FILE_SIZE, CHECKPOINT_OFFSETS, MIN_TIMESTAMP_SLACK_MS
from formats.derive import struct_of
from rmqtool.errors import CorruptDataError
from rmqtool.io.fileio import ReadOnlyFile


_FIELDS = struct_of(Checkpoint)
_NAMES = tuple(sc.name for sc in Checkpoint.subcons)


@dataclass
class CheckpointValues:
    physic_msg_timestamp: int
    logics_msg_timestamp: int
    index_msg_timestamp: int
    master_flushed_offset: int
    confirm_phy_offset: int
    file_size: int
    nonzero_bytes_after_fields: int

    @property
    def min_timestamp(self) -> int:
        """upstream getMinTimestamp(): max(0, min(physic, logics) - 3000)."""
        return max(0, min(self.physic_msg_timestamp, self.logics_msg_timestamp) - MIN_TIMESTAMP_SLACK_MS)

    @property
    def min_timestamp_index(self) -> int:
        return min(self.min_timestamp, self.index_msg_timestamp)

    def as_dict(self) -> dict:
        d = asdict(self)
        d["min_timestamp"] = self.min_timestamp
        d["min_timestamp_index"] = self.min_timestamp_index
        return d


#: the most of a checkpoint file rmqtool reads: the broker maps one 4 KiB page of it (the five
#: longs, then zeros) and never looks further; a larger file is reported by its size
MAX_CHECKPOINT_READ = CHECKPOINT_FILE_SIZE


def read_checkpoint(path: Path) -> CheckpointValues:
    """The checkpoint's fields, from at most its first ``MAX_CHECKPOINT_READ`` bytes (``file_size``
    is the file's whole size; ``nonzero_bytes_after_fields`` counts within that first page)."""
    with ReadOnlyFile(path) as fh:
        size = fh.size()
        data = fh.read(0, min(size, MAX_CHECKPOINT_READ), exact=False)
    if len(data) < _FIELDS.size:
        raise CorruptDataError(
            f"checkpoint is {len(data)} bytes, needs at least {_FIELDS.size} "
            f"(normally {CHECKPOINT_FILE_SIZE})", path, len(data))
    tail = data[_FIELDS.size:]
    return CheckpointValues(*_FIELDS.unpack_from(data), file_size=max(size, len(data)),
                            nonzero_bytes_after_fields=len(tail) - tail.count(0))


def require_checkpoint(values: CheckpointValues, path: Path) -> CheckpointValues:
    """A file read as a checkpoint must look like one (``dump checkpoint FILE``): the broker's
    4096-byte page, zeros after the five longs, no negative timestamp or offset."""
    if values.file_size != CHECKPOINT_FILE_SIZE:
        raise CorruptDataError(f"not a checkpoint: {values.file_size} bytes, a checkpoint file is "
                               f"{CHECKPOINT_FILE_SIZE}", path, 0)
    if values.nonzero_bytes_after_fields:
        raise CorruptDataError(f"not a checkpoint: {values.nonzero_bytes_after_fields} non-zero bytes after "
                               f"the {_FIELDS.size}-byte fields, where the broker leaves zeros",
                               path, _FIELDS.size)
    for name in _NAMES:
        if getattr(values, name) < 0:
            raise CorruptDataError(f"not a checkpoint: {name} is negative ({getattr(values, name)})",
                                   path, CHECKPOINT_OFFSETS[name])
    return values
