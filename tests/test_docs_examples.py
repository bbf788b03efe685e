"""The documentation's examples run on a plain install (tests/docs_examples.py, which .ci/run runs in a
venv with only the base dependencies): here the runner's reading of the pages, and a subset of the
examples run with this environment's extras hidden (the shadow packages of test_plain_install)."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import docs_examples as dx

ROOT = Path(__file__).resolve().parent.parent


def test_every_page_with_examples_is_read():
    pages = dx.all_examples()
    assert {"README.md", "docs/guide-incident.md", "docs/guide-find-message.md", "docs/stores.md",
            "docs/commands.md (--help examples)"} <= set(pages)
    runnable = [e for items in pages.values() for e in items if e.skip is None]
    assert len(runnable) >= 60
    lines = {e.line for e in runnable}
    assert "rmqtool dump consumequeue ./article" in lines and "rmqtool dump index ./article" in lines   # a ; b
    assert "rmqtool info fixtures/reference/basic" in lines                                              # a && b


def test_what_the_bundle_does_not_hold_is_skipped_with_a_reason():
    assert dx._skip_reason("rmqtool verify /data/rocketmq/store --level deep") == "a broker host's path"
    assert dx._skip_reason("rmqtool info s3://snapshots/broker-a/store") == "object storage or HDFS"
    assert dx._skip_reason("rmqtool verify STORE... [--level shallow|deep]") == "a usage line"
    assert dx._skip_reason("rmqtool query-key ./article 3f0c…-msgid") == "a placeholder"
    assert dx._skip_reason("rmqtool stats fixtures/reference/basic --by minute") is None


def test_a_documented_exit_code_is_read(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("```sh\nrmqtool verify fixtures/reference/crashed   # findings, exit 1\n"
                    "rmqtool info fixtures/reference/basic | head -3\n```\n")
    got = [(e.line, e.code) for e in dx.page_examples(page)]
    assert got == [("rmqtool verify fixtures/reference/crashed", 1), ("rmqtool info fixtures/reference/basic", 0)]


def test_needed_extras():
    assert dx.needed_extra(["export", "s", "--to", "x"]) == {"parquet"}
    assert dx.needed_extra(["report", "s", "-o", "r.html"]) == set()       # Jinja2 is a base dependency
    assert dx.needed_extra(["verify", "s", "--engine", "spark"]) == {"spark"}
    assert dx.needed_extra(["stats", "s", "--jobs", "2"]) == {"parquet"}
    assert dx.needed_extra(["compare", "fixtures/reference/rocksdb-cq", "x", "--queues"]) == {"rocksdb"}
    assert dx.needed_extra(["info", "s"]) == set()


def test_incident_guide_examples_run_without_extras(tmp_path):
    """The incident guide (info, report, stats) with every extra hidden: all run as documented
    (`report` needs no extra: Jinja2 is a base dependency, its charts are hand-drawn SVG)."""
    examples = {p: items for p, items in dx.all_examples().items() if p == "docs/guide-incident.md"}
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(dx.hide_extras(tmp_path / "hide")), str(ROOT)]))
    env.pop("RMQTOOL_TRACEBACK", None)
    seen = []
    failures, ran, skipped = dx.run(examples, True, [sys.executable], env, tmp_path / "run", log=seen.append)
    assert failures == [] and ran >= 4 and skipped >= 2, seen
    assert not any("exit 2" in s and "report" in s for s in seen), seen


def test_a_crash_is_a_failure_even_with_exit_0():
    import subprocess
    e = dx.Example("x:1", "rmqtool info fixtures/reference/basic", 0)
    crash = subprocess.CompletedProcess([], 0, "", "error: internal error KeyError: 'x'\n")
    assert dx.check(e, crash, plain=False)
    missing = subprocess.CompletedProcess([], 2, "", "error: this needs pyarrow, which is not installed: "
                                                     "pip install 'rmqtool[parquet]'\n")
    assert dx.check(dx.Example("x:1", "rmqtool export s --to d", 0), missing, plain=True) is None
    assert dx.check(dx.Example("x:1", "rmqtool info s", 0), missing, plain=True)   # info needs no extra
