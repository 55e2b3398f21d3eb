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


# -- hosts of M nodes (issue 15): `netdp compose --per-host M` ------------------------------------
HOSTS_EXAMPLE = ROOT / "deploy" / "compose" / "hosts-64.yml"
HOSTS_ARGS = dict(
    nodes=64,
    per_host=16,
    data_dir="./data",
    build_context="../..",
    file="deploy/compose/hosts-64.yml",
)


@pytest.fixture(scope="module")
def pki_64(tmp_path_factory):
    """`netdp pki setup DIR --nodes 64 --per-host 16`, as the example's pki service runs it (the
    files' fsync skipped: a test's throwaway keys need no durability, and it is most of the
    time)."""
    from netdp_node.security import pki

    root = tmp_path_factory.mktemp("pki64")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(pki.os, "fsync", lambda fd: None)
        assert main(["pki", "setup", str(root), "--nodes", "64", "--per-host", "16"]) == 0
    return root


def test_committed_hosts_example_is_the_generator_output():
    assert HOSTS_EXAMPLE.read_text() == generate(**HOSTS_ARGS), (
        "regenerate with: netdp compose --nodes 64 --per-host 16 --data-dir ./data "
        "--build-context ../.. -o deploy/compose/hosts-64.yml"
    )
    # the header's command is the one that regenerates it
    first = HOSTS_EXAMPLE.read_text().splitlines()[0]
    cmd = re.search(r"`netdp (compose [^`]*)`", first).group(1).split()
    from netdp_node.cli import build_parser

    a = build_parser().parse_args(cmd)
    assert (a.nodes, a.per_host, a.data_dir, a.build_context, a.output) == (
        64,
        16,
        "./data",
        "../..",
        "deploy/compose/hosts-64.yml",
    )


def _host_of(n: int, per_host: int) -> str:
    return f"host-{(n - 1) // per_host + 1}"


def test_hosts_example_runs_16_nodes_per_host_each_with_only_its_keys():
    doc = yaml.safe_load(HOSTS_EXAMPLE.read_text())
    svcs = doc["services"]
    assert set(svcs) == {"pki", "bootstrap", "submit", "host-1", "host-2", "host-3", "host-4"}
    assert svcs["pki"]["build"] == "../.."  # the repository's root, from deploy/compose/
    assert (HOSTS_EXAMPLE.parent / svcs["pki"]["build"] / "Dockerfile").is_file()
    pki_cmd = svcs["pki"]["command"]
    assert pki_cmd[pki_cmd.index("--per-host") + 1] == "16"
    ledgers = {}
    for k in range(1, 5):
        host = svcs[f"host-{k}"]
        cmd = host["command"]
        assert cmd[cmd.index("--advertise") + 1] == f"host-{k}:7601"
        assert cmd[cmd.index("--listen") + 1] == "0.0.0.0:7601"
        (certs,) = [v for v in host["volumes"] if isinstance(v, dict)]
        assert certs["source"] == "pki" and certs["read_only"] is True
        assert certs["volume"]["subpath"] == f"hosts/host-{k}"  # its own nodes' keys only
        assert cmd[cmd.index("--identities") + 1] == certs["target"]
        for v in host["volumes"]:
            if isinstance(v, str) and v.startswith("ledger-"):
                vol, target = v.split(":")
                ledgers[vol] = (f"host-{k}", target)
        hc = host["healthcheck"]["test"]
        assert hc[3:] == ["127.0.0.1:7601", "--count", "16"]  # all 16 ports of the host
        # SIGTERM stops the 16 nodes at once: the grace period is above one node's, plus margin
        assert _seconds(host["stop_grace_period"]) >= _seconds("30s") + 16
    # every node: its own ledger volume, on the host that runs it, at /ledger/NODE_ID
    assert ledgers == {
        f"ledger-node-{n}": (_host_of(n, 16), f"/ledger/node-{n}") for n in range(1, 65)
    }
    assert set(doc["volumes"]) == {"pki", "bootstrap-state", "results", *ledgers}
    sub = svcs["submit"]["command"]
    assert sub[sub.index("--wait-nodes") + 1] == "64"


def test_hosts_example_commands_pass_check(pki_64, tmp_path, capsys):
    """Every service's command with --check, the hosts' against the folders that `netdp pki
    setup --per-host 16` really lays out (what their volume subpath mounts) and the committed
    value files (what ./data mounts): each host finds exactly its 16 nodes and their values."""
    doc = yaml.safe_load(HOSTS_EXAMPLE.read_text())
    data = HOSTS_EXAMPLE.parent / "data"
    for name, svc in doc["services"].items():
        binds = {"/data": data, "/ledger": tmp_path / name, "/results": tmp_path}
        for v in svc.get("volumes", []):
            if isinstance(v, dict):
                binds[v["target"]] = pki_64 / v["volume"]["subpath"]
        binds["/pki"] = tmp_path / "pki-check"
        argv = [_host_path(a, binds) for a in svc["command"]]
        code = main([*argv, "--check"])
        err = capsys.readouterr().err
        assert code == 0, f"service {name}: `netdp {' '.join(argv)} --check` failed: {err}"
        if name.startswith("host-"):
            k = int(name.split("-")[1])
            assert "ok: 16 nodes in one process" in err, err
            checked = re.findall(
                r"ok: node with bootstrap bootstrap:7600, ledger (\S+), 1 value", err
            )
            assert [Path(p).name for p in checked] == [
                f"node-{n}" for n in range(16 * (k - 1) + 1, 16 * k + 1)
            ]


def test_pki_per_host_layout_holds_exactly_each_hosts_nodes(tmp_path, monkeypatch):
    """DIR/hosts/host-K/ holds the identity folders of host K's nodes, byte for byte the issued
    ones, and nothing else (no other node's key, no CA key); re-laid out for another M, every
    folder again holds exactly its nodes."""
    from netdp_node.security import pki

    monkeypatch.setattr(pki.os, "fsync", lambda fd: None)
    nodes = [f"node-{n}" for n in range(1, 12)]
    for per_host in (4, 3, 11):
        pki.setup(tmp_path, nodes=nodes, per_host=per_host)
        hosts = tmp_path / "hosts"
        expected: dict[str, set[str]] = {}
        for n in range(1, 12):
            expected.setdefault(_host_of(n, per_host), set()).add(f"node-{n}")
        assert {h.name for h in hosts.iterdir()} == set(expected), per_host
        for host, members in expected.items():
            assert {p.name for p in (hosts / host).iterdir()} == members, (per_host, host)
            for node in members:
                folder = hosts / host / node
                assert {p.name for p in folder.iterdir()} == {"ca.pem", "cert.pem", "key.pem"}
                for f in ("ca.pem", "cert.pem", "key.pem"):
                    assert (folder / f).read_bytes() == (tmp_path / node / f).read_bytes()
                assert (folder / "key.pem").stat().st_mode & 0o077 == 0
                ident = pki.load_identity(folder)
                assert (ident.node_id, ident.role) == (node, "node")
            # what `netdp node --identities` of that host finds: its nodes, in order
            from netdp_node.host import identity_folders

            found = [p.name for p in identity_folders([], [str(hosts / host)])]
            assert found == sorted(members, key=lambda s: int(s.split("-")[1]))
        assert not list(hosts.rglob("ca.key"))
    # a revoked node is left out of its host's folder; no other node changes host
    pki.revoke(tmp_path, "node-2")
    pki.setup(tmp_path, nodes=nodes, per_host=4)
    assert {p.name for p in (tmp_path / "hosts" / "host-1").iterdir()} == {
        "node-1",
        "node-3",
        "node-4",
    }
    assert {p.name for p in (tmp_path / "hosts" / "host-2").iterdir()} == {
        f"node-{n}" for n in range(5, 9)
    }
    # a node id cannot take the layout's folder name
    with pytest.raises(ConfigError):
        pki.issue(tmp_path, "hosts")


def test_host_faults_apply_to_a_whole_host(tmp_path, capsys):
    doc = yaml.safe_load(generate(nodes=10, per_host=4, faults=["host-2:crash_at_step=3,drop=0.1"]))
    assert set(doc["services"]) >= {"host-1", "host-2", "host-3"}
    assert doc["services"]["host-2"]["environment"] == {
        "NETDP_FAULT_CRASH_AT_STEP": "3",
        "NETDP_FAULT_DROP": "0.1",
    }
    assert "environment" not in doc["services"]["host-1"]
    # host-3 runs the remaining 2 nodes
    assert doc["services"]["host-3"]["healthcheck"]["test"][3:] == [
        "127.0.0.1:7601",
        "--count",
        "2",
    ]
    with pytest.raises(ConfigError, match="whole host"):
        generate(nodes=10, per_host=4, faults=["node-3:drop=0.1"])
    with pytest.raises(ConfigError, match="--per-host"):
        generate(nodes=300)
    with pytest.raises(ConfigError, match="--per-host"):
        generate(nodes=10, per_host=-1)
    assert (
        main(
            [
                "compose",
                "--nodes",
                "10",
                "--per-host",
                "0",
                "-o",
                "-",
                "--data-dir",
                str(tmp_path / "d"),
            ]
        )
        == 0
    )
    assert "node-10:" in capsys.readouterr().out


def test_probe_count_needs_every_port_served(capsys):
    import socket

    socks = []
    try:
        for _ in range(20):  # two consecutive free ports
            a = socket.socket()
            a.bind(("127.0.0.1", 0))
            b = socket.socket()
            try:
                b.bind(("127.0.0.1", a.getsockname()[1] + 1))
            except OSError:
                a.close()
                b.close()
                continue
            socks = [a, b]
            break
        if not socks:
            pytest.skip("no two consecutive free ports on 127.0.0.1")
        for s in socks:
            s.listen()
        port = socks[0].getsockname()[1]
        assert main(["probe", f"127.0.0.1:{port}", "--count", "2"]) == 0
        socks[1].close()
        capsys.readouterr()
        assert main(["probe", f"127.0.0.1:{port}", "--count", "2", "--timeout", "2"]) == 1
        err = capsys.readouterr().err
        assert f"127.0.0.1:{port + 1}" in err and f"127.0.0.1:{port}:" not in err
        assert main(["probe", f"127.0.0.1:{port}", "--count", "0"]) == 2
    finally:
        for s in socks:
            s.close()


def _free_consecutive_ports(count: int) -> int:
    """The first of `count` consecutive ports of 127.0.0.1 that were free a moment ago."""
    import socket

    for _ in range(50):
        socks = [socket.socket()]
        try:
            socks[0].bind(("127.0.0.1", 0))
            first = socks[0].getsockname()[1]
            if first + count - 1 > 65535:
                continue
            for k in range(1, count):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", first + k))
            return first
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    pytest.skip(f"no {count} consecutive free ports on 127.0.0.1")


@pytest.mark.slow
def test_a_generated_host_service_runs_its_16_nodes(pki_64, tmp_path):
    """host-1 of the example, run as Compose would run it (its command, paths and addresses mapped
    to this machine's loopback): its 16 nodes register with a real bootstrap, each on its port
    7601+i and with its own ledger folder (its own volume in Compose), the generated health check
    passes once they all serve, and SIGTERM stops all 16 cleanly (exit 0)."""
    import json
    import signal
    import subprocess
    import sys

    from netdp_node.waiting import cpu_ticks, wait_progress

    doc = yaml.safe_load(HOSTS_EXAMPLE.read_text())
    svcs = doc["services"]
    cli = [sys.executable, "-m", "netdp_node.cli"]
    procs: list[subprocess.Popen[bytes]] = []

    def spawn(argv: list[str], log: Path) -> subprocess.Popen[bytes]:
        p = subprocess.Popen([*cli, *argv], stdout=subprocess.DEVNULL, stderr=log.open("wb"))
        procs.append(p)
        return p

    def port_file(path: Path) -> str:
        p = procs[-1]
        wait_progress(
            lambda: path.is_file() or p.poll() is not None,
            f"{path.name} written",
            stall=60,
            progress=lambda: cpu_ticks(p.pid),
        )
        assert path.is_file(), f"exited {p.poll()}"
        return path.read_text()

    try:
        boot = svcs["bootstrap"]["command"]
        boot = [a.replace("/certs", str(pki_64 / "bootstrap")) for a in boot]
        boot = [a.replace("/state", str(tmp_path / "state")) for a in boot]
        boot[boot.index("--listen") + 1] = "127.0.0.1:0"
        spawn([*boot, "--port-file", str(tmp_path / "boot.port")], tmp_path / "boot.log")
        bport = int(port_file(tmp_path / "boot.port"))

        first = _free_consecutive_ports(16)
        host = svcs["host-1"]["command"]
        mapped = {
            "/certs": str(pki_64 / "hosts" / "host-1"),
            "/ledger": str(tmp_path / "ledger"),
            "/data": str(HOSTS_EXAMPLE.parent / "data"),
            f"bootstrap:{7600}": f"127.0.0.1:{bport}",
            "0.0.0.0:7601": f"127.0.0.1:{first}",
            "host-1:7601": f"127.0.0.1:{first}",
            "127.0.0.1:7601": f"127.0.0.1:{first}",  # the health check's
        }
        argv = [mapped.get(a, a) for a in host]
        assert all(a not in mapped for a in argv)  # every path and address was mapped
        h = spawn([*argv, "--port-file", str(tmp_path / "host.ports")], tmp_path / "host.log")
        ports = json.loads(port_file(tmp_path / "host.ports"))
        assert ports == {f"node-{n}": first + n - 1 for n in range(1, 17)}

        test = svcs["host-1"]["healthcheck"]["test"]
        assert test[:3] == ["CMD", "netdp", "probe"]
        probe = [mapped.get(a, a) for a in test[3:]]
        assert probe[0] == f"127.0.0.1:{first}"
        r = subprocess.run([*cli, "probe", *probe], capture_output=True, timeout=60)
        assert r.returncode == 0, r.stderr

        h.send_signal(signal.SIGTERM)
        assert h.wait(timeout=300) == 0, (tmp_path / "host.log").read_text()[-3000:]
        for n in range(1, 17):
            assert any((tmp_path / "ledger" / f"node-{n}").iterdir()), n
        assert {p.name for p in (tmp_path / "ledger").iterdir()} == {
            f"node-{n}" for n in range(1, 17)
        }
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
