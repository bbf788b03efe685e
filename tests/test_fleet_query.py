"""query-key over several stores (a fleet): every store searched, every row names its store."""
from __future__ import annotations

import pytest

from conftest import STORE_NAMES, reference_store, run_cli

KEYS = ["key-0005", "hcAaAa", "no-such-key"]


def _rows(*args):
    r = run_cli("query-key", *args, "-f", "jsonl")
    assert r.code in (0, 1) and not r.err.startswith("error"), r.err
    return r.code, r.jsonl()


@pytest.mark.parametrize("key", KEYS)
@pytest.mark.parametrize("scan", [False, True])
def test_fleet_equals_each_store_alone(key, scan):
    extra = ["--scan"] if scan else []
    stores = [str(reference_store(n)) for n in STORE_NAMES]
    code, fleet = _rows(*stores, key, *extra)
    want, found = [], False
    for name, path in zip(STORE_NAMES, stores):
        c, rows = _rows(path, key, *extra)
        found |= c == 0
        want += [{**r, "store": name} for r in rows]
    assert fleet == want
    assert code == (0 if found else 1)
    assert (key == "no-such-key") == (not fleet)


def test_glob_names_the_stores_and_max_is_per_store():
    pattern = str(reference_store("basic").parent / "[bc]*")
    code, rows = _rows(pattern, "key-0005", "--max", "2")
    assert code == 0
    assert [r["store"] for r in rows] == ["basic", "basic", "crashed", "crashed"]


def test_bad_fleet_arguments():
    r = run_cli("query-key", str(reference_store("basic")))
    assert r.code == 2 and r.err.startswith("error:")
    r = run_cli("query-key", str(reference_store("basic")) + "/nope*", "k")
    assert r.code == 2 and "no store matches" in r.err
