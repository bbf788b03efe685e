"""`rmqtool write STORE --from FILE|- | --synthetic N`: append exact broker records."""
from __future__ import annotations

import io
import json
import sys
from pathlib import Path
from typing import List, Optional

import typer

from rmqtool.cli.common import FormatOpt, app, emit, stderr, stdout
from rmqtool.cli.options import Format, WriteLayout, option
from rmqtool.errors import UsageError, writing_to
from rmqtool.wording import counted

#: the member ``write --layout dledger`` writes (a single-member group, as a fresh DLedger broker)
DLEDGER_SELF_ID = "n0"


#: the longest JSONL row `write --from` reads: the broker's default maxMessageSize (4 MiB) as base64,
#: with room for properties_raw and the other fields. A longer line is refused before it is parsed.
MAX_ROW_BYTES = 16 << 20


def _open_source(source: str):
    if source == "-":
        raw = getattr(sys.stdin, "buffer", None)      # a text stream without bytes (an embedding caller's)
        return raw if raw is not None else io.BytesIO(sys.stdin.read().encode("utf-8", "surrogateescape"))
    try:
        return open(source, "rb")
    except FileNotFoundError:
        raise UsageError("no such file (expected a JSONL file of records, or - for stdin)", source) from None
    except IsADirectoryError:
        raise UsageError("is a directory (expected a JSONL file of records, or - for stdin)", source) from None
    except OSError as exc:
        raise UsageError(f"cannot open: {exc.strerror}", source) from None


def _body_range(text: str) -> tuple[int, int]:
    """--body-size MIN-MAX (or N): 0 <= MIN <= MAX."""
    lo, _, hi = text.partition("-")
    try:
        lo_i, hi_i = int(lo), int(hi or lo)
    except ValueError:
        raise UsageError(f"--body-size {text!r}: expected MIN-MAX, e.g. 400-600") from None
    if not 0 <= lo_i <= hi_i:
        raise UsageError(f"--body-size {text!r}: expected 0 <= MIN <= MAX")
    return lo_i, hi_i


def _rows(source: str):
    fh = _open_source(source)
    name = "<stdin>" if source == "-" else source
    n = at = 0
    try:
        while True:
            line = fh.readline(MAX_ROW_BYTES + 1)
            if not line:
                return
            n += 1
            if len(line) > MAX_ROW_BYTES:
                raise UsageError(f"line {n} is longer than {MAX_ROW_BYTES} bytes (the longest row write reads)",
                                 name, at)
            start, at = at, at + len(line)
            try:
                text = line.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise UsageError(f"line {n}: not UTF-8 text ({exc.reason})", name, start) from None
            if not text.strip():
                continue
            try:
                yield f"{name}:{n}", json.loads(text)
            except (ValueError, RecursionError) as exc:
                raise UsageError(f"line {n}: not JSON ({str(exc)[:200]})", name, start) from None
    finally:
        if source != "-":
            fh.close()


@app.command("write")
def write_command(
    store_arg: str = typer.Argument(..., metavar="STORE", help="store root (created if missing; appended to if it exists)"),
    source: Optional[str] = typer.Option(None, "--from", metavar="FILE|-",
                                         help="JSONL file of records (dump --format jsonl), or -"),
    synthetic: Optional[int] = typer.Option(None, "--synthetic", metavar="N", help="generate this many messages instead"),
    topics: int = typer.Option(4, "--topics", metavar="N", help="synthetic: number of topics"),
    queues: int = typer.Option(8, "--queues", metavar="N", help="synthetic: queues per topic"),
    key_cardinality: int = typer.Option(200_000, "--key-cardinality", metavar="N",
                                        help="synthetic: distinct bk-N keys"),
    body_size: str = typer.Option("400-600", "--body-size", metavar="MIN-MAX",
                                  help="synthetic: body size range MIN-MAX (uniform)"),
    tags: str = typer.Option("TagA,TagB", "--tags", metavar="TAG[,TAG...]",
                             help="synthetic: comma-separated tags, cycled ('' for none)"),
    seed: int = typer.Option(1, "--seed", metavar="N", help="synthetic: random seed"),
    no_uniq_key: bool = typer.Option(False, "--no-uniq-key",
                                     help="--from: do not generate UNIQ_KEY for rows without properties"),
    commitlog_file_size: Optional[int] = option("commitlog_file_size",
                                                help="mappedFileSizeCommitLog (default 1 GiB or the store's)"),
    cq_file_size: Optional[int] = option("cq_file_size", help="mappedFileSizeConsumeQueue (default 6,000,000)"),
    index_slots: Optional[int] = typer.Option(None, "--index-slots", metavar="N",
                                              help="maxHashSlotNum (default 5,000,000)"),
    index_entries: Optional[int] = typer.Option(None, "--index-entries", metavar="N",
                                                help="maxIndexNum (default 20,000,000)"),
    multi_dispatch: bool = typer.Option(False, "--multi-dispatch", help="dispatch records naming light queues "
                                        "(INNER_MULTI_DISPATCH) to them, as a broker with enableMultiDispatch and "
                                        "enableLmq (on by itself for a store holding %LMQ% queues)"),
    bcq_file_size: Optional[int] = option("bcq_file_size", help="mapperFileSizeBatchConsumeQueue (default 13,800,000)"),
    batch_cq_topic: Optional[List[str]] = typer.Option(None, "--batch-cq-topic", metavar="TOPIC", help="a topic of queue type BatchCQ "
                                                       "(repeatable): its records get BatchConsumeQueue units (found "
                                                       "by itself in a store holding batchconsumequeue/)"),
    cq_ext: bool = typer.Option(False, "--cq-ext", help="write ConsumeQueueExt units and put their addresses in the "
                                "ConsumeQueue units, as a 4.x broker with enableConsumeQueueExt=true (on by itself "
                                "for a store holding consumequeue_ext/)"),
    cq_ext_file_size: Optional[int] = typer.Option(None, "--cq-ext-file-size", metavar="BYTES", help="mappedFileSizeConsumeQueueExt "
                                                   "(default 50,331,648 or the store's; implies --cq-ext)"),
    prop_crc: bool = typer.Option(False, "--prop-crc", help="end every record's properties with the __CRC32# "
                                  "property, as a broker with enabledAppendPropCRC=true"),
    fmt: Format = FormatOpt,
    layout: WriteLayout = typer.Option(WriteLayout.auto, "--layout",
                                       help="the store's layout (dledger: a new DLedger-mode store of member n0's "
                                            "entries; simplified: the article's *.txt files; auto: found from the files)"),
    undo: Optional[str] = typer.Option(None, "--undo", metavar="BACKUP",
                                       help="instead of writing: put STORE back as it was before the write that "
                                            "made BACKUP (its <root>.backup-<UTC ts> directory)"),
):
    """Append exact broker records to a store, dispatch them to ConsumeQueue and IndexFiles."""
    from rmqtool.io.storage import is_uri
    from rmqtool.ops.writer import Geometry, StoreWriter, SyntheticSpec, write_rows, write_synthetic
    if is_uri(store_arg):
        raise UsageError("write needs a local store directory: stores on object storage are read-only "
                         "to rmqtool (write locally, then upload)", store_arg)
    store = Path(store_arg[len("file://"):] if store_arg.startswith("file://") else store_arg)
    if undo is not None:
        return _undo(store, Path(undo), fmt, source is not None or synthetic is not None)
    if (source is None) == (synthetic is None):
        raise UsageError("give exactly one of --from FILE|- and --synthetic N")
    if synthetic is not None and synthetic < 0:
        raise UsageError(f"--synthetic {synthetic}: expected a message count >= 0")
    for option, value in (("--topics", topics), ("--queues", queues), ("--key-cardinality", key_cardinality)):
        if synthetic is not None and value < 1:
            raise UsageError(f"{option} {value}: expected a count >= 1")
    lo_i, hi_i = _body_range(body_size)
    from rmqtool.simplified import use_simplified
    if layout != "dledger" and use_simplified(store, layout):   # the article's three files (--synthetic: its generator)
        from rmqtool.cli import simplified_store as simplified_cli
        rows = None if source is None else _rows(source)
        raise typer.Exit(simplified_cli.write(store, rows, synthetic, seed, fmt))
    geometry = None
    if cq_ext_file_size is not None and cq_ext_file_size <= 24:
        raise UsageError(f"--cq-ext-file-size {cq_ext_file_size}: a file must hold a unit (20 bytes) and its "
                         "4-byte end")
    if cq_ext or any(v is not None for v in (commitlog_file_size, cq_file_size, index_slots, index_entries,
                                              bcq_file_size, cq_ext_file_size)):
        g = Geometry()
        existing = StoreWriter.__new__(StoreWriter)
        if (store / "commitlog").is_dir():
            from rmqtool.io.store import Store
            existing.store = Store(store)
            g = existing.infer_geometry()
        g.commitlog_file_size = commitlog_file_size or g.commitlog_file_size
        g.cq_file_size = cq_file_size or g.cq_file_size
        g.hash_slots = index_slots or g.hash_slots
        g.index_entries = index_entries or g.index_entries
        g.bcq_file_size = bcq_file_size or g.bcq_file_size
        if cq_ext or cq_ext_file_size is not None:
            from formats.consumequeue_ext import DEFAULT_EXT_FILE_SIZE
            g.cq_ext_file_size = cq_ext_file_size or g.cq_ext_file_size or DEFAULT_EXT_FILE_SIZE
        geometry = g
    dledger_id = DLEDGER_SELF_ID if layout == "dledger" else None
    from rmqtool.cli.progress import Progress
    bar = Progress("write", unit="records")
    try:
        with writing_to(store):            # an ENOSPC names the store, not "rmqtool"
            if synthetic is not None:
                spec = SyntheticSpec(synthetic, topics, queues, key_cardinality, lo_i, hi_i,
                                     tuple(t for t in tags.split(",") if t), seed)
                s = write_synthetic(store, spec, geometry, progress=bar, dledger_id=dledger_id, prop_crc=prop_crc)
            else:
                s = write_rows(store, _rows(source), geometry, not no_uniq_key, progress=bar, dledger_id=dledger_id,
                               prop_crc=prop_crc, multi_dispatch=multi_dispatch, batch_cq_topics=batch_cq_topic or ())
    finally:
        bar.close()
    if fmt != "table":
        emit([s.as_dict()], fmt)
        return 0
    d = s.as_dict()
    stdout.print(f"wrote {counted(s.records, 'record')} ({counted(s.bytes, 'byte')}) to {s.store} "
                 f"[{s.first_offset}, {s.end_offset}) in {counted(len(s.commitlog_files), 'commitlog file')}", markup=False)
    stdout.print(f"  consumequeue: {counted(s.cq_units, 'unit')} in {counted(s.cq_files, 'file write')}; index: "
                 f"{counted(s.index_entries, 'entry')} in {counted(len(s.index_files), 'file')}", markup=False)
    stdout.print(f"  {s.seconds:.2f} s, {d['messages_per_second'] or 0} messages/s", markup=False)
    if s.backup:
        stdout.print(f"  backup: {s.backup} holds the old bytes of the {counted(s.backup_files, 'file')} this write changed "
                     f"or created ({s.backup_bytes / 2**10:.1f} KiB on disk); undo: rmqtool write "
                     f"{s.store} --undo {s.backup}", markup=False)
    for note in s.recovered:
        stdout.print(f"  recovered: {note}", markup=False)
    for w in s.warnings[:20]:
        stderr.print(f"warning: {w}", markup=False)
    return 0


def _undo(store: Path, backup: Path, fmt: str, also_writing: bool) -> int:
    """``--undo BACKUP``: restore the bytes a write changed (``rmqtool.io.writebackup``)."""
    from rmqtool.io.writebackup import restore
    if also_writing:
        raise UsageError("--undo restores a backup: give it without --from / --synthetic")
    with writing_to(store):
        r = restore(backup, store)
    if fmt != "table":
        emit([r], fmt)
        return 0
    stdout.print(f"restored {r['store']} as it was before the write of {r['backup']}: {counted(r['files_rewritten'], 'file')} "
                 f"put back, {counted(r['files_removed'], 'file')} and {counted(r['directories_removed'], 'directory')} the write "
                 f"created removed" + (f" ({r['already_restored']} already restored)" if r["already_restored"]
                                       else ""), markup=False)
    return 0
