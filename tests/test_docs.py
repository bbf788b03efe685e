"""The user documentation is true: the generated reference pages are current, every command is in the
README, every option is explained, and every example in the README runs and exits as documented."""
from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import typer

from rmqtool.cli import app
from rmqtool.cli import reference

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"


def test_generated_reference_pages_are_current():
    assert reference.main(["--check"]) == 0, "run: python -m rmqtool.cli.reference --write"


def test_every_command_is_in_the_readme_table():
    readme = README.read_text(encoding="utf-8")
    names = typer.main.get_command(app).commands
    assert [n for n in names if f"| `{n}` |" not in readme] == []


def test_every_option_is_explained():
    missing = []
    for name, cmd in reference._commands(typer.main.get_command(app), "rmqtool"):
        missing += [f"{name} {p.opts[0]}" for p in cmd.params
                    if p.param_type_name == "option" and not p.hidden and not (p.help or "").strip()]
    assert missing == []


def readme_examples() -> list[tuple[str, int]]:
    """(command line, expected exit code) of every `rmqtool …` example in the README, in order: the
    lines of shell blocks and the commands in backticks of the command table. A trailing comment that
    ends in `exit N` gives the expected code (default 0)."""
    text = README.read_text(encoding="utf-8")
    out = []
    for block in re.findall(r"```sh\n(.*?)```", text, re.S):
        for line in block.splitlines():
            if line.startswith("rmqtool "):
                cmd, _, comment = line.partition("#")
                code = re.search(r"exit (\d+)\s*$", comment)
                out.append((cmd.strip(), int(code.group(1)) if code else 0))
    out += [(m, 0) for m in re.findall(r"\| `(rmqtool [^`]+)` \|", text)]
    return out


def test_the_readme_has_examples():
    assert len(readme_examples()) >= 15


def _run_examples(examples: list[tuple[str, int]], tmp_path) -> list[str]:
    """Run ``rmqtool …`` lines in a scratch directory holding a copy of the fixtures; `/tmp/` paths go to
    it too, with the tarball fixtures unpacked there (as `tar --sparse -xzf fixtures/reference/timer.tar.gz
    -C /tmp`). Returns the lines that did not exit as documented."""
    shutil.copytree(ROOT / "fixtures", tmp_path / "fixtures", symlinks=True)
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    for tarball in (ROOT / "fixtures" / "reference").glob("*.tar.gz"):
        subprocess.run(["tar", "--sparse", "-xzf", str(tarball), "-C", str(scratch)], check=True)
    failures = []
    for line, code in examples:
        argv = [a.replace("/tmp/", f"{scratch}/") for a in shlex.split(line)]
        r = subprocess.run([sys.executable, "-m", "rmqtool", *argv[1:]], cwd=tmp_path, capture_output=True,
                           text=True, timeout=300)
        if r.returncode != code or "Traceback" in r.stderr:
            failures.append(f"{line}: exit {r.returncode} (documented {code}): {r.stderr.strip()[-300:]}")
    return failures


def test_every_readme_example_runs_as_documented(tmp_path):
    assert _run_examples(readme_examples(), tmp_path) == []


def test_every_command_has_a_help_example_that_runs(tmp_path):
    from rmqtool.cli.examples import EXAMPLES, SETUP
    names = [n[len("rmqtool "):] for n, _ in reference._commands(typer.main.get_command(app), "rmqtool")]
    assert sorted(n for n in names if n not in EXAMPLES) == []
    lines = [(line, 0) for name in names for line in SETUP.get(name, []) + EXAMPLES[name]]
    assert _run_examples(lines, tmp_path) == []


@pytest.mark.parametrize("page", sorted((ROOT / "docs").glob("*.md")) + [README, ROOT / "bench" / "README.md"],
                         ids=lambda p: p.name)
def test_links_between_pages_resolve(page):
    text = page.read_text(encoding="utf-8")
    broken = [t for t in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", text) if not (page.parent / t).exists()]
    assert broken == []
