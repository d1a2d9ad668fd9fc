"""``make bench`` rewrites BENCHMARKS.md: the sections it ran, and everything else the page held."""

from __future__ import annotations

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
