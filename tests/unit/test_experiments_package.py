"""The papers' experiments are a distribution of their own (netdp-experiments, the folder
experiments/ of a checkout), which a node does not install. Without it `netdp reproduce` says in one
line what to install and exits with status 2, without a traceback, and the rest of the command
line (its help included) works; with it, `netdp reproduce --help` lists the experiments."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import netdp_experiments
from netdp_node import cli

ROOT = Path(__file__).resolve().parents[2]

# The command line in a fresh interpreter where `import netdp_experiments` fails as it does when
# the distribution is not installed (ModuleNotFoundError naming it).
WITHOUT = (
    "import sys; sys.modules['netdp_experiments'] = None; "
    "from netdp_node.cli import main; sys.exit(main(sys.argv[1:]))"
)


def _netdp_without_experiments(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", WITHOUT, *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
        cwd=ROOT,
    )


@pytest.mark.parametrize(
    "args", [("reproduce", "list"), ("reproduce", "network-dp-fig1a", "--quick")]
)
def test_reproduce_without_the_experiments_says_what_to_install(args, tmp_path):
    out = _netdp_without_experiments(*args, *(["--out", str(tmp_path)] if len(args) > 2 else []))
    assert out.returncode == 2, out.stderr
    assert out.stderr.splitlines() == [
        "netdp reproduce: the papers' experiments are not installed; from a netdp checkout: "
        "pip install ./experiments"
    ]
    assert out.stdout == ""
    assert not any(tmp_path.iterdir())  # nothing written


def test_help_works_without_the_experiments():
    top = _netdp_without_experiments("--help")
    assert top.returncode == 0, top.stderr
    assert "netdp reproduce NAME" in top.stdout and "Traceback" not in top.stderr


def test_reproduce_help_without_the_experiments_says_what_to_install():
    sub = _netdp_without_experiments("reproduce", "--help")
    assert sub.returncode == 0, sub.stderr
    assert "pip install ./experiments" in sub.stdout
    assert "network-dp-fig1a" not in sub.stdout


def test_reproduce_help_lists_the_installed_experiments(capsys):
    with pytest.raises(SystemExit) as done:
        cli.main(["reproduce", "--help"])
    assert done.value.code == 0
    text = capsys.readouterr().out
    for name, (_, what) in netdp_experiments.EXPERIMENTS.items():
        assert f"  {name:<20} {what}" in text
    assert "pip install" not in text


def test_experiments_package_is_found_or_none(monkeypatch):
    assert cli.experiments_package() is netdp_experiments
    monkeypatch.setitem(sys.modules, "netdp_experiments", None)  # as if not installed
    assert cli.experiments_package() is None


def test_a_broken_experiments_package_is_not_taken_for_a_missing_one(monkeypatch, tmp_path):
    """A module the experiments need and do not find is that module's error, not "install the
    experiments" (which would send the user to reinstall what is there)."""
    fake = tmp_path / "netdp_experiments"
    fake.mkdir()
    (fake / "__init__.py").write_text("import netdp_no_such_module_for_this_test\n")
    monkeypatch.delitem(sys.modules, "netdp_experiments")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ModuleNotFoundError) as e:
        cli.experiments_package()
    assert e.value.name == "netdp_no_such_module_for_this_test"


def test_what_a_node_installs_leaves_the_experiments_out():
    """The netdp distribution's packages (pyproject.toml's find rule) and the Docker image (what
    it copies and installs) hold no experiment; the experiments' distribution holds nothing else."""
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    find_namespace_packages = pytest.importorskip("setuptools").find_namespace_packages

    def packages(where: Path) -> list[str]:
        find = tomllib.loads((where / "pyproject.toml").read_text())["tool"]["setuptools"]
        return find_namespace_packages(where=str(where), **find["packages"]["find"])

    node = packages(ROOT)
    assert {"netdp_node", "netdp_node.algorithms", "netdp_bootstrap"} <= set(node)
    assert not [p for p in node if "experiments" in p]
    assert set(packages(ROOT / "experiments")) == {"netdp_experiments"}
    dockerfile = (ROOT / "Dockerfile").read_text()
    copies = [ln.split()[1] for ln in dockerfile.splitlines() if ln.startswith("COPY")]
    assert copies and not [c for c in copies if c in (".", "./") or "experiments" in c]
    installs = [ln for ln in dockerfile.splitlines() if "pip install" in ln]
    assert installs and not [ln for ln in installs if "experiments" in ln]
