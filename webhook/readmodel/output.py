"""Rendering for the developer commands and the console: tables that fit 80 columns, ages, bars, quantities,
JSON/YAML.

Everything here is a pure function of its arguments (the current time is passed in), so golden-output tests
pin the exact text.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from webhook.api.names import MAX_JOBS
from webhook.api.objects import parse_time
from webhook.api.statuses import WAITING

WIDTH = 80
"""Tables are shrunk to fit this many columns."""
WIDE = 120
"""... and ``-o wide`` tables this many (wide output is wide by request, as kubectl's)."""
GAP = "   "
ELLIPSIS = "…"

RESOURCE_ALIASES = {"nvidia.com/gpu": "gpu", MAX_JOBS: "jobs"}
"""Short display names for long resource names."""


@dataclass(frozen=True, slots=True)
class Column:
    """A table column: ``shrink`` marks columns whose values may be cut (with ``…``) to fit the width, lower
    ``shrink`` values are cut first; ``right`` aligns numbers to the right."""

    header: str
    right: bool = False
    shrink: int = 0
    min_width: int = 6


def _cut(text: str, width: int) -> str:
    if len(text) <= width:
        return text
    if width <= 1:
        return text[:width]
    return text[: width - 1] + ELLIPSIS


def layout(
    columns: Sequence[Column], rows: Sequence[Sequence[str]], width: int = WIDTH, gap: str = GAP
) -> list[int]:
    """Column widths for ``rows``: each as wide as its widest cell, then the shrinkable columns cut (lowest
    ``shrink`` rank first, widest first) until the line fits ``width`` or they reach their minimum."""
    widths = [len(column.header) for column in columns]
    for index, cells in enumerate(zip(*rows, strict=False)):
        widths[index] = max(widths[index], *map(len, cells))

    def total() -> int:
        return sum(widths) + len(gap) * (len(widths) - 1)

    while total() > width:
        candidates = [
            i for i, c in enumerate(columns) if c.shrink and widths[i] > max(c.min_width, len(c.header))
        ]
        if not candidates:
            break
        rank = min(columns[i].shrink for i in candidates)
        widest = max((i for i in candidates if columns[i].shrink == rank), key=lambda i: widths[i])
        widths[widest] -= 1
    return widths


def render(
    columns: Sequence[Column],
    rows: Sequence[Sequence[str]],
    widths: Sequence[int],
    header: bool = True,
    gap: str = GAP,
) -> str:
    """The lines of ``rows`` (and the header) laid out in ``widths``, cells cut with ``…`` when longer. Each line is
    one format of its cells (a few microseconds a row: ``kq list -A`` lays out tens of thousands)."""
    lines: Sequence[Sequence[str]] = [[c.header for c in columns], *rows] if header else rows
    if not lines:
        return ""
    last = len(widths) - 1
    if any(len(cells) != len(widths) for cells in lines):
        lines = [[*cells[: len(widths)], *[""] * (len(widths) - len(cells))] for cells in lines]
    by_column: list[Sequence[str]] = list(zip(*lines, strict=True))
    if any(max(map(len, cells)) > width for cells, width in zip(by_column, widths, strict=True)):
        by_column = [cells if max(map(len, cells)) <= width else [_cut(text, width) for text in cells]
                     for cells, width in zip(by_column, widths, strict=True)]
        lines = list(zip(*by_column, strict=True))
    line = gap.join(f"{{:>{width}}}" if column.right else "{}" if index == last else f"{{:<{width}}}"
                    for index, (column, width) in enumerate(zip(columns, widths, strict=False)))
    return "".join(line.format(*cells).rstrip() + "\n" for cells in lines)


def table(columns: Sequence[Column], rows: Sequence[Sequence[str]], width: int = WIDTH, gap: str = GAP) -> str:
    """A kubectl-style table (upper-case headers, three spaces between columns) whose lines fit ``width``
    when the shrinkable columns allow; empty string when there are no rows."""
    if not rows:
        return ""
    return render(columns, rows, layout(columns, rows, width, gap), gap=gap)


_AGE_RUNGS = (("m", 60, 10, 180), ("h", 60, 8, 48), ("d", 24, 8, 730))
"""kubectl's ladder past two minutes: a unit, how many of the one below make one, under how many it still
shows the rest in the unit below (``5m30s``), and under how many it shows the unit alone (``42m``)."""


def human_age(seconds: float) -> str:
    """kubectl's short durations: ``45s``, ``5m30s``, ``42m``, ``3h20m``, ``30h``, ``3d5h``, ``45d``, ``2y``."""
    value = int(max(0.0, seconds))
    if value < 120:
        return f"{value}s"
    below = "s"
    for unit, size, with_rest, alone in _AGE_RUNGS:
        value, rest = divmod(value, size)
        if value < with_rest:
            return f"{value}{unit}{rest}{below}" if rest else f"{value}{unit}"
        if value < alone:
            return f"{value}{unit}"
        below = unit
    return f"{value // 365}y"


def age(created: float | None, now: float) -> str:
    """The age of something created at ``created`` (seconds since the epoch); ``<unknown>`` when unset."""
    if not created:
        return "<unknown>"
    return human_age(now - created)


def eta_text(status: object, start_text: object, latest_text: object, now: float) -> str:
    """The ETA column of ``kq list`` from the job's status and its two estimates as RFC 3339 texts: ``~12m`` (the
    estimate), ``<20m`` (only the latest is known), ``?`` (the controller has none), ``-`` (the job does not
    wait)."""
    if status not in WAITING:
        return "-"
    start, latest = parse_time(start_text), parse_time(latest_text)
    if start is not None:
        return f"~{human_age(start - now)}"
    if latest is not None:
        return f"<{human_age(latest - now)}"
    return "?"


def resource_name(name: str) -> str:
    """``gpu`` for ``nvidia.com/gpu``, ``jobs`` for ``kube-queue/max-jobs``, else the name itself."""
    return RESOURCE_ALIASES.get(name, name)


_NANO = 10**9
_BINARY = (("Ei", 2**60), ("Pi", 2**50), ("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10))
_DECIMAL = (("E", 10**18), ("P", 10**15), ("T", 10**12), ("G", 10**9), ("M", 10**6), ("k", 10**3))


def _short_number(value: float) -> str:
    if value >= 100 or value == int(value):
        return str(round(value))
    return f"{value:.1f}".rstrip("0").rstrip(".")


def quantity(name: str, nanos: int) -> str:
    """A short, human amount of resource ``name``: ``10``, ``500m``, ``1.5``, ``10Gi``, ``1.5Gi``, ``100M``.

    Exact when the canonical text is short; otherwise rounded to one decimal of the largest fitting unit
    (display only, never parsed back).
    """
    from webhook.core.quantity import format_quantity  # noqa: PLC0415 - keeps `kq --help` light
    from webhook.core.resources import is_binary_resource  # noqa: PLC0415

    if nanos < 0:
        return "-" + quantity(name, -nanos)
    binary = is_binary_resource(name)
    exact = format_quantity(nanos, binary)
    if len(exact) <= 6:
        return exact
    units = nanos / _NANO
    if units < 1:
        return f"{round(nanos / 10**6)}m"
    for suffix, factor in _BINARY if binary else _DECIMAL:
        if units >= factor:
            return _short_number(units / factor) + suffix
    return _short_number(units)


def describe(resources: Mapping[str, int]) -> str:
    """``cpu=10, memory=10Gi, gpu=1`` (sorted by name; ``kube-queue/max-jobs`` left out); ``nothing`` if empty."""
    parts = [
        f"{resource_name(name)}={quantity(name, amount)}"
        for name, amount in sorted(resources.items())
        if name != MAX_JOBS and amount
    ]
    return ", ".join(parts) or "nothing"


def bar(used: int, limit: int | None, guaranteed: int, width: int = 10) -> str:
    """``[###++.....]``: one cell per ``1/width`` of ``limit`` (the node's ``max``); ``#`` used within the
    guaranteed ``min``, ``+`` borrowed beyond it, ``.`` free. No limit: ``[ no max ]``."""
    if limit is None:
        return "[" + "no max".center(width) + "]"
    cells = []
    for index in range(width):
        # The cell is filled when usage reaches its middle.
        middle = (2 * index + 1) * limit
        if limit and used * 2 * width >= middle:
            cells.append("#" if guaranteed * 2 * width >= middle else "+")
        else:
            cells.append(".")
    return "[" + "".join(cells) + "]"


def percent(used: int, limit: int | None) -> str:
    if not limit:
        return "-"
    return f"{round(100 * used / limit)}%"


def to_json(data: object) -> str:
    return json.dumps(data, indent=2, sort_keys=False, ensure_ascii=False) + "\n"


def to_yaml(data: object) -> str:
    import yaml  # noqa: PLC0415 - only for -o yaml

    text: str = yaml.safe_dump(data, sort_keys=False, default_flow_style=False, allow_unicode=True)
    return text


def wrap(text: str, indent: int, width: int = WIDTH, lead: str = "") -> str:
    """``lead + text`` wrapped to ``width``: ``lead`` (a label or a row's first cells) is kept as written, the
    words of ``text`` fill the lines, and every line after the first is indented by ``indent`` spaces."""
    import textwrap  # noqa: PLC0415

    return textwrap.fill(
        " ".join(text.split()),
        width=width,
        initial_indent=lead,
        subsequent_indent=" " * indent,
        break_long_words=False,
        break_on_hyphens=False,
    )
