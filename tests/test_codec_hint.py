"""`--body text` on a compressed body whose codec is not installed: no compressed bytes passed off
as text. The body is null with a ``note`` naming the codec and the extra to install; a table cell
shows that hint; `dump` says it once on stderr."""
from __future__ import annotations

import json
import sys

import pytest

from conftest import run_cli
from formats import commitlog as cl
from fuzz import seeds as sd

TEXT = "hello, compressed world " * 20
HINT = "pip install 'rmqtool[codecs]'"


@pytest.fixture
def lz4_log(tmp_path):
    lz4 = pytest.importorskip("lz4.frame")
    flag = cl.COMPRESSED_FLAG | (cl.COMPRESSION_LZ4 << cl.COMPRESSION_TYPE_SHIFT)
    img = sd.commitlog_image([dict(topic=b"T", body=lz4.compress(TEXT.encode()), sys_flag=flag),
                              dict(topic=b"T", body=b"plain text")], 8192)
    path = tmp_path / f"{0:020d}"
    path.write_bytes(img)
    return path


def _hide_lz4(monkeypatch):
    for name in ("lz4", "lz4.frame"):
        monkeypatch.setitem(sys.modules, name, None)       # import fails as for a missing module


def _messages(res):
    return [r for r in res.jsonl() if r["kind"] == "MESSAGE"]


def test_text_body_with_the_codec_is_the_inflated_text(lz4_log):
    res = run_cli("dump", "commitlog", lz4_log, "-f", "jsonl", "--body", "text")
    assert res.code == 0, res.err
    assert [r["body"] for r in _messages(res)] == [TEXT, "plain text"]


def test_text_body_without_the_codec_is_a_hint_not_compressed_bytes(lz4_log, monkeypatch):
    _hide_lz4(monkeypatch)
    res = run_cli("dump", "commitlog", lz4_log, "-f", "jsonl", "--body", "text")
    assert res.code == 0, res.err
    lz, plain = _messages(res)
    assert lz["body"] is None and lz["compression"] == "lz4" and lz["inflated_body_length"] is None
    assert "lz4" in lz["note"] and HINT in lz["note"]
    assert plain["body"] == "plain text"
    assert res.err.strip() == f"note: 1 body compressed with lz4 not shown as text: the lz4 codec is not installed ({HINT})"
    table = run_cli("dump", "commitlog", lz4_log, "--body", "text")          # piped: the table as TSV
    assert table.code == 0, table.err
    header, first, second = table.out.splitlines()[:3]
    cells = dict(zip(header.split("\t"), first.split("\t")))
    assert cells["body"] == f"(lz4 codec not installed ({HINT}))"
    assert dict(zip(header.split("\t"), second.split("\t")))["body"] == "plain text"


def test_export_text_body_without_the_codec_is_null(lz4_log, tmp_path, monkeypatch):
    pytest.importorskip("pyarrow")
    store = tmp_path / "store"
    (store / "commitlog").mkdir(parents=True)
    lz4_log.rename(store / "commitlog" / lz4_log.name)
    _hide_lz4(monkeypatch)
    res = run_cli("export", store, "--to", tmp_path / "out", "--format", "jsonl", "--body", "text")
    assert res.code == 0, res.err
    rows = [json.loads(line) for f in sorted((tmp_path / "out").rglob("*.jsonl")) for line in f.read_text().splitlines()]
    lz = [r for r in rows if r["compression"] == "lz4"]
    assert len(lz) == 1 and lz[0]["body"] is None and HINT in lz[0]["note"]
