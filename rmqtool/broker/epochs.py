"""The controller-mode epoch rules (EpochFileCache, AutoSwitchHAClient.doTruncate, DefaultElectPolicy).

An epoch is a master's term: it starts where the master's CommitLog ended when it took over, and
ends where the next epoch starts (the last one: at the CommitLog's max offset). A slave that
connects to a master truncates its CommitLog at the consistent point: the end, on both sides, of
the newest epoch both have with the same start offset. docs/format-controller.md cites each rule.
"""
from __future__ import annotations

from dataclasses import dataclass

from formats.controller import OPEN_END


@dataclass(frozen=True)
class EpochRange:
    epoch: int
    start: int
    end: int | None          # None: open (Long.MAX_VALUE; the last epoch starts past the max offset)

    @property
    def end_or_open(self) -> int:
        return OPEN_END if self.end is None else self.end


def epoch_ranges(entries: list[tuple[int, int]], max_offset: int) -> list[EpochRange]:
    """The cache loaded from ``entries`` (file order), by epoch: each entry ends where the entry after
    it in the file starts (a later duplicate epoch replaces an earlier one), and the newest epoch ends
    at ``max_offset`` unless it starts past it."""
    cells = [[epoch, start, OPEN_END] for epoch, start in entries]
    for prev, cur in zip(cells, cells[1:]):
        prev[2] = cur[1]
    by_epoch = {cell[0]: cell for cell in cells}
    ordered = [by_epoch[k] for k in sorted(by_epoch)]
    if ordered and ordered[-1][1] <= max_offset:
        ordered[-1][2] = max_offset
    return [EpochRange(e, s, None if end == OPEN_END else end) for e, s, end in ordered]


def handshake_ranges(entries: list[tuple[int, int]], max_offset: int) -> list[EpochRange]:
    """The ranges doTruncate works with: the cache's entries by epoch, loaded afresh (so ends are the
    next epoch's start in epoch order), the newest ending at ``max_offset``."""
    return epoch_ranges([(r.epoch, r.start) for r in epoch_ranges(entries, max_offset)], max_offset)


def consistent_point(local: list[EpochRange], master: list[EpochRange]) -> tuple[int | None, int]:
    """(the newest epoch both hold with the same start, the offset the slave truncates to): the
    smaller of the two ends of that epoch; (None, -1) when no epoch matches (the slave cannot follow)."""
    theirs = {r.epoch: r for r in master}
    for mine in reversed(local):
        other = theirs.get(mine.epoch)
        if other is not None and other.start == mine.start:
            return mine.epoch, min(mine.end_or_open, other.end_or_open)
    return None, -1


def election_rank(last_epoch: int, max_offset: int) -> tuple[int, int]:
    """How the controller ranks live candidates when neither the old master nor a preferred broker
    decides: the higher last epoch, then the higher max offset (then electionPriority, a config value)."""
    return last_epoch, max_offset
