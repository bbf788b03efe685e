"""`report`: one self-contained HTML file for an incident ticket (issue 18): what `info` says, the
`verify` summary and findings, the recovery forecast with the messages a restart loses or has not
dispatched yet, a map of the CommitLog files with damaged ranges marked, the write rate over time,
and per queue how far dispatch lags. Charts are drawn with matplotlib as inline SVG (the ``report``
extra); nothing is fetched from the network when the file is opened."""
from __future__ import annotations

import html
import io
import json
from pathlib import Path

from rmqtool.errors import MissingDependencyError
from rmqtool.io.topicpath import printable
from rmqtool.ops.info import store_info
from rmqtool.ops.stats import stats
from rmqtool.ops.verify import VerifyOptions, verify
from rmqtool.wording import counted

LISTED = 200          # rows of each message list shown in the page (the JSON block keeps what verify listed)


def _svg(fig) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight")
    import matplotlib.pyplot as plt
    plt.close(fig)
    text = buf.getvalue()
    return text[text.index("<svg"):]


def _plt():
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        return plt
    except ImportError:
        raise MissingDependencyError("report needs matplotlib: pip install 'rmqtool[report]'", None) from None


def file_map(stats_files: list[dict], findings: list[dict], valid_end: int, file_size: int) -> str:
    """One bar per CommitLog file: how full it is; damage findings marked where they are; the
    forecast's valid end drawn across."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(10, max(1.5, 0.22 * len(stats_files) + 1)))
    names = [f["file"].rsplit("/", 1)[-1] for f in stats_files]
    for i, f in enumerate(stats_files):
        ax.barh(i, f["data_end"], color="#4c78a8", height=0.6)
        ax.barh(i, f["file_size"] - f["data_end"], left=f["data_end"], color="#e0e0e0", height=0.6)
    by_file = {n: i for i, n in enumerate(names)}
    for fd in findings:
        name = (fd.get("file") or "").rsplit("/", 1)[-1]
        if name in by_file and fd.get("offset") is not None and fd["severity"] == "error":
            ax.plot([fd["offset"]], [by_file[name]], marker="x", color="#d62728", markersize=9)
    for i, f in enumerate(stats_files):
        start = int(names[i]) if names[i].isdigit() else None
        if start is not None and start <= valid_end < start + f["file_size"]:
            ax.plot([valid_end - start] * 2, [i - 0.45, i + 0.45], color="#d62728", linewidth=2)
    ax.set_yticks(range(len(names)), names, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("bytes in the file (blue: data; red x: an error finding; red line: the valid end)")
    ax.set_title("CommitLog files")
    return _svg(fig)


def rate_chart(buckets: dict, bucket_ms: int) -> str:
    plt = _plt()
    import datetime as dt
    items = sorted(buckets.items())
    fig, ax = plt.subplots(figsize=(10, 2.6))
    if items:
        xs = [dt.datetime.fromtimestamp(b / 1000, dt.timezone.utc) for b, _ in items]
        ax.bar(xs, [v[0] for _, v in items], width=bucket_ms / 86_400_000 * 0.9, color="#4c78a8")
    ax.set_ylabel(f"messages per {bucket_ms // 1000} s")
    ax.set_title("write rate (store time, UTC)")
    return _svg(fig)


def lag_chart(queues: list[dict], valid_end: int) -> str:
    """Per queue: CommitLog bytes between its last unit's record end and the valid end."""
    plt = _plt()
    rows = sorted(queues, key=lambda q: (q["topic"], q["queue_id"]))[:60]
    fig, ax = plt.subplots(figsize=(10, max(1.5, 0.2 * len(rows) + 1)))
    lag = [max(0, valid_end - (q["max_phy_offset"] or 0)) for q in rows]
    ax.barh(range(len(rows)), lag, color="#f58518")
    ax.set_yticks(range(len(rows)), [printable(f"{q['topic']}/{q['queue_id']}") for q in rows], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("bytes of CommitLog past the queue's last unit (the valid end minus its max offset)")
    ax.set_title("dispatch lag per queue")
    return _svg(fig)


def _cell(col: str, value) -> str:
    if value is None:
        return ""
    if col.endswith(("_timestamp", "_time")) and isinstance(value, int):
        import datetime as dt
        return dt.datetime.fromtimestamp(value / 1000, dt.timezone.utc).isoformat(timespec="milliseconds")
    return str(value)


def _table(rows: list[dict], cols: list[str]) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in cols)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(_cell(c, r.get(c)))}</td>" for c in cols)
                   + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


MSG_COLS = ["phy_offset", "topic", "queue_id", "queue_offset", "store_timestamp", "keys", "uniq_key", "offset_msg_id"]
CSS = """body{font-family:system-ui,sans-serif;margin:2em;color:#222}h1{font-size:1.5em}h2{margin-top:1.6em;
font-size:1.15em;border-bottom:1px solid #ccc}table{border-collapse:collapse;font-size:12px}td,th{border:1px solid
#ddd;padding:2px 6px;text-align:left;vertical-align:top}th{background:#f3f3f3}.bad{color:#b00}.ok{color:#070}
pre{background:#f7f7f7;padding:1em;overflow:auto;font-size:12px}svg{max-width:100%;height:auto}"""


def _two_walks(progress, store):
    """``progress(done, total)`` over the report's two CommitLog walks (verify's, then stats'):
    (verify's callable, told each file's size as it is done; stats' callable)."""
    if progress is None:
        return None, None
    size = sum(seg.size for seg in store.commitlog.files)
    verified = [0]

    def on_verify(n: int) -> None:
        verified[0] += n
        progress(min(verified[0], size), 2 * size)
    on_verify.restart = lambda: verified.__setitem__(0, 0)      # verify reads a replaced store again
    return on_verify, lambda done, total: progress(size + min(done, size), 2 * size)


def build_report(store, name: str, level: str = "deep", engine=None, split_size: int | None = None,
                 progress=None) -> str:
    """The page's HTML; ``engine`` (None: this process) runs the verify and the stats walks;
    ``progress(done, total)``: CommitLog bytes of both walks."""
    on_verify, on_stats = _two_walks(progress, store)
    info = store_info(store)
    rep = verify(store, VerifyOptions(level=level), engine=engine, split_size=split_size, progress=on_verify)
    st, = stats([(name, store)], "minute", engine=engine, split_size=split_size, progress=on_stats)
    fc = rep.forecast
    d = rep.as_dict()
    findings = d["findings"]
    code = rep.exit_code("error")
    verdict = (f'<p class="ok">verify ({level}): clean, exit 0</p>' if code == 0 else
               f'<p class="bad">verify ({level}): exit {code}; {counted(len(findings), "finding")} listed</p>')
    parts = [
        f"<!doctype html><html><head><meta charset='utf-8'><title>rmqtool report: {html.escape(name)}</title>"
        f"<style>{CSS}</style></head><body>",
        f"<h1>rmqtool report: {html.escape(str(store.root))}</h1>", verdict,
        "<h2>Recovery forecast</h2>",
        _table([{"mode": fc["mode"], "start file": fc["start_file"], "valid end": fc["valid_end"],
                 "end": f"{fc['end_kind']} at {fc['end_file']}@{fc['end_position']}",
                 "commitlog files deleted": ", ".join(fc["commitlog_files_deleted"]) or "none",
                 "queues truncated": len(fc["consume_queues_truncated"]),
                 "lost at restart": fc.get("lost_count", 0), "not dispatched": fc["not_dispatched_count"],
                 "not indexed": fc["not_indexed_count"]}],
               ["mode", "start file", "valid end", "end", "commitlog files deleted", "queues truncated",
                "lost at restart", "not dispatched", "not indexed"]),
        f"<h2>Messages a restart loses ({fc.get('lost_count', 0)})</h2>",
        _table(fc.get("lost", [])[:LISTED], MSG_COLS),
        f"<h2>Messages not dispatched yet ({fc['not_dispatched_count']})</h2>",
        _table(fc["not_dispatched"][:LISTED], MSG_COLS),
        "<h2>CommitLog</h2>",
        file_map([f for f in st.files], findings, fc["valid_end"], store.commitlog.file_size),
        "<h2>Write rate</h2>", rate_chart(st.buckets, st.bucket_ms),
        "<h2>Dispatch lag</h2>", lag_chart(info["queues"], fc["valid_end"]),
        f"<h2>Findings ({len(findings)})</h2>",
        _table(findings[:LISTED], ["severity", "check", "file", "offset", "message"]),
        "<h2>Topics and queues</h2>",
        _table([r for r in st.rows() if r["kind"] == "queue"],
               ["topic", "queue_id", "messages", "bytes", "first_store_time", "last_store_time", "messages_per_second"]),
        "<h2>info</h2>", f"<pre>{html.escape(json.dumps(info, indent=2, default=str))}</pre>",
        "<h2>verify summary</h2>", f"<pre>{html.escape(json.dumps(d['summary'], indent=2, default=str))}</pre>",
        "</body></html>",
    ]
    return "\n".join(parts)


def write_report(store, name: str, output: Path, level: str = "deep", engine=None,
                 split_size: int | None = None, progress=None) -> int:
    """Build the page, then write it whole or not at all (a temporary file, fsynced, renamed over
    ``output``: an existing report is replaced only by a complete one); returns its length."""
    from rmqtool.io.install import fsync_path, write_synced
    text = printable(build_report(store, name, level, engine, split_size, progress))       # a name that is not UTF-8: as \xNN
    output = Path(output)
    write_synced(output, text)
    fsync_path(output.absolute().parent)
    return len(text)
