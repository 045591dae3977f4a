"""The README stays short enough to scan and every link of it and of docs/ resolves; the guides show their worked
examples as they are in tests/examples/ (which tests/test_examples.py trains)."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")  # a markdown link's target


def test_the_readme_is_under_200_lines_and_links_to_every_docs_page():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) < 200
    linked = {target for target in LINK.findall(readme) if target.startswith("docs/")}
    assert linked == {f"docs/{page.name}" for page in PAGES[1:]}


@pytest.mark.parametrize("page", PAGES, ids=[page.name for page in PAGES])
def test_every_relative_link_resolves(page):
    for target in LINK.findall(page.read_text(encoding="utf-8")):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue  # a web address, or an anchor of the page itself
        assert (page.parent / target.split("#")[0]).exists(), f"{page.name}: {target}"


@pytest.mark.parametrize(
    "guide, example", [("adding-a-method.md", "soft_prefix.py"), ("adding-a-dataset.md", "capitals.py")]
)
def test_a_guide_shows_its_example_as_it_is(guide, example):
    code = (ROOT / "tests" / "examples" / example).read_text(encoding="utf-8")
    assert f"```python\n{code}```" in (ROOT / "docs" / guide).read_text(encoding="utf-8")
