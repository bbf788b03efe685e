"""Benchmark: peak memory (RSS) of `rebuild all` and `verify --level deep` at two store sizes.

Stores are made on the fly with `write --synthetic` (default geometry: 1 GiB CommitLog files,
one default IndexFile of 5M slots x 20M entries) under --dir, and reused between runs. Each
command runs in its own process; its peak RSS is the child's ru_maxrss. The ratio of the two
sizes' peaks is the figure that matters: memory that does not grow with the store gives ~1.

    python bench/bench_memory.py [--sizes 1000000 3000000] [--dir /tmp/rmqtool-mem] [--tree DIR]

``--tree`` runs another checkout's code (say the code before a change) in the same run.
"""
from __future__ import annotations

import argparse
import json
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


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[1_000_000, 3_000_000])
    ap.add_argument("--dir", type=Path, default=Path("/tmp/rmqtool-mem"))
    ap.add_argument("--tree", type=Path, action="append", default=[], help="another checkout to compare")
    args = ap.parse_args()
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
