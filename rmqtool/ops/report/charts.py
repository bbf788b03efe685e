"""The report's charts as small inline SVG, drawn by hand (docs/report.md says why not matplotlib).

Every chart is one ``<svg>`` with a ``viewBox`` and no fixed width (it scales to the page), colours
from CSS classes (the page's stylesheet gives them light and dark values), text escaped here, and
``data-`` attributes that say what it draws: a time chart carries ``data-x-min``/``data-x-max`` (epoch
ms: the first and last point of its data, which are its x-axis ends) so a test can check the axis
against the data. Nothing here reads a store: the functions take numbers and names.
"""
from __future__ import annotations

from html import escape

from rmqtool.wording import format_time

#: nice steps for time-axis ticks (ms)
_TICK_STEPS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1_000, 2_000, 5_000, 10_000, 15_000, 30_000, 60_000,
               120_000, 300_000, 600_000, 900_000, 1_800_000, 3_600_000, 7_200_000, 10_800_000, 21_600_000,
               43_200_000, 86_400_000, 172_800_000, 604_800_000, 2_592_000_000, 31_536_000_000)
#: series drawn on their own in a stacked chart; the rest are added up as "other"
MAX_SERIES = 8
WIDTH = 960


def _a(value) -> str:
    """An attribute value, quoted."""
    return '"' + escape(str(value), quote=True) + '"'


def shorten(text: str, keep: int = 28) -> str:
    """``text`` cut in the middle to about ``keep`` characters (``…`` where the cut is)."""
    if len(text) <= keep:
        return text
    head = (keep - 1) * 2 // 3
    return text[:head] + "…" + text[len(text) - (keep - 1 - head):]


def time_label(ms: int, step: int, span: int) -> str:
    """A tick's label: as fine as the step, the date only when the span crosses days (parts of the
    tables' one form, ``wording.format_time``; a time it cannot word is given whole as it does)."""
    date, t, clock = format_time(ms).partition("T")       # YYYY-MM-DD, HH:MM:SS.mmmZ
    if not t:
        return date
    if span >= 86_400_000 or step >= 86_400_000:
        return date if step >= 86_400_000 else f"{date[-5:]} {clock[:5]}"
    return clock[:5] if step >= 60_000 else clock[:8] if step >= 1_000 else clock[:12]


def time_ticks(lo: int, hi: int, most: int = 7) -> tuple[int, list[int]]:
    """(step, tick times) inside [lo, hi]: the smallest nice step giving at most ``most`` ticks."""
    span = max(hi - lo, 1)
    step = next((s for s in _TICK_STEPS if span // s + 1 <= most), _TICK_STEPS[-1])
    first = -(-lo // step) * step
    return step, list(range(first, hi + 1, step))


def value_ticks(top: float, most: int = 4) -> list[float]:
    """0 and nice round values up to ``top``."""
    if top <= 0:
        return [0]
    magnitude = 1
    while magnitude * 10 <= top:
        magnitude *= 10
    for step in (magnitude / 10, magnitude / 5, magnitude / 2, magnitude, magnitude * 2, magnitude * 5):
        if step >= 1 and top / step <= most:
            break
    step = max(step, 1)
    return [i * step for i in range(int(top // step) + 1)]


def _num(v: float) -> str:
    return f"{int(v):,}" if float(v).is_integer() else f"{v:,.1f}"


def rate_chart(topic_buckets: dict, bucket_ms: int, first: int | None, last: int | None,
               height: int = 260) -> str:
    """Messages written per bucket of ``bucket_ms``, stacked per topic (the ``MAX_SERIES - 1`` largest
    topics, the rest as "other"); the x-axis runs from the first record's store time to the last one's
    (``first``, ``last``: exactly the data's span; edge buckets are drawn cut to it), and the last
    record, the moment the store stopped being written, is marked. ``topic_buckets``:
    ``{(bucket start, topic): [messages, bytes]}`` (``ops/stats`` ``by="auto"``)."""
    if first is None or last is None or not topic_buckets:
        return ""
    totals: dict[str, int] = {}
    for (_, topic), (n, _) in topic_buckets.items():
        totals[topic] = totals.get(topic, 0) + n
    order = sorted(totals, key=lambda t: (-totals[t], t))
    shown = order if len(order) <= MAX_SERIES else order[:MAX_SERIES - 1]
    series = {t: i for i, t in enumerate(shown)}
    other = len(shown) if len(order) > len(shown) else None
    stacks: dict[int, list[int]] = {}
    for (b, topic), (n, _) in topic_buckets.items():
        row = stacks.setdefault(b, [0] * (len(shown) + (other is not None)))
        row[series.get(topic, other)] += n
    top = max(sum(r) for r in stacks.values())
    left, right, top_pad, bottom = 64, 16, 28, 42
    pw, ph = WIDTH - left - right, height - top_pad - bottom
    span = max(last - first, 1)

    def x(t: int) -> float:
        return left + (min(max(t, first), last) - first) * pw / span

    def y(v: float) -> float:
        return top_pad + ph - v * ph / max(top, 1)

    unit = bucket_name(bucket_ms)
    out = [f'<svg class="chart rate" viewBox="0 0 {WIDTH} {height}" role="img" data-chart="write-rate" '
           f'data-axis="time" data-x-min={_a(first)} data-x-max={_a(last)} data-bucket-ms={_a(bucket_ms)} '
           f'aria-label={_a(f"messages written per {unit}, per topic")}>']
    for v in value_ticks(top):
        out.append(f'<line class="grid" x1="{left}" x2="{left + pw}" y1="{y(v):.1f}" y2="{y(v):.1f}"/>'
                   f'<text class="tick" x="{left - 6}" y="{y(v) + 4:.1f}" text-anchor="end">{_num(v)}</text>')
    step, ticks = time_ticks(first, last)
    for t in ticks:
        out.append(f'<line class="axis" x1="{x(t):.1f}" x2="{x(t):.1f}" y1="{top_pad + ph}" y2="{top_pad + ph + 4}"/>'
                   f'<text class="tick" x="{x(t):.1f}" y="{top_pad + ph + 17}" text-anchor="middle">'
                   f'{escape(time_label(t, step, last - first))}</text>')
    for b in sorted(stacks):
        t0, t1 = max(b, first), min(b + bucket_ms, last)
        x0, x1 = x(t0), x(t1)
        w = max(x1 - x0 - (1 if x1 - x0 > 3 else 0), 1.0)
        base = 0
        for i, n in enumerate(stacks[b]):
            if not n:
                continue
            name = shown[i] if i < len(shown) else "other"
            out.append(f'<rect class="s{i}" x="{x0:.1f}" y="{y(base + n):.1f}" width="{w:.1f}" '
                       f'height="{y(base) - y(base + n):.1f}" data-t0="{t0}" data-t1="{t1}">'
                       f'<title>{escape(name)}: {n:,} from {escape(time_label(b, 1, 0))} UTC</title></rect>')
            base += n
    out.append(f'<line class="axis" x1="{left}" x2="{left + pw}" y1="{top_pad + ph}" y2="{top_pad + ph}"/>')
    out.append(f'<line class="crash" x1="{x(last):.1f}" x2="{x(last):.1f}" y1="{top_pad - 6}" y2="{top_pad + ph}" '
               f'data-t="{last}"><title>last record {escape(time_label(last, 1, 0))} UTC</title></line>'
               f'<text class="crash-label" x="{x(last) - 4:.1f}" y="{top_pad - 10}" text-anchor="end">'
               f'last record {escape(time_label(last, 1, 0))}</text>')
    out.append(f'<text class="tick" x="{left}" y="{height - 6}">messages per {escape(unit)} (UTC)</text>')
    legend_x = left + 220
    for i, name in enumerate(shown + (["other"] if other is not None else [])):
        if legend_x > WIDTH - 60:
            break
        label = shorten(name, 22)
        out.append(f'<rect class="s{i}" x="{legend_x}" y="{height - 16}" width="10" height="10"/>'
                   f'<text class="tick" x="{legend_x + 14}" y="{height - 7}"><title>{escape(name)}</title>'
                   f'{escape(label)}</text>')
        legend_x += 24 + 6.5 * len(label)
    out.append("</svg>")
    return "".join(out)


def bucket_name(ms: int) -> str:
    for size, name in ((604_800_000, "week"), (86_400_000, "day"), (3_600_000, "hour"), (60_000, "minute"),
                       (1_000, "second")):
        if ms % size == 0:
            n = ms // size
            return name if n == 1 else f"{n} {name}s"
    return f"{ms} ms"


def bar_chart(rows: list[dict], label: str, value: str, note: str, css: str = "lag", kind: str = "bars",
              most: int = 40) -> str:
    """Horizontal bars, one per row (the ``most`` largest): ``row[label]`` beside it, length
    ``row[value]``, ``row[note]`` written after the bar."""
    rows = sorted((r for r in rows if r[value]), key=lambda r: -r[value])[:most]
    if not rows:
        return ""
    bar_h, gap, left, right = 16, 6, 200, 200
    height = len(rows) * (bar_h + gap) + 8
    pw = WIDTH - left - right
    top = max(r[value] for r in rows)
    out = [f'<svg class="chart {css}" viewBox="0 0 {WIDTH} {height}" role="img" data-chart={_a(kind)} '
           f'data-axis="count" data-rows="{len(rows)}">']
    for i, r in enumerate(rows):
        yy = 4 + i * (bar_h + gap)
        w = max(r[value] * pw / top, 1)
        out.append(f'<text class="tick" x="{left - 6}" y="{yy + 12}" text-anchor="end"><title>{escape(r[label])}</title>'
                   f'{escape(shorten(r[label], 30))}</text>'
                   f'<rect class="bar" x="{left}" y="{yy}" width="{w:.1f}" height="{bar_h}"/>'
                   f'<text class="tick" x="{left + w + 6:.1f}" y="{yy + 12}">{escape(r[note])}</text>')
    out.append("</svg>")
    return "".join(out)


def file_map(groups: list[dict], per_line: int = 40) -> str:
    """Files as cells, one line per group row (wrapping after ``per_line`` cells): each cell's width is
    its file's share of the line, filled to where its data ends when that is known (``fill``, 0..1),
    marked where a finding is (``marks``: [(fraction into the file, severity)]), outlined dashed when
    the next start deletes it (``deleted``), with a line where the valid end falls (``end``: fraction).

    ``groups``: [{"kind": "CommitLog", "rows": [{"label", "cells": [{"name", "fill", "marks", "deleted",
    "end", "title"}]}]}]"""
    label_w, cell_h, line_gap, head_h = 200, 18, 6, 22
    cell_w = (WIDTH - label_w - 8) / per_line
    body, yy = [], 4
    for g in groups:
        body.append(f'<text class="kind" x="0" y="{yy + 15}">{escape(g["kind"])}</text>')
        yy += head_h
        for row in g["rows"]:
            cells = row["cells"]
            body.append(f'<text class="tick" x="{label_w - 6}" y="{yy + 13}" text-anchor="end">'
                        f'<title>{escape(row["label"])}</title>{escape(shorten(row["label"], 30))}</text>')
            for j, c in enumerate(cells):
                if j and j % per_line == 0:
                    yy += cell_h + 2
                cx = label_w + (j % per_line) * cell_w
                w = cell_w - 2
                cls = "cell deleted" if c.get("deleted") else "cell"
                if any(sev == "error" for _, sev in c.get("marks", ())):
                    cls += " damaged"
                body.append(f'<g data-file={_a(c["name"])}><title>{escape(c["title"])}</title>'
                            f'<rect class="{cls}" x="{cx:.1f}" y="{yy}" width="{w:.1f}" height="{cell_h}"/>')
                if c.get("fill"):
                    body.append(f'<rect class="fill" x="{cx:.1f}" y="{yy}" width="{w * min(c["fill"], 1):.1f}" '
                                f'height="{cell_h}"/>')
                if c.get("end") is not None:
                    ex = cx + w * c["end"]
                    body.append(f'<line class="valid-end" x1="{ex:.1f}" x2="{ex:.1f}" y1="{yy - 3}" y2="{yy + cell_h + 3}"/>')
                for frac, sev in c.get("marks", ()):
                    mx = cx + w * min(max(frac, 0), 1)
                    body.append(f'<path class="mark {escape(sev)}" d="M{mx - 4:.1f} {yy + 2}l8 {cell_h - 4}'
                                f'M{mx + 4:.1f} {yy + 2}l-8 {cell_h - 4}"/>')
                body.append("</g>")
            yy += cell_h + line_gap
        yy += 4
    height = yy + 4
    return (f'<svg class="chart filemap" viewBox="0 0 {WIDTH} {height}" role="img" data-chart="file-map" '
            f'data-axis="files">' + "".join(body) + "</svg>")
