"""``make bench`` rewrites BENCHMARKS.md: the sections it ran, and everything else the page held."""

from __future__ import annotations

import re
from pathlib import Path

from bench.__main__ import BENCHES, INTRO, assemble, marker


def test_a_rerun_keeps_the_other_sections_and_the_notes_written_after_them() -> None:
    first, second = BENCHES[0].name, BENCHES[1].name
    previous = assemble({first: "## first\nold figures\n", second: "## second\nkept figures\n"}, "")
    _, end = marker(first)
    previous = previous.replace(end + "\n", end + "\n\n## A single change, measured by hand\n\nIt saved a fifth.\n", 1)
    page = assemble({first: "## first\nnew figures\n"}, previous)
    assert page.startswith(INTRO)
    assert "new figures" in page and "old figures" not in page
    assert "kept figures" in page
    notes = page.index("## A single change, measured by hand")
    assert page.index(end) < notes < page.index(marker(second)[0])
    assert assemble({first: "## first\nnew figures\n"}, page) == page, "a second rerun changes nothing more"


def test_the_pages_hand_written_notes_sit_outside_the_sections_a_rerun_replaces() -> None:
    # A rerun replaces everything between a section's markers: a note written there would be lost.
    page = (Path(__file__).resolve().parents[2] / "BENCHMARKS.md").read_text()
    inside = {}
    for bench in BENCHES:
        start, end = marker(bench.name)
        found = re.search(re.escape(start) + r"\n(.*?)" + re.escape(end), page, re.DOTALL)
        if found is not None:
            inside[bench.name] = [line for line in found.group(1).splitlines() if line.startswith("### ")]
    assert len(inside) > 10, "the page's sections were not found"
    assert {name: notes for name, notes in inside.items() if notes} == {}
