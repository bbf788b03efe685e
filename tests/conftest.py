"""Shared fixtures: the upstream-written reference stores and their answers."""
from __future__ import annotations

import gzip
import json
import shutil
from functools import lru_cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ROOT / "fixtures" / "reference"
STORE_NAMES = ("basic", "mixed", "crashed")


@lru_cache(maxsize=None)
def load_answers(name: str) -> dict:
    with gzip.open(REFERENCE / "answers" / f"{name}.json.gz", "rt", encoding="utf-8") as fh:
        return json.load(fh)


def reference_store(name: str) -> Path:
    return REFERENCE / name


@pytest.fixture(params=STORE_NAMES)
def store_name(request):
    return request.param


@pytest.fixture
def store_copy(tmp_path):
    """Factory: a writable copy of a reference store in tmp_path."""
    def make(name: str) -> Path:
        dest = tmp_path / name
        shutil.copytree(reference_store(name), dest)
        return dest
    return make
