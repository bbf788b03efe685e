"""One pipeline, two engines: tasks over CommitLog byte ranges, run locally or on Spark.

``engines.base`` holds the task (``Task``, ``plan_tasks``, ``scan_task``, the chain checks) and
the ``Engine`` every executor is; ``engines.local`` (a process pool) and ``engines.spark`` are
the executors, chosen by name here (``get_engine``); ``engines.ordered`` is the ordered local pool
a rebuild walks on. Nothing here knows an operation: each operation's stages live with it.
"""
from __future__ import annotations

from typing import Sequence

from rmqtool.engines.base import (DEFAULT_SPLIT_SIZE, ENGINES, Engine, Task, TaskStatus,
                                  check_chains, default_jobs, file_ends, plan_tasks, run_one, scan_task)
from rmqtool.errors import UsageError


def get_engine(name: str = "local", *, jobs: int | None = None, master: str | None = None,
               remote: str | None = None, spark_conf: Sequence[str] = (), spark=None,
               staging: str | None = None) -> Engine:
    """The engine called ``name``: ``local`` (``jobs`` processes) or ``spark``; ``staging``: a
    location every task and this process reach, for stages with large outputs."""
    if staging is not None:
        from rmqtool.io.staging import check_location
        check_location(staging)
    if name == "local":
        from rmqtool.engines.local import LocalEngine
        engine: Engine = LocalEngine(jobs=jobs)
    elif name == "spark":
        from rmqtool.engines.spark import SparkEngine
        engine = SparkEngine(master=master, remote=remote, conf=spark_conf, session=spark)
    else:
        raise UsageError(f"--engine must be one of {', '.join(ENGINES)}, not {name!r}")
    engine.staging_location = staging
    return engine


__all__ = ["Task", "TaskStatus", "Engine", "plan_tasks", "scan_task", "check_chains", "file_ends", "run_one",
           "get_engine", "default_jobs", "DEFAULT_SPLIT_SIZE", "ENGINES"]
