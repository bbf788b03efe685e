"""Capture the golden outputs: ``python tests/golden/capture.py [--tree DIR]``.

``--tree`` runs the command from another checkout (say ``git worktree add /tmp/before HEAD``),
so the goldens come from the code before a change. Each store is copied to a temporary
directory first (the path in outputs is normalised to ``{store}``)."""
from __future__ import annotations

import argparse
import gzip
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cases import GOLDEN, ROOT, STORES, cases, materialise, run_case  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tree", type=Path, default=ROOT, help="checkout whose rmqtool is run")
    ap.add_argument("--only", nargs="*", help="case names")
    args = ap.parse_args()
    reference = ROOT / "fixtures" / "reference"
    for name in STORES:
        with gzip.open(reference / "answers" / f"{name}.json.gz", "rt", encoding="utf-8") as fh:
            answers = json.load(fh)
        out_dir = GOLDEN / name
        out_dir.mkdir(parents=True, exist_ok=True)
        for case, argv in cases(name, answers).items():
            if args.only and case not in args.only:
                continue
            with tempfile.TemporaryDirectory(prefix="rmqtool-golden-") as tmp:
                store = Path(tmp) / "store"
                materialise(reference, name, store)
                record = run_case(argv, store, Path(tmp) / "out", args.tree.resolve())
            (out_dir / f"{case}.out").write_text(record, encoding="utf-8")
            print(f"{name}/{case}: {record.splitlines()[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
