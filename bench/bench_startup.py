"""Start-up benchmark: whole-process time of short commands beside a bare ``python -c pass``.

In one run, alternating the commands round-robin so that the machine's drift reaches each alike,
it times (min and median of --runs) ``python -c pass``, ``rmqtool --version``, ``rmqtool --help``
and ``query-key``, ``query-id`` (an offsetMsgId and a UNIQ_KEY), ``locate`` and ``info`` on a
1M-message store, and prints each one's ratio to the bare interpreter beside its goal (issue 35:
``--version`` and ``--help`` <= 2x, the store commands <= 3x).

The store (default /tmp/bench1m) is made with ``write --synthetic 1000000`` if it is missing
(about a minute; never committed). ``locate`` walks the CommitLog file from its start to the offset
(record boundaries are known only that way; through a file's first MiB with ``struct``, further with
numpy): it is timed at a record near the start (key bk-17's
first) and, for scale, at one deep in the file (its last); ``info`` walks the last CommitLog file to
find where the data validly ends, as the broker's recovery does, so its time is mostly that walk.
``--help`` is timed as a person meets it the second time: the first, untimed run renders it with
typer and keeps it in the cache (rmqtool/cli/startup.py).
Usage: python bench/bench_startup.py [--store /tmp/bench1m] [--runs 15] [--rmqtool PATH]
(``--rmqtool``: time an installed console script, as installed, instead of ``python -m rmqtool`` of
this checkout).
Every process runs with its bytecode compiled once and kept (in --pycache, not in the checkout),
as an installed package has it, even where PYTHONDONTWRITEBYTECODE is set.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GOALS = {"--version": 2.0, "--help": 2.0, "locate (deep in the file)": None}
STORE_GOAL = 3.0


def run(cmd: list[str], env: dict) -> tuple[float, subprocess.CompletedProcess]:
    t = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    return time.perf_counter() - t, p


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--store", default="/tmp/bench1m")
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--rmqtool", default=None, help="an rmqtool console script to time instead")
    ap.add_argument("--pycache", default="/tmp/rmqtool-bench-pycache", help="where the bytecode is kept")
    args = ap.parse_args()
    py = os.path.realpath(sys.executable)
    # bytecode compiled once, as an installed package has it (kept apart from the checkout)
    env = dict(os.environ, COLUMNS="100", PYTHONPYCACHEPREFIX=args.pycache)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if not args.rmqtool:
        env["PYTHONPATH"] = str(ROOT)
    rmq = [args.rmqtool] if args.rmqtool else [py, "-m", "rmqtool"]
    store = Path(args.store)
    if not (store / "commitlog").is_dir():
        print(f"building {store} (write --synthetic 1000000, about a minute) ...", flush=True)
        p = subprocess.run(rmq + ["write", "--synthetic", "1000000", str(store)], env=env, cwd=ROOT)
        if p.returncode:
            raise SystemExit(f"write --synthetic failed (exit {p.returncode})")
    _, p = run(rmq + ["query-key", str(store), "bk-17", "-f", "jsonl"], env)
    hits = [json.loads(line) for line in p.stdout.splitlines()]
    first, last = min(hits, key=lambda h: h["phy_offset"]), max(hits, key=lambda h: h["phy_offset"])
    cases = {
        "python -c pass": [py, "-c", "pass"],
        "--version": rmq + ["--version"],
        "--help": rmq + ["--help"],
        "query-key": rmq + ["query-key", str(store), "bk-17", "-f", "json"],
        "query-id (offsetMsgId)": rmq + ["query-id", str(store), first["offset_msg_id"], "-f", "json"],
        "query-id (UNIQ_KEY)": rmq + ["query-id", str(store), first["uniq_key"], "-f", "json"],
        "locate": rmq + ["locate", str(store), str(first["phy_offset"]), "-f", "json"],
        "locate (deep in the file)": rmq + ["locate", str(store), str(last["phy_offset"]), "-f", "json"],
        "info": rmq + ["info", str(store), "-f", "json"],
    }
    times: dict[str, list[float]] = {name: [] for name in cases}
    exits: dict[str, int] = {}
    for cmd in cases.values():                   # untimed: page cache warm, --help kept
        run(cmd, env)
    for _ in range(args.runs):
        for name, cmd in cases.items():
            t, p = run(cmd, env)
            times[name].append(t)
            exits[name] = p.returncode
    base_min, base_med = min(times["python -c pass"]), statistics.median(times["python -c pass"])
    print(f"store {store}, {args.runs} runs each, alternating; {' '.join(rmq)}")
    print(f"{'command':26s} {'min':>9s} {'median':>9s} {'min/min':>8s} {'med/med':>8s} {'goal':>6s}  exit")
    for name, ts in times.items():
        lo, med = min(ts), statistics.median(ts)
        goal = None if name == "python -c pass" else GOALS.get(name, STORE_GOAL)
        verdict = "for scale" if goal is None and name in GOALS else "" if goal is None else (
            f"{goal:4.0f}x {'met' if lo / base_min <= goal else 'NOT met'}")
        print(f"{name:26s} {lo * 1000:7.1f}ms {med * 1000:7.1f}ms {lo / base_min:7.2f}x {med / base_med:7.2f}x "
              f"{verdict:>12s}  {exits[name]}")


if __name__ == "__main__":
    main()
