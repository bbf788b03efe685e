"""A plain ``pip install rmqtool`` (no extras): every command that does not need an extra runs,
and one that does says in one line which extra to install (exit 2), never an internal error.

The extras' modules are hidden by packages of the same name, first on ``PYTHONPATH``, whose import
fails as a missing module's does."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from rmqtool.errors import EXTRA_OF_MODULE

ROOT = Path(__file__).resolve().parent.parent
BASIC = str(ROOT / "fixtures" / "reference" / "basic")
MIXED = str(ROOT / "fixtures" / "reference" / "mixed")


@pytest.fixture(scope="module")
def no_extras(tmp_path_factory) -> Path:
    hide = tmp_path_factory.mktemp("no-extras")
    for module in EXTRA_OF_MODULE:
        (hide / module).mkdir()
        (hide / module / "__init__.py").write_text(
            f"raise ModuleNotFoundError(\"No module named '{module}'\", name={module!r})\n")
    return hide


def _run(no_extras: Path, *args) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(no_extras), str(ROOT)]))
    env.pop("RMQTOOL_TRACEBACK", None)
    return subprocess.run([sys.executable, "-m", "rmqtool", *map(str, args)], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=300)


@pytest.mark.parametrize("args", [
    ("info", BASIC),
    ("dump", "commitlog", BASIC, "--limit", "3"),
    ("verify", BASIC, "--level", "deep"),
    ("verify", BASIC, MIXED),
    ("stats", BASIC, MIXED),
    ("query-key", BASIC, MIXED, "key-0001"),
    ("query-key", BASIC, "key-0001", "--scan"),
    ("locate", BASIC, "0"),
    ("report", BASIC, "-o", "{tmp}/r.html", "--level", "shallow"),
], ids=lambda a: " ".join(x if x not in (BASIC, MIXED) else "STORE" for x in a))
def test_commands_run_without_any_extra(no_extras, args, tmp_path):
    r = _run(no_extras, *[str(a).replace("{tmp}", str(tmp_path)) for a in args])
    assert r.returncode in (0, 1), r.stderr
    assert "internal error" not in r.stderr and r.stdout


def test_rebuild_runs_without_any_extra(no_extras, tmp_path):
    r = _run(no_extras, "rebuild", "all", BASIC, "--output", tmp_path / "out")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "out" / "consumequeue").is_dir() and (tmp_path / "out" / "index").is_dir()


@pytest.mark.parametrize("args,extra", [
    (("export", BASIC, "--to", "{tmp}/ex", "--format", "jsonl"), "parquet"),
    (("verify", BASIC, "--engine", "spark"), "spark"),
], ids=["export", "verify-spark"])
def test_a_command_that_needs_an_extra_names_it(no_extras, tmp_path, args, extra):
    r = _run(no_extras, *[str(a).replace("{tmp}", str(tmp_path)) for a in args])
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and f"rmqtool[{extra}]" in lines[0] and "internal error" not in lines[0], r.stderr
