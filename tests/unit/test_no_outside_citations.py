"""No string, docstring or comment cites a file outside the repository.

The project's code once cited the private implementation specifications it was built from (by file
name and section, or by the folder they lived in), which readers of the repository do not have.
Papers are cited by authors, venue and theorem, and netdp's own notes by their docs page (e.g.
docs/errata.md, whose table labels E1, E2, ... are the only erratum labels the code may use).

Checked: the string constants of the packages, the experiments' included (what a user can see;
docstrings excluded), and the docstrings and comments of the packages, tests/, benchmarks/ and
scripts/.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("netdp_node", "netdp_bootstrap", "experiments/netdp_experiments")
SOURCES = (*PACKAGES, "tests", "benchmarks", "scripts")
# the private specification files and the folder they lived in; docs/algorithms/muffliato.md and
# docs/algorithms/inca.md are the repository's own pages and may be cited
OUTSIDE = re.compile(
    r"(?<![\w/])(network-dp\.md|muffliato\.md|random-walks\.md|inca\.md)|\.\./shared|spec §"
)
# in docstrings and comments, also the specifications' own vocabulary: their section items and
# steps, their tags, their ambiguity labels, "Spec:" headers and "the spec's" numbers
NOTE_OUTSIDE = re.compile(
    r"(?<![\w/])(?:network-dp|muffliato|random-walks|inca)\.(?:md|txt)\b"
    r"|\.\./shared|shared/papers"
    r"|\b[Ss]pec(?:'s)?\s+§|\bSpec:|\bthe spec's\b|\"the spec\""
    r"|§\s?\d+(?:\.\d+)?(?:\([a-z]\))?\s+(?:items?|steps?)\s+\d"
    r"|\b[Aa]mbiguit(?:y|ies) A\d+"
    r"|\[(?:CHECK|CODE|NOTE|PAPER)\]"
)
ERRATUM = re.compile(r"\bE(\d{1,2})\b")
# this file names the patterns it looks for
SELF = Path(__file__).resolve()


def _docstrings(tree: ast.AST) -> dict[int, ast.Constant]:
    out = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                out[id(body[0].value)] = body[0].value
    return out


def _modules(dirs: tuple[str, ...]) -> list[Path]:
    missing = [d for d in dirs if not (ROOT / d).is_dir()]
    assert not missing, f"{missing} moved: update PACKAGES / SOURCES"
    return [
        path
        for d in dirs
        for path in sorted((ROOT / d).rglob("*.py"))
        if "_pb2" not in path.name and path.resolve() != SELF
    ]


def offending(*, docstrings: bool) -> list[str]:
    """String constants of the packages (docstrings only, or everything but docstrings) that name
    a specification file."""
    found = []
    for path in _modules(PACKAGES):
        source = path.read_text(encoding="utf-8")
        if not OUTSIDE.search(source):  # fast path: most modules mention none
            continue
        tree = ast.parse(source)
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


def notes(source: str) -> list[tuple[int, str]]:
    """(line, text) of every docstring and comment of a module."""
    out = [(c.lineno, str(c.value)) for c in _docstrings(ast.parse(source)).values()]
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            out.append((tok.start[0], tok.string))
    return out


def errata_labels() -> set[str]:
    """The labels of docs/errata.md's tables (first column: E1, E2, ...)."""
    text = (ROOT / "docs" / "errata.md").read_text(encoding="utf-8")
    return set(re.findall(r"^\| (E\d+) \|", text, flags=re.MULTILINE))


def note_citations(source: str, labels: set[str]) -> list[tuple[int, str]]:
    """(line, hit) of every specification reference in the module's docstrings and comments."""
    if not NOTE_OUTSIDE.search(source) and all(
        m.group(0) in labels for m in ERRATUM.finditer(source)
    ):
        return []  # fast path: nothing that could offend, anywhere in the file
    bad = []
    for line, text in notes(source):
        bad += [(line, m.group(0)) for m in NOTE_OUTSIDE.finditer(text)]
        bad += [(line, m.group(0)) for m in ERRATUM.finditer(text) if m.group(0) not in labels]
    return bad


def test_pattern_tells_outside_files_from_repository_pages() -> None:
    assert OUTSIDE.search("Theorem 1 (network-dp.md §3.1)")
    assert OUTSIDE.search("default $NETDP_DATA_DIR, then ../shared/data")
    assert OUTSIDE.search("a quirk (spec §4.2)")
    assert not OUTSIDE.search("see docs/algorithms/muffliato.md and docs/errata.md")
    assert not OUTSIDE.search("Cyffers & Bellet, AISTATS 2022, Theorem 1; erratum E1")


def test_note_pattern_catches_specification_references() -> None:
    labels = {"E1", "E22"}
    src = (
        '"""Algorithm 1 (spec §2.1, erratum E1).\n\nSpec: ../shared/papers/inca.md §4."""\n'
        "x = 1  # the walk (random-walks.md §7.1 items 1-2; ambiguity A3), E13\n"
        "y = 2  # muffliato.md §7.1 item 7; [CHECK] the spec's table\n"
        "z = 3  # §6 item 14: counts (`inca.md`)\n"
        'print("E99 is data, not a note")\n'
    )
    found = note_citations(src, labels)
    assert {line for line, _ in found} == {1, 4, 5, 6}
    assert {hit for _, hit in found} >= {
        "spec §",
        "Spec:",
        "../shared",
        "inca.md",
        "random-walks.md",
        "ambiguity A3",
        "E13",
        "muffliato.md",
        "[CHECK]",
        "the spec's",
        "§6 item 1",
    }
    ok = (
        '"""Theorem 2 of Cyffers & Bellet, AISTATS 2022 (docs/errata.md, E1, E22); Algorithm 1\n'
        'of the paper\'s §3.2; see docs/algorithms/inca.md."""\n'
        "spec = job.spec  # the job spec the nodes ran; E[D] is an expectation\n"
    )
    assert note_citations(ok, labels) == []


def test_errata_page_has_the_labels_the_code_uses() -> None:
    labels = errata_labels()
    assert {"E1", "E5", "E15", "E22"} <= labels


def test_no_user_visible_string_cites_a_file_outside_the_repository() -> None:
    found = offending(docstrings=False)
    assert not found, "strings citing files users do not have:\n" + "\n".join(found)


def test_no_docstring_or_comment_cites_a_file_outside_the_repository() -> None:
    labels = errata_labels()
    found = []
    for path in _modules(SOURCES):
        rel = path.relative_to(ROOT).as_posix()
        for line, hit in note_citations(path.read_text(encoding="utf-8"), labels):
            found.append(f"{rel}:{line}: {hit!r}")
    assert not found, (
        "docstrings/comments citing the private specifications or an erratum label that "
        "docs/errata.md does not have:\n" + "\n".join(found)
    )
