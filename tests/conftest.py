"""Shared fixtures: the upstream-written reference stores and their answers."""
from __future__ import annotations

import gzip
import json
import os
import shutil
from functools import lru_cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ROOT / "fixtures" / "reference"
STORE_NAMES = ("basic", "mixed", "crashed")

#: Every JVM the tests start (Spark drivers, executors, a standalone cluster's master and workers)
#: runs seconds of work, not hours: the client compiler alone and the serial collector start it
#: about a third faster on this machine kind (a standalone-cluster verify: 40 s -> 27 s). The java
#: launcher reads this variable; a value set outside the tests is kept.
os.environ.setdefault("JDK_JAVA_OPTIONS", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")


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


class CliResult:
    def __init__(self, code, out, err):
        self.code, self.out, self.err = code, out, err

    def jsonl(self) -> list:
        return [json.loads(line) for line in self.out.splitlines() if line.strip()]


def run_cli(*args, stdin: str | None = None) -> CliResult:
    """Run the rmqtool CLI in-process; returns exit code, stdout and stderr."""
    import contextlib
    import io
    import sys
    from rmqtool.cli import main
    import os
    out, err = io.StringIO(), io.StringIO()
    old_argv, old_stdin, old_env = sys.argv, sys.stdin, dict(os.environ)
    sys.argv = ["rmqtool", *map(str, args)]
    if stdin is not None:
        sys.stdin = io.StringIO(stdin)
    code = 0
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                main()
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    finally:
        sys.argv, sys.stdin = old_argv, old_stdin
        if dict(os.environ) != old_env:          # options such as --storage-option are per command
            os.environ.clear()
            os.environ.update(old_env)
    return CliResult(code, out.getvalue(), err.getvalue())


def run_cli_process(*args, timeout: float = 120, **kw):
    """Run the installed CLI in a subprocess (for tests that need a real process)."""
    import subprocess
    import sys
    return subprocess.run([sys.executable, "-m", "rmqtool", *map(str, args)], capture_output=True,
                          text=True, timeout=timeout, **kw)


class EngineWay:
    """One way of running a command: the installed CLI with this engine's options and
    environment (``native``: the default, in one process, native core; ``numpy``: the same
    with the numpy reference kernels; ``pool``: the local engine's process pool over small
    split tasks; ``spark``: ``--engine spark`` on a local master)."""

    def __init__(self, name: str, options: list[str], env: dict[str, str]):
        self.name, self.options, self.env = name, options, env

    def run(self, *args, split_size: int | None = None, timeout: float = 300):
        """``rmqtool ARGS`` this way; ``split_size`` (commands that take it) cuts the pool's and
        Spark's tasks small enough that every reference store is several tasks."""
        import os
        import subprocess
        import sys
        env = {k: v for k, v in os.environ.items() if k != "RMQTOOL_NATIVE"}
        env.update(self.env)
        extra = ["--split-size", str(split_size)] if split_size and self.name in ("pool", "spark") else []
        return subprocess.run([sys.executable, "-m", "rmqtool", *map(str, args), *self.options, *extra],
                              capture_output=True, text=True, timeout=timeout, env=env)


ENGINE_WAYS = {
    "native": EngineWay("native", [], {"RMQTOOL_NATIVE": "1"}),
    "numpy": EngineWay("numpy", [], {"RMQTOOL_NATIVE": "0"}),
    "pool": EngineWay("pool", ["--engine", "local", "--jobs", "2"], {}),
    "spark": EngineWay("spark", ["--engine", "spark", "--master", "local[2]"], {}),
}


@pytest.fixture(params=list(ENGINE_WAYS))
def engine(request) -> EngineWay:
    """Each way a command can run; spark is skipped (with the reason) without pyspark or Java."""
    if request.param == "spark":
        pytest.importorskip("pyspark")
        from rmqtool.engines.spark import find_java
        if find_java() is None:
            pytest.skip("no Java for Spark (JAVA_HOME or java on PATH)")
    return ENGINE_WAYS[request.param]


#: the temporary directory as the session starts (tests that redirect ``tempfile`` do not move it)
_SESSION_TMP = __import__("tempfile").gettempdir()


@lru_cache(maxsize=None)
def dledger_store() -> Path:
    """The upstream-written DLedger-mode store (fixtures/reference/dledger.tar.gz), unpacked once
    per test session into a temporary directory; its 160 MiB DLedger index file stays sparse.
    Tests that change it work on ``dledger_copy``."""
    import atexit
    import tarfile
    import tempfile
    tmp = Path(tempfile.mkdtemp(prefix="rmqtool-dledger-", dir=_SESSION_TMP))
    atexit.register(shutil.rmtree, tmp, True)
    with tarfile.open(REFERENCE / "dledger.tar.gz") as tar:
        tar.extractall(tmp, filter="data")
    return tmp / "dledger"


@lru_cache(maxsize=None)
def timer_store_root() -> Path:
    """The upstream-written 5.x timer store (fixtures/reference/timer.tar.gz; its 38.7 MB wheel
    stays sparse), unpacked once per session. Tests that change it work on ``timer_copy``."""
    import atexit
    import tarfile
    import tempfile
    tmp = Path(tempfile.mkdtemp(prefix="rmqtool-timer-", dir=_SESSION_TMP))
    atexit.register(shutil.rmtree, tmp, True)
    with tarfile.open(REFERENCE / "timer.tar.gz") as tar:
        tar.extractall(tmp, filter="data")
    return tmp / "timer"


def timer_copy(dest: Path) -> Path:
    import subprocess
    subprocess.run(["cp", "-a", "--sparse=always", str(timer_store_root()), str(dest)], check=True)
    return dest


def dledger_copy(dest: Path) -> Path:
    """A writable copy of the DLedger reference store (sparse files copied with their holes)."""
    import subprocess
    subprocess.run(["cp", "-a", "--sparse=always", str(dledger_store()), str(dest)], check=True)
    return dest


#: test files whose tests start JVMs or a local S3 server: the longest files of the suite, longest first
_LONG_FILES = ("test_spark_cluster.py", "test_storage_s3.py", "test_spark.py", "test_every_engine.py",
               "test_engines.py", "test_verify_engine_joins.py")


def pytest_configure(config):
    config.addinivalue_line("markers", "native_calls(*names): the test must call these C functions of the "
                                       "native core (tests/native_calls.py counts them)")


def _sanitizer_names(path: str) -> set[bytes]:
    """The AddressSanitizer entry points a shared object links against (names in its symbol tables)."""
    import re
    with open(path, "rb") as fh:
        return set(re.findall(rb"__asan_[A-Za-z0-9_]+", fh.read()))


def pytest_sessionstart(session):
    """``RMQTOOL_EXPECT_SANITIZED=DIR`` (CI's sanitizer step): the native core this session loads
    must be the one built with AddressSanitizer into DIR, or the session stops before any test."""
    expect = os.environ.get("RMQTOOL_EXPECT_SANITIZED")
    if not expect:
        return
    from rmqtool.kernels import native
    loaded = getattr(native.core, "__file__", None)
    if loaded is None:
        raise pytest.UsageError(f"RMQTOOL_EXPECT_SANITIZED: no native core loaded ({native.path})")
    names = _sanitizer_names(loaded)
    if not Path(loaded).resolve().is_relative_to(Path(expect).resolve()) or "__asan_init" not in {
            n.decode() for n in names}:
        raise pytest.UsageError(f"RMQTOOL_EXPECT_SANITIZED: the native core loaded is {loaded} "
                                f"({len(names)} ASan symbols), not the sanitized build in {expect}")
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(f"native core under test: {loaded} ({len(names)} ASan symbols)")


@pytest.fixture(scope="session")
def native_core():
    """The native core, for the tests of it: skipped with the reason where it is not in use, a
    failure where ``RMQTOOL_REQUIRE_NATIVE=1`` (CI sets it where a compiler and headers exist)."""
    from rmqtool.kernels import native
    if native.core is None:
        if os.environ.get("RMQTOOL_REQUIRE_NATIVE") == "1":
            pytest.fail(f"RMQTOOL_REQUIRE_NATIVE=1 but the native core is not in use: {native.path}")
        pytest.skip(f"native core not in use: {native.path}")
    return native.core


def pytest_collection_modifyitems(config, items):
    """The longest files first: with a worker per core (pytest-xdist, one file per worker) the
    short ones then fill in behind them and the workers end together."""
    rank = {name: i for i, name in enumerate(_LONG_FILES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))
