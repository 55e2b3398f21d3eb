"""docker-compose.yml cannot drift from the CLI: it is the generator's output, and every service's
command line passes `--check` (flags and configuration validated without starting anything and
without the certificate files that the one-shot `pki` service creates)."""

from __future__ import annotations

import re
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
            return str(host / arg[len(target) :].lstrip("/"))
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
    assert (ROOT / "docker-compose.yml").read_text() == generate(), (
        "regenerate with: netdp compose -o docker-compose.yml"
    )


def test_every_service_command_passes_check(tmp_path, capsys):
    doc = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    assert set(doc["services"]) == {
        "pki",
        "bootstrap",
        "submit",
        *(f"node-{i}" for i in range(1, 9)),
    }
    for i in range(1, 9):
        svc = doc["services"][f"node-{i}"]
        assert {
            "type": "volume",
            "source": "pki",
            "target": "/certs",
            "read_only": True,
            "volume": {"subpath": f"node-{i}"},
        } in svc["volumes"]  # only its own identity
        assert f"ledger-node-{i}:/ledger" in svc["volumes"]  # its own ledger volume
    _check_all(doc, tmp_path, capsys)


def test_generated_faults_are_valid(tmp_path, capsys):
    text = generate(
        nodes=5,
        faults=[
            "node-3:drop=0.2,delay_ms=50,jitter_ms=10",
            "node-5:offline=2:5,10:3",
            "node-4:partition=node-1,node-2",
        ],
    )
    doc = yaml.safe_load(text)
    env3 = doc["services"]["node-3"]["environment"]
    assert env3 == {
        "NETDP_FAULT_DROP": "0.2",
        "NETDP_FAULT_DELAY_MS": "50",
        "NETDP_FAULT_JITTER_MS": "10",
    }
    plan = plan_from({}, env=doc["services"]["node-5"]["environment"])
    assert plan.offline == ((2.0, 5.0), (10.0, 3.0))
    assert plan_from({}, env=doc["services"]["node-4"]["environment"]).partition == {
        "node-1",
        "node-2",
    }
    _check_all(doc, tmp_path, capsys)


def test_walk_sum_compose_file_passes_check(tmp_path, capsys):
    doc = yaml.safe_load(
        generate(
            nodes=4, topology="complete", algorithm="walk-sum", faults=["node-2:crash_at_step=3"]
        )
    )
    cmd = doc["services"]["submit"]["command"]
    assert cmd[cmd.index("--algorithm") + 1] == "walk-sum" and "T=40" in cmd
    _check_all(doc, tmp_path, capsys)
    with pytest.raises(ConfigError):
        generate(algorithm="walk-sgd")


@pytest.mark.parametrize("algorithm,topology", [("muffliato", "hypercube"), ("inca", "complete")])
def test_gossip_compose_files_pass_check(algorithm, topology, tmp_path, capsys):
    doc = yaml.safe_load(
        generate(
            nodes=8,
            topology=topology,
            algorithm=algorithm,
            rounds=12,
            faults=["node-3:leave_at_step=4", "node-5:offline=20:5"],
        )
    )
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


# -- what a real `docker compose up` relies on (issue 13, defect 11) ------------------------------
def _seconds(text: str) -> float:
    units = {"ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(ms|s|m|h)", text)
    assert m, text
    return float(m.group(1)) * units[m.group(2)]


def test_images_are_built_never_pulled():
    """Every service runs the image built from the Dockerfile; none may be pulled (`netdp:latest`
    on a registry is not this project's image)."""
    doc = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    images = {svc["image"] for svc in doc["services"].values()}
    assert images == {"netdp:latest"}
    assert [n for n, s in doc["services"].items() if "build" in s] == ["pki"]
    for name, svc in doc["services"].items():
        assert svc.get("pull_policy") == "build", name


def test_dependents_wait_for_a_healthy_bootstrap_and_probe_works(capsys):
    import socket

    from netdp_node.compose import BOOTSTRAP_PORT, PEER_PORT

    doc = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    svcs = doc["services"]
    for name, svc in svcs.items():
        for dep, cond in svc.get("depends_on", {}).items():
            assert cond["condition"] != "service_started", (name, dep)
            if dep == "bootstrap":
                assert cond["condition"] == "service_healthy", name
    probes = {"bootstrap": BOOTSTRAP_PORT, **{f"node-{i}": PEER_PORT for i in range(1, 9)}}
    for name, port in probes.items():
        hc = svcs[name]["healthcheck"]
        assert hc["test"][:3] == ["CMD", "netdp", "probe"], name
        assert hc["test"][3] == f"127.0.0.1:{port}"
        assert _seconds(hc["start_interval"]) <= 2 and _seconds(hc["start_period"]) >= 60
    # The health check's own command, against a port that is served and one that is not.
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen()
        served = srv.getsockname()[1]
        assert main(["probe", f"127.0.0.1:{served}"]) == 0
    assert main(["probe", f"127.0.0.1:{served}", "--timeout", "2"]) == 1  # closed now
    assert f"127.0.0.1:{served}" in capsys.readouterr().err


def test_daemons_get_a_stop_grace_period_above_their_shutdown():
    """Docker kills a container stop_grace_period after SIGTERM; a node's own shutdown takes its
    server's grace period plus closing links and the ledger, so the margin must be ample (Docker's
    default, 10 s, is what the file must exceed)."""
    from netdp_bootstrap.server import BootstrapConfig
    from netdp_node.daemon import NodeConfig

    doc = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    node_grace = NodeConfig.__dataclass_fields__["grace"].default
    boot_grace = BootstrapConfig.__dataclass_fields__["grace"].default
    for name, svc in doc["services"].items():
        if name in ("pki", "submit"):
            continue
        own = boot_grace if name == "bootstrap" else node_grace
        assert _seconds(svc["stop_grace_period"]) >= max(10 * own, 20), name


def test_submit_retries_reattach_to_one_job_id():
    """`restart: on-failure` restarts the submitter: each attempt must carry the same --job-id (the
    bootstrap then returns the existing job), and another spec must get another id."""
    doc = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    sub = doc["services"]["submit"]
    assert sub["restart"].startswith("on-failure")
    cmd = sub["command"]
    job_id = cmd[cmd.index("--job-id") + 1]
    assert (
        main(
            ["job", "submit", "--bootstrap", "b:1", "--certs", "/x", "--job-id", job_id, "--check"]
        )
        == 0
    )
    again = yaml.safe_load(generate())["services"]["submit"]["command"]
    assert again[again.index("--job-id") + 1] == job_id
    other = yaml.safe_load(generate(rounds=11))["services"]["submit"]["command"]
    assert other[other.index("--job-id") + 1] != job_id
    bigger = yaml.safe_load(generate(nodes=9))["services"]["submit"]["command"]
    assert bigger[bigger.index("--job-id") + 1] != job_id


def test_header_documents_versions_and_how_to_wait():
    head = [
        ln for ln in (ROOT / "docker-compose.yml").read_text().splitlines() if ln.startswith("#")
    ]
    text = "\n".join(head)
    assert "Docker Engine >= 26.0" in text and "Compose >= 2.26" in text
    assert "docker compose up -d --build && docker compose wait submit" in text


def test_compose_for_16_nodes_writes_its_data_files(tmp_path, capsys, monkeypatch):
    """`netdp compose --nodes 16 -o FILE` writes the value files the file mounts (relative to the
    file's folder, as Compose resolves them), keeps existing ones, and every node's command then
    passes --check with its data."""
    out = tmp_path / "proj" / "docker-compose.yml"
    out.parent.mkdir()
    data = out.parent / "deploy" / "compose" / "data"
    data.mkdir(parents=True)
    (data / "node-1.txt").write_text("0.25\n")  # the user's own value: kept
    monkeypatch.chdir(tmp_path)  # not the file's folder
    assert main(["compose", "--nodes", "16", "-o", str(out)]) == 0
    assert "15 missing value file(s)" in capsys.readouterr().err
    assert (data / "node-1.txt").read_text() == "0.25\n"
    from netdp_node.data import load_values

    for i in range(2, 17):
        assert list(load_values(data / f"node-{i}.txt")) == [((i - 1) % 10 + 1) / 10]
    doc = yaml.safe_load(out.read_text())
    for i in range(1, 17):
        argv = [a.replace("/data/", f"{data}/") for a in doc["services"][f"node-{i}"]["command"]]
        assert main([*argv, "--check"]) == 0, capsys.readouterr().err
        capsys.readouterr()
    # again: nothing to write
    assert main(["compose", "--nodes", "16", "-o", str(out)]) == 0
    assert "missing value file" not in capsys.readouterr().err


def test_committed_data_covers_the_committed_file():
    doc = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    nodes = [n for n in doc["services"] if n.startswith("node-")]
    for n in nodes:
        assert (ROOT / "deploy" / "compose" / "data" / f"{n}.txt").is_file(), n


def test_real_compose_accepts_the_file_when_installed():
    """With a Docker Compose v2 binary on PATH (`docker compose` or `docker-compose`), its own
    parser must accept the file (`config --quiet` needs no daemon). Skipped where there is none."""
    import shutil
    import subprocess

    cmd = None
    if (
        shutil.which("docker")
        and subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0
    ):
        cmd = ["docker", "compose"]
    elif shutil.which("docker-compose"):
        v = subprocess.run(["docker-compose", "version"], capture_output=True, text=True)
        if v.returncode == 0 and " v2." in v.stdout:
            cmd = ["docker-compose"]
    if cmd is None:
        pytest.skip("no Docker Compose v2 on PATH")
    r = subprocess.run(
        [*cmd, "-f", str(ROOT / "docker-compose.yml"), "config", "--quiet"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize(
    "algorithm,topology",
    [
        ("ring-sum", "ring"),
        ("ring-sum-r", "ring"),
        ("walk-sum", "complete"),
        ("muffliato", "hypercube"),
        ("muffliato", "ring"),
        ("inca", "complete"),
    ],
)
def test_the_bootstrap_accepts_every_generated_job(algorithm, topology, tmp_path):
    """--check validates the submitter's flags only; the job itself is the bootstrap's to accept.
    The submit command of each generated file, as the real bootstrap service builds it into a job
    for 8 registered nodes (the same code as SubmitJob, without the network)."""
    import json

    from netdp.v1 import bootstrap_pb2
    from netdp_bootstrap.service import BootstrapService
    from netdp_bootstrap.store import Store
    from netdp_node.cli import build_parser
    from netdp_node.security import pki

    pki.init_ca(tmp_path / "pki")
    store = Store(tmp_path / "state")
    try:
        for i in range(1, 9):
            store.register(f"node-{i}", f"node-{i}:7601", 1000 + i)
        svc = BootstrapService(store, (tmp_path / "pki" / "ca.pem").read_bytes())
        doc = yaml.safe_load(generate(nodes=8, topology=topology, algorithm=algorithm, rounds=6))
        a = build_parser().parse_args(doc["services"]["submit"]["command"])
        req = bootstrap_pb2.SubmitJobRequest(
            algorithm=a.algorithm,
            params_json=json.dumps(dict(a.param or [])),
            topology_kind=a.topology or "",
            job_id=a.job_id,
        )
        job = svc.make_job(req)
        assert job.job_id == a.job_id and len(job.participants) == 8
        if algorithm == "muffliato":
            assert json.loads(job.params_json)["graph"] == topology
        elif algorithm != "ring-sum" or topology != "ring":
            assert job.topology.kind == topology
    finally:
        store.close()
