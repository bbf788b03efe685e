"""The Spark engine: a task table run through ``mapInArrow``; DataFrame API only.

Each task opens its own CommitLog file by path (CommitLog bytes never travel through the
JVM; ``binaryFile`` / ``sc.binaryFiles`` run it out of memory). The task table is
``spark.range(n, numPartitions=p)``: a Spark task per rmqtool task of full size (small ones
grouped, ``SparkEngine.partitions``), in Classic and in Spark Connect alike. Stage output and each task's status row share one Arrow stream.

Session: ``--remote`` / ``SPARK_REMOTE`` (Spark Connect), else the session spark-submit
configured, else ``--master`` (default ``local[*]``). pyspark is imported lazily.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from typing import Iterable, Sequence

import numpy as np
import pyarrow as pa

from rmqtool.engines.base import Engine, Task, TaskStatus, scan_task
from rmqtool.errors import MissingDependencyError, UsageError

EXTRA = "pip install 'rmqtool[spark]'"
DEFAULT_MASTER = "local[*]"
_STATUS_SCHEMA = [("_task", pa.int64()), ("_seq", pa.int64()), ("_start", pa.int64()),
                  ("_end_kind", pa.string()), ("_end_pos", pa.int64())]


def find_java() -> str | None:
    home = os.environ.get("JAVA_HOME")
    if home and os.access(os.path.join(home, "bin", "java"), os.X_OK):
        return os.path.join(home, "bin", "java")
    return shutil.which("java")


def java_major(java: str) -> int | None:
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30).stderr
    except (OSError, subprocess.SubprocessError):
        return None
    import re
    m = re.search(r'version "(\d+)(?:\.(\d+))?', out)
    if not m:
        return None
    major = int(m.group(1))
    return int(m.group(2) or 0) if major == 1 else major


def check_dependencies(need_java: bool = True) -> None:
    """Raise MissingDependencyError (exit 2) naming the extra when pyspark/pyarrow/pandas or Java is missing."""
    for module in ("pyspark", "pyarrow", "pandas"):
        try:
            __import__(module)
        except ImportError:
            raise MissingDependencyError(f"--engine spark needs {module}: {EXTRA}") from None
    if need_java:
        java = find_java()
        if java is None:
            raise MissingDependencyError(
                "--engine spark needs a Java runtime (java on PATH or JAVA_HOME; 17 or newer for "
                f"pyspark 4) and the spark extra: {EXTRA}")
        import pyspark
        major = java_major(java)
        if major is not None and int(pyspark.__version__.split(".")[0]) >= 4 and major < 17:
            raise MissingDependencyError(f"pyspark {pyspark.__version__} needs Java 17 or newer; "
                                         f"{java} is Java {major}")


def parse_conf(pairs: Sequence[str]) -> dict[str, str]:
    conf = {}
    for p in pairs:
        key, sep, value = p.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--spark-conf expects key=value, not {p!r}")
        conf[key.strip()] = value
    return conf


def get_session(master: str | None = None, remote: str | None = None, conf: Sequence[str] = ()):
    """(SparkSession, created_here). Reuses an active session when there is one."""
    remote = remote or os.environ.get("SPARK_REMOTE")
    settings = parse_conf(conf)
    local = False
    under_submit = bool(os.environ.get("PYSPARK_GATEWAY_PORT"))
    check_dependencies(need_java=not (remote and remote.startswith("sc://")) and not under_submit)
    from pyspark.sql import SparkSession
    if not remote:
        active = SparkSession.getActiveSession()
        if active is not None:
            return active, False
    builder = SparkSession.builder
    if remote:
        builder = builder.remote(remote)
        local = not remote.startswith("sc://")
    elif not under_submit:
        master = master or DEFAULT_MASTER
        builder = builder.master(master)
        local = master.startswith("local")
    if local:
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        settings.setdefault("spark.ui.enabled", "false")
    settings.setdefault("spark.ui.showConsoleProgress", "false")
    # executors read store URIs with this run's storage options and S3 endpoint (credentials
    # come from their own environment unless given as options)
    for name in ("RMQTOOL_STORAGE_OPTIONS", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_REGION"):
        if os.environ.get(name):
            settings.setdefault(f"spark.executorEnv.{name}", os.environ[name])
    settings.setdefault("spark.sql.execution.arrow.pyspark.enabled", "true")
    for k, v in settings.items():
        builder = builder.config(k, v)
    try:
        session = builder.appName("rmqtool").getOrCreate()
    except Exception as exc:      # the JVM did not come up: one line, not a py4j traceback
        raise MissingDependencyError(f"could not start Spark ({exc.__class__.__name__}: "
                                     f"{str(exc).splitlines()[0] if str(exc) else ''}); {EXTRA}") from None
    try:
        session.sparkContext.setLogLevel("ERROR")
    except Exception:             # Spark Connect has no sparkContext
        pass
    return session, True


def _with_status(batch: pa.RecordBatch, task_id: int, seq: int) -> pa.RecordBatch:
    n = batch.num_rows
    cols = list(batch.columns) + [pa.array(np.full(n, task_id, dtype=np.int64)),
                                  pa.array(np.full(n, seq, dtype=np.int64)),
                                  pa.nulls(n, pa.int64()), pa.nulls(n, pa.string()), pa.nulls(n, pa.int64())]
    return pa.RecordBatch.from_arrays(cols, schema=full_schema(batch.schema))


def _status_batch(schema: pa.Schema, status: TaskStatus) -> pa.RecordBatch:
    cols = [pa.nulls(1, f.type) for f in schema]
    cols += [pa.array([status.task_id]), pa.array([-1]), pa.array([status.start], pa.int64()),
             pa.array([status.end_kind]), pa.array([status.end_pos])]
    return pa.RecordBatch.from_arrays(cols, schema=full_schema(schema))


def full_schema(schema: pa.Schema) -> pa.Schema:
    return pa.schema(list(schema) + [pa.field(name, typ) for name, typ in _STATUS_SCHEMA])


def task_runner(tasks: Sequence[Task], fn, schema: pa.Schema):
    """The mapInArrow function: row ``id`` of the task table runs ``tasks[id]``."""
    tasks = list(tasks)

    def run(batches):
        from rmqtool.io import fileio
        fileio.READ_AHEAD = False          # an executor runs a task per core: no second reader thread
        for ids in batches:
            for i in ids.column(0).to_pylist():
                task = tasks[i]
                records, status = scan_task(task)
                seq = 0
                for out in fn(task, records):
                    if out.num_rows:
                        yield _with_status(out if out.schema == schema else out.cast(schema),
                                           task.task_id, seq)
                        seq += 1
                for _ in records:
                    pass
                yield _status_batch(schema, status())
    return run


def item_runner(items: Sequence, fn, schema: pa.Schema):
    """The mapInArrow function of ``Engine.map``: row ``id`` of the task table runs ``fn(items[id])``."""
    items = list(items)

    def run(batches):
        for ids in batches:
            for i in ids.column(0).to_pylist():
                for seq, out in enumerate(b for b in fn(items[i]) if b.num_rows):
                    yield _with_status(out if out.schema == schema else out.cast(schema), i, seq)
    return run


#: bytes of CommitLog below which tasks share a Spark partition (Spark's cost per task, ~10-50 ms,
#: is then more than their work)
MIN_PARTITION_BYTES = 16 << 20


class SparkEngine(Engine):
    """Runs stages as ``spark.range(n, numPartitions=p).mapInArrow(...)`` jobs.

    One task table row per rmqtool task; ``p`` (``partitions``) is one per task of full size,
    small tasks grouped, so a store of many small files does not pay Spark's per-task cost
    for each of them.
    """

    name = "spark"

    def __init__(self, master: str | None = None, remote: str | None = None, conf: Sequence[str] = (),
                 session=None, max_partitions: int | None = None):
        self.max_partitions = max_partitions
        if session is None:
            session, created = get_session(master, remote, conf)
        else:
            created = False
        self.spark = session
        self._created = created

    def on_this_machine(self) -> bool:
        """A local master, or a cluster whose master listens on this machine's loopback."""
        try:
            master = self.spark.sparkContext.master
        except Exception:         # Spark Connect: the server's address
            master = os.environ.get("SPARK_REMOTE", "") or ""
            try:
                master = self.spark.client.host or master      # type: ignore[attr-defined]
            except Exception:
                pass
        if master.startswith("local"):
            return True
        host = master.split("://", 1)[-1].split(":", 1)[0].split("/", 1)[0]
        return host in ("127.0.0.1", "localhost", "::1")

    def parallelism(self) -> int:
        """Task slots of the session (Classic: defaultParallelism; Connect: the conf, or 8)."""
        try:
            return max(1, int(self.spark.sparkContext.defaultParallelism))
        except Exception:         # Spark Connect has no sparkContext
            try:
                return max(1, int(self.spark.conf.get("spark.default.parallelism")))
            except Exception:
                return 8

    def partitions(self, sizes: Sequence[int]) -> int:
        """Spark partitions for tasks of these sizes in bytes (consecutive tasks share one): a
        partition per task of full size, so the slots end together (a store of 17 full tasks on two
        slots is not cut into 8 partitions of 3), small tasks (small files, empty tails) grouped to
        ``MIN_PARTITION_BYTES``, at least four partitions per slot; ``max_partitions`` overrides."""
        n = len(sizes)
        if self.max_partitions:
            return max(1, min(n, self.max_partitions))
        largest, total = max(sizes, default=0), sum(sizes)
        full = min(-(-total // largest), total // MIN_PARTITION_BYTES) if largest > 0 else 0
        return max(1, min(n, max(4 * self.parallelism(), full)))

    def dataframe(self, tasks: Sequence[Task], fn, schema: pa.Schema):
        """The raw job as a DataFrame (stage columns + status columns), not yet run."""
        from pyspark.sql.pandas.types import from_arrow_schema
        n = len(tasks)
        spark_schema = from_arrow_schema(full_schema(schema))
        parts = self.partitions([t.hi - t.lo for t in tasks])
        return self.spark.range(0, n, 1, numPartitions=parts).mapInArrow(
            task_runner(tasks, fn, schema), spark_schema)

    def _execute(self, tasks: Sequence[Task], fn, schema) -> Iterable[tuple[TaskStatus, pa.Table]]:
        if not tasks:
            return []
        df = self.dataframe(tasks, fn, schema)
        try:
            table = df.toArrow() if hasattr(df, "toArrow") else pa.Table.from_pandas(df.toPandas())
        except Exception as exc:           # a worker's error arrives wrapped in a JVM/py4j error
            raise job_error(exc) from None
        return split_results(table, schema, tasks)

    def _map(self, items: list, fn, schema) -> Iterable[pa.Table]:
        from pyspark.sql.pandas.types import from_arrow_schema
        n = len(items)
        parts = self.partitions([1] * n)
        df = self.spark.range(0, n, 1, numPartitions=parts).mapInArrow(
            item_runner(items, fn, schema), from_arrow_schema(full_schema(schema)))
        try:
            table = df.toArrow() if hasattr(df, "toArrow") else pa.Table.from_pandas(df.toPandas())
        except Exception as exc:           # a worker's error arrives wrapped in a JVM/py4j error
            raise job_error(exc) from None
        table = table.sort_by([("_task", "ascending"), ("_seq", "ascending")])
        return [table.select(schema.names).cast(schema)]

    def close(self) -> None:
        if self._created and self.spark is not None:
            self.spark.stop()
        self.spark = None


def job_error(exc: Exception):
    """The RmqError a Spark job failed with (path@offset and message kept), else a one-line RmqError."""
    import re
    from rmqtool import errors
    text = str(exc)
    m = re.search(r"rmqtool\.errors\.(\w+): (.+)", text)
    if m and isinstance(getattr(errors, m.group(1), None), type):
        err = getattr(errors, m.group(1))(m.group(2).strip())
        return err
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    python = [line for line in lines if re.match(r"[A-Za-z_][\w.]*(Error|Exception): ", line)
              and not line.startswith(("java.", "org.", "py4j.", "pyspark.", "scala."))]
    what = python[-1] if python else (lines[0] if lines else exc.__class__.__name__)
    return errors.RmqError(f"Spark job failed: {what[:500]}")


def split_results(table: pa.Table, schema: pa.Schema, tasks: Sequence[Task]) -> list[tuple[TaskStatus, pa.Table]]:
    """Separate status rows from stage rows and give each task its rows in output order."""
    import pyarrow.compute as pc
    kinds = table.column("_end_kind")
    is_status = pc.is_valid(kinds)
    status_rows = table.filter(is_status).select(["_task", "_start", "_end_kind", "_end_pos"]).to_pylist()
    statuses = {r["_task"]: TaskStatus(r["_task"], r["_start"], r["_end_kind"], r["_end_pos"])
                for r in status_rows}
    data = table.filter(pc.invert(is_status))
    data = data.sort_by([("_task", "ascending"), ("_seq", "ascending")])
    task_col = data.column("_task").to_numpy()
    payload = data.select(schema.names).cast(schema)
    out = []
    for t in tasks:
        lo, hi = np.searchsorted(task_col, t.task_id, "left"), np.searchsorted(task_col, t.task_id, "right")
        if t.task_id not in statuses:
            raise RuntimeError(f"Spark returned no status for task {t.task_id}")
        out.append((statuses[t.task_id], payload.slice(lo, hi - lo)))
    return out
