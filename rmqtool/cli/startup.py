"""What the CLI answers before it is built: ``rmqtool --version``, and ``rmqtool --help`` from a cache.

Building the typer app costs typer, rich and every command module, several times a bare
interpreter's start. ``--version`` needs none of it. The top-level ``--help`` is typer's own
rendering, and it depends only on the sources of rmqtool, typer and rich, the interpreter and the
terminal (width, colour, encoding, program name): the first run renders it with typer and keeps the
exact text in the user's cache directory under a key made of all of those; a later run with the
same key prints the kept text without building the app. Anything that changes the key renders it
afresh; a cache that cannot be read or written is skipped (the help is rendered as usual).
"""
from __future__ import annotations

import os
import sys

#: optional extras and the module each one brings (``--version`` says which are installed)
EXTRAS = {"parquet/spark/storage": "pyarrow", "spark": "pyspark", "codecs (lz4)": "lz4", "codecs (zstd)": "zstandard",
          "rocksdb": "rocksdict"}


def version_text() -> str:
    """What ``--version`` prints: the version, the kernel path that runs, the installed extras."""
    import importlib.util
    import rmqtool
    from rmqtool.kernels import native
    have = [name for name, module in EXTRAS.items() if importlib.util.find_spec(module) is not None]
    missing = [name for name in EXTRAS if name not in have]
    return (f"rmqtool {rmqtool.__version__} ({native.path})\n"
            f"extras: {', '.join(have) or 'none'}" + (f"; not installed: {', '.join(missing)}" if missing else "")
            + "\n")


#: environment variables typer and rich read to render help (tests/test_startup.py checks the
#: installed typer and rich read no other), and rmqtool's own root options' (RMQTOOL_*)
HELP_ENVIRONMENT = ("COLUMNS", "LINES", "TERM", "COLORTERM", "NO_COLOR", "FORCE_COLOR", "PY_COLORS",
                    "GITHUB_ACTIONS", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "JUPYTER_COLUMNS", "JUPYTER_LINES",
                    "DATABRICKS_RUNTIME_VERSION", "UNICODE_VERSION", "TERMINAL_WIDTH", "TYPER_USE_RICH",
                    "_TYPER_FORCE_DISABLE_TERMINAL", "TYPER_STANDARD_TRACEBACK", "_TYPER_STANDARD_TRACEBACK")
#: packages whose sources make the help text
HELP_SOURCES = ("rmqtool", "formats", "typer", "rich", "click")
#: help texts kept at most (one per terminal width and colour setting seen)
HELP_CACHE_FILES = 16


def outputs_hold_any_text() -> None:
    """A name read from the file system that is not UTF-8 (a topic directory named with bytes
    ``\\xff\\xfe``) reaches the output as lone surrogates, which a strict UTF-8 stdout cannot
    encode: they are written as ``\\udcff`` escapes (in JSON the same string again), never an error."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None and getattr(stream, "errors", None) in ("strict", "surrogateescape"):
            try:
                reconfigure(errors="backslashreplace")
            except (ValueError, OSError):
                pass


def quiet_closed_stdout() -> None:
    """The reader went away (``| head``): point stdout at /dev/null, so that the interpreter's
    flush at exit does not fail a second time."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):      # no real file descriptor (tests' StringIO)
        pass


def _cache_dir() -> str:
    return os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "rmqtool")


def _package_dir(name: str) -> str | None:
    if name in sys.modules and getattr(sys.modules[name], "__path__", None):
        return list(sys.modules[name].__path__)[0]
    import importlib.util
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    return locations[0] if locations else None


def _fingerprint(digest, directory: str) -> None:
    """Every source file under ``directory``: its relative path, size and modification time."""
    entries = []
    stack = [directory]
    while stack:
        top = stack.pop()
        with os.scandir(top) as it:
            for entry in it:
                if entry.is_dir(follow_symlinks=False):
                    if entry.name != "__pycache__":
                        stack.append(entry.path)
                elif entry.name.endswith((".py", ".so", ".pyd")):
                    st = entry.stat()
                    entries.append(f"{os.path.relpath(entry.path, directory)}\0{st.st_size}\0{st.st_mtime_ns}")
    digest.update("\n".join(sorted(entries)).encode("utf-8", "surrogateescape"))


def _terminal() -> str:
    parts = []
    for fd in (0, 1, 2):
        try:
            tty = os.isatty(fd)
            size = tuple(os.get_terminal_size(fd)) if tty else None
        except (OSError, ValueError):
            tty, size = False, None
        parts.append(f"{fd}:{tty}:{size}")
    return " ".join(parts)


def help_cache_path(argv: list[str]) -> str | None:
    """The file that holds the text ``rmqtool --help`` prints in this process's circumstances, or
    None when the help is not the plain top-level one (or a source cannot be found)."""
    if argv != ["--help"] or any(name.endswith("_COMPLETE") for name in os.environ):
        return None
    import hashlib
    import rmqtool
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    digest = hashlib.sha256()
    stdout = sys.stdout
    key = [rmqtool.__version__, sys.version, sys.platform, sys.argv[0], getattr(spec, "name", None),
           getattr(stdout, "encoding", None), getattr(stdout, "errors", None), _terminal()]
    key += [f"{name}={os.environ[name]}" for name in sorted(os.environ)
            if name in HELP_ENVIRONMENT or name.startswith("RMQTOOL")]
    digest.update(repr(key).encode("utf-8", "surrogateescape"))
    try:
        for name in HELP_SOURCES:
            directory = _package_dir(name)
            digest.update(f"\n{name}:{directory}\n".encode("utf-8", "surrogateescape"))
            if directory is not None:
                _fingerprint(digest, directory)
    except OSError:
        return None
    return os.path.join(_cache_dir(), f"help-{digest.hexdigest()[:32]}.txt")


def cached_help(argv: list[str]) -> str | None:
    """The kept text of this ``--help``, if there is one."""
    path = help_cache_path(argv)
    if path is None:
        return None
    try:
        with open(path, "rb") as fh:
            return fh.read().decode("utf-8", "surrogatepass")
    except (OSError, UnicodeDecodeError):
        return None


def keep_help(path: str, text: str) -> None:
    """Write ``text`` to ``path`` atomically (a whole file or none); keep at most
    ``HELP_CACHE_FILES`` such files. A cache that cannot be written is left alone."""
    import tempfile
    directory = os.path.dirname(path)
    try:
        os.makedirs(directory, exist_ok=True)
        fd, temporary = tempfile.mkstemp(prefix=".help-", dir=directory)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(text.encode("utf-8", "surrogatepass"))
            os.replace(temporary, path)
        except BaseException:
            os.unlink(temporary)
            raise
        kept = sorted((e for e in os.scandir(directory) if e.name.startswith("help-")),
                      key=lambda e: e.stat().st_mtime_ns, reverse=True)
        for old in kept[HELP_CACHE_FILES:]:
            os.unlink(old.path)
    except (OSError, UnicodeEncodeError):
        pass


class _Tee:
    """``sys.stdout`` as the command sees it (same tty, width, encoding), also keeping what is written."""

    def __init__(self, stream):
        self._stream = stream
        self.parts: list[str] = []
        self.failed = False

    def write(self, text):
        try:
            written = self._stream.write(text)
        except OSError:                 # the reader went away: what it got is not the whole help
            self.failed = True
            raise
        self.parts.append(text)         # (click probes the stream with bytes, which fail here)
        return written

    def flush(self):
        try:
            return self._stream.flush()
        except OSError:
            self.failed = True
            raise

    def __getattr__(self, name):
        return getattr(self._stream, name)


class recording_help:
    """Around the CLI's run: a plain ``--help`` that typer rendered in full (exit 0) is kept."""

    def __init__(self, argv: list[str]):
        self.path = help_cache_path(argv)
        self.tee = None

    def __enter__(self):
        if self.path is not None:
            self.tee = sys.stdout = _Tee(sys.stdout)
        return self

    def __exit__(self, kind, exc, tb):
        if self.tee is None:
            return False
        sys.stdout = self.tee._stream
        done = kind is None or (kind is SystemExit and exc.code in (0, None))
        if done and not self.tee.failed and self.tee.parts:
            keep_help(self.path, "".join(self.tee.parts))
        return False


def answer(argv: list[str]) -> bool:
    """Print the answer to ``--version``, or a kept ``--help``, without building the CLI; False
    when this command line needs the CLI."""
    if argv == ["--version"]:
        text = version_text()
    else:
        text = cached_help(argv)
        if text is None:
            return False
        outputs_hold_any_text()
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:             # the reader went away (``| head``): as the CLI does, exit 0
        quiet_closed_stdout()
    return True
