"""Layers only point down (netdp issue 14): cli -> tools -> daemon / bootstrap -> runtime ->
transport -> wire -> protocols -> privacy (pure) / ledger / security, and everything may use the
base (errors, retry, waiting, limits, lazy).

The imports are read from the source with `ast`, at every depth: module level, inside functions,
and under `if TYPE_CHECKING:` (a type is a dependency too). An import inside a function is allowed
only when it says why on its line or the line above (`# lazy: start-up cost`): a local import may
save start-up time, never hide a cycle. The last tests start a fresh interpreter and check which
heavy packages a node's import actually loads (module names, never timings)."""

from __future__ import annotations

import ast
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: each package and the folder it lives in (the experiments are a distribution of their own)
PACKAGES = {
    "netdp_node": ROOT,
    "netdp_bootstrap": ROOT,
    "netdp_experiments": ROOT / "experiments",
}

# The layer of each module, by the longest dotted prefix that names it.
GROUP_OF = {
    "netdp": "generated",
    "netdp_node": "base",  # the package itself: its version
    "netdp_node.errors": "base",
    "netdp_node.retry": "base",
    "netdp_node.waiting": "base",
    "netdp_node.limits": "base",
    "netdp_node.lazy": "base",
    "netdp_node.graphs": "base",
    "netdp_node.vclock": "base",
    "netdp_node.memledger": "ledger",
    "netdp_node.privacy": "privacy",
    "netdp_node.ledger": "ledger",
    "netdp_node.security": "security",
    "netdp_node.faults": "faults",
    "netdp_node.data": "data",
    "netdp_node.datasets": "data",
    "netdp_node.protocols": "protocols",
    # an algorithm's folder spans layers: its parameters and engine are sans-IO protocol code, the
    # record and hooks that tie them to accountants and tools sit just above
    "netdp_node.algorithms": "algorithms",
    "netdp_node.wire": "wire",
    "netdp_node.transport": "transport",
    "netdp_node.runtime": "runtime",
    "netdp_node.daemon": "daemon",
    "netdp_node.bootstrap_client": "daemon",
    "netdp_node.host": "daemon",
    "netdp_node.jobwatch": "daemon",
    "netdp_bootstrap": "bootstrap",
    "netdp_node.simulate": "tools",
    "netdp_node.report": "tools",
    "netdp_node.audit": "tools",
    "netdp_node.jobs": "tools",
    "netdp_node.cluster": "tools",
    "netdp_node.demo": "tools",
    "netdp_node.compose": "tools",
    "netdp_node.k8s": "tools",
    "netdp_node.watch": "tools",
    "netdp_node.progress": "tools",
    "netdp_node.plan": "tools",
    # the papers' experiments (experiments/netdp_experiments, the netdp-experiments distribution)
    "netdp_experiments": "tools",
    "netdp_node.cli": "cli",
}

_LOW = {"base", "generated"}
# What each layer may import (besides the standard library and third-party packages).
MAY_IMPORT = {
    "base": {"base"},
    "generated": {"generated"},
    "privacy": {"base", "privacy"},
    "ledger": {"base", "ledger"},
    "security": _LOW | {"security"},
    "faults": {"base", "faults"},
    "data": {"base", "data"},
    "protocols": {"base", "privacy", "protocols"},
    "algorithms": {"base", "privacy", "data", "faults", "protocols", "algorithms"},
    "wire": _LOW | {"protocols", "wire"},
    "transport": _LOW | {"protocols", "wire", "security", "faults", "transport"},
    "runtime": _LOW
    | {"privacy", "ledger", "faults", "protocols", "algorithms", "wire", "transport", "runtime"},
    "daemon": _LOW
    | {
        "privacy",
        "ledger",
        "security",
        "faults",
        "data",
        "protocols",
        "algorithms",
        "wire",
        "transport",
        "runtime",
        "daemon",
    },
    # the bootstrap shares the base, the PKI and mTLS (security), the algorithm registry and the
    # wire format with the nodes; it never reaches into a node's transport, runtime or daemon
    "bootstrap": _LOW
    | {"privacy", "security", "data", "protocols", "algorithms", "wire", "bootstrap"},
    "tools": set(GROUP_OF.values()) - {"cli"},
    "cli": set(GROUP_OF.values()),
}

# Third-party and standard-library packages a layer must not import at all.
PURE = {"grpc", "asyncio", "socket", "sqlite3", "subprocess", "threading", "matplotlib"}
FORBIDDEN = {
    "base": {"matplotlib"},
    "privacy": PURE,
    "protocols": PURE | {"time", "random"},  # sans-IO: no clock, no global RNG
    "algorithms": PURE,
    "ledger": {"grpc", "matplotlib"},
    "security": {"matplotlib"},
    "wire": {"matplotlib", "asyncio", "socket"},
    "transport": {"matplotlib"},
    "runtime": {"matplotlib"},
    "daemon": {"matplotlib"},
    "bootstrap": {"matplotlib"},
}
# Heavy packages a node does not need to start: never imported at module level on its import path
# (a layer below "tools"); where a function needs one it imports it there, marked lazy.
HEAVY = {"scipy", "matplotlib", "networkx"}
NODE_PATH = {
    "base",
    "privacy",
    "ledger",
    "security",
    "faults",
    "data",
    "protocols",
    "algorithms",
    "wire",
    "transport",
    "runtime",
    "daemon",
}


@dataclass(frozen=True)
class Import:
    module: str  # the importing module
    target: str  # the imported module (dotted), or "pkg.name" for `from pkg import name`
    line: int
    local: bool  # inside a function
    marked: bool  # says why it is local (`# lazy ...`)


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


#: modules of an algorithm's folder (netdp_node.algorithms.<family>.<module>) in the protocols layer
PROTOCOL_MODULES = {"engine", "params"}


def group_of(name: str) -> str | None:
    parts = name.split(".")
    if (
        parts[:2] == ["netdp_node", "algorithms"]
        and len(parts) >= 4
        and parts[3] in PROTOCOL_MODULES
    ):
        return "protocols"
    for i in range(len(parts), 0, -1):
        g = GROUP_OF.get(".".join(parts[:i]))
        if g is not None:
            return g
    return None


def _marked(lines: list[str], node: ast.stmt) -> bool:
    here = lines[node.lineno - 1 : (node.end_lineno or node.lineno)]
    above = lines[node.lineno - 2] if node.lineno >= 2 else ""
    return any("# lazy" in s for s in here) or above.strip().startswith("# lazy")


def imports_of(path: Path, root: Path = ROOT) -> list[Import]:
    return parse_imports(path.read_text(), module_name(path, root), path.name == "__init__.py")


def parse_imports(src: str, me: str, is_package: bool = False) -> list[Import]:
    lines = src.splitlines()
    tree = ast.parse(src)
    package = me if is_package else me.rpartition(".")[0]
    local: set[int] = set()
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            local.update(id(n) for n in ast.walk(fn) if isinstance(n, (ast.Import, ast.ImportFrom)))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            # `from pkg import name` may name a submodule: keep both, the longer decides the layer
            targets = [f"{mod}.{a.name}" for a in node.names]
        else:
            continue
        for t in targets:
            out.append(Import(me, t, node.lineno, id(node) in local, _marked(lines, node)))
    return out


def all_imports() -> list[Import]:
    files = sorted((p, root) for pkg, root in PACKAGES.items() for p in (root / pkg).rglob("*.py"))
    assert files, "no sources found"
    return [imp for f, root in files for imp in imports_of(f, root)]


IMPORTS = all_imports()


def where(imp: Import) -> str:
    return f"{imp.module}:{imp.line} imports {imp.target}{' (in a function)' if imp.local else ''}"


def test_every_module_has_a_layer():
    modules = {imp.module for imp in IMPORTS}
    assert not sorted(m for m in modules if group_of(m) is None)


def test_no_module_imports_a_higher_layer():
    bad = []
    for imp in IMPORTS:
        mine, theirs = group_of(imp.module), group_of(imp.target)
        if theirs is None or mine is None:
            continue  # standard library or third party
        if theirs not in MAY_IMPORT[mine]:
            bad.append(f"{where(imp)}: layer {mine} may not import layer {theirs}")
    assert not bad, "\n".join(bad)


def test_bootstrap_does_not_import_node_internals():
    bad = [
        where(i)
        for i in IMPORTS
        if i.module.startswith("netdp_bootstrap")
        and i.target.startswith(
            (
                "netdp_node.transport",
                "netdp_node.runtime",
                "netdp_node.daemon",
                "netdp_node.bootstrap_client",
                "netdp_node.cli",
                "netdp_node.ledger",
            )
        )
    ]
    assert not bad, "\n".join(bad)


#: the one place a node's code names the experiments' package: the command line's lookup for
#: `netdp reproduce` (cli.experiments_package), inside a function, which copes with its absence
EXPERIMENTS_LOOKUP = "netdp_node.cli"


def test_node_code_does_not_import_the_experiments():
    """The experiments (the netdp-experiments distribution) may import netdp_node, never the
    reverse: a node installs netdp alone. Only the command line looks the package up, lazily."""
    bad = [
        where(i)
        for i in IMPORTS
        if not i.module.startswith("netdp_experiments")
        and i.target.split(".")[0] == "netdp_experiments"
        and not (i.module == EXPERIMENTS_LOOKUP and i.local and i.marked)
    ]
    assert not bad, "\n".join(bad)
    assert any(
        i.module == EXPERIMENTS_LOOKUP and i.target == "netdp_experiments" for i in IMPORTS
    ), "the command line no longer looks the experiments up: update EXPERIMENTS_LOOKUP"


def test_pure_layers_import_no_io():
    bad = []
    for imp in IMPORTS:
        top = imp.target.split(".")[0]
        if group_of(imp.target) is None and top in FORBIDDEN.get(group_of(imp.module) or "", ()):
            bad.append(f"{where(imp)}: {group_of(imp.module)} may not import {top}")
    assert not bad, "\n".join(bad)


def test_heavy_packages_only_lazily_on_a_nodes_path():
    bad = [
        where(i)
        for i in IMPORTS
        if group_of(i.module) in NODE_PATH and not i.local and i.target.split(".")[0] in HEAVY
    ]
    assert not bad, "\n".join(bad)


def test_function_local_imports_say_why():
    """An import inside a function hides a dependency from the top of the file; it is kept only
    to save start-up cost, and then says so (`# lazy: start-up cost`)."""
    bad = [where(i) for i in IMPORTS if i.local and not i.marked]
    assert not bad, f"{len(bad)} unmarked function-local imports:\n" + "\n".join(bad)


def test_the_checker_sees_what_it_checks():
    """The parser finds imports at every depth (module level, `if TYPE_CHECKING:`, functions),
    resolves relative ones, tells marked local imports from unmarked ones, and the map refuses
    what the layering forbids."""
    src = (
        "from __future__ import annotations\nfrom typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from netdp_node.runtime import NodeRuntime\n"
        "def f():\n    from .ring import engine\n    import scipy  # lazy: start-up cost\n"
        "async def g():\n    # lazy: start-up cost\n    from ..privacy import (\n"
        "        composition,\n    )\n"
    )
    by_target = {i.target: i for i in parse_imports(src, "netdp_node.algorithms.probe")}
    assert set(by_target) == {
        "__future__.annotations",
        "typing.TYPE_CHECKING",
        "netdp_node.runtime.NodeRuntime",
        "netdp_node.algorithms.ring.engine",
        "scipy",
        "netdp_node.privacy.composition",
    }
    assert not by_target["netdp_node.runtime.NodeRuntime"].local
    assert group_of("netdp_node.runtime.NodeRuntime") == "runtime"
    assert "runtime" not in MAY_IMPORT[group_of("netdp_node.algorithms.probe") or ""]
    assert group_of("netdp_node.algorithms.walk.engine") == "protocols"
    ring = by_target["netdp_node.algorithms.ring.engine"]
    assert ring.local and not ring.marked
    assert by_target["scipy"].local and by_target["scipy"].marked
    assert by_target["netdp_node.privacy.composition"].marked
    assert group_of("netdp_node.protocols") == "protocols" and group_of("json") is None
    # the package's own modules are all read
    assert {
        "netdp_node.daemon",
        "netdp_node.privacy.composition",
        "netdp_bootstrap.service",
        "netdp_experiments",
        "netdp_experiments.rw_table1",
    } <= {i.module for i in IMPORTS}
    assert group_of("netdp_experiments.rw_table1") == "tools"


def test_lazy_module_imports_on_first_use():
    """`lazy_module` binds a name without importing; the first attribute read imports it, and
    keeps the attribute on the stand-in (a later read is an ordinary attribute lookup)."""
    code = (
        "import sys; from netdp_node.lazy import lazy_module; "
        "m = lazy_module('wave'); a = 'wave' in sys.modules; "
        "f = m.open; print(a, 'wave' in sys.modules, f is sys.modules['wave'].open, "
        "vars(m) == {'open': f} and m.open is f)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "True", "True", "True"]


@pytest.mark.parametrize(
    "module", ["netdp_node.daemon", "netdp_node.cli", "netdp_bootstrap.server"]
)
def test_starting_loads_no_heavy_package(module):
    """What a node, the bootstrap or the command line loads when it starts: no scipy, matplotlib or
    networkx (they cost seconds of CPU and tens of MB; the code that needs them imports them)."""
    code = (
        f"import sys, {module}; "
        "print(' '.join(m for m in ('scipy', 'matplotlib', 'networkx') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == []
