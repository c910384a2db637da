"""Tiny inline SVG line charts for Dagster markdown metadata.

The Dagster UI renders a markdown metadata value inline only when it is shorter than 1,000
characters (longer ones sit behind "Show Markdown"), so the PNG plots cannot show inline. These
charts are a few hundred characters: one polyline per candidate (at most ``MAX_POINTS`` points),
as a ``data:image/svg+xml`` image, which the UI's sanitizer allows.
"""

from __future__ import annotations

from urllib.parse import quote

import numpy as np

MAX_POINTS = 12
WIDTH, HEIGHT = 320, 80
PALETTE = [("#d22", "red"), ("#17b", "blue"), ("#2a2", "green"), ("#f80", "orange"),
           ("#96b", "purple"), ("#854", "brown")]


def _points(values: list[float], top: float, n_max: int) -> str:
    v = np.asarray(values, dtype=float)
    idx = np.unique(np.linspace(0, len(v) - 1, min(len(v), MAX_POINTS)).round().astype(int))
    xs = idx * (WIDTH - 4) / max(n_max - 1, 1) + 2
    ys = HEIGHT - 2 - np.nan_to_num(v[idx]) * (HEIGHT - 14) / top
    return " ".join(f"{x:.0f},{y:.0f}" for x, y in zip(xs, ys, strict=True))


def sparkline_markdown(title: str, series: dict[str, list[float]]) -> str:
    """Markdown: ``title``, the chart, and a colour legend naming every series."""
    series = {k: v for k, v in series.items() if len(v)}
    if not series:
        return f"**{title}**: no data"
    top = max(max(float(np.nanmax(np.asarray(v, dtype=float))), 0.0) for v in series.values())
    top = top or 1.0
    n_max = max(len(v) for v in series.values())
    lines = "".join(
        f"<polyline fill='none' stroke='{PALETTE[i % len(PALETTE)][0]}' stroke-width='2' "
        f"points='{_points(v, top, n_max)}'/>" for i, v in enumerate(series.values()))
    svg = (f"<svg xmlns='http://www.w3.org/2000/svg' width='{WIDTH}' height='{HEIGHT}'>"
           f"<path d='M0 {HEIGHT - 1}H{WIDTH}' stroke='#bbb'/>"
           f"<text x='2' y='9' font-size='9'>{top:g}</text>{lines}</svg>")
    legend = " · ".join(f"{PALETTE[i % len(PALETTE)][1]}: {name}"
                        for i, name in enumerate(series))
    uri = "data:image/svg+xml," + quote(svg, safe="=/:,.'-")
    return f"**{title}** ({legend})\n\n![{title}]({uri})"
