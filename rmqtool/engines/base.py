"""Tasks over CommitLog byte ranges, their plan and scan, and the ``Engine`` that runs them.

The unit of work is a ``Task``: the records whose start lies in ``[lo, hi)`` of one
CommitLog file. A task with ``lo > 0`` finds its first record with the resync rule (a
MESSAGE magic at p+4 and a stored PHYSICALOFFSET equal to file base + p). A stage is a
function ``fn(task, batches) -> iterable of pyarrow.RecordBatch`` over the scanner's
record batches; ``Engine.run(tasks, fn, schema)`` runs it for every task and returns
the concatenated output in task order.

After the tasks ran, the engine checks each file's chain: task k must start exactly
where task k-1's walk left off (and nothing is reachable after a BLANK, a zero tail or a
corrupt record). A task that resynced elsewhere (corruption, or a false MAGIC match
inside a body) is discarded and re-run from the right place, so a split file gives
exactly the records of one sequential walk of that file (``rmqtool.records.scan.FileScan``).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import Callable, Iterable, Iterator, Sequence

from rmqtool.errors import FileChangedError, RmqError, UsageError

#: default byte-range size of one task (a 1 GiB CommitLog file becomes 8 tasks)
DEFAULT_SPLIT_SIZE = 128 << 20
ENGINES = ("local", "spark")


@dataclass(frozen=True)
class Task:
    task_id: int
    store: str              # store (broker) name carried by every row
    path: str               # CommitLog file, opened by the worker itself
    file_base: int          # commitlog offset of the file's first byte
    lo: int                 # first byte of the range (records starting here or later)
    hi: int                 # end of the range (exclusive) for record starts
    exact: bool = False     # lo is a known record start: no resync
    skip: bool = False      # unreachable by the sequential walk: produce nothing
    check_crc: bool = False  # a body CRC mismatch ends the walk (as the broker's recovery)

    @property
    def file_key(self) -> tuple[str, str]:
        return self.store, self.path

    @property
    def location(self):
        """The CommitLog file, resolved once where the task runs (``path`` is its name, the form
        that travels to workers and executors): a ``pathlib.Path`` or a ``RemotePath``."""
        from rmqtool.io import storage
        return storage.path(self.path)


@dataclass(frozen=True)
class TaskStatus:
    task_id: int
    start: int | None       # first position walked (None: no record start in range)
    end_kind: str
    end_pos: int


def plan_tasks(stores: Sequence[tuple[str, object]], split_size: int = DEFAULT_SPLIT_SIZE,
               offset_range: tuple[int | None, int | None] = (None, None),
               check_crc: bool = False, exact_start: bool = False) -> list[Task]:
    """Tasks over every CommitLog file of every ``(name, Store)``; files wholly outside
    ``offset_range`` ([from, to) commitlog offsets) are left out. ``exact_start``: ``from`` is a
    record start (a rebuild walk resumed past damage): its file's tasks begin there."""
    if split_size <= 0:
        raise UsageError(f"split size must be positive, not {split_size}")
    lo_off, hi_off = offset_range
    tasks: list[Task] = []
    for name, store in stores:
        for seg in store.commitlog.files:
            size = seg.size
            if lo_off is not None and seg.start + max(size, 1) <= lo_off:
                continue
            if hi_off is not None and seg.start >= hi_off:
                continue
            first = lo_off - seg.start if exact_start and lo_off is not None and lo_off > seg.start else 0
            cuts = _cuts(seg.path, size, first, split_size)
            for k, lo in enumerate(cuts):
                hi = cuts[k + 1] if k + 1 < len(cuts) else size
                tasks.append(Task(len(tasks), name, str(seg.path), seg.start, lo, hi,
                                  exact=lo == first, check_crc=check_crc))
    return tasks


def _cuts(path, size: int, first: int, split_size: int) -> list[int]:
    """Where a CommitLog file's tasks start: every ``split_size`` bytes from ``first``, except that
    a run of pieces holding only holes (a sparse file's unwritten space, ``fileio.next_data``) is
    one piece. Such a piece starts in zeros (``scan.past_data_end``): it costs nothing, however
    large the file says it is, and a walk that reaches it is continued by the chain as always."""
    cuts = [first]
    if size - first <= split_size:
        return cuts
    from rmqtool.io.fileio import ReadOnlyFile, next_data
    from rmqtool.io.storage import is_remote
    if is_remote(path):              # an object has no holes to ask about
        return list(range(first, size, split_size))
    try:
        fh = ReadOnlyFile(path)
    except RmqError:                 # unreadable or gone: the task that reads it says so
        return list(range(first, size, split_size))
    with fh:
        at, in_hole = first + split_size, False
        while at < size:
            data = next_data(fh, at, size)
            if data >= min(at + split_size, size):         # [at, at + split) is a hole
                if not in_hole:
                    cuts.append(at)
                    in_hole = True
                if data >= size:
                    break                                   # no data up to the end
                at = first + (data - first) // split_size * split_size    # the piece holding it
                continue
            cuts.append(at)
            in_hole = False
            at += split_size
    return cuts


def scan_task(task: Task, check_crc: bool | None = None) -> tuple[Iterator, Callable[[], TaskStatus]]:
    """(record batches of the task, a function giving its status once they are consumed)."""
    from rmqtool.records.scan import END_RANGE, END_TORN, FileScan, find_record_start, past_data_end
    state: dict = {}
    check_crc = task.check_crc if check_crc is None else check_crc

    def batches():
        if task.skip:
            state["status"] = TaskStatus(task.task_id, None, "skipped", task.lo)
            return
        path = task.location
        try:
            start = task.lo if task.exact else \
                None if past_data_end(path, task.lo) else find_record_start(path, task.file_base, task.lo, task.hi)
        except FileChangedError as exc:
            state["status"] = TaskStatus(task.task_id, task.lo, END_TORN, exc.offset or task.lo)
            return
        if start is None or start >= task.hi:
            state["status"] = TaskStatus(task.task_id, None, END_RANGE, task.hi)
            return
        scan = FileScan(path, task.file_base, lo=start, hi=task.hi, check_crc=check_crc)
        try:
            yield from scan
        except FileChangedError as exc:
            state["status"] = TaskStatus(task.task_id, start, END_TORN, exc.offset or start)
            return
        state["status"] = TaskStatus(task.task_id, start, scan.end.kind, scan.end.position)

    def status() -> TaskStatus:
        return state["status"]
    return batches(), status


def check_chains(tasks: Sequence[Task], statuses: dict[int, TaskStatus]) -> tuple[list[Task], list[int]]:
    """Compare each file's tasks with one sequential walk.

    Returns (tasks to run again with a corrected start, ids of tasks whose output must be
    discarded). Only the first wrong task of each file is corrected per round; the
    tasks after it are judged again once it has been re-run.
    """
    from rmqtool.records.scan import END_RANGE
    by_file: dict = {}
    for t in tasks:
        by_file.setdefault(t.file_key, []).append(t)
    rerun, discard = [], []
    for file_tasks in by_file.values():
        file_tasks.sort(key=lambda t: t.lo)
        first = file_tasks[0]
        st0 = statuses[first.task_id]
        # a file planned from its start begins at 0; otherwise trust the first resync
        expected: int | None = 0 if first.lo == 0 else (st0.start if st0.start is not None else first.hi)
        for t in file_tasks:
            st = statuses[t.task_id]
            if t.skip:
                continue
            if expected is None or expected >= t.hi:
                # unreachable (the walk ended before), or inside one record spanning the range
                if st.start is not None:
                    discard.append(t.task_id)
                    rerun.append(replace(t, skip=True))
                continue
            if st.start != expected:
                discard.append(t.task_id)
                rerun.append(replace(t, lo=expected, exact=True))
                break
            expected = st.end_pos if st.end_kind == END_RANGE else None
    return rerun, discard


def file_ends(tasks: Sequence[Task], statuses: dict[int, TaskStatus]) -> dict[str, tuple[str, int]]:
    """Per CommitLog file: (end kind, in-file position) of its one sequential walk, from the
    tasks as finally run (after ``check_chains``)."""
    from rmqtool.records.scan import END_EOF, END_RANGE
    by_file: dict = {}
    for t in sorted(tasks, key=lambda t: (t.path, t.lo)):
        by_file.setdefault(t.path, []).append(t)
    ends = {}
    for path, ts in by_file.items():
        kind, pos = END_EOF, ts[-1].hi
        for t in ts:
            st = statuses[t.task_id]
            if t.skip or st.start is None:
                continue
            if st.end_kind != END_RANGE:
                kind, pos = st.end_kind, st.end_pos
                break
        ends[path] = (kind, pos)
    return ends


class Engine:
    """Runs a stage over tasks; subclasses provide ``_execute``."""

    name = "engine"
    #: after ``run``: the final status of every task, and the tasks as finally run
    statuses: dict = {}
    tasks: list = []
    #: where stages leave large parts for the driver (``--staging``); None: a temporary
    #: directory when the tasks run on this machine
    staging_location: str | None = None

    def on_this_machine(self) -> bool:
        """Whether every task runs on this machine (and can write to its temporary directory)."""
        return True

    def in_this_process(self) -> bool:
        """Whether the tasks run in this process, one after the other (a progress callable can
        then follow each task's walk batch by batch, not only task by task)."""
        return False

    def open_staging(self):
        """A ``Staging`` for one stage's parts, or None when tasks cannot reach one (a cluster
        without ``--staging``: the parts then travel back with the stage's rows)."""
        from rmqtool.io.staging import Staging
        if self.staging_location is not None:
            return Staging(self.staging_location)
        return Staging() if self.on_this_machine() else None

    def run(self, tasks: Sequence[Task], fn, schema, on_discard=None, progress=None):
        """Run ``fn`` for every task; returns a pyarrow Table (``schema``) in task order.

        ``on_discard(table)`` is called with the output of a task that is thrown away (so a
        stage that wrote files can remove them) before that task runs again.
        ``progress(done, total)``: CommitLog bytes of the tasks walked so far, of all of them.
        """
        import pyarrow as pa
        tasks = list(tasks)
        meter = None if progress is None else _Meter(progress, tasks)
        if meter is not None and self.in_this_process():
            fn = _Watched(fn, meter)
        by_id = {t.task_id: t for t in tasks}
        outputs: dict[int, pa.Table] = {}
        statuses: dict[int, TaskStatus] = {}
        todo = tasks
        for _ in range(len(tasks) + 1):
            if not todo:
                break
            for status, table in self._execute(todo, fn, schema):
                statuses[status.task_id] = status
                outputs[status.task_id] = table
                if meter is not None:
                    meter.finished(by_id[status.task_id])
            current = [by_id[i] for i in sorted(by_id)]
            rerun, discard = check_chains(current, statuses)
            for tid in discard:
                if on_discard is not None and outputs[tid].num_rows:
                    on_discard(outputs[tid])
                outputs[tid] = schema.empty_table()
            for t in rerun:
                by_id[t.task_id] = t
            todo = rerun
        self.statuses = statuses
        self.tasks = [by_id[i] for i in sorted(by_id)]
        tables = [outputs[i] for i in sorted(outputs)]
        return pa.concat_tables(tables).cast(schema) if tables else schema.empty_table()

    def _execute(self, tasks: Sequence[Task], fn, schema) -> Iterable[tuple[TaskStatus, object]]:
        raise NotImplementedError

    def map(self, items: Sequence, fn, schema):
        """Run ``fn(item) -> iterable of pyarrow.RecordBatch`` for every item, as tasks that walk no
        CommitLog range (verify's chunk joins); returns a pyarrow Table (``schema``) in item order."""
        import pyarrow as pa
        tables = list(self._map(list(items), fn, schema)) if items else []
        return pa.concat_tables(tables).cast(schema) if tables else schema.empty_table()

    def _map(self, items: list, fn, schema) -> Iterable[object]:
        raise NotImplementedError

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class _Meter:
    """What ``Engine.run`` tells its ``progress``: the bytes of the tasks done, and of the one
    being walked (a task run again counts again, the total never passed)."""

    def __init__(self, progress, tasks: Sequence[Task]):
        self.progress = progress
        self.total = sum(t.hi - t.lo for t in tasks)
        self.done = 0

    def walking(self, task: Task, position: int) -> None:
        self.progress(min(self.done + max(min(position, task.hi) - task.lo, 0), self.total), self.total)

    def finished(self, task: Task) -> None:
        self.done += task.hi - task.lo
        self.progress(min(self.done, self.total), self.total)


class _Watched:
    """A stage whose record batches report where the walk is (in this process only)."""

    def __init__(self, fn, meter: _Meter):
        self.fn, self.meter = fn, meter

    def __call__(self, task: Task, batches):
        return self.fn(task, self._watch(task, batches))

    def _watch(self, task: Task, batches):
        for b in batches:
            yield b
            self.meter.walking(task, b.buf_base + len(b.buf))


def run_one(task: Task, fn, check_crc: bool | None = None):
    """Run ``fn`` over one task in this process: (status, list of pyarrow RecordBatches)."""
    batches, status = scan_task(task, check_crc)
    out = list(fn(task, batches))
    for _ in batches:        # fn may stop early; the walk still has to reach the range end
        pass
    return status(), out


def default_jobs() -> int:
    """The CPUs this process may run on (its affinity mask where the OS has one)."""
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
