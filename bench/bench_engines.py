"""Scan/export throughput of the engines on one synthetic store (>= 2 GiB by default).

    python bench/bench_engines.py [--store /tmp/rmq-bench-store] [--messages 3300000]

Generates the store with ``rmqtool write --synthetic`` when it is missing (never inside
the repository), warms the page cache, then runs the same stage, records -> Arrow
batches (every schema field, bodies as raw bytes) -> one summary row per task, on:
local 1 process, local process pool, Spark local[1] and Spark local[2]. Spark's fixed
cost (session start + first job, and stop) is timed apart from the warm runs. A second
workload exports Parquet. Prints one table; the figure to watch is Spark local[2] /
local[1] (it should scale: >= 1.6x).
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rmqtool.engines import DEFAULT_SPLIT_SIZE, plan_tasks  # noqa: E402
from rmqtool.engines.arrow import batch_to_arrow  # noqa: E402
from rmqtool.store import Store  # noqa: E402

SUMMARY = pa.schema([("rows", pa.int64()), ("bytes", pa.int64())])


class CountStage:
    """Decode every record to Arrow (the export path minus the writer); one row per task."""

    def __call__(self, task, batches):
        rows = size = 0
        for b in batches:
            rb = batch_to_arrow(b, task.store, "raw")
            rows += rb.num_rows
            size += int(b.size.sum())
        yield pa.RecordBatch.from_pylist([{"rows": rows, "bytes": size}], schema=SUMMARY)


def ensure_store(path: Path, messages: int) -> None:
    if (path / "commitlog").is_dir():
        return
    print(f"generating {messages} messages into {path} ...", flush=True)
    subprocess.run([sys.executable, "-m", "rmqtool", "write", str(path), "--synthetic", str(messages),
                    "-f", "json"], check=True, stdout=subprocess.DEVNULL)


def warm(store: Store) -> int:
    total = 0
    for seg in store.commitlog.files:
        with open(seg.path, "rb") as fh:
            while chunk := fh.read(64 << 20):
                total += len(chunk)
    return total


def timed(fn, repeat: int):
    best, out = None, None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        dt = time.perf_counter() - t
        best = dt if best is None else min(best, dt)
    return best, out


def spark_session(master: str):
    from rmqtool.engines.spark import get_session
    return get_session(master=master, conf=["spark.sql.shuffle.partitions=2"])[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", default=os.path.join(tempfile.gettempdir(), "rmq-bench-store"))
    ap.add_argument("--messages", type=int, default=3_300_000, help="synthetic messages (~680 B each)")
    ap.add_argument("--split-size", type=int, default=DEFAULT_SPLIT_SIZE)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--jobs", type=int, default=2, help="local process pool size")
    ap.add_argument("--no-spark", action="store_true")
    ap.add_argument("--no-export", action="store_true")
    args = ap.parse_args()

    from rmqtool.engines.local import LocalEngine
    from rmqtool.engines.spark import SparkEngine
    from rmqtool.export import export

    root = Path(args.store)
    ensure_store(root, args.messages)
    store = Store(root)
    stores = [(root.name, store)]
    size = warm(store)
    tasks = plan_tasks(stores, args.split_size)
    print(f"store {root}: {len(store.commitlog.files)} commitlog files, {size / 2**30:.2f} GiB, "
          f"{len(tasks)} tasks of <= {args.split_size >> 20} MiB; cpus {os.cpu_count()}", flush=True)

    results = []   # (label, seconds, rows)

    def scan(engine):
        t = engine.run(tasks, CountStage(), SUMMARY)
        return sum(t.column("rows").to_pylist())

    def export_run(engine):
        dest = Path(tempfile.mkdtemp(prefix="rmq-bench-export-"))
        try:
            return export(stores, dest / "out", engine, split_size=args.split_size)["rows"]
        finally:
            shutil.rmtree(dest, ignore_errors=True)

    for jobs in (1, args.jobs):
        with LocalEngine(jobs=jobs) as eng:
            label = "local, 1 process" if jobs == 1 else f"local, pool of {jobs}"
            secs, rows = timed(lambda: scan(eng), args.repeat)
            results.append((f"scan   {label}", secs, rows))
            print(f"  {results[-1][0]}: {secs:.2f} s", flush=True)
            if not args.no_export:
                secs, rows = timed(lambda: export_run(eng), 1)
                results.append((f"export {label}", secs, rows))
                print(f"  {results[-1][0]}: {secs:.2f} s", flush=True)

    startup = {}
    if not args.no_spark:
        for master in ("local[1]", "local[2]"):
            t0 = time.perf_counter()
            session = spark_session(master)
            eng = SparkEngine(session=session, max_partitions=len(tasks))
            t1 = time.perf_counter()
            eng.run(tasks[:1], CountStage(), SUMMARY)          # first job: workers start, imports
            t2 = time.perf_counter()
            secs, rows = timed(lambda: scan(eng), args.repeat)
            results.append((f"scan   Spark {master}", secs, rows))
            print(f"  {results[-1][0]}: {secs:.2f} s", flush=True)
            if not args.no_export:
                secs, rows = timed(lambda: export_run(eng), 1)
                results.append((f"export Spark {master}", secs, rows))
                print(f"  {results[-1][0]}: {secs:.2f} s", flush=True)
            t3 = time.perf_counter()
            session.stop()
            startup[master] = (t1 - t0, t2 - t1, time.perf_counter() - t3)

    base = {k: v for k, v, _ in results}
    print()
    print(f"{'workload / engine':34} {'seconds':>8} {'rows/s':>12} {'MiB/s':>8}")
    for label, secs, rows in results:
        print(f"{label:34} {secs:8.2f} {rows / secs:12,.0f} {size / secs / 2**20:8.1f}")
    for master, (start, first, stop) in startup.items():
        print(f"Spark {master} fixed cost: session start {start:.2f} s, first job {first:.2f} s, "
              f"stop {stop:.2f} s (not in the figures above)")
    for work in ("scan  ", "export"):
        one, two = base.get(f"{work} Spark local[1]"), base.get(f"{work} Spark local[2]")
        if one and two:
            print(f"{work.strip()}: Spark local[2] / local[1] throughput = {one / two:.2f}x (goal >= 1.6x)")
        l1, lp = base.get(f"{work} local, 1 process"), base.get(f"{work} local, pool of {args.jobs}")
        if l1 and lp:
            print(f"{work.strip()}: local pool of {args.jobs} / 1 process = {l1 / lp:.2f}x")


if __name__ == "__main__":
    main()
