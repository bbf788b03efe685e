"""Benchmark: peak memory (RSS) of `rebuild all` and `verify --level deep` at two store sizes.

Stores are made on the fly with `write --synthetic` (default geometry: 1 GiB CommitLog files,
one default IndexFile of 5M slots x 20M entries) under --dir, and reused between runs. Each
command runs in its own process; its peak RSS is the child's ru_maxrss. The ratio of the two
sizes' peaks is the figure that matters: memory that does not grow with the store gives ~1.

    python bench/bench_memory.py [--sizes 1000000 3000000] [--dir /tmp/rmqtool-mem] [--tree DIR]
    python bench/bench_memory.py --spark [--master local[2]] [--sizes 1000000 4000000]

``--tree`` runs another checkout's code (say the code before a change) in the same run.
``--spark`` measures `verify --level deep --engine spark` instead: the peak RSS of the driver's
Python process, of the JVM and of the largest Python worker, each sampled from /proc (VmHWM)
while the command runs; the driver's ratio between the sizes is the figure that matters.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def ensure_store(path: Path, messages: int) -> None:
    marker = path / "bench.json"
    if marker.is_file() and json.loads(marker.read_text()).get("messages") == messages:
        return
    shutil.rmtree(path, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "rmqtool", "write", str(path), "--synthetic", str(messages)],
                   check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    marker.write_text(json.dumps({"messages": messages}))


def peak_rss(argv: list[str], tree: Path) -> tuple[float, float]:
    """(peak RSS in MiB, seconds) of one command run in a fresh process (a fork server-less
    wrapper: each measurement is the only child of a fresh interpreter)."""
    code = ("import resource, subprocess, sys, time; t = time.perf_counter(); "
            "subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL); "
            "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, time.perf_counter() - t)")
    out = subprocess.run([sys.executable, "-c", code, sys.executable, "-m", "rmqtool", *argv],
                         check=True, capture_output=True, text=True, cwd=tree).stdout.split()
    return int(out[0]) / 1024, float(out[1])


def _children(pid: int) -> list[int]:
    out = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as fh:
                out.extend(int(c) for c in fh.read().split())
    except OSError:
        pass
    return out


def _hwm_and_kind(pid: int) -> tuple[int, str] | None:
    try:
        with open(f"/proc/{pid}/status") as fh:
            hwm = next((int(line.split()[1]) for line in fh if line.startswith("VmHWM:")), 0)
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            cmd = fh.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return None
    kind = "jvm" if "java" in cmd.split(" ", 1)[0] else "worker"
    return hwm, kind


def peak_tree(argv: list[str], tree: Path, interval: float = 0.1) -> tuple[dict, float]:
    """Peak RSS in MiB of the command's own process ('driver'), its JVM ('jvm') and its
    largest other descendant ('worker'), sampled from /proc every ``interval`` seconds."""
    t = time.perf_counter()
    env = dict(os.environ, PYTHONPATH=str(tree))          # Spark's Python workers import the same code
    proc = subprocess.Popen([sys.executable, "-m", "rmqtool", *argv], cwd=tree, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    peaks = {"driver": 0, "jvm": 0, "worker": 0}
    while proc.poll() is None:
        todo, seen = [proc.pid], set()
        while todo:
            pid = todo.pop()
            if pid in seen:
                continue
            seen.add(pid)
            got = _hwm_and_kind(pid)
            if got is not None:
                kind = "driver" if pid == proc.pid else got[1]
                peaks[kind] = max(peaks[kind], got[0])
            todo.extend(_children(pid))
        time.sleep(interval)
    secs = time.perf_counter() - t
    return {k: v / 1024 for k, v in peaks.items()}, secs


def main_spark(args) -> int:
    trees = [ROOT] + [t.resolve() for t in args.tree]
    for n in args.sizes:
        ensure_store(args.dir / f"s{n}", n)
    print(f"verify --level deep --engine spark --master {args.master}: peak RSS (MiB) of the driver's "
          "Python / the JVM / the largest Python worker")
    for tree in trees:
        rows = []
        for n in args.sizes:
            argv = ["verify", str(args.dir / f"s{n}"), "--level", "deep", "-f", "json", "--engine", "spark",
                    "--master", args.master]
            peaks, secs = peak_tree(argv, tree)
            rows.append(peaks)
            print(f"  {str(tree)[-28:]:28} {n:>10,} records: driver {peaks['driver']:6.0f}  jvm "
                  f"{peaks['jvm']:6.0f}  worker {peaks['worker']:6.0f}  {secs:5.1f}s", flush=True)
        print(f"  {str(tree)[-28:]:28} driver ratio largest / smallest: "
              f"{rows[-1]['driver'] / rows[0]['driver']:.2f}x", flush=True)
    print(f"({time.strftime('%Y-%m-%d %H:%M')})")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[1_000_000, 3_000_000])
    ap.add_argument("--dir", type=Path, default=Path("/tmp/rmqtool-mem"))
    ap.add_argument("--tree", type=Path, action="append", default=[], help="another checkout to compare")
    ap.add_argument("--spark", action="store_true", help="verify deep through Spark: driver / JVM / worker peaks")
    ap.add_argument("--master", default="local[2]")
    args = ap.parse_args()
    if args.spark:
        return main_spark(args)
    trees = [ROOT] + [t.resolve() for t in args.tree]
    for n in args.sizes:
        ensure_store(args.dir / f"s{n}", n)
    commands = {
        "rebuild all --output": lambda s, out: ["rebuild", "all", str(s), "--output", str(out), "-f", "json"],
        "verify --level deep": lambda s, out: ["verify", str(s), "--level", "deep", "-f", "json"],
    }
    print(f"{'command':24} {'code':28} " + " ".join(f"{n:>16,}" for n in args.sizes) + "   ratio")
    for name, make in commands.items():
        for tree in trees:
            peaks = []
            for n in args.sizes:
                with tempfile.TemporaryDirectory(prefix="rmqtool-mem-out-") as tmp:
                    try:
                        mib, secs = peak_rss(make(args.dir / f"s{n}", Path(tmp) / "out"), tree)
                    except subprocess.CalledProcessError:       # verify exits 1 on findings
                        mib, secs = float("nan"), float("nan")
                peaks.append((mib, secs))
            cells = " ".join(f"{m:8.0f} MiB {s:4.1f}s" for m, s in peaks)
            ratio = peaks[-1][0] / peaks[0][0]
            print(f"{name:24} {str(tree)[-28:]:28} {cells}   {ratio:.2f}x", flush=True)
    print(f"(peak RSS and wall time per size; ratio = largest / smallest size; "
          f"{time.strftime('%Y-%m-%d %H:%M')})")
    return 0


if __name__ == "__main__":
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    sys.exit(main())
