"""docker-compose.yml cannot drift from the CLI: it is the generator's output, and every service's
command line passes `--check` (flags and configuration validated without starting anything and
without the certificate files that the one-shot `pki` service creates)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from netdp_node.cli import main
from netdp_node.compose import FAULT_KEYS, generate, services
from netdp_node.errors import ConfigError
from netdp_node.faults import plan_from

pytestmark = pytest.mark.timeout(60)
ROOT = Path(__file__).resolve().parents[2]


def _host_path(arg: str, binds: dict[str, Path]) -> str:
    """Translate a container path of a bind mount to the host path (named volumes stay as they
    are: they do not exist before `docker compose up`)."""
    for target, host in binds.items():
        if arg == target or arg.startswith(target + "/"):
            return str(host / arg[len(target):].lstrip("/"))
    return arg


def _check_all(doc: dict, tmp_path: Path, capsys) -> None:
    for name, svc in doc["services"].items():
        binds = {}
        for v in svc.get("volumes", []):
            if isinstance(v, str) and v.startswith("./"):
                host, target = v.split(":")[:2]
                binds[target] = ROOT / host
        argv = [_host_path(a, binds) for a in svc["command"]]
        # named volumes (/pki, /certs, /state, /ledger, /results) do not exist on this machine
        code = main([*argv, "--check"])
        err = capsys.readouterr().err
        assert code == 0, f"service {name}: `netdp {' '.join(argv)} --check` failed: {err}"
        assert err.startswith("ok:"), (name, err)
        env = svc.get("environment", {})
        assert set(env) <= set(FAULT_KEYS.values())
        plan_from({}, env=env)  # the node would accept these variables


def test_committed_file_is_the_generator_output():
    assert (ROOT / "docker-compose.yml").read_text() == generate(), \
        "regenerate with: netdp compose -o docker-compose.yml"


def test_every_service_command_passes_check(tmp_path, capsys):
    doc = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    assert set(doc["services"]) == {"pki", "bootstrap", "submit", *(f"node-{i}" for i in
                                                                    range(1, 9))}
    for i in range(1, 9):
        svc = doc["services"][f"node-{i}"]
        assert {"type": "volume", "source": "pki", "target": "/certs", "read_only": True,
                "volume": {"subpath": f"node-{i}"}} in svc["volumes"]  # only its own identity
        assert f"ledger-node-{i}:/ledger" in svc["volumes"]  # its own ledger volume
    _check_all(doc, tmp_path, capsys)


def test_generated_faults_are_valid(tmp_path, capsys):
    text = generate(nodes=5, faults=["node-3:drop=0.2,delay_ms=50,jitter_ms=10",
                                     "node-5:offline=2:5,10:3", "node-4:partition=node-1,node-2"])
    doc = yaml.safe_load(text)
    env3 = doc["services"]["node-3"]["environment"]
    assert env3 == {"NETDP_FAULT_DROP": "0.2", "NETDP_FAULT_DELAY_MS": "50",
                    "NETDP_FAULT_JITTER_MS": "10"}
    plan = plan_from({}, env=doc["services"]["node-5"]["environment"])
    assert plan.offline == ((2.0, 5.0), (10.0, 3.0))
    assert plan_from({}, env=doc["services"]["node-4"]["environment"]).partition == {
        "node-1", "node-2"}
    _check_all(doc, tmp_path, capsys)


def test_walk_sum_compose_file_passes_check(tmp_path, capsys):
    doc = yaml.safe_load(generate(nodes=4, topology="complete", algorithm="walk-sum",
                                  faults=["node-2:crash_at_step=3"]))
    cmd = doc["services"]["submit"]["command"]
    assert cmd[cmd.index("--algorithm") + 1] == "walk-sum" and "T=40" in cmd
    _check_all(doc, tmp_path, capsys)
    with pytest.raises(ConfigError):
        generate(algorithm="walk-sgd")


@pytest.mark.parametrize("algorithm,topology", [("muffliato", "hypercube"), ("inca", "complete")])
def test_gossip_compose_files_pass_check(algorithm, topology, tmp_path, capsys):
    doc = yaml.safe_load(generate(nodes=8, topology=topology, algorithm=algorithm, rounds=12,
                                  faults=["node-3:leave_at_step=4", "node-5:offline=20:5"]))
    cmd = doc["services"]["submit"]["command"]
    assert cmd[cmd.index("--algorithm") + 1] == algorithm and "T=12" in cmd
    _check_all(doc, tmp_path, capsys)


def test_bad_fault_specs_are_refused():
    with pytest.raises(ConfigError):
        services(4, "ring", 3, ["node-9:drop=0.1"], "img", "./d")
    with pytest.raises(ConfigError):
        services(4, "ring", 3, ["node-2:explode=1"], "img", "./d")


def test_pki_setup_is_idempotent(tmp_path):
    from netdp_node.security import pki

    made = pki.setup(tmp_path, nodes=["node-1", "node-2"], bootstrap_hosts=["bootstrap"])
    assert made == ["operator", "bootstrap", "node-1", "node-2"]
    ident = pki.load_identity(tmp_path / "node-2")
    assert ident.node_id == "node-2" and ident.role == "node"
    assert pki.setup(tmp_path, nodes=["node-1", "node-2", "node-3"]) == ["node-3"]
    assert pki.load_identity(tmp_path / "node-2").serial == ident.serial  # not re-issued
