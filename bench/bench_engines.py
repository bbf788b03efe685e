"""Scan/export throughput of the engines on one synthetic store (>= 2 GiB by default).

    python bench/bench_engines.py [--store /tmp/rmq-bench-store] [--messages 3300000]

Generates the store with ``rmqtool write --synthetic`` when it is missing (never inside
the repository), warms the page cache, then runs the same stage, records -> Arrow
batches (every schema field, bodies as raw bytes) -> one summary row per task, on:
local 1 process, local process pool, Spark local[1] and Spark local[2]. Spark's fixed
cost (session start + first job, and stop) is timed apart from the warm runs. A second
workload exports Parquet. Prints one table; the figure to watch is Spark local[2] /
local[1] (it should scale: >= 1.6x).

``--standalone`` adds a real Spark standalone cluster on 127.0.0.1 (``tests/sparkcluster.py``)
with one worker of one core, then two: the figure to watch is 2 workers / 1 worker (>= 1.8x).
``--s3`` adds the scan of a smaller store (``--s3-messages``) from disk and through ``s3://``
on a local S3-compatible server (moto, ``tests/s3server.py``), by one process and a pool.
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
from rmqtool.output.arrow import batch_to_arrow  # noqa: E402
from rmqtool.io.store import Store  # noqa: E402

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


class ByteStage:
    """Only the record walk: how many bytes of records there are (for MiB/s)."""

    def __call__(self, task, batches):
        size = sum(int(b.size.sum()) for b in batches)
        yield pa.RecordBatch.from_pylist([{"rows": 0, "bytes": size}], schema=SUMMARY)


def _burn(n: int) -> int:
    total = 0
    for i in range(n):
        total += i * i
    return total


def cpu_scaling(n: int = 20_000_000) -> float:
    """Control: the same pure-Python work in 2 processes vs 1 (2.0 on two idle cores)."""
    import multiprocessing as mp
    t = time.perf_counter()
    _burn(n)
    one = time.perf_counter() - t
    with mp.get_context("fork").Pool(2) as pool:
        t = time.perf_counter()
        pool.map(_burn, [n, n])
        two = time.perf_counter() - t
    return 2 * one / two


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
    ap.add_argument("--standalone", action="store_true", help="also a standalone cluster, 1 then 2 workers")
    ap.add_argument("--s3", action="store_true", help="also scan a store through s3:// (local moto server)")
    ap.add_argument("--s3-messages", type=int, default=300_000)
    ap.add_argument("--spark-child", help=argparse.SUPPRESS)   # one Spark master in a fresh process
    ap.add_argument("--label", help=argparse.SUPPRESS)
    args = ap.parse_args()

    from rmqtool.engines.local import LocalEngine
    from rmqtool.engines.spark import SparkEngine
    from rmqtool.ops.export import export

    root = Path(args.store)
    ensure_store(root, args.messages)
    store = Store(root)
    stores = [(root.name, store)]
    size = 1
    tasks = plan_tasks(stores, args.split_size)
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

    if args.spark_child:
        import json
        t0 = time.perf_counter()
        session = spark_session(args.spark_child)
        eng = SparkEngine(session=session, max_partitions=len(tasks))
        t1 = time.perf_counter()
        eng.run(tasks[:1], CountStage(), SUMMARY)          # first job: workers start, imports
        t2 = time.perf_counter()
        secs, rows = timed(lambda: scan(eng), args.repeat)
        label = args.label or args.spark_child
        results.append((f"scan   Spark {label}", secs, rows))
        if not args.no_export:
            secs, rows = timed(lambda: export_run(eng), 1)
            results.append((f"export Spark {label}", secs, rows))
        t3 = time.perf_counter()
        session.stop()
        print("RESULT " + json.dumps({"results": results, "startup": [t1 - t0, t2 - t1, time.perf_counter() - t3]}))
        return

    size = warm(store)
    data = sum(LocalEngine(1).run(tasks, ByteStage(), SUMMARY).column("bytes").to_pylist())
    print(f"store {root}: {len(store.commitlog.files)} commitlog files of {store.commitlog.file_size >> 20} MiB, "
          f"{data / 2**30:.2f} GiB of records, {len(tasks)} tasks of <= {args.split_size >> 20} MiB; "
          f"cpus {os.cpu_count()}, load {os.getloadavg()[0]:.1f}", flush=True)
    size = data
    control = [cpu_scaling()]

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

    def spark_child(master: str, label: str, env=None) -> None:
        import json
        cmd = [sys.executable, __file__, "--store", str(root), "--split-size", str(args.split_size),
               "--repeat", str(args.repeat), "--spark-child", master, "--label", label] + \
            (["--no-export"] if args.no_export else [])
        t = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
        line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
        if line is None:
            print(proc.stdout[-2000:], proc.stderr[-2000:])
            raise SystemExit(f"Spark run for {label} failed")
        got = json.loads(line[len("RESULT "):])
        for name, secs, rows in got["results"]:
            results.append((name, secs, rows))
            print(f"  {name}: {secs:.2f} s", flush=True)
        startup[label] = tuple(got["startup"]) + (time.perf_counter() - t,)

    if not args.no_spark:
        for master in ("local[1]", "local[2]"):
            spark_child(master, master)
    if args.standalone:
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
        from sparkcluster import StandaloneCluster
        for workers in (1, 2):
            with StandaloneCluster(workers=workers, cores=1, memory="2g",
                                   pythonpath=str(Path(__file__).resolve().parent.parent)) as cluster:
                spark_child(cluster.url, f"standalone x{workers}", cluster.env)
    if args.s3:
        s3_scan(args, results)
    control.append(cpu_scaling())
    base = {k: v for k, v, _ in results}
    print()
    print(f"{'workload / engine':34} {'seconds':>8} {'rows/s':>12} {'MiB/s':>8}")
    for label, secs, rows in results:
        mib = "" if ("disk," in label or "s3://" in label) else f"{size / secs / 2**20:8.1f}"   # another store
        print(f"{label:34} {secs:8.2f} {rows / secs:12,.0f} {mib:>8}")
    for master, (start, first, stop, wall) in startup.items():
        print(f"Spark {master} fixed cost (not in the figures above): JVM + session {start:.2f} s, "
              f"first job (workers, imports) {first:.2f} s, stop {stop:.2f} s; whole process {wall:.1f} s")
    print(f"control: 2 processes / 1 process on pure-Python work = {control[0]:.2f}x before, "
          f"{control[1]:.2f}x after (2.0 = two free cores; below that the machine is shared)")
    for work in ("scan  ", "export"):
        one, two = base.get(f"{work} Spark local[1]"), base.get(f"{work} Spark local[2]")
        if one and two:
            print(f"{work.strip()}: Spark local[2] / local[1] throughput = {one / two:.2f}x (goal >= 1.6x)")
        one, two = base.get(f"{work} Spark standalone x1"), base.get(f"{work} Spark standalone x2")
        if one and two:
            print(f"{work.strip()}: standalone 2 workers / 1 worker throughput = {one / two:.2f}x (goal >= 1.8x)")
        disk, remote = base.get(f"{work} disk, 1 process"), base.get(f"{work} s3://, 1 process")
        if disk and remote:
            print(f"{work.strip()}: s3:// (local moto server) / disk time = {remote / disk:.2f}x, one process")
        l1, lp = base.get(f"{work} local, 1 process"), base.get(f"{work} local, pool of {args.jobs}")
        if l1 and lp:
            print(f"{work.strip()}: local pool of {args.jobs} / 1 process = {l1 / lp:.2f}x")


def s3_scan(args, results) -> None:
    """The scan of a smaller store from disk and through s3:// (moto on 127.0.0.1, in this
    process: the server's own CPU is on the same two cores)."""
    import logging
    from rmqtool.engines.local import LocalEngine
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    from s3server import S3Server
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    root = Path(args.store + f"-s3-{args.s3_messages}")
    if not (root / "commitlog").is_dir():
        subprocess.run([sys.executable, "-m", "rmqtool", "write", str(root), "--synthetic", str(args.s3_messages),
                        "--commitlog-file-size", str(64 << 20), "-f", "json"], check=True, stdout=subprocess.DEVNULL)
    server = S3Server()
    saved = dict(os.environ)
    try:
        os.environ.update(server.env())
        server.bucket("bench")
        t = time.perf_counter()
        uri = server.upload(root, "bench", "store")
        print(f"  uploaded {root} to {uri} in {time.perf_counter() - t:.1f} s", flush=True)
        for where, path in (("disk", str(root)), ("s3://", uri)):
            store = Store(path)
            tasks = plan_tasks([("store", store)], args.split_size)
            for jobs in (1, args.jobs):
                with LocalEngine(jobs=jobs) as eng:
                    secs, rows = timed(lambda: sum(eng.run(tasks, CountStage(), SUMMARY).column("rows").to_pylist()),
                                       args.repeat)
                label = f"scan   {where}, {'1 process' if jobs == 1 else f'pool of {jobs}'}"
                results.append((label, secs, rows))
                print(f"  {label}: {secs:.2f} s", flush=True)
    finally:
        os.environ.clear()
        os.environ.update(saved)
        server.stop()


if __name__ == "__main__":
    main()
