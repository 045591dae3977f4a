"""No page under leaderboards/ links to a file that does not exist (a page, a figure)."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINK = re.compile(r"\]\(([^)\s]+)\)")  # [text](target) and ![alt](target)


def missing_links(folder: Path) -> list[str]:
    """``page: target`` for every relative link of a markdown page under ``folder`` whose target is not a file."""
    found = []
    for page in sorted(folder.rglob("*.md")):
        for target in LINK.findall(page.read_text(encoding="utf-8")):
            path = target.split("#")[0]
            if not path or re.match(r"[a-z]+:", path):  # an anchor, a URL
                continue
            if not (page.parent / path).is_file():
                found.append(f"{page.relative_to(folder)}: {target}")
    return found


def test_a_missing_target_is_found(tmp_path):
    (tmp_path / "a.md").write_text("[b](b.md) [here](#x) [web](https://example.org) ![f](figures/f.png)")
    (tmp_path / "b.md").write_text("[a](a.md)")
    assert missing_links(tmp_path) == ["a.md: figures/f.png"]


def test_no_leaderboard_page_links_to_a_missing_file():
    assert not missing_links(ROOT / "leaderboards"), "\n".join(missing_links(ROOT / "leaderboards"))
