"""`convert`: a DLedger-mode store rewritten as a classic store (groups leaving DLedger).

The source is only read. Its records are walked as every command walks them (entry by
entry, ``records.scan``) and written by ``ops.writer`` into a new store: CommitLog files of
the broker's layout (each record at its new offset, BLANK at file ends), the ConsumeQueues and
IndexFiles dispatched from them, the checkpoint. Every field of every record is kept (queue
offsets, store times, hosts, properties, bodies); only PHYSICALOFFSET changes, so offsetMsgIds
change and UNIQ_KEYs do not. Only committed entries are converted (index <= the member's
``committedIndex``), unless ``include_uncommitted``.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from formats import dledger as dl
from rmqtool.errors import RefusedError, UsageError
from rmqtool.output.schema import record_to_dict
from rmqtool.io.dledger_layout import committed_index
from rmqtool.kernels.gather import strided_view
from rmqtool.ops.writer import Geometry, WriteSummary, write_rows
from rmqtool.records.scan import RecordBatch, walk_store


def entry_indexes(batch: RecordBatch) -> np.ndarray:
    """The DLedger entry index of each record of a batch walked from a DLedger data file
    (read from the entry header in front of the record)."""
    heads = batch.position - batch.buf_base - dl.ENTRY_BODY_OFFSET
    return strided_view(batch.buf, dl.ENTRY_HEADER_DTYPE)[heads]["index"].astype(np.int64)


def convert_to_commitlog(store, output: Path, commitlog_file_size: int | None = None,
                         include_uncommitted: bool = False, progress=None) -> WriteSummary:
    """Write ``store`` (DLedger mode) as a classic store at ``output`` (which must not exist)."""
    if not store.dledger:
        raise UsageError("not a DLedger-mode store: convert reads dledger-<selfId>/data", store.root)
    output = Path(output)
    if output.exists():
        raise RefusedError("the output exists; convert writes a new store", output)
    member = store.commitlog_dirs[0].parent
    last = None if include_uncommitted else committed_index(member)
    if not include_uncommitted and last is None:
        raise UsageError("no committedIndex in the member's checkpoint: pass --include-uncommitted "
                         "to convert every entry", member / "checkpoint")
    g = Geometry(commitlog_file_size=commitlog_file_size or store.commitlog.file_size)
    g.cq_file_size = store.cq_file_size() or g.cq_file_size
    geometry = store.index_geometry
    g.hash_slots, g.index_entries = geometry.hash_slots, geometry.index_entries
    stops = []

    def rows():
        for item in walk_store(store, check_crc=True, stop_at_break=True):
            if not isinstance(item, RecordBatch):
                if not item.clean:
                    stops.append(item)
                continue
            keep = np.ones(len(item), dtype=bool) if last is None else entry_indexes(item) <= last
            for i in np.flatnonzero(keep).tolist():
                yield f"{item.path}@{int(item.position[i])}", record_to_dict(item, i, body="raw")

    summary = write_rows(output, rows(), g, generate_uniq_key=False, progress=progress, detect_batches=False)
    if stops:       # the walk ended at damage: what was converted is there, and said so
        end = stops[0]
        summary.warnings.append(f"the source's walk stopped at {end.path}@{end.position} ({end.check or end.kind}: "
                                f"{end.detail}); entries after it were not converted")
    return summary
