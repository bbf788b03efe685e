"""The local engine: tasks run in this process, or in a pool of worker processes."""
from __future__ import annotations

from concurrent.futures import ProcessPoolExecutor
from typing import Iterable, Sequence

import pyarrow as pa

from rmqtool.engines.base import Engine, Task, TaskStatus, run_one
from rmqtool.engines.interrupts import interrupts_held, start_worker


def _run(task: Task, fn, schema) -> tuple[TaskStatus, pa.Table]:
    status, batches = run_one(task, fn)
    table = pa.Table.from_batches(batches, schema=schema) if batches else schema.empty_table()
    return status, table


def _run_item(item, fn, schema) -> pa.Table:
    batches = list(fn(item))
    return pa.Table.from_batches(batches, schema=schema) if batches else schema.empty_table()


class LocalEngine(Engine):
    """numpy in-process (``jobs`` = 1) or a process pool across tasks."""

    name = "local"

    def __init__(self, jobs: int | None = 1):
        self.jobs = max(1, jobs or 1)
        self._pool: ProcessPoolExecutor | None = None

    def in_this_process(self) -> bool:
        return self.jobs == 1

    def _execute(self, tasks: Sequence[Task], fn, schema) -> Iterable[tuple[TaskStatus, pa.Table]]:
        return self._each(_run, tasks, fn, schema)

    def _map(self, items: list, fn, schema) -> Iterable[pa.Table]:
        return self._each(_run_item, items, fn, schema)

    def _each(self, runner, items, fn, schema):
        """``runner(item, fn, schema)`` of every item in order: here, or on the pool."""
        if self.jobs == 1 or len(items) == 1:
            for item in items:
                yield runner(item, fn, schema)
            return
        with interrupts_held():        # the first submit forks the workers
            futures = [self._ensure_pool().submit(runner, item, fn, schema) for item in items]
        for f in futures:
            yield f.result()

    def _ensure_pool(self) -> ProcessPoolExecutor:
        if self._pool is None:
            self._pool = ProcessPoolExecutor(max_workers=self.jobs, initializer=start_worker)
        return self._pool

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
            self._pool = None
