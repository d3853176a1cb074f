"""The report's charts: plain SVG, drawn here, so they show from file:// with no script and
are files Snakemake's own report can hold (``report()`` outputs of the report rule)."""

from __future__ import annotations

from dataclasses import dataclass
from xml.sax.saxutils import escape

WIDTH = 640
LABEL_WIDTH = 220
# right of the longest bar: room for its value (``12,345 + 678 ($0.0001725)``)
VALUE_WIDTH = 150
BAR_HEIGHT = 22
GAP = 6
TOP = 34
# colours people can tell apart in print and with the common colour-vision deficiencies
BLUE, ORANGE, GREY, RED = "#3b6ea5", "#e08a2c", "#9aa5b1", "#c0392b"


@dataclass
class Bar:
    label: str
    value: float
    # what the bar says at its end, e.g. "0.82 (n=40)"
    text: str
    # an interval around value (low, high), drawn as a whisker
    interval: tuple[float, float] | None = None
    # a second value stacked after the first (completion tokens after prompt tokens)
    stacked: float = 0.0
    colour: str = BLUE


def _attr(value: str) -> str:
    return escape(value, {'"': "&quot;"})


def _svg(title: str, height: int, body: list[str], chart_id: str) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" id="{_attr(chart_id)}" role="img" '
        f'width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" '
        f'font-family="system-ui, sans-serif" font-size="12">\n'
        f"<title>{escape(title)}</title>\n"
        f'<text x="0" y="16" font-size="14" font-weight="600">{escape(title)}</text>\n'
        + "\n".join(body) + "\n</svg>\n"
    )


def _short(text: str, most: int = 28) -> str:
    return text if len(text) <= most else text[:most - 1] + "\u2026"


def bars(title: str, items: list[Bar], *, scale: float | None = None, empty: str = "nothing to show",
         chart_id: str = "chart", legend: list[tuple[str, str]] | None = None) -> str:
    """Horizontal bars, one per item, on a common scale (``scale``: the value of a full bar)."""
    if not items:
        body = [f'<rect x="0" y="{TOP}" width="{WIDTH}" height="1" fill="{GREY}"/>',
                f'<text x="0" y="{TOP + 22}" fill="#555">{escape(empty)}</text>']
        return _svg(title, TOP + 34, body, chart_id)
    top = max((max(b.value + b.stacked, b.interval[1] if b.interval else 0) for b in items), default=0)
    full = scale if scale is not None else (top or 1)
    room = WIDTH - LABEL_WIDTH - VALUE_WIDTH
    body = []
    if legend:
        x = LABEL_WIDTH
        for name, colour in legend:
            body.append(f'<rect x="{x}" y="6" width="10" height="10" fill="{colour}"/>')
            body.append(f'<text x="{x + 14}" y="15">{escape(name)}</text>')
            x += 24 + 7 * len(name)
    for i, bar in enumerate(items):
        y = TOP + i * (BAR_HEIGHT + GAP)
        width = max(room * bar.value / full, 0) if full else 0
        extra = max(room * bar.stacked / full, 0) if full else 0
        body.append(f'<g class="bar"><title>{escape(bar.label)}: {escape(bar.text)}</title>')
        body.append(f'<text x="{LABEL_WIDTH - 8}" y="{y + 15}" text-anchor="end">{escape(_short(bar.label))}</text>')
        body.append(f'<rect x="{LABEL_WIDTH}" y="{y}" width="{width:.1f}" height="{BAR_HEIGHT}" fill="{bar.colour}"/>')
        if extra:
            body.append(f'<rect x="{LABEL_WIDTH + width:.1f}" y="{y}" width="{extra:.1f}" height="{BAR_HEIGHT}" '
                        f'fill="{ORANGE}"/>')
        end = LABEL_WIDTH + width + extra
        if bar.interval is not None and full:
            low, high = (LABEL_WIDTH + room * v / full for v in bar.interval)
            mid = y + BAR_HEIGHT / 2
            body.append(f'<path d="M{low:.1f} {mid} H{high:.1f} M{low:.1f} {y + 5} V{y + BAR_HEIGHT - 5} '
                        f'M{high:.1f} {y + 5} V{y + BAR_HEIGHT - 5}" stroke="#222" fill="none"/>')
            end = max(end, high)
        body.append(f'<text x="{end + 6:.1f}" y="{y + 15}">{escape(bar.text)}</text></g>')
    height = TOP + len(items) * (BAR_HEIGHT + GAP) + 4
    return _svg(title, height, body, chart_id)


def columns(title: str, items: list[tuple[str, int]], *, empty: str = "nothing to show",
            chart_id: str = "chart", colours: dict[str, str] | None = None) -> str:
    """Vertical columns of counts (a histogram), labelled underneath."""
    if not items or not any(n for _, n in items):
        body = [f'<rect x="0" y="{TOP}" width="{WIDTH}" height="1" fill="{GREY}"/>',
                f'<text x="0" y="{TOP + 22}" fill="#555">{escape(empty)}</text>']
        return _svg(title, TOP + 34, body, chart_id)
    plot = 150
    top = max(n for _, n in items)
    slot = (WIDTH - 20) / len(items)
    width = max(min(slot - 6, 60), 2)
    base = TOP + 16 + plot
    body = [f'<rect x="0" y="{base}" width="{WIDTH}" height="1" fill="{GREY}"/>']
    for i, (label, n) in enumerate(items):
        x = 10 + i * slot + (slot - width) / 2
        h = plot * n / top
        colour = (colours or {}).get(label, BLUE)
        body.append(f'<g class="bar"><title>{escape(label)}: {n}</title>')
        body.append(f'<rect x="{x:.1f}" y="{base - h:.1f}" width="{width:.1f}" height="{h:.1f}" fill="{colour}"/>')
        body.append(f'<text x="{x + width / 2:.1f}" y="{base - h - 4:.1f}" text-anchor="middle">{n}</text>')
        body.append(f'<text x="{x + width / 2:.1f}" y="{base + 16}" text-anchor="middle">{escape(_short(label, 10))}'
                    f"</text></g>")
    return _svg(title, base + 26, body, chart_id)
