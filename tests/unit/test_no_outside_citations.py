"""No string a user can see cites a file outside the repository.

The project's code once cited the private implementation specifications it was built from
(`network-dp.md §3.1`, `../shared/data`, ...), which users do not have. Papers are cited by
authors, venue and theorem, and netdp's own notes by their docs page (e.g. docs/errata.md). This
test parses every module of the two packages and lists the string constants (f-string parts
included, docstrings excluded: `offending(docstrings=True)` lists those) that still name a
specification file.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("netdp_node", "netdp_bootstrap")
# the private specification files and the folder they lived in; docs/algorithms/muffliato.md and
# docs/algorithms/inca.md are the repository's own pages and may be cited
OUTSIDE = re.compile(
    r"(?<![\w/])(network-dp\.md|muffliato\.md|random-walks\.md|inca\.md)|\.\./shared|spec §"
)


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                out.add(id(body[0].value))
    return out


def offending(*, docstrings: bool) -> list[str]:
    found = []
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            if "_pb2" in path.name:
                continue
            tree = ast.parse(path.read_text(encoding="utf-8"))
            docs = _docstrings(tree)
            for node in ast.walk(tree):
                if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
                    continue
                if (id(node) in docs) != docstrings:
                    continue
                m = OUTSIDE.search(node.value)
                if m:
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {m.group(0)!r}")
    return found


def test_pattern_tells_outside_files_from_repository_pages() -> None:
    assert OUTSIDE.search("Theorem 1 (network-dp.md §3.1)")
    assert OUTSIDE.search("default $NETDP_DATA_DIR, then ../shared/data")
    assert OUTSIDE.search("a quirk (spec §4.2)")
    assert not OUTSIDE.search("see docs/algorithms/muffliato.md and docs/errata.md")
    assert not OUTSIDE.search("Cyffers & Bellet, AISTATS 2022, Theorem 1; erratum E1")


def test_no_user_visible_string_cites_a_file_outside_the_repository() -> None:
    found = offending(docstrings=False)
    assert not found, "strings citing files users do not have:\n" + "\n".join(found)
