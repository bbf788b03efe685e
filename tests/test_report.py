"""`report`: the incident page (issue 36). Its headline and numbers against upstream's answers about the
reference stores (the crashed store's abort file, dispatch frontier, deleted files, per-queue records not
dispatched), its charts' axes against the data, damage drawn on the file that holds it, untrusted names
rendered as text, every store kind and a fleet, its imports; and rendered by Debian's headless chromium
at 1280 and 800 px (no horizontal overflow, no console message, screenshots kept in the test's tmp dir)."""
from __future__ import annotations

import html.parser
import json
import re
import shutil
import struct
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from conftest import dledger_store, load_answers, reference_store, run_cli, timer_store_root
from corruptions import corrupt, patch
from formats import commitlog as cl
from formats.consumequeue import CQ_UNIT_OFFSETS, CQ_UNIT_SIZE
from rmqtool.io.store import Store
from rmqtool.ops.report import charts
from rmqtool.ops.report.model import store_model

ROOT = Path(__file__).resolve().parent.parent


class _Page(html.parser.HTMLParser):
    """The parts of the page the tests read: tags, remote references, the headline, chart attributes."""

    def __init__(self):
        super().__init__()
        self.tags, self.remote, self.charts, self.cells = [], [], [], []
        self.headlines, self._in_headline, self.text = [], False, []
        self._group, self._in_kind = None, False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.append(tag)
        for k, v in attrs:
            if k in ("src", "href") and v and v.startswith(("http:", "https:", "//")):
                self.remote.append(v)
        if tag == "svg":
            self.charts.append({"attrs": a, "bars": []})
        if tag == "rect" and "data-t0" in a and self.charts:
            self.charts[-1]["bars"].append((int(a["data-t0"]), int(a["data-t1"])))
        if tag == "g" and "data-file" in a:
            self._group = {"file": a["data-file"], "damaged": False, "kind": self.charts[-1].get("kind")}
            self.cells.append(self._group)
        if tag == "rect" and self._group is not None and "damaged" in (a.get("class") or ""):
            self._group["damaged"] = True
        if tag == "text" and a.get("class") == "kind":
            self._in_kind = True
        if tag == "p" and "headline" in (a.get("class") or ""):
            self._in_headline = True
            self.headlines.append("")

    def handle_endtag(self, tag):
        if tag == "p":
            self._in_headline = False
        if tag == "g":
            self._group = None
        if tag == "text":
            self._in_kind = False

    def handle_data(self, data):
        self.text.append(data)
        if self._in_headline:
            self.headlines[-1] += data
        if self._in_kind:
            self.charts[-1]["kind"] = data.split()[0]


def parse(text: str) -> _Page:
    page = _Page()
    page.feed(text)
    return page


def report(tmp_path, *stores, name="report.html", level="deep", code=(0, 1)) -> str:
    out = tmp_path / name
    r = run_cli("report", *stores, "-o", out, "--level", level)
    assert r.code in code, r.err
    return out.read_text(encoding="utf-8")


# --- charts, on their own -------------------------------------------------------------------------------
@settings(max_examples=60, deadline=None)
@given(lo=st.integers(1_600_000_000_000, 1_900_000_000_000), span=st.integers(0, 40 * 86_400_000))
def test_time_ticks_fall_inside_the_span_and_are_few(lo, span):
    step, ticks = charts.time_ticks(lo, lo + span)
    assert all(lo <= t <= lo + span for t in ticks) and len(ticks) <= 7
    assert all(t % step == 0 for t in ticks)


@settings(max_examples=200, deadline=None)
@given(ms=st.integers(0, 4_102_444_800_000), step=st.sampled_from([1, *charts._TICK_STEPS]),
       span=st.integers(0, 40 * 86_400_000))
def test_time_labels_are_parts_of_the_tables_time(ms, step, span):
    """A tick's label is cut from ``wording.format_time``: as fine as the step, as datetime words it."""
    import datetime as dt
    t = dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc)
    if span >= 86_400_000 or step >= 86_400_000:
        want = t.strftime("%Y-%m-%d") if step >= 86_400_000 else t.strftime("%m-%d %H:%M")
    else:
        want = t.strftime({60_000: "%H:%M", 1_000: "%H:%M:%S"}.get(
            next((k for k in (60_000, 1_000) if step >= k), 0), "%H:%M:%S.") + ("" if step >= 1_000 else f"{ms % 1000:03d}"))
    assert charts.time_label(ms, step, span) == want


def test_a_time_past_datetimes_calendar_is_labelled_not_raised():
    """A damaged record's store time can lie past year 9999 (datetime raises there): its label is still
    the part of ``format_time``'s words the step asks for."""
    from rmqtool.wording import format_time
    for step, span in ((1, 0), (60_000, 0), (86_400_000, 0), (60_000, 86_400_000)):
        label = charts.time_label(1 << 62, step, span)
        assert label and all(part in format_time(1 << 62) for part in label.split(" "))


class _Batch:
    """What ``StoreStats.add_batch`` reads of a record batch."""

    def __init__(self, times, tids):
        import numpy as np
        self.store_timestamp = np.array(times, dtype=np.int64)
        self.queue_id = np.zeros(len(times), dtype=np.int32)
        self.size = np.full(len(times), 10, dtype=np.int64)
        self.tids = np.array(tids, dtype=np.int32)

    def __len__(self):
        return len(self.tids)


def _topics(names):
    from rmqtool.ops.verify.records import TopicTable

    class Table(TopicTable):
        def topic_ids(self, batch, core=None):
            return batch.tids
    return Table(names=list(names))


NAMES = ["a", "b", "<c>", "d&e"]


@settings(max_examples=60, deadline=None)
@given(times=st.lists(st.integers(1_700_000_000_000, 1_700_000_000_000 + 3 * 86_400_000), min_size=1, max_size=300),
       tids=st.lists(st.integers(0, len(NAMES) - 1), min_size=1, max_size=300),
       cut=st.integers(1, 50), parts=st.integers(1, 4))
def test_auto_buckets_count_exactly_and_the_chart_spans_the_data(times, tids, cut, parts):
    """``stats`` by="auto": the bucket size grows with the span (at most AUTO_MAX_BUCKETS buckets), every
    record counted once in its bucket per topic, also when engine tasks' parts are merged; the chart's
    x-range is the first to the last time."""
    from rmqtool.ops.stats import AUTO_MAX_BUCKETS, new_stats
    tids = (tids * len(times))[:len(times)]
    topics = _topics(NAMES)
    one = new_stats("s", "auto")
    for i in range(0, len(times), cut):                    # in batches, as the walk feeds it
        one.add_batch(_Batch(times[i:i + cut], tids[i:i + cut]), topics)
    merged = new_stats("s", "auto")
    step = -(-len(times) // parts)
    for i in range(0, len(times), step):                   # engine tasks: a part each, merged in order
        part = new_stats("s", "auto")
        part.add_batch(_Batch(times[i:i + step], tids[i:i + step]), topics)
        merged.merge(part)
    for st_ in (one, merged):
        size = st_.bucket_ms
        assert len(st_.buckets) <= AUTO_MAX_BUCKETS
        want = Counter((t // size * size, NAMES[k]) for t, k in zip(times, tids))
        assert {k: v[0] for k, v in st_.topic_buckets.items()} == dict(want)
    assert one.bucket_ms == merged.bucket_ms
    svg = charts.rate_chart(one.topic_buckets, one.bucket_ms, min(times), max(times))
    chart = parse(svg).charts[0]
    assert int(chart["attrs"]["data-x-min"]) == min(times) and int(chart["attrs"]["data-x-max"]) == max(times)
    assert min(b[0] for b in chart["bars"]) == min(times) and max(b[1] for b in chart["bars"]) == max(times)
    assert all(min(times) <= t0 <= t1 <= max(times) for t0, t1 in chart["bars"])


def test_bucket_size_follows_the_span():
    from rmqtool.ops.stats import new_stats
    from rmqtool.ops.stats import auto_step
    for span, want in ((2_300, 100), (17_000, 1_000), (50 * 60_000, 30_000), (6 * 3_600_000, 300_000),
                       (20 * 86_400_000, 21_600_000)):
        assert auto_step(span) == want
        s = new_stats("s", "auto")
        s.buckets = {0: [1, 1], span // 1000 * 1000: [1, 1]}
        s.topic_buckets = {(0, "t"): [1, 1]}
        s.coarsen()
        assert s.bucket_ms == want, (span, s.bucket_ms)


def test_waits_read_in_their_unit():
    from rmqtool.ops.report.model import waited
    assert [waited(ms) for ms in (0, 1, 999, 1_000, 12_500, 200_000, 18_000_000, 345_600_000)] == \
        ["0 ms", "1 ms", "999 ms", "1.0 s", "12.5 s", "3.3 min", "5.0 h", "4.0 days"]


def test_shortened_ids_keep_both_ends():
    assert charts.shorten("abc", 10) == "abc"
    s = charts.shorten("FD0000000000000000000000000000026A1B5FFD2B2769D594A80000", 22)
    assert len(s) == 22 and s.startswith("FD00000") and s.endswith("A80000") and "…" in s


# --- the crashed store: upstream's answers --------------------------------------------------------------
def test_crashed_headline_and_numbers_are_upstreams(tmp_path):
    text = report(tmp_path, reference_store("crashed"))
    page = parse(text)
    answers = load_answers("crashed")
    rec = answers["recovery"]
    assert rec["abortFilePresent"] and page.headlines[0].strip() == "abnormal shutdown"
    assert "clean" not in page.headlines[0]
    frontier = rec["maxPhyOffsetInConsumeQueueBefore"]
    waiting = [m for m in answers["messages"] if m["phyOffset"] >= frontier]
    for name in rec["indexFilesDeletedByRecovery"] + rec["commitlogFilesDeletedByRecovery"]:
        assert name in text
    assert f"<b>{len(waiting)}</b>not dispatched" in text
    deleted = len(rec["indexFilesDeletedByRecovery"]) + len(rec["commitlogFilesDeletedByRecovery"])
    assert f"<b>{deleted}</b>files deleted at restart" in text
    assert all(m["uniqKey"] in text for m in waiting if m["uniqKey"])      # full ids are in the page (copyable)
    assert page.tags.count("script") == 0 and page.remote == []
    assert "Content-Security-Policy" in text and "default-src 'none'" in text
    for what in ("generated", "rmqtool 0", "host", "command", str(reference_store("crashed").resolve())):
        assert what in text, what
    assert "rmqtool report " in text and "UTC" in text


def test_crashed_dispatch_lag_per_queue_is_the_records_past_upstreams_frontier():
    answers = load_answers("crashed")
    rec = answers["recovery"]
    frontier = rec["maxPhyOffsetInConsumeQueueBefore"]
    last = max(m["storeTimestamp"] for m in answers["messages"])
    want = {}
    for m in answers["messages"]:
        if m["phyOffset"] >= frontier:
            n, oldest = want.get(f"{m['topic']}/{m['queueId']}", (0, None))
            want[f"{m['topic']}/{m['queueId']}"] = (n + 1, m["storeTimestamp"] if oldest is None else min(oldest, m["storeTimestamp"]))
    model = store_model(Store(reference_store("crashed")), "crashed", "deep")
    got = {r["queue"]: (r["records"], r["oldest_store_time"]) for r in model["dispatch_lag"]}
    assert got == want
    assert all(r["seconds"] == (last - r["oldest_store_time"]) / 1000 for r in model["dispatch_lag"])
    ends = {f"{q['topic']}/{q['queueId']}": q["maxOffsetInQueue"] for q in rec["consumeQueuesBefore"]}
    assert all(r["queue_max_offset"] == ends[r["queue"]] for r in model["dispatch_lag"])
    assert model["first_store_time"] == min(m["storeTimestamp"] for m in answers["messages"])
    assert model["last_store_time"] == last and model["bucket_ms"] == 1000       # 17 s of data: seconds
    assert model["index_lag"]["records"] == model["forecast"]["not_indexed_count"] > 0


def test_the_write_rate_axis_is_exactly_the_datas_span(tmp_path):
    answers = load_answers("crashed")
    times = [m["storeTimestamp"] for m in answers["messages"]]
    rate = [c for c in parse(report(tmp_path, reference_store("crashed"))).charts
            if c["attrs"].get("data-axis") == "time"]
    assert len(rate) == 1
    a = rate[0]["attrs"]
    assert (int(a["data-x-min"]), int(a["data-x-max"])) == (min(times), max(times))
    assert min(b[0] for b in rate[0]["bars"]) == min(times) and max(b[1] for b in rate[0]["bars"]) == max(times)
    per_topic = Counter(m["topic"] for m in answers["messages"])
    svg = re.search(r'<svg[^>]*data-chart="write-rate".*?</svg>', (tmp_path / "report.html").read_text(), re.S).group()
    drawn = Counter()
    for topic, n in re.findall(r"<title>([^<:]+): (\d[\d,]*) from", svg):
        drawn[topic] += int(n.replace(",", ""))
    assert drawn == per_topic


# --- states -------------------------------------------------------------------------------------------
def test_a_clean_store_says_clean_shutdown(tmp_path):
    page = parse(report(tmp_path, reference_store("basic")))
    assert page.headlines[0].strip() == "clean shutdown"


BROKER = textwrap.dedent("""
    import fcntl, os, sys, time
    fd = os.open(sys.argv[1], os.O_RDWR)
    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)      # FileChannel.tryLock(0, 1, false)
    print("locked", flush=True)
    time.sleep(120)
""")


@pytest.fixture
def live_store(store_copy):
    """A copy of the basic store whose lock a stand-in broker process holds (a live snapshot)."""
    root = store_copy("basic")
    broker = subprocess.Popen([sys.executable, "-c", BROKER, str(root / "lock")], stdout=subprocess.PIPE, text=True)
    try:
        assert broker.stdout.readline().strip() == "locked"
        yield root, broker.pid
    finally:
        broker.kill()
        broker.wait()


def test_a_store_a_broker_holds_says_running_broker(tmp_path, live_store):
    root, pid = live_store
    text = report(tmp_path, root)
    page = parse(text)
    assert page.headlines[0].strip() == "running broker" and str(pid) in text


@pytest.fixture
def damaged_store(store_copy):
    """basic with a CommitLog body bit flipped (file 5) and a ConsumeQueue unit's size changed in
    OrderTopic/2's first file, whose 20-digit name is also the first CommitLog file's."""
    root = store_copy("basic")
    corrupt(root, "body-flip")
    path = root / "consumequeue" / "OrderTopic" / "2" / f"{0:020d}"
    size = struct.unpack(">i", path.read_bytes()[9 * CQ_UNIT_SIZE + CQ_UNIT_OFFSETS["size"]:][:4])[0]
    patch(path, 9 * CQ_UNIT_SIZE + CQ_UNIT_OFFSETS["size"], struct.pack(">i", size + 4))
    return root


def test_damage_is_drawn_on_the_file_that_holds_it(tmp_path, damaged_store):
    text = report(tmp_path, damaged_store, code=(0,))           # the page is written: exit 0, whatever it says
    page = parse(text)
    assert page.headlines[0].strip() == "damaged"
    damaged = {(c["kind"], c["file"]) for c in page.cells if c["damaged"]}
    from rmqtool.ops.verify import VerifyOptions, verify
    kind = {"commitlog": "CommitLog", "consumequeue": "ConsumeQueue", "index": "IndexFile"}
    want = {(kind[Path(f.file).relative_to(damaged_store).parts[0]], Path(f.file).name)
            for f in verify(Store(damaged_store), VerifyOptions(level="deep")).findings
            if f.severity == "error" and f.offset is not None}
    assert damaged == want and {("CommitLog", f"{5 * 98304:020d}"), ("ConsumeQueue", f"{0:020d}")} <= damaged
    first_cl = [c for c in page.cells if c["kind"] == "CommitLog" and c["file"] == f"{0:020d}"]
    assert first_cl and not first_cl[0]["damaged"]                 # the same name, not the same file


def test_a_topic_with_markup_renders_as_text(tmp_path):
    """A topic ``<script>alert(1)</script>`` (a CommitLog record's, as a broker could have written it)."""
    from rmqtool.records.encode import Host, MessageFields, encode, patch_phy_offset
    store = tmp_path / "store"
    raw = bytearray()
    for i, topic in enumerate(["<script>alert(1)</script>", "plain", "<img src=x onerror=alert(2)>"]):
        f = MessageFields(topic=topic, body=b"payload %d" % i,
                          properties=cl.encode_properties({"KEYS": f"<b>key-{i}</b>", "UNIQ_KEY": f"U{i:030d}"}),
                          queue_id=0, queue_offset=0, born_timestamp=1_700_000_000_000 + i,
                          store_timestamp=1_700_000_000_000 + i * 1500, born_host=Host(bytes(4), 1),
                          store_host=Host(bytes(4), 2))
        rec = bytearray(encode(f))
        patch_phy_offset(rec, len(raw))
        raw += rec
    (store / "commitlog").mkdir(parents=True)
    (store / "commitlog" / f"{0:020d}").write_bytes(bytes(raw) + bytes((1 << 16) - len(raw)))
    text = report(tmp_path, store)
    page = parse(text)
    assert "script" not in page.tags and "img" not in page.tags
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text and "<script>" not in text
    assert "<script>alert(1)</script>" in "".join(page.text)       # shown, as text


# --- every store kind, and a fleet -------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["dledger", "timer", "propcrc-lmq-batchcq", "rocksdb-cq", "mixed"])
def test_every_store_kind(tmp_path, kind):
    if kind == "rocksdb-cq":
        pytest.importorskip("rocksdict", reason="a RocksDB ConsumeQueue needs the rocksdb extra")
    root = {"dledger": dledger_store, "timer": timer_store_root}.get(kind, lambda: reference_store(kind))()
    text = report(tmp_path, root, level="shallow")
    page = parse(text)
    assert page.headlines and page.headlines[0].strip() in ("clean shutdown", "abnormal shutdown", "damaged")
    label = {"dledger": "DLedger", "timer": "timer store", "propcrc-lmq-batchcq": "BatchConsumeQueue",
             "rocksdb-cq": "RocksDB ConsumeQueue", "mixed": "classic"}[kind]
    assert label in text
    assert any(c["attrs"].get("data-chart") == "file-map" for c in page.charts)


def test_a_fleet_has_a_row_per_store_then_each_section(tmp_path, store_copy):
    a, b = store_copy("basic"), store_copy("crashed")
    text = report(tmp_path, str(tmp_path / "*"), level="shallow")
    page = parse(text)
    assert page.headlines[0].strip() == "1 abnormal shutdown, 1 clean shutdown"
    assert [h.strip() for h in page.headlines[1:]] == ["clean shutdown", "abnormal shutdown"]
    assert text.count('<section class="store') == 2
    rows = re.search(r'<h2 id="fleet">.*?</table>', text, re.S).group()
    assert rows.count("<tr>") == 3 and 'href="#store-1"' in rows and 'href="#store-2"' in rows


def test_consumer_groups_a_restart_moves(tmp_path, store_copy):
    """The section lists the (group, topic, queue)s ``ops/consumers`` forecasts the restart moves, as
    text (a group name is store data); a store without consumer offsets says so in one line; offsets
    that cannot be read are said, and the rest of the page is still written."""
    from rmqtool.ops.consumers import restart_forecast
    from rmqtool.ops.report import consumer_groups_section, page_meta, render
    store = Store(reference_store("consumers"))
    model = store_model(store, "consumers", "shallow")
    want = restart_forecast(store)
    assert want and [(r["group"], r["topic"], r["queue_id"]) for r in model["consumer_groups"]["rows"]] == \
        [(r["group"], r["topic"], r["queue_id"]) for r in want]
    text = render([model], page_meta(["rmqtool", "report"]))
    assert f"Consumer groups a restart moves ({len(want)} of" in text and want[0]["restart_status"] in text
    assert {"label": "consumer queues moved at restart", "value": len(want)}.items() <= next(
        n for n in model["numbers"] if n["label"] == "consumer queues moved at restart").items()
    basic = store_model(Store(reference_store("basic")), "basic", "shallow")
    assert "the store has no config/consumerOffset.json" in render([basic], page_meta(["rmqtool", "report"]))
    basic["consumer_groups"] = consumer_groups_section([{"group": "<g>", "topic": "TopicTest", "queue_id": 0}])
    assert "&lt;g&gt;" in render([basic], page_meta(["rmqtool", "report"]))
    bad = store_copy("consumers")
    for name in ("consumerOffset.json", "consumerOffset.json.bak"):
        (bad / "config" / name).write_text("{\n\t\"offsetTable\":{")
    text = report(tmp_path, str(bad), level="shallow")
    assert "could not be read: " in text and "consumerOffset.json" in text


@pytest.mark.parametrize("abort", [False, True])
def test_consumer_groups_on_verifys_forecast_are_those_of_the_recovery_walk(store_copy, abort):
    """The section is read on the restart verify's forecast predicts (no walk of its own): the same rows
    as on the broker's recovery walk run for it (``ops/consumers.restart_of``), either start mode."""
    from rmqtool.ops.report.model import read_consumer_groups
    from rmqtool.ops.verify import VerifyOptions, verify
    root = store_copy("consumers")
    if abort:
        (root / "abort").write_bytes(b"")
    store = Store(root)
    fc = verify(store, VerifyOptions(level="deep")).forecast
    assert fc["mode"] == ("abnormal" if abort else "normal")
    section = read_consumer_groups(store, fc)
    assert section["read"] and section == read_consumer_groups(store)


# --- what it imports, what it ships --------------------------------------------------------------------
def test_report_imports_nothing_heavy(tmp_path):
    code = textwrap.dedent(f"""
        import sys
        sys.argv = ["rmqtool", "report", {str(reference_store('crashed'))!r}, "-o", {str(tmp_path / 'r.html')!r}]
        from rmqtool.cli import main
        try:
            main()
        except SystemExit:
            pass
        heavy = ("matplotlib", "pyarrow", "pandas", "pyspark", "PIL", "scipy", "rocksdict")
        print(sorted({{m.split(".")[0] for m in sys.modules}} & set(heavy)))
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300,
                       env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] == "[]" and (tmp_path / "r.html").stat().st_size > 10_000


def test_templates_are_package_data():
    import tomllib
    conf = tomllib.loads((ROOT / "pyproject.toml").read_text())
    globs = conf["tool"]["setuptools"]["package-data"]["rmqtool.ops.report"]
    here = ROOT / "rmqtool" / "ops" / "report"
    shipped = {p for g in globs for p in here.glob(g)}
    assert shipped == set((here / "templates").iterdir()) and shipped
    assert any(d.startswith("Jinja2") for d in conf["project"]["dependencies"])


# --- a real browser ----------------------------------------------------------------------------------------
PROBE = """<script>(function(){var d=document.documentElement;var out={scrollWidth:d.scrollWidth,
innerWidth:window.innerWidth,headline:(document.querySelector('.headline')||{}).textContent,
charts:[].map.call(document.querySelectorAll('svg[data-axis=time]'),function(s){var r=s.getBoundingClientRect();
return {xmin:s.dataset.xMin,xmax:s.dataset.xMax,width:r.width};}),
wide:[].map.call(document.querySelectorAll('body *'),function(e){var r=e.getBoundingClientRect();
return r.right>window.innerWidth+0.5&&!e.closest('.wrap')&&!e.closest('details:not([open])')?e.tagName+'.'+e.className:null}).filter(Boolean).slice(0,5),
scrolled:[].map.call(document.querySelectorAll('.wrap'),function(w){var h=w.previousElementSibling;
return w.scrollWidth>w.clientWidth+1?(h?h.textContent:'?'):null}).filter(Boolean)};
var p=document.createElement('pre');p.id='probe';p.textContent=JSON.stringify(out);document.body.appendChild(p);})();</script>"""


def _browser():
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name) or (f"/usr/bin/{name}" if Path(f"/usr/bin/{name}").exists() else None)
        if path:
            return path
    pytest.skip("no chromium on this machine (.ci/run installs Debian's chromium with apt-get; "
                "`apt-get install -y chromium` where apt-get is there)")


def _chromium(browser, width: int, *args) -> subprocess.CompletedProcess:
    return subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                           "--enable-logging=stderr", "--v=0", f"--window-size={width},2400", *args],
                          capture_output=True, text=True, timeout=180)


@pytest.mark.parametrize("which", ["crashed", "live", "damaged", "dledger"])
def test_report_renders_in_headless_chromium(tmp_path, which, request):
    browser = _browser()
    if which == "live":
        root = request.getfixturevalue("live_store")[0]
    elif which == "damaged":
        root = request.getfixturevalue("damaged_store")
    elif which == "dledger":
        root = dledger_store()
    else:
        root = reference_store("crashed")
    text = report(tmp_path, root, name=f"{which}.html")
    page = parse(text)
    for width in (1280, 800):
        shot = tmp_path / f"{which}-{width}.png"
        r = _chromium(browser, width, f"--screenshot={shot}", (tmp_path / f"{which}.html").as_uri())
        assert r.returncode == 0 and shot.stat().st_size > 10_000, r.stderr[-2000:]
        console = [line for line in r.stderr.splitlines() if ":CONSOLE" in line]
        assert console == [], console                       # no script, no blocked load, no error
        probed = tmp_path / f"{which}-{width}-probe.html"
        probed.write_text(text.replace("default-src 'none'", "default-src 'none'; script-src 'unsafe-inline'")
                          .replace("</body>", PROBE + "</body>"), encoding="utf-8")
        dom = _chromium(browser, width, "--dump-dom", probed.as_uri())
        got = json.loads(re.search(r'<pre id="probe">(.*?)</pre>', dom.stdout, re.S).group(1).replace("&quot;", '"')
                         .replace("&amp;", "&").replace("&lt;", "<").replace("&gt;", ">"))
        assert got["innerWidth"] == width
        assert got["scrollWidth"] <= got["innerWidth"], (width, got)
        assert got["wide"] == [], got["wide"]
        assert got["scrolled"] == [], got["scrolled"]         # every table fits, none scrolls sideways
        assert got["headline"].strip() == page.headlines[0].strip()
        for chart, drawn in zip(got["charts"], (c for c in page.charts if c["attrs"].get("data-axis") == "time")):
            assert (chart["xmin"], chart["xmax"]) == (drawn["attrs"]["data-x-min"], drawn["attrs"]["data-x-max"])
            assert 0 < chart["width"] <= width
    if which == "crashed":
        pdf = tmp_path / "crashed.pdf"                      # printed, as a ticket attachment
        r = _chromium(browser, 1280, f"--print-to-pdf={pdf}", "--no-pdf-header-footer", (tmp_path / "crashed.html").as_uri())
        assert r.returncode == 0 and pdf.read_bytes().startswith(b"%PDF") and pdf.stat().st_size > 20_000
        assert page.headlines[0].strip() == "abnormal shutdown"
        times = [m["storeTimestamp"] for m in load_answers("crashed")["messages"]]
        rate = next(c for c in page.charts if c["attrs"].get("data-axis") == "time")
        assert (int(rate["attrs"]["data-x-min"]), int(rate["attrs"]["data-x-max"])) == (min(times), max(times))
    want = {"crashed": "abnormal shutdown", "live": "running broker", "damaged": "damaged"}.get(which)
    assert want is None or page.headlines[0].strip() == want
