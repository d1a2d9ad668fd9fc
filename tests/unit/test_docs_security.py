"""docs/security.md cites tests that exist: every ``tests/...py::test_name`` (and ``::test_name`` following one on
the same line), and every repository file it names."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "security.md"


def test_every_cited_test_and_file_exists() -> None:
    missing: list[str] = []
    for line in DOC.read_text().splitlines():
        current: Path | None = None
        for match in re.finditer(r"`((?:tests|webhook)/[\w/]+\.py)?(?:::\s*(\w+))?`", line):
            path, name = match.group(1), match.group(2)
            if path:
                current = ROOT / path
                if not current.is_file():
                    missing.append(path)
                    continue
            if name and current is not None and not re.search(rf"def {name}\b", current.read_text()):
                missing.append(f"{current.relative_to(ROOT)}::{name}")
    assert missing == []
