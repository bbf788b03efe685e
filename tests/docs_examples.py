"""Run every `rmqtool …` example of the documentation and check it exits as documented.

The examples are the ``rmqtool`` lines of the shell blocks of README.md and docs/*.md (a trailing
comment ending in ``exit N`` documents the exit code, 0 otherwise), the README's command table, and
each command's ``--help`` example (``rmqtool.cli.examples``, shown in docs/commands.md). Each page's
examples run in order in a scratch directory of their own, holding a copy of fixtures/ (the bundled
stores) and the unpacked fixtures/reference/*.tar.gz; ``/tmp/`` paths go there too. An example that
names what the bundle does not hold (``/data/…``, ``s3://…``, a usage line's ``STORE``) is skipped with
its reason.

Every example must exit as documented, with no traceback and no ``internal error``. With ``--plain``
(an install without extras: .ci/run's base-only venv) an example that needs an extra (``export``:
parquet, ``--engine spark``: spark, a RocksDB ConsumeQueue: rocksdb, ``--jobs N``:
parquet) must instead exit 2 with one line naming it (``pip install 'rmqtool[parquet]'``).
``--hide-extras`` makes this checkout look like such an install (the extras' modules shadowed by
packages whose import fails, as tests/test_plain_install.py does) and implies ``--plain``.

    python tests/docs_examples.py [--plain | --hide-extras] [--only TEXT] [--list]

It runs ``python -m rmqtool`` of the interpreter that runs it (from outside the checkout, so an
installed rmqtool is the one tested; ``--hide-extras`` puts this checkout on the path instead).
Exit 0 when every example ran as documented, 1 otherwise (the failures listed).
"""
from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: optional modules and their extra (the same table as ``rmqtool.errors.EXTRA_OF_MODULE``, which an
#: install without the checkout on the path may not be able to import before the runner starts)
EXTRA_OF_MODULE = {"pyarrow": "parquet", "pyspark": "spark", "pandas": "spark", "lz4": "codecs",
                   "zstandard": "codecs", "rocksdict": "rocksdb"}
#: what the bundle does not hold: an example naming it is skipped, with the reason
OUTSIDE = ((re.compile(r"^(/data/|/shared/|/var/)"), "a broker host's path"),
           (re.compile(r"^[a-z0-9]+://"), "object storage or HDFS"),
           (re.compile(r"^[A-Z][A-Z_]*=\S"), "an environment setting for a remote store"),
           (re.compile(r"…"), "a placeholder"),
           (re.compile(r"^(s1|s2|messages\.jsonl)$"), "a reader's own store or file"))
#: usage lines: ``STORE``, ``STORE...``, ``[OPTIONS]``, ``[--level shallow|deep]``
_PLACEHOLDER = re.compile(r"^(\[.*|[A-Z][A-Z_]*(\.\.\.)?|.*\])$")


@dataclass
class Example:
    source: str         # page:line
    line: str           # the command line as documented
    code: int           # the documented exit code
    skip: str | None = None

    @property
    def argv(self) -> list[str]:
        return shlex.split(self.line)[1:]


def _split_commands(text: str) -> list[str]:
    """The ``rmqtool …`` commands of one shell line (``a && b``, ``a ; b``), without redirections
    or pipes."""
    out = []
    for part in re.split(r"\s(?:&&|;)\s", text):
        part = re.split(r"\s(?:\||>|2>)\s", part.strip())[0].strip()
        if part.startswith("rmqtool ") or re.match(r"^[A-Z][A-Z_]*=\S+ rmqtool ", part):
            out.append(part)
    return out


def _skip_reason(line: str) -> str | None:
    try:
        words = shlex.split(line)
    except ValueError:
        return "not a command line"
    for w in words:
        if _PLACEHOLDER.match(w):
            return "a usage line"
        for pattern, why in OUTSIDE:
            if pattern.search(w):
                return why
    return None


def page_examples(page: Path) -> list[Example]:
    """The examples of one Markdown page, in order."""
    text = page.read_text(encoding="utf-8")
    rel = page.relative_to(ROOT) if page.is_relative_to(ROOT) else page
    out = []
    for block in re.finditer(r"^```(sh|bash|shell|console)?\n(.*?)^```", text, re.S | re.M):
        first = text.count("\n", 0, block.start(2)) + 1
        for k, raw in enumerate(block.group(2).splitlines()):
            raw = raw.strip()
            raw = raw[2:] if raw.startswith("$ ") else raw
            cmd, _, comment = raw.partition(" #")
            documented = re.search(r"exit (\d+)\s*$", comment)
            for line in _split_commands(cmd):
                out.append(Example(f"{rel}:{first + k}", line, int(documented.group(1)) if documented else 0,
                                   _skip_reason(line)))
    for m in re.finditer(r"\| `(rmqtool [^`]+)` \|", text):
        out.append(Example(f"{rel}:{text.count(chr(10), 0, m.start()) + 1}", m.group(1), 0, _skip_reason(m.group(1))))
    return [e for e in out if not page.name == "commands.md" or e.skip is None]


def help_examples() -> list[Example]:
    """Each command's ``--help`` example (with what it needs run first), as docs/commands.md shows them."""
    sys.path.insert(0, str(ROOT))
    try:
        from rmqtool.cli.examples import EXAMPLES, SETUP
    finally:
        sys.path.remove(str(ROOT))
    out = []
    for name, lines in EXAMPLES.items():
        for line in SETUP.get(name, []) + lines:
            out.append(Example(f"rmqtool/cli/examples.py:{name}", line, 0, _skip_reason(line)))
    return out


def all_examples() -> dict[str, list[Example]]:
    """Every example, by the page whose scratch directory it runs in."""
    pages = [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))
    out = {str(p.relative_to(ROOT)): page_examples(p) for p in pages}
    out["docs/commands.md (--help examples)"] = help_examples()
    return {k: v for k, v in out.items() if v}


def needed_extra(argv: list[str]) -> set[str]:
    """The extras an example needs (what a plain install answers with a one-line exit 2)."""
    need = set()
    if argv and argv[0] == "export":
        need.add("parquet")
    if "spark" in argv and "--engine" in argv:
        need.add("spark")
    for opt in ("--jobs", "-j", "--workers"):
        if opt in argv and argv.index(opt) + 1 < len(argv) and argv[argv.index(opt) + 1] != "1":
            need.add("parquet")
    if any("rocksdb-cq" in a for a in argv):
        need.add("rocksdb")
    return need


def hide_extras(where: Path) -> Path:
    """A directory of packages named like the extras' modules whose import fails as a missing
    module's does: first on PYTHONPATH, it makes an environment look like a plain install."""
    for module in EXTRA_OF_MODULE:
        (where / module).mkdir(parents=True, exist_ok=True)
        (where / module / "__init__.py").write_text(
            f"raise ModuleNotFoundError(\"No module named '{module}'\", name={module!r})\n")
    return where


def _scratch(base: Path) -> tuple[Path, Path]:
    """(working directory with a copy of fixtures/, the directory ``/tmp/`` paths go to)."""
    base.mkdir(parents=True)
    shutil.copytree(ROOT / "fixtures", base / "fixtures", symlinks=True)
    tmp = base / "tmp"
    tmp.mkdir()
    for tarball in sorted((ROOT / "fixtures" / "reference").glob("*.tar.gz")):
        subprocess.run(["tar", "--sparse", "-xzf", str(tarball), "-C", str(tmp)], check=True)
    return base, tmp


def check(example: Example, proc: subprocess.CompletedProcess, plain: bool) -> str | None:
    """Why the run is not as documented (None: it is)."""
    err = proc.stderr
    if "Traceback" in err or "internal error" in err:
        return f"exit {proc.returncode}, {err.strip()[-400:]}"
    need = needed_extra(example.argv) if plain else set()
    if need and proc.returncode == 2:
        lines = err.strip().splitlines()
        named = [x for x in need if f"pip install 'rmqtool[{x}]'" in err]
        if len(lines) == 1 and named:
            return None
        return f"exit 2 without one line naming {' or '.join(sorted(need))}: {err.strip()[-400:]}"
    if proc.returncode != example.code:
        return f"exit {proc.returncode} (documented {example.code}): {err.strip()[-400:]}"
    return None


def run(examples: dict[str, list[Example]], plain: bool, python: list[str], env: dict,
        workdir: Path, log=print) -> tuple[list[str], int, int]:
    """Run the examples page by page; returns (failures, examples run, examples skipped)."""
    failures, ran, skipped = [], 0, 0
    for k, (page, items) in enumerate(examples.items()):
        todo = [e for e in items if e.skip is None]
        skipped += len(items) - len(todo)
        if not todo:
            continue
        cwd, tmp = _scratch(workdir / f"page-{k}")
        missing: set[str] = set()       # what an example stopped for a missing extra would have written
        for e in todo:
            argv = [a.replace("/tmp/", f"{tmp}/") for a in e.argv]
            if missing.intersection(argv):
                skipped += 1
                log(f"skip (its input comes from an example that needs an extra)  {e.source}: {e.line}")
                continue
            proc = subprocess.run([*python, "-m", "rmqtool", *argv], cwd=cwd, env=env, capture_output=True,
                                  text=True, timeout=600, stdin=subprocess.DEVNULL)
            ran += 1
            why = check(e, proc, plain)
            if why is not None:
                failures.append(f"{e.source}: {e.line}: {why}")
            elif proc.returncode == 2:
                missing.update(a for a in argv if a.startswith(f"{tmp}/"))
            log(f"{'FAIL' if why else 'ok  '} exit {proc.returncode}  {e.source}: {e.line}")
    return failures, ran, skipped


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--plain", action="store_true", help="no extras installed: examples needing one exit 2 naming it")
    parser.add_argument("--hide-extras", action="store_true", help="shadow the extras of this environment (implies --plain)")
    parser.add_argument("--only", default=None, help="only the examples whose page or command line contains this")
    parser.add_argument("--list", action="store_true", help="list the examples (and the skipped ones, why), run nothing")
    args = parser.parse_args(argv)
    examples = all_examples()
    if args.only:
        examples = {p: [e for e in items if args.only in f"{e.source} {e.line}"] for p, items in examples.items()}
    if args.list:
        for page, items in examples.items():
            for e in items:
                print(f"{e.source}: {e.line}  [exit {e.code}]" + (f"  skipped: {e.skip}" if e.skip else ""))
        return 0
    env = dict(os.environ)
    env.pop("RMQTOOL_TRACEBACK", None)
    env["COLUMNS"] = "120"
    with tempfile.TemporaryDirectory(prefix="rmqtool-docs-examples-") as work:
        work = Path(work)
        if args.hide_extras:
            env["PYTHONPATH"] = os.pathsep.join([str(hide_extras(work / "no-extras")), str(ROOT)])
        failures, ran, skipped = run(examples, args.plain or args.hide_extras, [sys.executable], env, work / "run")
    print(f"{ran} examples run, {skipped} skipped (--list says why), {len(failures)} failed")
    for f in failures:
        print(f"FAILED {f}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
