"""docs/semantics.md is the numeric contract the code and README cite. No code reads it at
run time (the package cites it in messages and docstrings only), so the wheel does not carry it."""
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "semantics.md"


def test_contract_covers_what_users_need():
    text = DOC.read_text()
    for topic in ("ties to even", "saturation", "NaN", "Zero points", "Per-tensor and per-axis",
                  "Feature levels", "float16", "Scales"):
        assert topic in text, topic


def test_code_cites_the_document_in_the_project():
    cited = set()
    for path in list((ROOT / "dmlq").glob("*.py")) + list((ROOT / "tests").glob("test_api*.py")):
        cited |= set(re.findall(r"docs/[\w./-]+\.md", path.read_text()))
    assert cited == {"docs/semantics.md"}
    assert all((ROOT / c).exists() for c in cited)
    readme = (ROOT / "README.md").read_text()
    assert "docs/semantics.md" in readme


def _section(title):
    text = (ROOT / "README.md").read_text()
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end > 0 else None]


@pytest.mark.parametrize("title", ["The two commands", "API", "Semantics", "Performance"])
def test_readme_cites_no_missing_file(title):
    readme = _section(title)
    for ref in re.findall(r"`((?:bench|docs|tests|dmlq|cuda|tools)/[\w./<>-]+)`", readme):
        if "<" in ref or "*" in ref:
            continue
        assert (ROOT / ref.rstrip("/")).exists(), ref
