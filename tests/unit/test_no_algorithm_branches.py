"""An algorithm is one unit (netdp issue 14): what differs between algorithms is looked up in its
record (`get_algorithm(name).hooks`), never switched on by name. Outside `netdp_node/algorithms/`
no code compares a literal algorithm name (`== "inca"`, `!= "ring-sum"`, `in ("walk-sum", ...)`,
`.startswith("muffliato")`). The sources are read with `ast`, so strings in messages and help
texts are not comparisons."""

from __future__ import annotations

import ast
from pathlib import Path

from netdp_node.algorithms import ALGORITHMS

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("netdp_node", "netdp_bootstrap", "experiments/netdp_experiments")
OWN = ROOT / "netdp_node" / "algorithms"

#: Files allowed to compare names for now, and why.
ALLOWED = {
    # labels of the paper figures' variants ("muffliato" vs "central" runs), not job algorithms
    "experiments/netdp_experiments/muffliato_common.py": "figure variant labels",
    "experiments/netdp_experiments/muffliato_fig1c.py": "figure variant labels",
}


def _names(node: ast.expr) -> list[str]:
    """The string constants of a literal (a string, or a tuple/list/set of them)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [s for e in node.elts for s in _names(e)]
    return []


def _is_name(s: str) -> bool:
    return s in ALGORITHMS


def _is_prefix(s: str) -> bool:
    """A prefix that picks out algorithms by name (`"muffliato"`, `"ring-"`, `"walk-"`)."""
    return len(s) >= 4 and any(name.startswith(s) for name in ALGORITHMS)


def comparisons(src: str) -> list[tuple[int, str]]:
    """(line, text) of every comparison of a literal algorithm name in the source."""
    out = []
    for node in ast.walk(ast.parse(src)):
        hit = False
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            for op, (left, right) in zip(node.ops, zip(sides, sides[1:])):
                if isinstance(op, (ast.Eq, ast.NotEq)):
                    hit |= any(_is_name(s) for s in _names(left) + _names(right))
                elif isinstance(op, (ast.In, ast.NotIn)) and isinstance(
                    right, (ast.Tuple, ast.List, ast.Set)
                ):
                    hit |= any(_is_name(s) for s in _names(right))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("startswith", "endswith")
            and node.args
        ):
            hit = any(_is_prefix(s) or _is_name(s) for s in _names(node.args[0]))
        if hit:
            out.append((node.lineno, ast.unparse(node)))
    return out


def test_the_detector_finds_what_it_looks_for():
    src = (
        'if a.algorithm == "inca": pass\n'
        'if "ring-sum" != alg: pass\n'
        'x = alg in ("walk-sum", "walk-histogram")\n'
        'y = spec["algorithm"].startswith("muffliato")\n'
        'z = name.startswith(("ring-", "x"))\n'
        # not comparisons of algorithm names
        'print("algorithm == inca")\n'
        'w = mode == "central"\n'
        'v = "inca" in names\n'
        'u = flag.startswith("--")\n'
    )
    assert [line for line, _ in comparisons(src)] == [1, 2, 3, 4, 5]


def test_no_algorithm_name_is_compared_outside_its_folder():
    bad = []
    for pkg in PACKAGES:
        assert (ROOT / pkg).is_dir(), f"{pkg} moved: update PACKAGES"
        for path in sorted((ROOT / pkg).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if path.is_relative_to(OWN) or rel in ALLOWED:
                continue
            found = sorted(comparisons(path.read_text()))
            bad += [f"{rel}:{line}: {text}" for line, text in found]
    assert not bad, (
        "ask the algorithm's record (get_algorithm(name).hooks) instead of comparing its name:\n"
        + "\n".join(bad)
    )
