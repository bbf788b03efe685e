"""`report`: one self-contained HTML page for an incident ticket, on the crashed reference store (the
messages its forecast names are listed), rendered by a real headless browser when one is installed."""
from __future__ import annotations

import html.parser
import shutil
import subprocess

import pytest

from conftest import load_answers, reference_store, run_cli

pytest.importorskip("matplotlib", reason="the report extra (matplotlib) is not installed")


class _Page(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags, self.remote = [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        for k, v in attrs:
            if k in ("src", "href") and v and v.startswith(("http:", "https:", "//")):
                self.remote.append(v)


def test_report_names_the_forecast_and_draws_without_the_network(tmp_path):
    out = tmp_path / "report.html"
    r = run_cli("report", reference_store("crashed"), "-o", out)
    assert r.code == 0, r.err
    text = out.read_text(encoding="utf-8")
    page = _Page()
    page.feed(text)
    assert page.tags.count("svg") == 3 and page.remote == []
    assert "2349532" in text                                            # upstream's valid end
    messages = {m["phyOffset"]: m for m in load_answers("crashed")["messages"]}
    waiting = [m for off, m in messages.items() if off >= 2315394]    # the 26 records past the CQs' end
    assert len(waiting) == 26 and all(m["uniqKey"] in text for m in waiting if m["uniqKey"])
    assert run_cli("report", reference_store("crashed"), "-o", out).code == 3    # never overwrites


def test_report_renders_in_headless_chromium(tmp_path):
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.skip("no chromium on this machine (.ci/run installs Debian's chromium when apt-get is there)")
    out = tmp_path / "report.html"
    assert run_cli("report", reference_store("crashed"), "-o", out, "--level", "shallow").code == 0
    args = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--window-size=1200,2000"]
    dom = subprocess.run(args + ["--dump-dom", out.as_uri()], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0 and "Recovery forecast" in dom.stdout and "<svg" in dom.stdout
    shot = tmp_path / "report.png"
    subprocess.run(args + [f"--screenshot={shot}", out.as_uri()], capture_output=True, timeout=120, check=True)
    assert shot.stat().st_size > 10_000
