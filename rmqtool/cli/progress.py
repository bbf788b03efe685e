"""The one progress bar of every long command (rebuild, write, convert, verify, export, stats,
report, info --count): on stderr, only when stderr is a terminal, only once the work has taken more than
``DELAY_S``, and gone when it ends, so piped output and logs never hold it. It counts bytes
("35.8/60.0 MB") or things ("36,000/60,000 records"), whichever the work is measured in."""
from __future__ import annotations

import os
import sys
import time

from rmqtool.cli.common import real_console, stderr

#: seconds of work before the bar appears: a short run shows none
DELAY_S = 1.0


def _on_a_terminal() -> bool:
    """stderr is a terminal (``--color always`` forces colour, not a bar into a pipe)."""
    if not stderr.is_terminal:
        return False
    return os.environ.get("RMQTOOL_COLOR") != "always" or sys.stderr.isatty()


class Progress:
    """``bar(done, total)``: the work done so far (``total`` may be given once, or change).
    ``unit``: "bytes", or the plural noun of what is counted ("records", "messages")."""

    def __init__(self, label: str, unit: str = "bytes", total: int | None = None, delay: float = DELAY_S):
        self.label, self.unit, self.delay = label, unit, delay
        self.total, self.done = total, 0
        self.t0 = time.perf_counter()
        self.bar = None
        self.task = None

    def __call__(self, done: int, total: int | None = None) -> None:
        self.done = done
        if total is not None:
            self.total = total if total > 0 else None        # 0: not known (a bar without an end)
        self._show()

    def restart(self) -> None:
        """Back to zero: the work starts again (verify reads a store that was replaced meanwhile)."""
        self.done = 0

    def _show(self) -> None:
        if self.bar is None:
            if time.perf_counter() - self.t0 < self.delay or not _on_a_terminal():
                return
            from rich.progress import (BarColumn, DownloadColumn, MofNCompleteColumn, Progress as RichProgress,
                                       TextColumn, TimeRemainingColumn, TransferSpeedColumn)
            if self.unit == "bytes":
                counts = (DownloadColumn(), TransferSpeedColumn())
            else:
                counts = (MofNCompleteColumn(), TextColumn(self.unit))
            self.bar = RichProgress(TextColumn(self.label), BarColumn(), *counts, TimeRemainingColumn(),
                                    console=real_console(stderr), transient=True)
            self.task = self.bar.add_task(self.label, total=None)
            self._update()
            self.bar.start()
            return
        self._update()

    def _update(self) -> None:
        total = None if self.total is None else max(self.total, self.done)
        self.bar.update(self.task, completed=self.done, total=total)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()
            self.bar = None

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class Tally(Progress):
    """A ``Progress`` told the amount just done, ``bar(n)``, rather than the amount done so far
    (verify's CommitLog walk reports each file's size as it finishes it)."""

    def __call__(self, n: int, total: int | None = None) -> None:
        super().__call__(self.done + n, total)
