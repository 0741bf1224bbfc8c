"""The documentation stands on its own: every link and file it names is inside the
repository, and every test the field-case table cites exists."""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", ROOT / "benchmarks" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves_inside_the_repository(doc):
    text = doc.read_text()
    assert "../shared" not in text
    for target in re.findall(r"\]\(([^)#\s]+)", text):
        if re.match(r"[a-z]+:", target):  # https:, mailto:
            continue
        path = (doc.parent / target).resolve()
        assert path.is_relative_to(ROOT), f"{doc.name}: {target} points outside the repository"
        assert path.exists(), f"{doc.name}: {target} does not exist"


def test_no_source_file_points_outside_the_repository():
    for p in [*ROOT.glob("jitbench/**/*.py"), *ROOT.glob("tests/**/*.py")]:
        if p == Path(__file__).resolve():
            continue
        assert "../shared" not in p.read_text(), p


def test_the_field_case_table_cites_tests_that_exist():
    table = (ROOT / "docs" / "field-cases.md").read_text()
    cited = re.findall(r"`(tests/[\w/]+\.py)::([\w*]+)`", table)
    ids = re.findall(r"^\| (C\d+) \|", table, flags=re.M)
    assert ids == [f"C{i}" for i in range(1, len(ids) + 1)] and len(ids) >= 11
    assert len(cited) >= len(ids)
    for path, name in cited:
        defs = re.findall(r"^def (test_\w+)", (ROOT / path).read_text(), flags=re.M)
        assert fnmatch.filter(defs, name), f"{path}::{name} matches no test"
