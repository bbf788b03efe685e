"""Scan benchmark: CommitLog → record batches, MB/s beside zlib.crc32 MB/s over the same bytes.

Generates a store of ~1 KB messages with `rmqtool write --synthetic` under /tmp (reused
if present), warms the page cache, then measures in one run:
  - zlib.crc32 over every commitlog byte (the baseline),
  - the scanner (walk + numpy decode + property extraction) producing record batches.
Usage: python bench/bench_scan.py [--gib 1.0] [--dir /tmp/rmqtool-bench-scan] [--layout dledger]
``--layout dledger`` measures a DLedger-mode store of the same messages (each record behind a
48-byte entry header; default dir /tmp/rmqtool-bench-scan-dledger).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from crc_floor import crc32_rates, describe  # noqa: E402
from rmqtool.records.scan import FileScan  # noqa: E402
from rmqtool.io.store import Store  # noqa: E402

MESSAGE_BYTES = 1024          # body ~800 B + header/topic/properties ~220 B


def ensure_store(root: Path, gib: float, layout: str = "rocketmq") -> Store:
    data = root / ("dledger-n0/data" if layout == "dledger" else "commitlog")
    files = sorted(data.glob("[0-9]" * 20)) if data.is_dir() else []
    have = sum(f.stat().st_size for f in files)
    if have < gib * (1 << 30):
        messages = int(gib * (1 << 30) / MESSAGE_BYTES) + 1000
        if root.exists():
            import shutil
            shutil.rmtree(root)
        subprocess.run([sys.executable, "-m", "rmqtool", "write", str(root), "--synthetic", str(messages),
                        "--body-size", "700-900", "--topics", "8", "--queues", "4", "--layout", layout,
                        "--commitlog-file-size", str(1 << 30), "--seed", "1"], check=True)
    return Store(root)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gib", type=float, default=1.0)
    ap.add_argument("--dir", default=None)
    ap.add_argument("--layout", default="rocketmq", choices=["rocketmq", "dledger"])
    args = ap.parse_args()
    default_dir = "/tmp/rmqtool-bench-scan" + ("-dledger" if args.layout == "dledger" else "")
    store = ensure_store(Path(args.dir or default_dir), args.gib, args.layout)
    paths = [(f.path, f.start) for f in store.commitlog.files]
    total = sum(os.path.getsize(p) for p, _ in paths)
    rates = crc32_rates([p for p, _ in paths])
    t = time.perf_counter()
    records = 0
    for p, base in paths:
        for batch in FileScan(p, base):
            records += len(batch)
    scan_s = time.perf_counter() - t
    mb = total / 1e6
    print(f"commitlog bytes      {total:,} in {len(paths)} files, {records:,} messages")
    print(f"baseline             {describe(rates)}")
    print(f"scan → record batches {mb / scan_s:8.0f} MB/s  ({records / scan_s / 1e6:.2f} M records/s)")
    print(f"ratio scan / crc32   {mb / scan_s / rates['fresh']:8.2f}")
    print(f"ratio scan / floor   {mb / scan_s / rates['floor']:8.2f}")


if __name__ == "__main__":
    main()
