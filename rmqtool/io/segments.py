"""Ordered segment files named by their start offset (the MappedFileQueue equivalent)."""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from rmqtool.io import fileio, storage

SEGMENT_NAME = re.compile(r"^\d{20}$")


@dataclass(frozen=True)
class Segment:
    path: Path
    start: int      # logical offset of the first byte (= file name)
    size: int       # size on disk when discovered

    @property
    def name(self) -> str:
        return self.path.name


@dataclass
class LayoutProblem:
    """A naming/size/contiguity anomaly found while listing segments."""
    check: str
    path: str
    offset: int | None
    message: str
    severity: str = "error"


@dataclass
class SegmentQueue:
    """Segment files of one queue (commitlog, one consume queue, ...), sorted by name."""
    kind: str
    files: list[Segment]
    file_size: int                      # nominal mapped-file size
    problems: list[LayoutProblem] = field(default_factory=list)

    @classmethod
    def discover(cls, dirs: list[Path], kind: str, file_size: int | None = None,
                 unit: int = 1) -> "SegmentQueue":
        """List 20-digit files in ``dirs`` (merged, sorted by name) and check them."""
        files, problems = [], []
        for d in dirs:
            try:
                entries = sorted(storage.scandir(d), key=lambda e: e.name)
            except FileNotFoundError:
                continue
            except NotADirectoryError:
                problems.append(LayoutProblem("names", str(d), None, "not a directory"))
                continue
            for e in entries:
                if not SEGMENT_NAME.match(e.name):
                    if e.is_file(follow_symlinks=False) or e.is_symlink():
                        problems.append(LayoutProblem("names", e.path, None,
                                                      "file name is not 20 digits; ignored", "warning"))
                    continue
                size = entry_size(e)              # a FIFO, device or dangling link: refused here
                if size is None:                  # deleted between listing and stat (retention)
                    problems.append(LayoutProblem("names", e.path, None,
                                                  "file vanished while listing; ignored", "warning"))
                    continue
                if e.is_symlink():
                    problems.append(LayoutProblem("names", e.path, None, fileio.link_note(e.path), "info"))
                files.append(Segment(e.path if storage.is_remote(e.path) else Path(e.path), int(e.name), size))
        files.sort(key=lambda s: s.name)
        nominal = file_size or _infer_file_size(files, unit)
        queue = cls(kind, files, nominal, problems)
        queue._check(unit)
        return queue

    def _check(self, unit: int) -> None:
        if not self.files:
            return
        size = self.file_size
        for i, seg in enumerate(self.files):
            last = i == len(self.files) - 1
            if seg.size != size and not (last and seg.size == 0):
                self.problems.append(LayoutProblem(
                    "file-size", str(seg.path), None,
                    f"size {seg.size} differs from the queue's file size {size}"))
            if size and seg.start % size:
                self.problems.append(LayoutProblem(
                    "names", str(seg.path), None,
                    f"name {seg.start} is not a multiple of the file size {size}"))
            if i and seg.start - self.files[i - 1].start != size:
                gap_from = self.files[i - 1].start + size
                self.problems.append(LayoutProblem(
                    "contiguity", str(seg.path), None,
                    f"not contiguous: expected a file starting at {gap_from}, found {seg.start}"))

    @property
    def min_offset(self) -> int:
        return self.files[0].start if self.files else 0

    @property
    def end_offset(self) -> int:
        """Offset just past the last file's nominal end."""
        return self.files[-1].start + self.file_size if self.files else 0

    def locate(self, offset: int) -> tuple[Segment, int] | None:
        """The file holding logical ``offset`` and the position inside it."""
        lo, hi = 0, len(self.files) - 1
        while lo <= hi:
            mid = (lo + hi) // 2
            seg = self.files[mid]
            if offset < seg.start:
                hi = mid - 1
            elif offset >= seg.start + self.file_size:
                lo = mid + 1
            else:
                return seg, offset - seg.start
        return None


def entry_size(e) -> int | None:
    """Size of a listed store file the broker reads by name (a segment, an index file), as the
    broker's ``File`` API sees it (``fileio.regular_size``: a symbolic link followed); None when
    it vanished since the listing. Anything that is not a regular file there (FIFO, socket,
    device, a dangling link) is refused (``RefusedError``, exit 3) naming it: skipping it would
    make the files after it look like the start, or the files before it the end, of the log."""
    if e.is_symlink():
        return fileio.regular_size(e.path)
    try:
        st = e.stat(follow_symlinks=False)
    except FileNotFoundError:
        return None
    fileio.require_regular(e.path, st.st_mode)
    return st.st_size


def _infer_file_size(files: list[Segment], unit: int) -> int:
    """The mapped-file size: from name spacing when possible, else the common size."""
    if len(files) >= 2:
        steps = Counter(b.start - a.start for a, b in zip(files, files[1:]) if b.start > a.start)
        sizes = Counter(s.size for s in files if s.size)
        if steps:
            step, _ = steps.most_common(1)[0]
            if step in sizes or not sizes:
                return step
    sizes = Counter(s.size for s in files if s.size)
    if sizes:
        return sizes.most_common(1)[0][0]
    return 0
