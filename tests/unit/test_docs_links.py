"""The project's own docs hold together: every ``docs/<page>.md`` the code, tests, benchmarks and docs cite
exists; nothing cites a document outside the repository; every relative link in ``docs/*.md`` and
``README.md`` leads to a file (and heading) that exists; ``docs/architecture.svg`` is what
``hack/architecture_svg.py`` draws. Each scanner must find something, so no check passes by scanning nothing."""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CODE_DIRS = ("webhook", "tests", "bench")
TEXT_SUFFIXES = {".py", ".md", ".yaml", ".yml", ".sh", ".txt", ".toml", ".json", ".cfg"}

DOC_CITATION = re.compile(r"(?<![\w/.-])docs/([\w.-]+\.(?:md|svg))")
"""``docs/reclaim.md`` as cited in code and prose (not ``site/docs/x.md`` of another project)."""
OUTSIDE = re.compile(r"\b(?:MISSION|ARCHITECTURE|KUBERNETES-NOTES)\.md\b|/work/shared\b")
"""Documents that are not in the repository (the project's planning notes)."""
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
"""A markdown link or image: ``[text](target)``."""


def _text_files(*names: str) -> Iterator[Path]:
    for name in names:
        base = ROOT / name
        if base.is_file():
            yield base
            continue
        for path in sorted(base.rglob("*")):
            if path.is_file() and path.suffix in TEXT_SUFFIXES and "__pycache__" not in path.parts:
                yield path


def _markdown_pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _citations() -> dict[str, set[str]]:
    """Cited ``docs/`` file -> the files citing it."""
    found: dict[str, set[str]] = {}
    for path in _text_files(*CODE_DIRS, "README.md", "docs"):
        for match in DOC_CITATION.finditer(path.read_text(encoding="utf-8", errors="replace")):
            found.setdefault(match.group(1), set()).add(str(path.relative_to(ROOT)))
    return found


def test_every_cited_docs_page_exists() -> None:
    cited = _citations()
    missing = {name: sorted(where) for name, where in cited.items() if not (ROOT / "docs" / name).is_file()}
    assert missing == {}
    # Guard against a vacuous pass: the code, the tests and the docs all cite pages.
    citing_dirs = {where.split("/")[0] for places in cited.values() for where in places}
    assert {"webhook", "tests", "docs"} <= citing_dirs
    assert {"reclaim.md", "start-timeout.md", "queueing.md", "quota-tree.md", "architecture.md"} <= set(cited)


def _outside_citations(text: str) -> list[str]:
    return [match.group(0) for match in OUTSIDE.finditer(text)]


def test_no_code_cites_a_document_outside_the_repository() -> None:
    this = Path(__file__).resolve()
    offenders = {}
    scanned = 0
    for path in _text_files(*CODE_DIRS):
        if path.resolve() == this:
            continue
        scanned += 1
        found = _outside_citations(path.read_text(encoding="utf-8", errors="replace"))
        if found:
            offenders[str(path.relative_to(ROOT))] = found
    assert offenders == {}
    assert scanned > 100


def test_the_outside_citation_scanner_finds_what_it_forbids() -> None:
    planted = "The rules (" + "MISSION" + ".md part 3); the layering of " + "ARCHITECTURE" + ".md holds."
    assert _outside_citations(planted) == ["MISSION" + ".md", "ARCHITECTURE" + ".md"]
    assert _outside_citations("ADMISSION_ANNOTATION and docs/architecture.md") == []


def _slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces as ``-``."""
    text = heading.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    anchors: set[str] = set()
    seen: dict[str, int] = {}
    fenced = False
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fenced = not fenced
            continue
        match = re.match(r"#{1,6}\s+(.*)", line)
        if fenced or match is None:
            continue
        slug = _slug(match.group(1))
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        anchors.add(slug if count == 0 else f"{slug}-{count}")
    return anchors


def _broken_links(page: Path) -> Iterator[tuple[str, str]]:
    """``(link, why)`` for every relative link of ``page`` that leads nowhere."""
    fenced = False
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fenced = not fenced
        if fenced:
            continue
        for match in LINK.finditer(line):
            target = match.group(1)
            if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
                continue
            file_part, _, anchor = target.partition("#")
            linked = (page.parent / file_part).resolve() if file_part else page
            if not linked.exists():
                yield target, "no such file"
            elif anchor and linked.suffix == ".md" and anchor not in _anchors(linked):
                yield target, f"no heading #{anchor} in {linked.name}"


def _links_checked() -> int:
    count = 0
    for page in _markdown_pages():
        for match in LINK.finditer(page.read_text(encoding="utf-8")):
            if not re.match(r"[a-z][a-z0-9+.-]*:", match.group(1)):
                count += 1
    return count


def test_every_relative_link_in_the_docs_resolves() -> None:
    broken = {
        str(page.relative_to(ROOT)): list(_broken_links(page)) for page in _markdown_pages()
    }
    assert {page: links for page, links in broken.items() if links} == {}
    # Guard against a vacuous pass: the pages do link to each other, and the README to docs/README.md.
    assert _links_checked() > 30
    assert "docs/README.md" in {match.group(1) for match in LINK.finditer((ROOT / "README.md").read_text())}


def test_the_link_checker_sees_a_broken_link(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# Title\n\n[there](missing.md), [here](#title), [nowhere](#no-such-heading)\n"
                    "```\n[in a code block](ignored.md)\n```\n")
    assert list(_broken_links(page)) == [
        ("missing.md", "no such file"),
        ("#no-such-heading", "no heading #no-such-heading in page.md"),
    ]


def test_github_anchors() -> None:
    assert _slug("The tree's status") == "the-trees-status"
    assert _slug("`spec.queuePolicy`") == "specqueuepolicy"
    assert _slug("What `kq why` reports") == "what-kq-why-reports"


def test_the_architecture_picture_is_what_its_script_draws() -> None:
    spec = importlib.util.spec_from_file_location("architecture_svg", ROOT / "hack" / "architecture_svg.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    drawn = module.render()
    assert isinstance(drawn, str) and "<svg" in drawn
    assert (ROOT / "docs" / "architecture.svg").read_text(encoding="utf-8") == drawn, (
        "docs/architecture.svg is out of date: run python3 hack/architecture_svg.py"
    )
