"""Start-up: what a short command imports, and the two things answered before the CLI is built.

- the import graph (``python -X importtime``) of ``query-key``/``query-id`` on a reference store,
  ``--version`` and a kept ``--help`` holds no numpy, pyarrow, rich or Spark (``--version`` and a
  kept ``--help`` no typer either);
- ``--help`` from the cache (rmqtool/cli/startup.py) is byte for byte typer's rendering; a changed
  source renders it afresh; a cache directory that cannot be written changes nothing;
- the help cache's key names every environment variable the installed typer and rich read;
- the numpy-free geometry inference of a small index file equals the numpy one on every reference
  store's index files and damaged copies of them.
No timing here: bench/bench_startup.py measures.
"""
from __future__ import annotations

import os
import random
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REFERENCE

ROOT = Path(__file__).resolve().parent.parent
BASIC = REFERENCE / "basic"
#: modules a short command must not load
HEAVY = {"numpy", "pyarrow", "rich", "pyspark", "pandas", "construct"}


def _run(args, env=None, pythonpath=ROOT, cwd=ROOT):
    environment = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "NO_COLOR", "FORCE_COLOR")}
    environment.update(PYTHONPATH=str(pythonpath), **(env or {}))
    return subprocess.run([sys.executable, "-X", "importtime", "-m", "rmqtool", *map(str, args)],
                          capture_output=True, text=True, env=environment, cwd=cwd, timeout=120)


def _imported(proc) -> set[str]:
    """Top-level names of every module the process imported (``-X importtime`` lines on stderr)."""
    names = re.findall(r"^import time:\s+\d+ \|\s+\d+ \|\s*([\w.]+)", proc.stderr, re.M)
    return {n.split(".")[0] for n in names}


@pytest.mark.parametrize("args", [
    ["query-key", BASIC, "key-0001", "-f", "json"],
    ["query-key", BASIC, "key-0001", "-f", "jsonl"],
    ["query-key", BASIC, "key-0011", "--topic", "OrderTopic", "-f", "csv"],
    ["query-key", BASIC, "key-0001"],                              # table format, piped: tab-separated
    ["query-id", BASIC, "C0A8010A00002A9F00000000000005C2", "-f", "json"],
    ["query-id", BASIC, "FD0000000000000000000000000000027A145FFD2B2769A65271000B", "-f", "json"],  # a note
    ["locate", BASIC, "1000", "-f", "json"],                       # within a file's first MiB: the chain
], ids=["query-key-json", "query-key-jsonl", "query-key-topic-csv", "query-key-piped", "query-id-json",
        "query-id-uniq-key-note", "locate-json"])
def test_query_commands_import_nothing_heavy(args):
    """query-key, query-id and locate (near a file's start) load no numpy, rich, pyarrow, Spark or construct."""
    proc = _run(args)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip()
    assert not (_imported(proc) & HEAVY), sorted(_imported(proc) & HEAVY)
    modules = set(re.findall(r"^import time:\s+\d+ \|\s+\d+ \|\s*([\w.]+)", proc.stderr, re.M))
    assert "rmqtool.engines" not in modules          # the executor loads only when a scan runs on one


def test_the_engine_choices_are_the_executors_engines():
    """--engine's choices (cli/options, loaded without the executor) name exactly the engines
    ``engines.get_engine`` knows."""
    from rmqtool.cli.options import Engine
    from rmqtool.engines import ENGINES
    assert tuple(e.value for e in Engine) == ENGINES


def test_version_builds_no_cli(tmp_path):
    fast = _run(["--version"])
    assert fast.returncode == 0
    assert fast.stdout.startswith("rmqtool ")
    assert not (_imported(fast) & (HEAVY | {"typer", "click", "construct"})), _imported(fast)
    through_typer = _run(["--color", "auto", "--version"])      # the root option's callback
    assert through_typer.returncode == 0 and "typer" in _imported(through_typer)
    assert through_typer.stdout == fast.stdout


def _help(cache: Path, **kw):
    return _run(["--help"], env={"XDG_CACHE_HOME": str(cache), "COLUMNS": "100"}, **kw)


def test_help_from_the_cache_is_typers_rendering(tmp_path):
    """Kept and fresh are the same bytes; another width is another key; no cache, no harm."""
    fresh = _help(tmp_path / "cache")
    assert fresh.returncode == 0 and "typer" in _imported(fresh)
    assert "query-key" in fresh.stdout
    assert len(list((tmp_path / "cache" / "rmqtool").glob("help-*.txt"))) == 1
    kept = _help(tmp_path / "cache")
    assert kept.returncode == 0
    assert kept.stdout == fresh.stdout
    assert not (_imported(kept) & (HEAVY | {"typer", "click", "construct"})), _imported(kept)
    narrower = {"XDG_CACHE_HOME": str(tmp_path / "cache"), "COLUMNS": "70"}
    narrow = _run(["--help"], env=narrower)
    assert "typer" in _imported(narrow) and narrow.stdout != fresh.stdout      # another width, another key
    assert _run(["--help"], env=narrower).stdout == narrow.stdout
    blocker = tmp_path / "file"                     # a cache directory that cannot be made or written
    blocker.write_text("not a directory")
    for _ in range(2):
        proc = _help(blocker / "below")
        assert proc.returncode == 0 and proc.stdout == fresh.stdout
        assert not [line for line in proc.stderr.splitlines() if not line.startswith("import time:")]
    assert blocker.read_text() == "not a directory"


def test_changed_source_renders_help_afresh(tmp_path):
    copy = tmp_path / "src"
    for package in ("rmqtool", "formats"):
        shutil.copytree(ROOT / package, copy / package, ignore=shutil.ignore_patterns("__pycache__"))
    cache = tmp_path / "cache"
    before = _help(cache, pythonpath=copy, cwd=copy)
    assert before.returncode == 0 and "Offline forensic" in before.stdout
    kept = _help(cache, pythonpath=copy, cwd=copy)
    assert kept.stdout == before.stdout and "typer" not in _imported(kept)
    common = copy / "rmqtool" / "cli" / "common.py"
    common.write_text(common.read_text().replace("Offline forensic and repair tool",
                                                 "Offline (changed) forensic and repair tool"))
    after = _help(cache, pythonpath=copy, cwd=copy)
    assert after.returncode == 0 and "typer" in _imported(after)
    assert "Offline (changed) forensic" in after.stdout
    assert after.stdout == _help(tmp_path / "empty", pythonpath=copy, cwd=copy).stdout
    assert _help(cache, pythonpath=copy, cwd=copy).stdout == after.stdout


def test_help_cache_key_names_every_variable_typer_and_rich_read():
    """A variable typer or rich reads could change the help: it must be part of the key."""
    from rmqtool.cli.startup import HELP_ENVIRONMENT
    import rich
    import typer
    #: read for completion (the cache is skipped then), for config paths, or by click's option
    #: ``envvar`` machinery (values of options, never the help text)
    not_help = {"XDG_CONFIG_HOME", "COMP_WORDS", "COMP_CWORD"}
    read = set()
    for package in (typer, rich):
        for path in Path(package.__file__).parent.rglob("*.py"):
            text = path.read_text(encoding="utf-8")
            read |= set(re.findall(r"(?:environ(?:\.get)?\(?\s*\[?|getenv\()\s*[\"']([A-Za-z_][A-Za-z0-9_]*)[\"']",
                                   text))
    assert read, "no environment reads found: the pattern no longer matches typer/rich"
    missing = {name for name in read - not_help - set(HELP_ENVIRONMENT) if not name.startswith("_TYPER_COMPLETE")}
    assert not missing, f"typer/rich read {sorted(missing)}: add them to startup.HELP_ENVIRONMENT"


def _index_files() -> list[Path]:
    return sorted(p for p in REFERENCE.glob("*/index/*") if p.is_file())


def _built_index_files(rng: random.Random) -> list[bytes]:
    """Index files written by rebuild's own image builder, of many geometries: few slots (so that
    several slot/entry boundaries fit the size and each used slot rules out only some), partly
    and wholly filled."""
    import numpy as np
    from rmqtool.broker.dispatch import build_index_image
    files = []
    for slots in (1, 2, 3, 4, 5, 7, 11, 61, 500):
        for entries in (2, 3, 6, 17, 40, 350):
            for used in {1, entries // 2, entries - 1} - {0}:
                hashes = np.array([rng.randrange(1 << 31) for _ in range(used)], dtype=np.int64)
                phy = np.arange(used, dtype=np.int64) * 100
                ts = np.full(used, 1_700_000_000_000, dtype=np.int64)
                files.append(build_index_image(hashes, phy, ts, slots, entries).to_bytes())
    return files


def _damaged(data: bytes, rng: random.Random) -> list[bytes]:
    """``data`` damaged where the inference looks: random bytes; the header's two counts, each
    moved by one or zeroed; used slots pointing past the count, at zero or negative; entries'
    hashes negative; everything zero."""
    from formats.indexfile import INDEX_HEADER_SIZE
    ints = len(data) - INDEX_HEADER_SIZE
    out = []
    for _ in range(6):
        damaged = bytearray(data)
        for _ in range(rng.randint(1, 8)):
            damaged[rng.randrange(len(damaged))] = rng.randrange(256)
        out.append(damaged)
    h, count = int.from_bytes(data[32:36], "big", signed=True), int.from_bytes(data[36:40], "big", signed=True)
    for at, value in ((32, h - 1), (32, h + 1), (36, count - 1), (36, count + 1), (32, 0), (36, 0)):
        damaged = bytearray(data)
        damaged[at:at + 4] = value.to_bytes(4, "big", signed=True)
        out.append(damaged)
    for value in (count, count + 7, 0, -1, -(1 << 31)):        # a used slot (of the first 16) changed
        damaged = bytearray(data)
        used = [i for i in range(0, ints, 4) if any(data[INDEX_HEADER_SIZE + i:INDEX_HEADER_SIZE + i + 4])][:16]
        if used:
            at = INDEX_HEADER_SIZE + rng.choice(used)
            damaged[at:at + 4] = value.to_bytes(4, "big", signed=True)
            out.append(damaged)
    for _ in range(3):                              # an int's sign bit set (an entry's hash negative)
        damaged = bytearray(data)
        damaged[INDEX_HEADER_SIZE + rng.randrange(ints // 4) * 4] |= 0x80
        out.append(damaged)
    out.append(bytes(len(data)))                    # all zero
    return [bytes(d) for d in out]


def test_small_index_geometry_inference_equals_numpy():
    """The plain-Python inference gives what the numpy one does, on the reference stores' index
    files and on files of many geometries, intact and damaged where the inference looks."""
    from rmqtool.io.indexfile import SMALL_INFER_SIZE, _infer_geometry_numpy, _infer_geometry_python
    files = [p.read_bytes() for p in _index_files()]
    assert len({p.parent.parent.name for p in _index_files()}) >= 3
    rng = random.Random(35)
    built = _built_index_files(rng)
    inferred = ambiguous = 0
    for data in files + built:
        assert len(data) <= SMALL_INFER_SIZE
        for v in [data, *_damaged(data, rng)]:
            expected = _infer_geometry_numpy(v, len(v))
            assert _infer_geometry_python(v, len(v)) == expected, (len(v), v[32:40].hex())
            inferred += expected is not None
            ambiguous += expected is None and v is data
    assert inferred >= len(files) + len(built) // 2     # most intact files give a geometry
    assert ambiguous                                    # and some (few slots) have no one answer


def test_answers_to_a_reader_that_went_away(tmp_path):
    """``rmqtool --version | head -0``: exit 0 and no traceback, as the CLI's own commands."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    subprocess.run([sys.executable, "-m", "rmqtool", "--help"], capture_output=True, env=env, cwd=ROOT)
    for args in (["--version"], ["--help"]):             # --help: the kept one
        read, write = os.pipe()
        os.close(read)                                   # every write fails with EPIPE
        try:
            proc = subprocess.run([sys.executable, "-m", "rmqtool", *args], stdout=write, stderr=subprocess.PIPE,
                                  text=True, env=env, cwd=ROOT, timeout=60)
        finally:
            os.close(write)
        assert proc.returncode == 0, proc.stderr
        assert "Traceback" not in proc.stderr and "Error" not in proc.stderr, proc.stderr
