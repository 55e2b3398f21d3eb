"""The README and the documentation site stay short, linked and self-contained.

* README.md has at most 200 lines (the details live in docs/);
* every relative link in README.md, REPRODUCTION.md and docs/**/*.md points to a file of the
  repository, and an anchor (`page.md#section`) to a heading of that page;
* no page cites a file outside the repository (the private paper specifications the project was
  built from, or their folder): papers are cited by authors, venue and theorem.
"""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
README_MAX_LINES = 200


def doc_files() -> list[Path]:
    files = [README, *sorted((ROOT / "docs").rglob("*.md"))]
    if (ROOT / "REPRODUCTION.md").exists():
        files.append(ROOT / "REPRODUCTION.md")
    return files


# [text](target) and ![alt](target); the target ends at white space or ')'
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^\s*(```|~~~)")
INLINE_CODE = re.compile(r"`[^`]*`")


def _prose(text: str) -> str:
    """The text outside fenced code blocks and inline code (where links are not links)."""
    out, in_fence = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            in_fence = not in_fence
            continue
        if not in_fence:
            out.append(INLINE_CODE.sub("", line))
    return "\n".join(out)


def links(text: str) -> list[str]:
    return [m.group(1) for m in LINK.finditer(_prose(text))]


def _slug_mkdocs(title: str) -> str:
    """Python-Markdown's toc slugify (what mkdocs builds the anchors with)."""
    value = unicodedata.normalize("NFKD", title).encode("ascii", "ignore").decode("ascii")
    value = re.sub(r"[^\w\s-]", "", value).strip().lower()
    return re.sub(r"[-\s]+", "-", value)


def _slug_github(title: str) -> str:
    """GitHub's heading anchors (what README links resolve to on the repository's page)."""
    value = re.sub(r"[^\w\- ]", "", title.strip().lower())
    return value.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    found: set[str] = set()
    in_fence = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line):
            in_fence = not in_fence
            continue
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m and not in_fence:
            title = re.sub(r"[`*_]", "", m.group(1))
            found |= {_slug_mkdocs(title), _slug_github(title)}
    return found


def broken_links(path: Path, root: Path = ROOT) -> list[str]:
    """The relative links of one page that do not resolve inside the repository."""
    bad = []
    for target in links(path.read_text(encoding="utf-8")):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE):  # http:, https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        dest = path if not file_part else (path.parent / file_part).resolve()
        if not dest.is_relative_to(root):
            bad.append(f"{target} (outside the repository)")
        elif not dest.exists():
            bad.append(f"{target} (no such file)")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            bad.append(f"{target} (no heading with anchor #{anchor} in {dest.name})")
    return bad


# Files that exist only outside the repository: the private paper specifications and design notes.
SPEC_NAME = re.compile(
    r"[\w./-]*\b(?:network-dp|random-walks|muffliato|inca)(?:\.paper)?\.(?:md|txt)\b"
)
OUTSIDE = [
    re.compile(r"\.\./shared\b"),
    re.compile(r"/work/"),
    re.compile(r"\bpapers/[\w.-]+\.(?:md|txt)\b"),
    re.compile(r"\b(?:DESIGN|STYLE)\.md\b"),
    re.compile(r"\bspec(?:'s)? §"),
]


def outside_citations(path: Path, root: Path = ROOT) -> list[str]:
    """Mentions of files outside the repository (a spec file name counts unless it names a page
    of the repository, e.g. docs/algorithms/muffliato.md)."""
    text = path.read_text(encoding="utf-8")
    bad = [m.group(0) for rx in OUTSIDE for m in rx.finditer(text)]
    for m in SPEC_NAME.finditer(text):
        name = m.group(0).rstrip(".")
        if not any((base / name).resolve().exists() for base in (path.parent, root, root / "docs")):
            bad.append(name)
    return bad


def test_readme_is_short() -> None:
    n = len(README.read_text(encoding="utf-8").splitlines())
    assert n <= README_MAX_LINES, (
        f"README.md has {n} lines (at most {README_MAX_LINES}): move details to docs/"
    )


@pytest.mark.parametrize("path", doc_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(path: Path) -> None:
    assert broken_links(path) == []


@pytest.mark.parametrize("path", doc_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_citation_outside_the_repository(path: Path) -> None:
    assert outside_citations(path) == []


def test_every_page_is_in_the_site_navigation() -> None:
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    pages = [p.relative_to(ROOT / "docs").as_posix() for p in (ROOT / "docs").rglob("*.md")]
    assert pages and [p for p in pages if p not in nav] == []


# -- the checks themselves catch what they are meant to ----------------------------------------
def test_checks_catch_bad_pages(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "page.md").write_text("# A page\n\n## Faults and flags\n")
    readme = tmp_path / "README.md"
    readme.write_text(
        "see [ok](docs/page.md#faults-and-flags), [gone](docs/nope.md), "
        "[anchor](docs/page.md#nope), [up](../elsewhere.md), [web](https://example.org)\n"
        "`[code](docs/nope.md)`\n"
        "spec `network-dp.md` §4.11, data in ../shared/data, and docs/algorithms/inca.md\n"
    )
    assert broken_links(readme, tmp_path) == [
        "docs/nope.md (no such file)",
        "docs/page.md#nope (no heading with anchor #nope in page.md)",
        "../elsewhere.md (outside the repository)",
    ]
    assert sorted(outside_citations(readme, tmp_path)) == [
        "../shared",
        "docs/algorithms/inca.md",
        "network-dp.md",
    ]
