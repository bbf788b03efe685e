"""Findings: what verify reports instead of raising, and the registry of stable check names.

Every check name ``verify`` can emit is declared once in ``CHECKS`` with its usual
severity and meaning; docs/checks.md is generated from it (``rmqtool.cli.reference``) and a test proves that
nothing outside it is ever emitted.
"""
from __future__ import annotations

import itertools
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from rmqtool.errors import RmqError
from rmqtool.io.fileio import ReadOnlyFile

ERROR, WARNING, INFO = "error", "warning", "info"
SEVERITIES = (ERROR, WARNING, INFO)
_RANK = {ERROR: 2, WARNING: 1, INFO: 0}

# check name -> (usual severity, level, meaning)
CHECKS: dict[str, tuple[str, str, str]] = {
    # commitlog: layout and record structure
    "commitlog.names": (ERROR, "shallow", "file name is not 20 digits or not a multiple of the file size"),
    "commitlog.file-size": (ERROR, "shallow", "file size differs from the mapped-file size"),
    "commitlog.contiguity": (ERROR, "shallow", "a file is missing: names do not step by the file size"),
    "commitlog.extra-empty": (WARNING, "shallow", "more than one all-zero pre-allocated file after the data"),
    "commitlog.magic": (ERROR, "shallow", "illegal magic code where a record should start"),
    "commitlog.total-size": (ERROR, "shallow", "TOTALSIZE negative, below the smallest record or above the file size"),
    "commitlog.length": (ERROR, "shallow", "computed record length != TOTALSIZE (or negative topic length)"),
    "commitlog.torn-tail": (ERROR, "shallow", "the last record of the data is incomplete (rest of the file is zero)"),
    "commitlog.blank-size": (ERROR, "shallow", "BLANK TOTALSIZE != bytes left in the file"),
    "commitlog.after-blank": (WARNING, "shallow", "non-zero bytes after a BLANK header (stale pool bytes or garbage)"),
    "commitlog.early-end": (ERROR, "shallow", "a file's data ends without a BLANK although later files hold data"),
    "commitlog.stale-tail": (WARNING, "shallow", "non-zero bytes after the end of the data with no record in them"),
    "commitlog.carved": (WARNING, "shallow", "records found by resync past a corruption (not trusted)"),
    "commitlog.file-changed": (WARNING, "shallow", "a file shrank or vanished while being read (live store)"),
    "commitlog.replaced": (WARNING, "shallow", "the store root was replaced (by `write`) during every verify run"),
    "commitlog.live-tail": (INFO, "shallow", "incomplete record at the live tail of a store a broker holds"),
    # DLedger-mode commit log (docs/format-dledger.md): the entries that wrap the records
    "dledger.magic": (ERROR, "shallow", "a DLedger entry header without the entry magic where an entry should start"),
    "dledger.size": (ERROR, "shallow", "a DLedger entry size too small to hold a message"),
    "dledger.pos": (ERROR, "shallow", "a DLedger entry whose stored pos is not its own offset"),
    "dledger.body": (ERROR, "shallow", "a DLedger entry whose body is not one whole MESSAGE record"),
    "dledger.torn-tail": (ERROR, "shallow", "a DLedger entry runs past the end of its data file"),
    "dledger.index-gap": (ERROR, "shallow", "a DLedger entry index that is not the previous entry's + 1"),
    "dledger.term": (ERROR, "shallow", "a DLedger entry whose term is lower than the previous entry's"),
    "dledger.index-file": (WARNING, "shallow", "the member's entry index unit disagrees with the entry "
                           "(magic, pos, size, index or term): DLedger's recovery rewrites the index from there"),
    "dledger.checkpoint": (WARNING, "shallow", "the member checkpoint's committedIndex is past the last entry"),
    "dispatch.stop": (ERROR, "shallow", "a SCHEDULE_TOPIC_XXXX record whose DELAY is not an int: the broker's record "
                      "check fails there, its recovery ends the CommitLog there and nothing after it is dispatched"),
    # commitlog: deep record checks
    "commitlog.body-crc": (ERROR, "deep", "crc32(body) & 0x7FFFFFFF != BODYCRC (non-empty bodies only)"),
    "commitlog.prop-crc": (ERROR, "deep", "__CRC32# property != crc32 of the record without its 20-byte tail"),
    "commitlog.phy-offset": (ERROR, "deep", "stored PHYSICALOFFSET != file base + position"),
    "commitlog.queue-offset": (ERROR, "deep", "QUEUEOFFSET of NOT/COMMIT records not continuous per topic/queue"),
    # consume queues
    "cq.names": (ERROR, "shallow", "CQ file name is not 20 digits or not a multiple of the file size"),
    "cq.file-size": (ERROR, "shallow", "CQ file size differs from the queue's file size or is not whole units"),
    "cq.contiguity": (ERROR, "shallow", "a CQ file is missing in the middle of a queue"),
    "cq.gap": (ERROR, "shallow", "an invalid (zero) unit followed by valid units: a hole in the queue"),
    "cq.pre-blank": (ERROR, "shallow", "pre-blank sentinel unit before the first real unit, outside the first file"),
    "cq.filler": (WARNING, "shallow", "pre-blank sentinel between real units: a queue offset with no message"),
    "cq.unit-size": (ERROR, "shallow", "unit size outside what a record can be; deep: != its record's TOTALSIZE"),
    "cq.order": (ERROR, "shallow", "unit commitlog offsets not increasing within the queue"),
    "cq.beyond-end": (WARNING, "shallow", "unit points past the CommitLog's valid end (recovery truncates it)"),
    "cq.expired": (INFO, "shallow", "units pointing below the CommitLog's min offset (expired data)"),
    "cq.unit-target": (ERROR, "deep", "unit does not point at a record start (middle of a record, or no record)"),
    "cq.unit-record": (ERROR, "deep", "unit's record is in another topic/queue, has another QUEUEOFFSET, or is never dispatched"),
    "cq.tags-code": (ERROR, "deep", "unit tagsCode != the dispatcher's tagsCode of its record"),
    "cq.missing": (ERROR, "deep", "dispatchable record below the dispatch frontier has no unit in its queue"),
    # ConsumeQueueExt (4.x enableConsumeQueueExt, docs/format-cq-ext.md)
    "cqext.names": (ERROR, "shallow", "ConsumeQueueExt file name is not 20 digits or not a multiple of the file size"),
    "cqext.file-size": (ERROR, "shallow", "ConsumeQueueExt file size differs from the queue's file size"),
    "cqext.unit-size": (ERROR, "shallow", "ext unit size != 20 + its bitmap size, or the unit runs past its file"),
    "cqext.address": (ERROR, "shallow", "CQ unit's ext address in no ext file, at or past its file's data end, not at a "
                      "unit's start, or not after the previous unit's"),
    "cqext.unit-record": (ERROR, "deep", "ext unit's tagsCode or store time != those of the record its CQ unit points at"),
    "cq.rocksdb-entry": (ERROR, "shallow", "RocksDB ConsumeQueue entry whose key or value is not a unit's (or an offset entry's) layout"),
    "cq.rocksdb-offset": (ERROR, "shallow", "RocksDB ConsumeQueue offset table's max for a queue differs from its last unit"),
    "timer.unit": (ERROR, "shallow", "timer log: a unit of the wrong size where a unit should be, or a file filler that does not cover the file's tail"),
    "timer.unit-record": (ERROR, "shallow", "timer log unit whose CommitLog offset is not the start of a rmq_sys_wheel_timer record of the unit's size"),
    "timer.slot": (ERROR, "shallow", "timer wheel slot whose time belongs in another slot, or whose first/last unit lies outside the timer log"),
    "timer.slot-chain": (ERROR, "shallow", "timer wheel slot whose chain (last unit back through prev pos) loops, leaves the log or misses its first unit"),
    "timer.wheel": (ERROR, "shallow", "pending timer wheel slot that differs from what the timer log's units put there (rebuild timerwheel regenerates it)"),
    "timer.checkpoint": (ERROR, "shallow", "timer checkpoint's timer log flush position is past the timer log's end"),
    "lmq.unit-record": (ERROR, "deep", "a light queue's (%LMQ%) unit points at a record that does not name this queue in INNER_MULTI_DISPATCH, or whose size or tagsCode differ"),
    "bcq.unit-record": (ERROR, "deep", "a BatchConsumeQueue unit does not point at a record of its topic and queue with the unit's size, store time, base offset, inner count and tagsCode"),
    "bcq.base-offset": (ERROR, "deep", "a BatchConsumeQueue unit's base offset is not the previous unit's base + inner count"),
    "bcq.missing": (ERROR, "deep", "record of a BatchCQ topic below the dispatch frontier has no BatchConsumeQueue unit"),
    "cq.not-dispatched": (INFO, "deep", "record past the dispatch frontier: the broker dispatches it at restart"),
    # index
    "index.file-size": (ERROR, "shallow", "index file size != 40 + 4*slots + 20*entries (truncated file)"),
    "index.header": (ERROR, "shallow", "header indexCount out of range or begin/end fields disagree with entries"),
    "index.header-count": (ERROR, "shallow", "hashSlotCount != used slots, or entries past indexCount"),
    "index.slot-range": (ERROR, "shallow", "slot value negative or > indexCount"),
    "index.chain-loop": (ERROR, "shallow", "prevIndex not strictly smaller than the entry (chains must decrease)"),
    "index.chain": (ERROR, "shallow", "chain/slot structure differs from the bucket order (wrong slot or prev)"),
    "index.time-diff": (ERROR, "shallow", "negative timeDiff"),
    "index.entry-target": (ERROR, "deep", "entry does not point at a record start"),
    "index.entry-key": (ERROR, "deep", "no key of the entry's record hashes to the entry's keyHash"),
    "index.entry-time": (WARNING, "deep", "entry time (begin + timeDiff s) disagrees with the record's store time"),
    "index.missing": (ERROR, "deep", "key of a record inside the indexed range is not in the index"),
    "index.not-indexed": (INFO, "deep", "record past the index frontier: the broker indexes it at restart"),
    # checkpoint
    "checkpoint.missing": (WARNING, "shallow", "no checkpoint file"),
    "checkpoint.size": (WARNING, "shallow", "checkpoint is not 4096 bytes"),
    "checkpoint.trailing": (WARNING, "shallow", "non-zero bytes after the checkpoint fields"),
    "checkpoint.ahead": (ERROR, "shallow", "a checkpoint timestamp is later than any record in the CommitLog"),
    "checkpoint.confirm-offset": (ERROR, "shallow", "confirmPhyOffset past the CommitLog's valid end"),
    "checkpoint.behind": (INFO, "shallow", "checkpoint older than the data (normal after a crash: recovery re-dispatches)"),
    # the store as a tree
    "store.symlink": (WARNING, "shallow", "a symlink inside the store (named with its target): a link to a regular file is read through as the broker does, any other is not followed; write refuses it"),
    "store.config": (WARNING, "shallow", "a config/*.json file (and its .bak) that cannot be loaded: larger than "
                                         "64 MiB, not UTF-8 or not JSON"),
}


@dataclass
class Finding:
    severity: str
    check: str
    file: str | None
    offset: int | None
    message: str
    excerpt: str | None = None

    def as_dict(self) -> dict:
        return {"severity": self.severity, "check": self.check, "file": self.file,
                "offset": self.offset, "message": self.message, "excerpt": self.excerpt}


def hex_excerpt(path, offset: int | None, length: int = 16, before: int = 16) -> str | None:
    """``<start>: <hex before> [<hex from offset>]`` read from the file (None when unreadable)."""
    if path is None or offset is None or offset < 0:
        return None
    from rmqtool.io import storage
    try:
        # a finding names its file (a string, e.g. from a worker's batch check): located here,
        # once per finding kept, since the file reads take a resolved location
        with ReadOnlyFile(storage.path(path)) as fh:
            size = fh.size()
            start = max(0, offset - before)
            raw = fh.read(start, max(0, min(offset + length, size) - start), exact=False)
    except RmqError:
        return None
    cut = offset - start
    return f"{start}: {raw[:cut].hex()} [{raw[cut:].hex()}]"


def sort_key(f: Finding) -> tuple:
    """Report order: file, then offset (none first), then check name."""
    return (f.file or "", f.offset if f.offset is not None else -1, f.check)


class FindingLog:
    """A sink that keeps the ``add`` calls made to it, to be given to a real sink later
    (``replay``): a check run once whose findings go to a sink chosen afterwards."""

    def __init__(self):
        self._calls: list[tuple] = []

    def add(self, *args, **kwargs) -> None:
        self._calls.append((args, kwargs))

    def replay(self, sink) -> None:
        for args, kwargs in self._calls:
            sink.add(*args, **kwargs)


@dataclass
class FindingSink:
    """Collects findings; keeps at most ``limit`` per check and severity but counts all of them.

    The ones kept are the first by ``sort_key`` (file, offset), whatever order the checks
    ran in: verify joins the store range by range, so findings arrive out of file order.
    """
    limit: int | None = 1000
    counts: Counter = field(default_factory=Counter)          # (check, severity) -> n
    by_kind: dict = field(default_factory=lambda: defaultdict(Counter))   # kind -> severity -> n
    _kept: dict = field(default_factory=lambda: defaultdict(list), repr=False)   # (check, sev) -> findings
    _cut: dict = field(default_factory=dict, repr=False)      # (check, sev) -> sort key of the last kept
    _arrival: itertools.count = field(default_factory=itertools.count, repr=False)

    def add(self, check: str, file, offset: int | None, message: str, severity: str | None = None,
            excerpt: str | bool | None = True, excerpt_len: int = 16) -> None:
        if check not in CHECKS:
            raise KeyError(f"undeclared check name {check!r}")
        severity = severity or CHECKS[check][0]
        where, file = file, None if file is None else str(file)     # the excerpt is read from ``where``
        offset = None if offset is None else int(offset)
        if not self._count(check, severity, (file or "", offset if offset is not None else -1, check)):
            return
        if excerpt is True:
            excerpt = hex_excerpt(where, offset, excerpt_len)
        elif excerpt is False:
            excerpt = None
        self._keep(Finding(severity, check, file, offset, message, excerpt))

    def put(self, finding: Finding) -> None:
        """Add a finding built elsewhere (e.g. by a batch check)."""
        if finding.check not in CHECKS:
            raise KeyError(f"undeclared check name {finding.check!r}")
        if self._count(finding.check, finding.severity, sort_key(finding)):
            self._keep(finding)

    def _count(self, check: str, severity: str, key: tuple) -> bool:
        """Count one finding; False when it cannot be among the ``limit`` kept."""
        self.counts[(check, severity)] += 1
        self.by_kind[check.split(".")[0]][severity] += 1
        return self._admits(check, severity, key)

    def _admits(self, check: str, severity: str, key: tuple) -> bool:
        if self.limit is None:
            return True
        cut = self._cut.get((check, severity))
        return self.limit > 0 and (cut is None or key < cut)

    def _keep(self, finding: Finding) -> None:
        bucket = self._kept[(finding.check, finding.severity)]
        bucket.append((next(self._arrival), finding))
        if self.limit is not None and len(bucket) >= 2 * self.limit:
            self._trim(bucket, finding.check, finding.severity)

    def _trim(self, bucket: list, check: str, severity: str) -> None:
        bucket.sort(key=lambda kept: (sort_key(kept[1]), kept[0]))    # equal keys: arrival order
        del bucket[self.limit:]
        self._cut[(check, severity)] = sort_key(bucket[-1][1])

    def merge(self, later: "FindingSink") -> None:
        """Take in what ``later`` collected (engine tasks' sinks, in report order), as if its findings
        had come here after this sink's: all counted, kept by the same rule (its kept ones suffice:
        a finding it dropped had ``limit`` of its own before it)."""
        self.counts.update(later.counts)
        for kind, severities in later.by_kind.items():
            self.by_kind[kind].update(severities)
        for finding in later.findings:
            if self._admits(finding.check, finding.severity, sort_key(finding)):
                self._keep(finding)

    @property
    def findings(self) -> list[Finding]:
        """The kept findings (at most ``limit`` per check and severity), in arrival order."""
        out = []
        for (check, severity), bucket in self._kept.items():
            if self.limit is not None and len(bucket) > self.limit:
                self._trim(bucket, check, severity)
            out.extend(bucket)
        return [f for _, f in sorted(out, key=lambda kept: kept[0])]

    def total(self, severity: str) -> int:
        return sum(n for (_, sev), n in self.counts.items() if sev == severity)

    def suppressed(self) -> int:
        return max(0, sum(self.counts.values()) - len(self.findings))

    def worst(self) -> str | None:
        present = [sev for (_, sev), n in self.counts.items() if n]
        return max(present, key=_RANK.get) if present else None

    def sorted(self) -> list[Finding]:
        return sorted(self.findings, key=sort_key)
