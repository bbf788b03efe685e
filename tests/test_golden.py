"""Every command's output on every reference store is what it was when the goldens were
captured (``tests/golden/capture.py``; see ``tests/golden/cases.py``)."""
from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "golden"))
from cases import GOLDEN, ROOT, STORES, cases, materialise, run_case  # noqa: E402

REFERENCE = ROOT / "fixtures" / "reference"


def _all_cases():
    for name in STORES:
        with gzip.open(REFERENCE / "answers" / f"{name}.json.gz", "rt", encoding="utf-8") as fh:
            answers = json.load(fh)
        for case, argv in cases(name, answers).items():
            yield pytest.param(name, case, argv, id=f"{name}-{case}")


@pytest.mark.parametrize("name,case,argv", list(_all_cases()))
def test_output_is_the_golden_one(tmp_path, name, case, argv):
    golden = GOLDEN / name / f"{case}.out"
    assert golden.exists(), f"no golden for {name}/{case}: run tests/golden/capture.py"
    store = tmp_path / "store"
    materialise(REFERENCE, name, store)
    got = run_case(argv, store, tmp_path / "out", ROOT)
    assert got == golden.read_text(encoding="utf-8")
