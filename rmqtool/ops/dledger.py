"""DLedger-mode stores: the entries and the entry index as rows, and the member's view for `info`.

Entries come from the walk every command uses (``records.scan``, entry by entry), so a row
is an entry whose record the walk accepted; the entry index units are read from
``dledger-<selfId>/index/`` up to the first unit without the entry magic (the rest of a
DLedger index file is zeros). Layouts: ``formats.dledger``; docs/format-dledger.md.
"""
from __future__ import annotations

from typing import Iterator

import numpy as np

from formats import dledger as dl
from rmqtool.io.dledger_layout import INDEX_DIR, index_queue, read_properties
from rmqtool.output.schema import record_to_dict
from rmqtool.io.fileio import ReadOnlyFile
from rmqtool.kernels.gather import strided_view
from rmqtool.ops.dump import end_row
from rmqtool.records.scan import RecordBatch, walk_store

UNITS_PER_READ = 1 << 16


def member_dir(store):
    """The DLedger member whose data files are the store's CommitLog."""
    if not store.dledger:
        from rmqtool.errors import UsageError
        raise UsageError("not a DLedger-mode store (no dledger-<selfId>/data)", store.root)
    return store.commitlog_dirs[0].parent


def entry_rows(store, with_message: bool = True) -> Iterator[dict]:
    """Every entry the walk accepts, in order: its header fields and the message it carries;
    then, per file, where its entries end (the DLedger blank, the end of the data, damage)."""
    member = member_dir(store).name
    for item in walk_store(store, check_crc=False):
        if not isinstance(item, RecordBatch):
            row = end_row(item)
            if row:
                yield {"member": member, **row}
            continue
        at = item.position - item.buf_base - dl.ENTRY_BODY_OFFSET
        heads = strided_view(item.buf, dl.ENTRY_HEADER_DTYPE)[at]
        for i in range(len(item)):
            h = heads[i]
            row = {"member": member, "file": item.path, "position": int(item.position[i]) - dl.ENTRY_BODY_OFFSET}
            row.update({name: int(h[name]) for name in dl.ENTRY_HEADER_DTYPE.names})
            row["message_phy_offset"] = int(item.phy_offset[i])
            if with_message:
                rec = record_to_dict(item, i)
                row.update({k: rec.get(k) for k in ("topic", "queue_id", "queue_offset", "keys", "uniq_key")})
            yield row


def index_units(member) -> Iterator[tuple[str, int, np.ndarray]]:
    """(file, first unit number, units) of the member's entry index, up to the first unit
    without the entry magic."""
    queue = index_queue(member)
    number = 0
    for seg in queue.files:
        with ReadOnlyFile(seg.path) as fh:
            size = fh.size() - fh.size() % dl.INDEX_UNIT_SIZE
            pos = 0
            while pos < size:
                raw = fh.read(pos, min(UNITS_PER_READ * dl.INDEX_UNIT_SIZE, size - pos), exact=False)
                units = np.frombuffer(raw[:len(raw) - len(raw) % dl.INDEX_UNIT_SIZE], dl.INDEX_UNIT_DTYPE)
                stop = np.flatnonzero(units["magic"] != dl.ENTRY_MAGIC)
                if len(stop):
                    if stop[0]:
                        yield str(seg.path), number, units[:stop[0]]
                    return
                yield str(seg.path), number, units
                number += len(units)
                pos += len(raw)
        if seg.size < queue.file_size:
            return


def index_rows(store) -> Iterator[dict]:
    member = member_dir(store)
    for path, first, units in index_units(member):
        for k, u in enumerate(units):
            yield {"member": member.name, "file": path, "unit": first + k,
                   **{name: int(u[name]) for name in dl.INDEX_UNIT_DTYPE.names}}


def group_view(store) -> dict:
    """`info`'s DLedger section: the member, its entries (first/last index, terms), the
    checkpoint and currterm, the data and index files, and where the entry walk ends."""
    member = member_dir(store)
    first = last = None
    terms: set[int] = set()
    entries = 0
    end = None
    for item in walk_store(store, check_crc=False):
        if isinstance(item, RecordBatch):
            at = item.position - item.buf_base - dl.ENTRY_BODY_OFFSET
            heads = strided_view(item.buf, dl.ENTRY_HEADER_DTYPE)[at]
            if first is None:
                first = int(heads["index"][0])
            last = int(heads["index"][-1])
            terms.update(np.unique(heads["term"]).tolist())
            entries += len(item)
        elif not item.clean or item.kind != "blank":
            end = item
    units = sum(len(u) for _, _, u in index_units(member))
    index_files = sorted((member / INDEX_DIR).glob("[0-9]" * 20))
    return {
        "member": member.name, "self_id": member.name[len(dl.MEMBER_DIR_PREFIX):],
        "entries": entries, "first_index": first, "last_index": last, "terms": sorted(int(t) for t in terms),
        "checkpoint": read_properties(member / "checkpoint"), "currterm": read_properties(member / "currterm"),
        "data_files": len(store.commitlog.files), "data_file_size": store.commitlog.file_size,
        "index_files": len(index_files), "index_units": units,
        "data_end": None if end is None else {"file": end.path, "position": end.position,
                                              "offset": end.phy_offset, "kind": end.kind, "detail": end.detail},
    }
