"""The report's curves as SVG line charts, written by hand (no plotting library needed)."""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from typing import Any
from xml.sax.saxutils import escape

Series = dict[str, list[tuple[float, float]]]

WIDTH, HEIGHT, LEFT, RIGHT, TOP, BOTTOM = 640, 400, 70, 170, 40, 50
GRID = 'stroke="#ddd"'
COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e")


def _scale(values: Sequence[float], log: bool, size: float) -> Callable[[float], float]:
    low, high = min(values), max(values)
    if log:
        low, high = math.log10(low), math.log10(high)
    span = (high - low) or 1.0
    return lambda value: ((math.log10(value) if log else value) - low) / span * size


def _ticks(values: Sequence[float], log: bool) -> list[float]:
    """Return round values from at most the least of ``values`` to at least the greatest."""
    low, high = min(values), max(values)
    if log:
        return [
            10.0**k for k in range(math.floor(math.log10(low)), math.ceil(math.log10(high)) + 1)
        ]
    span = (high - low) or abs(high) or 1.0
    step = 10 ** math.floor(math.log10(span))
    while span / step < 4:
        step /= 2
    return [k * step for k in range(math.floor(low / step), math.ceil(high / step) + 1)]


def line_chart(
    title: str, x_label: str, y_label: str, series: Series, *, log_x: bool, log_y: bool = False
) -> str:
    """Return an SVG chart of ``series`` (label: points); log scales must be > 0."""
    points = [point for line in series.values() for point in line]
    xs = _ticks([x for x, _ in points], log_x)
    ys = _ticks([y for _, y in points] + ([] if log_y else [0.0]), log_y)
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    sx, sy = _scale(xs, log_x, plot_w), _scale(ys, log_y, plot_h)

    def px(x: float) -> float:
        return LEFT + sx(x)

    def py(y: float) -> float:
        return TOP + plot_h - sy(y)

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}"'
        ' font-family="sans-serif" font-size="12">',
        f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>',
        f'<text x="{WIDTH / 2}" y="22" text-anchor="middle" font-size="15">{escape(title)}</text>',
        f'<text x="{LEFT + plot_w / 2}" y="{HEIGHT - 10}" text-anchor="middle">'
        f"{escape(x_label)}</text>",
        f'<text transform="translate(16,{TOP + plot_h / 2}) rotate(-90)" text-anchor="middle">'
        f"{escape(y_label)}</text>",
    ]
    for x in xs:
        parts += [
            f'<line x1="{px(x):.1f}" y1="{TOP}" x2="{px(x):.1f}" y2="{TOP + plot_h}" {GRID}/>',
            f'<text x="{px(x):.1f}" y="{TOP + plot_h + 16}" text-anchor="middle">{x:,.6g}</text>',
        ]
    for y in ys:
        parts += [
            f'<line x1="{LEFT}" y1="{py(y):.1f}" x2="{LEFT + plot_w}" y2="{py(y):.1f}" {GRID}/>',
            f'<text x="{LEFT - 6}" y="{py(y) + 4:.1f}" text-anchor="end">{y:,.6g}</text>',
        ]
    for index, (label, line) in enumerate(series.items()):
        colour = COLOURS[index % len(COLOURS)]
        path = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in line)
        parts.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"/>')
        parts += [
            f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3" fill="{colour}"/>' for x, y in line
        ]
        legend_x, legend_y = WIDTH - RIGHT + 12, TOP + 16 * index + 8
        parts += [
            f'<rect x="{legend_x}" y="{legend_y - 5}" width="12" height="3" fill="{colour}"/>',
            f'<text x="{legend_x + 18}" y="{legend_y}">{escape(label)}</text>',
        ]
    return "\n".join([*parts, "</svg>", ""])


def _by_library(rows: Sequence[dict[str, Any]], field: str, floor: float = 0.0) -> Series:
    series: Series = {}
    for row in rows:
        if not row["fair"]:
            series.setdefault(row["label"], []).append((row["processes"], max(row[field], floor)))
    return series


def write_all(data: dict[str, Any], directory: str) -> list[str]:
    """Write the contention, renewal and listing curves of ``data`` to ``directory``."""
    rows, renewal = data["contention"], data["renewal"]
    charts = {
        "contention_throughput.svg": line_chart(
            "Contention: acquisitions per second",
            "processes",
            "acquisitions/s",
            _by_library(rows, "acquisitions_per_s"),
            log_x=True,
        ),
        "contention_wait_p99.svg": line_chart(
            "Contention: wait p99",
            "processes",
            "ms (log)",
            _by_library(rows, "wait_p99_ms", floor=0.01),
            log_x=True,
            log_y=True,
        ),
        "contention_jain.svg": line_chart(
            "Contention: Jain's fairness index",
            "processes",
            "Jain",
            _by_library(rows, "jain"),
            log_x=True,
        ),
        "renewal.svg": line_chart(
            "Renewal: Redis server time per round",
            "locks held",
            "us (log)",
            {
                "commands (commandstats)": [
                    (r["held"], max(r["usec_per_round"], 0.1)) for r in renewal
                ],
                "Redis CPU": [(r["held"], max(r["cpu_us_per_round"], 0.1)) for r in renewal],
            },
            log_x=True,
            log_y=True,
        ),
        "listing.svg": line_chart(
            "manage.py locks list --json",
            "locks held",
            "seconds (log)",
            {"--json": [(p["locks"], p["json"]["seconds"]) for p in data["listing"]["points"]]},
            log_x=True,
            log_y=True,
        ),
    }
    os.makedirs(directory, exist_ok=True)
    paths = []
    for name, svg in charts.items():
        path = os.path.join(directory, name)
        with open(path, "w", encoding="utf-8") as out:
            out.write(svg)
        paths.append(path)
    return paths
