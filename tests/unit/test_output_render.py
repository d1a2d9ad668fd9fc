"""Tables laid out one format a line say what laying each cell out in turn says: cut with ``…`` where a cell is
longer than its column, right-aligned numbers, the last column unpadded, trailing spaces dropped."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from webhook.readmodel.output import ELLIPSIS, GAP, Column, human_age, layout, render, table


def _cell_by_cell(columns: Sequence[Column], rows: Sequence[Sequence[str]], widths: Sequence[int],
                  header: bool) -> str:
    """The oracle: every cell cut, padded and aligned on its own."""
    lines = []
    for cells in [[column.header for column in columns], *rows] if header else rows:
        parts = []
        for index, (text, width) in enumerate(zip(cells, widths, strict=False)):
            cut = text if len(text) <= width else text[:width] if width <= 1 else text[: width - 1] + ELLIPSIS
            last = index == len(cells) - 1
            parts.append(cut.rjust(width) if columns[index].right else cut if last else cut.ljust(width))
        lines.append(GAP.join(parts).rstrip())
    return "\n".join(lines) + "\n" if lines else ""


COLUMNS = st.lists(st.builds(Column, st.sampled_from(["NAME", "KIND", "POSITION", "ETA"]), st.booleans(),
                             st.integers(0, 3), st.integers(2, 8)), min_size=1, max_size=6)
TEXT = st.text(st.sampled_from("ab-1 {}é…"), max_size=14)


@settings(max_examples=300, deadline=None)
@given(COLUMNS, st.data(), st.integers(20, 120), st.booleans())
def test_a_line_is_one_format_of_its_cells(columns: list[Column], data: st.DataObject, width: int,
                                           header: bool) -> None:
    rows = data.draw(st.lists(st.lists(TEXT, min_size=len(columns), max_size=len(columns)), max_size=6))
    widths = layout(columns, rows, width) if rows else [len(column.header) for column in columns]
    assert render(columns, rows, widths, header=header) == _cell_by_cell(columns, rows, widths, header)


def test_cut_columns_and_the_whole_table() -> None:
    columns = [Column("NAME", shrink=1, min_width=6), Column("POSITION", right=True), Column("AGE", right=True)]
    rows = [("a-very-long-job-name", "12", "5m"), ("short", "3", "40s")]
    assert table(columns, rows, 30) == (  # NAME cut to the 13 columns left of 30
        "NAME            POSITION   AGE\n"
        "a-very-long-…         12    5m\n"
        "short                  3   40s\n")
    assert table(columns, [], 30) == ""


@pytest.mark.parametrize(("seconds", "text"), [
    (-5, "0s"), (0, "0s"), (45, "45s"), (119.9, "119s"),
    (120, "2m"), (150, "2m30s"), (599, "9m59s"), (600, "10m"), (10_799, "179m"),
    (10_800, "3h"), (12_000, "3h20m"), (28_799, "7h59m"), (28_800, "8h"), (108_000, "30h"), (172_799, "47h"),
    (172_800, "2d"), (277_200, "3d5h"), (691_199, "7d23h"), (691_200, "8d"), (3_888_000, "45d"),
    (729 * 86_400 + 86_399, "729d"), (730 * 86_400, "2y"), (800 * 86_400, "2y"),
])
def test_ages_follow_kubectls_ladder_at_every_step(seconds: float, text: str) -> None:
    assert human_age(seconds) == text
