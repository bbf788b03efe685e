"""One refusal exit code (3) whether or not there is a terminal: `rebuild` answered no at its
prompt says it wrote nothing (no ``error:``), and the same run with nobody to ask says to pass
--yes; `report` refuses an existing output file unless --force."""
from __future__ import annotations

import io

import pytest

from conftest import reference_store, run_cli


class _Terminal(io.StringIO):
    """stdin that is a terminal, with the answers typed in advance."""

    def isatty(self) -> bool:
        return True


def _tree(root):
    return sorted((str(p.relative_to(root)), p.stat().st_size) for p in root.rglob("*"))


@pytest.mark.parametrize("kind", ["consumequeue", "index", "all"])
def test_rebuild_declined_at_the_prompt_exits_3_without_error(store_copy, monkeypatch, kind):
    root = store_copy("basic")
    before = _tree(root)
    monkeypatch.setattr("sys.stdin", _Terminal("n\n"))
    res = run_cli("rebuild", kind, root, "--workers", "1")
    assert res.code == 3, res.err
    assert "rebuild: nothing written (declined)" in res.err
    assert "error" not in res.err and "Aborted" not in res.err
    assert _tree(root) == before


def test_rebuild_without_a_terminal_is_refused_with_exit_3(store_copy, monkeypatch):
    root = store_copy("basic")
    before = _tree(root)
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    res = run_cli("rebuild", "consumequeue", root)
    assert res.code == 3, res.err
    lines = res.err.strip().splitlines()
    assert len(lines) == 1 and "--yes" in lines[0], res.err
    assert _tree(root) == before


def test_rebuild_confirmed_at_the_prompt_installs(store_copy, monkeypatch):
    root = store_copy("basic")
    monkeypatch.setattr("sys.stdin", _Terminal("y\n"))
    res = run_cli("rebuild", "consumequeue", root, "--workers", "1")
    assert res.code == 0, res.err
    assert "rebuilt: consumequeue" in res.out


def test_report_refuses_an_existing_file_naming_force_and_replaces_it_with_force(tmp_path):
    out = tmp_path / "report.html"
    out.write_text("an older report")
    res = run_cli("report", reference_store("basic"), "-o", out, "--level", "shallow")
    assert res.code == 3 and "--force" in res.err and str(out) in res.err, res.err
    assert out.read_text() == "an older report"
    res = run_cli("report", reference_store("basic"), "-o", out, "--level", "shallow", "--force")
    assert res.code == 0, res.err
    assert out.read_text(encoding="utf-8").startswith("<!doctype html>")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.html"]       # no temporary file left


def test_report_force_keeps_the_old_file_when_the_report_fails(tmp_path, monkeypatch):
    """The new page is written beside the old one and renamed over it: a failure before the
    rename leaves the old report whole."""
    from rmqtool.io import install
    out = tmp_path / "report.html"
    out.write_text("an older report")

    def full_disk(fd):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(install.os, "fsync", full_disk)
    res = run_cli("report", reference_store("basic"), "-o", out, "--level", "shallow", "--force")
    assert res.code == 2 and "No space left" in res.err, res.err
    assert out.read_text() == "an older report"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.html"]


def test_rebuild_timerwheel_declined_writes_nothing_and_exits_3(tmp_path, monkeypatch):
    """Was: the wheel left alone but 'rebuilt: …' printed and exit 0."""
    import subprocess
    from conftest import ROOT
    subprocess.run(["tar", "--sparse", "-xzf", str(ROOT / "fixtures" / "reference" / "timer.tar.gz"), "-C",
                    str(tmp_path)], check=True)
    root = tmp_path / "timer"
    before = _tree(root)
    monkeypatch.setattr("sys.stdin", _Terminal("n\n"))
    res = run_cli("rebuild", "timerwheel", root)
    assert res.code == 3, res.err
    assert "rebuild: nothing written (declined)" in res.err and "error" not in res.err
    assert "rebuilt" not in res.out
    assert _tree(root) == before


def test_rebuild_timerwheel_with_nobody_to_ask_is_refused_before_any_work(tmp_path):
    """The timer wheel is confirmed as every rebuild's install (``_confirm_factory``): no terminal
    and no --yes is refused at once, exit 3, the store untouched."""
    import subprocess
    from conftest import ROOT
    subprocess.run(["tar", "--sparse", "-xzf", str(ROOT / "fixtures" / "reference" / "timer.tar.gz"), "-C",
                    str(tmp_path)], check=True)
    root = tmp_path / "timer"
    before = _tree(root)
    res = run_cli("rebuild", "timerwheel", root)
    assert res.code == 3 and "pass --yes" in res.err, res.err
    assert _tree(root) == before
