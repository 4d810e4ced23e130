"""Every page under docs/ is in mkdocs.yml's navigation, and every page the navigation names
exists: a page nobody can reach from the nav is a page nobody reads."""

from __future__ import annotations

import re

from tritonrepo.paths import REPO_ROOT

DOCS = REPO_ROOT / "docs"


def nav_pages() -> set[str]:
    text = (REPO_ROOT / "mkdocs.yml").read_text()
    nav = text[text.index("\nnav:") :]
    return set(re.findall(r":\s*([\w./-]+\.md)\s*$", nav, flags=re.M))


def test_every_page_is_in_the_nav_and_every_nav_entry_exists() -> None:
    pages = {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md")}
    listed = nav_pages()
    assert not pages - listed, f"pages missing from mkdocs.yml's nav: {sorted(pages - listed)}"
    assert not listed - pages, f"nav entries without a page: {sorted(listed - pages)}"
