"""The deployment files under deploy/ cannot drift from the CLI or from Kubernetes and systemd.

- every Kubernetes manifest validates (strict: unknown fields are errors) against the schemas that
  the kubernetes-validate package ships, offline (the network is cut during validation);
- the manifests say what deploy/k8s/README.md says they say (names, ports, volumes, security);
- every `netdp` command line in a manifest, a systemd unit or a guide parses with the real parser
  (`netdp_node.cli.build_parser()`), after substituting its variables, and the daemons' command
  lines pass `--check`;
- the init container that hands each node pod its own certificate works (run with /bin/sh);
- the systemd units have the keys the hardening and restart policy rely on.
"""

from __future__ import annotations

import copy
import functools
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from netdp_node.cli import build_parser, main
from netdp_node.compose import FAULT_KEYS
from netdp_node.faults import plan_from

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "k8s"
SYSTEMD = DEPLOY / "systemd"
# A recent Kubernetes release whose schemas kubernetes-validate>=1.31 ships (the package's own
# latest is checked too).
K8S_VERSION = "1.31.0"
NAMESPACE = "netdp"
CLUSTER_DOMAIN = "svc.cluster.local"
FAULT_VARS = set(FAULT_KEYS.values())
NETDP_BIN = "/usr/local/bin/netdp"
# dummy values for the variables of the command lines ($(VAR) in manifests, $VAR in the guides)
DUMMIES = {
    "POD_NAME": "netdp-node-0",
    "JOB_ID": "netdp-ring-sum-x7k2p",
    "JOB": "job-1-abcdef",
    "i": "0",
    "peer": "10.0.0.12",
    "client": "10.0.0.11",
}


# -- helpers ------------------------------------------------------------------------------------
def _yaml() -> Any:
    return pytest.importorskip("yaml")


def _manifest_files() -> list[Path]:
    files = sorted(K8S.glob("*.yaml"))
    assert files, f"no manifests in {K8S}"
    return files


def _docs() -> list[tuple[Path, dict[str, Any]]]:
    yaml = _yaml()
    out = []
    for f in _manifest_files():
        # libyaml's loader where PyYAML has it (the same documents, parsed several times faster)
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        for doc in yaml.load_all(f.read_text(), Loader=loader):
            if doc is not None:
                out.append((f, doc))
    return out


def _one(kind: str, name: str) -> dict[str, Any]:
    found = [
        d
        for _, d in _docs()
        if d["kind"] == kind
        and name in (d["metadata"].get("name"), d["metadata"].get("generateName"))
    ]
    assert len(found) == 1, f"expected one {kind} {name}, found {len(found)}"
    return found[0]


def _pod_specs() -> list[tuple[str, dict[str, Any]]]:
    return [
        (
            f"{d['kind']}/{d['metadata'].get('name') or d['metadata'].get('generateName')}",
            d["spec"]["template"]["spec"],
        )
        for _, d in _docs()
        if d["kind"] in ("Deployment", "StatefulSet", "Job")
    ]


def _containers(spec: dict[str, Any]) -> list[dict[str, Any]]:
    return [*spec.get("initContainers", []), *spec["containers"]]


def _netdp_containers() -> list[tuple[str, dict[str, Any]]]:
    """(where, container) for every container that runs the image's `netdp` entrypoint."""
    out = []
    for where, spec in _pod_specs():
        for c in _containers(spec):
            if c["image"].split(":")[0] == "netdp" and "command" not in c:
                out.append((f"{where} container {c['name']}", c))
    return out


def _k8s_expand(args: list[str], env: dict[str, Any], where: str) -> list[str]:
    """Expand $(VAR) as the kubelet does; a variable the container does not define would be left
    as it is by Kubernetes, which is a bug here."""

    def sub(m: re.Match[str]) -> str:
        name = m.group(1)
        assert name in env, f"{where}: $({name}) is not defined in the container's env"
        return DUMMIES[name]

    return [re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", sub, a) for a in args]


def _parse(argv: list[str], where: str, capsys: pytest.CaptureFixture[str]) -> Any:
    try:
        return build_parser().parse_args(argv)
    except SystemExit as e:
        err = capsys.readouterr().err
        pytest.fail(f"{where}: `netdp {shlex.join(argv)}` does not parse (exit {e.code}): {err}")


def _arg(argv: list[str], flag: str) -> str:
    values = [a.split("=", 1)[1] for a in argv if a.startswith(flag + "=")]
    values += [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == flag]
    assert len(values) == 1, f"{flag} given {len(values)} times in {argv}"
    return values[0]


def _check(
    argv: list[str],
    env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    where: str,
) -> None:
    """`netdp ARGV --check` exits 0 with these environment variables (and no others of netdp's)."""
    for name in FAULT_VARS:
        monkeypatch.delenv(name, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    capsys.readouterr()
    code = main([*argv, "--check"])
    err = capsys.readouterr().err
    assert code == 0, f"{where}: `netdp {shlex.join(argv)} --check` exited {code}: {err}"
    assert err.startswith("ok:"), (where, err)


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Any attempt to resolve a name or open a connection fails the test."""

    def refuse(*a: Any, **k: Any) -> Any:
        raise AssertionError(f"network access attempted: {a!r}")

    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    yield


@pytest.fixture(scope="module")
def kv() -> Iterator[Any]:
    """kubernetes-validate, reading each schema file of its package once per module rather than at
    every `validate` (each call parses the version's whole _definitions.json, 1.3 MB, again); the
    validation itself is the package's own, unchanged."""
    kv = pytest.importorskip("kubernetes_validate")
    utils = pytest.importorskip("kubernetes_validate.utils")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(
            utils, "schema_contents", functools.lru_cache(maxsize=None)(utils.schema_contents)
        )
        mp.setattr(utils, "all_versions", functools.lru_cache(maxsize=1)(utils.all_versions))
        yield kv


# -- Kubernetes: schemas ------------------------------------------------------------------------
@pytest.mark.timeout(60)
def test_manifests_validate_against_kubernetes_schemas_offline(kv, no_network):
    versions = sorted({K8S_VERSION, kv.latest_version()})
    errors = []
    for f, doc in _docs():
        for version in versions:
            try:
                kv.validate(doc, version, strict=True)
            except kv.ValidationError as e:
                where = "/".join(str(p) for p in e.absolute_path)
                errors.append(
                    f"{f.name}: {doc['kind']} is invalid for Kubernetes {version} at "
                    f"{where}: {e.message}"
                )
    assert not errors, "\n".join(errors)
    # the validator is really checking: a typo and a wrong type are refused
    sts = copy.deepcopy(_one("StatefulSet", "netdp-node"))
    sts["spec"]["template"]["spec"]["containers"][0]["imagePullPolice"] = "Always"
    with pytest.raises(kv.ValidationError):
        kv.validate(sts, K8S_VERSION, strict=True)
    sts = copy.deepcopy(_one("StatefulSet", "netdp-node"))
    sts["spec"]["replicas"] = "eight"
    with pytest.raises(kv.ValidationError):
        kv.validate(sts, K8S_VERSION, strict=True)


@pytest.mark.timeout(60)
def test_manifests_hold_the_documented_resources():
    kinds = sorted(
        (d["kind"], d["metadata"].get("name") or d["metadata"]["generateName"]) for _, d in _docs()
    )
    assert kinds == sorted(
        [
            ("Namespace", "netdp"),
            ("PersistentVolumeClaim", "netdp-bootstrap-state"),
            ("Deployment", "netdp-bootstrap"),
            ("Service", "netdp-bootstrap"),
            ("Service", "netdp-node"),
            ("StatefulSet", "netdp-node"),
            ("Service", "netdp-host"),
            ("StatefulSet", "netdp-host"),
            ("NetworkPolicy", "netdp-node"),
            ("NetworkPolicy", "netdp-host"),
            ("NetworkPolicy", "netdp-bootstrap"),
            ("Job", "netdp-ring-sum-"),
        ]
    )
    for f, d in _docs():
        if d["kind"] != "Namespace":
            assert d["metadata"]["namespace"] == NAMESPACE, (f.name, d["kind"])
    assert (K8S / "job-submit.yaml").exists() and (K8S / "README.md").exists()


# -- Kubernetes: what the README promises -------------------------------------------------------
def _selects(service: dict[str, Any], pod_labels: dict[str, str]) -> bool:
    return all(pod_labels.get(k) == v for k, v in service["spec"]["selector"].items())


@pytest.mark.timeout(60)
def test_bootstrap_deployment_pvc_secret_and_service():
    dep = _one("Deployment", "netdp-bootstrap")
    assert dep["spec"]["replicas"] == 1
    assert dep["spec"]["strategy"]["type"] == "Recreate"  # never two writers on the SQLite store
    spec = dep["spec"]["template"]["spec"]
    (c,) = spec["containers"]
    args = c["args"]
    assert args[0] == "bootstrap"
    assert _arg(args, "--listen") == "0.0.0.0:7600"
    volumes = {v["name"]: v for v in spec["volumes"]}
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    # --state on the PersistentVolumeClaim
    (state_vol,) = [n for n, v in volumes.items() if "persistentVolumeClaim" in v]
    assert volumes[state_vol]["persistentVolumeClaim"]["claimName"] == "netdp-bootstrap-state"
    assert _arg(args, "--state").startswith(mounts[state_vol] + "/")
    pvc = _one("PersistentVolumeClaim", "netdp-bootstrap-state")
    assert pvc["spec"]["accessModes"] == ["ReadWriteOnce"]
    # --certs from the Secret netdp-bootstrap-tls
    (tls_vol,) = [n for n, v in volumes.items() if "secret" in v]
    secret = volumes[tls_vol]["secret"]
    assert secret["secretName"] == "netdp-bootstrap-tls"
    assert {i["key"] for i in secret["items"]} == {"ca.pem", "cert.pem", "key.pem"}
    assert _arg(args, "--certs") == mounts[tls_vol]
    assert c["readinessProbe"]["tcpSocket"]["port"] == 7600
    svc = _one("Service", "netdp-bootstrap")
    assert [p["port"] for p in svc["spec"]["ports"]] == [7600]
    assert _selects(svc, dep["spec"]["template"]["metadata"]["labels"])


@pytest.mark.timeout(60)
def test_node_statefulset_identity_dns_ledger_and_probe():
    sts = _one("StatefulSet", "netdp-node")
    svc = _one("Service", "netdp-node")
    replicas = sts["spec"]["replicas"]
    assert replicas >= 3
    # headless Service: netdp-node-<i>.netdp-node.netdp.svc.cluster.local
    assert sts["spec"]["serviceName"] == svc["metadata"]["name"] == "netdp-node"
    assert svc["spec"]["clusterIP"] == "None"
    assert [p["port"] for p in svc["spec"]["ports"]] == [7601]
    assert _selects(svc, sts["spec"]["template"]["metadata"]["labels"])

    spec = sts["spec"]["template"]["spec"]
    assert spec["terminationGracePeriodSeconds"] > 0
    assert spec["securityContext"]["runAsNonRoot"] is True
    (node,) = spec["containers"]
    args = node["args"]
    assert args[0] == "node"
    env = {e["name"]: e for e in node["env"]}
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert _arg(args, "--listen") == "0.0.0.0:7601"
    assert _arg(args, "--advertise") == (
        f"$(POD_NAME).{svc['metadata']['name']}.{NAMESPACE}.{CLUSTER_DOMAIN}:7601"
    )
    boot = _one("Service", "netdp-bootstrap")
    boot_port = boot["spec"]["ports"][0]["port"]
    assert _arg(args, "--bootstrap") == (
        f"{boot['metadata']['name']}.{NAMESPACE}.{CLUSTER_DOMAIN}:{boot_port}"
    )
    assert node["readinessProbe"]["tcpSocket"]["port"] == 7601

    # the ledger on the volumeClaimTemplate
    mounts = {m["name"]: m for m in node["volumeMounts"]}
    (claim,) = sts["spec"]["volumeClaimTemplates"]
    assert _arg(args, "--ledger") == "/var/lib/netdp/ledger"
    assert _arg(args, "--ledger").startswith(mounts[claim["metadata"]["name"]]["mountPath"] + "/")

    # every pod's own Secret, in the projected volume that only the init container mounts
    volumes = {v["name"]: v for v in spec["volumes"]}
    (all_ids,) = [n for n, v in volumes.items() if "projected" in v]
    tls = [
        s["secret"]
        for s in volumes[all_ids]["projected"]["sources"]
        if s["secret"]["name"].endswith("-tls")
    ]
    assert [s["name"] for s in tls] == [f"netdp-node-{i}-tls" for i in range(replicas)]
    for i, s in enumerate(tls):
        assert {(it["key"], it["path"]) for it in s["items"]} == {
            (k, f"netdp-node-{i}/{k}") for k in ("ca.pem", "cert.pem", "key.pem")
        }
    assert all_ids not in mounts, "the node container must not see the other nodes' keys"
    (init,) = spec["initContainers"]
    init_mounts = {m["name"]: m["mountPath"] for m in init["volumeMounts"]}
    assert init_mounts[all_ids] == "/secrets"
    assert "/secrets/$POD_NAME" in init["args"][0]
    certs_vol = [
        n for n in init_mounts if n in mounts and mounts[n]["mountPath"] == _arg(args, "--certs")
    ]
    assert len(certs_vol) == 1 and volumes[certs_vol[0]]["emptyDir"]["medium"] == "Memory"
    assert mounts[certs_vol[0]]["readOnly"] is True


@pytest.mark.timeout(60)
def test_every_pod_is_restricted_and_bounded():
    for where, spec in _pod_specs():
        sc = spec["securityContext"]
        assert sc["runAsNonRoot"] is True and sc["runAsUser"] != 0, where
        assert sc["seccompProfile"]["type"] == "RuntimeDefault", where
        assert spec["automountServiceAccountToken"] is False, where
        for c in _containers(spec):
            csc = c["securityContext"]
            assert csc["allowPrivilegeEscalation"] is False, (where, c["name"])
            assert csc["capabilities"]["drop"] == ["ALL"], (where, c["name"])
            assert csc["readOnlyRootFilesystem"] is True, (where, c["name"])
            for part in ("requests", "limits"):
                assert {"cpu", "memory"} <= set(c["resources"][part]), (where, c["name"], part)


# -- the netdp command lines --------------------------------------------------------------------
@pytest.mark.timeout(60)
def test_manifest_command_lines_parse_and_pass_check(monkeypatch, capsys):
    seen = set()
    for where, c in _netdp_containers():
        env = {e["name"]: e for e in c.get("env", [])}
        argv = _k8s_expand(c["args"], env, where)
        a = _parse(argv, where, capsys)
        seen.add(a.cmd if a.cmd != "job" else f"job {a.job_cmd}")
        plain = {k: str(e["value"]) for k, e in env.items() if "value" in e}
        assert set(plain) - {"PYTHONDONTWRITEBYTECODE"} <= FAULT_VARS, where
        if any(a.startswith("--identities") for a in argv):
            continue  # needs the init container's copies: test_host_pod_runs_its_own_nodes
        _check(argv, plain, monkeypatch, capsys, where)
    assert seen == {"bootstrap", "node", "job submit"}


@pytest.mark.timeout(60)
def test_commented_fault_examples_are_valid():
    text = (K8S / "nodes.yaml").read_text()
    examples = dict(
        re.findall(r"#\s*- name: (NETDP_FAULT_\w+)[^\n]*\n\s*#\s+value: \"([^\"]*)\"", text)
    )
    assert set(examples) == FAULT_VARS, set(examples) ^ FAULT_VARS
    env_text = (SYSTEMD / "node.env").read_text()
    env_examples = dict(re.findall(r"^#(NETDP_FAULT_\w+)=(.*)$", env_text, re.M))
    assert set(env_examples) == FAULT_VARS, set(env_examples) ^ FAULT_VARS
    for name, value in [*examples.items(), *env_examples.items()]:
        plan = plan_from({}, env={name: value})  # raises ConfigError on a bad value
        if name == "NETDP_FAULT_SEED":
            assert plan.seed == int(value)
        else:
            assert plan.active, (name, value)


@pytest.mark.timeout(60)
def test_init_container_hands_each_pod_its_own_identity(tmp_path):
    """Run the init container's script with /bin/sh against a real little PKI."""
    sh = shutil.which("sh")
    if sh is None:
        pytest.skip("no /bin/sh")
    from netdp_node.security import pki

    sts = _one("StatefulSet", "netdp-node")
    (init,) = sts["spec"]["template"]["spec"]["initContainers"]
    assert init["command"] == ["/bin/sh", "-c"]
    script = init["args"][0]
    for d in ("secrets", "certs", "data"):
        (tmp_path / d).mkdir()
        script = re.sub(rf"(?<![\w.$/-])/{d}\b", str(tmp_path / d), script)
    script = re.sub(r"\bpython3\b", shlex.quote(sys.executable), script)
    pki.init_ca(tmp_path / "pki")
    for i in (0, 1):
        pki.issue(
            tmp_path / "pki",
            f"netdp-node-{i}",
            hosts=(f"netdp-node-{i}.netdp-node.{NAMESPACE}.{CLUSTER_DOMAIN}",),
        )
    for i in (0, 1):
        shutil.copytree(
            tmp_path / "pki" / f"netdp-node-{i}", tmp_path / "secrets" / f"netdp-node-{i}"
        )
    (tmp_path / "secrets" / "netdp-node-0" / "values.txt").write_text("0.25\n")
    # pod 2's Secret holds pod 0's certificate
    shutil.copytree(tmp_path / "pki" / "netdp-node-0", tmp_path / "secrets" / "netdp-node-2")

    def run(pod: str) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "POD_NAME": pod, "PYTHONPATH": str(ROOT)}
        return subprocess.run(
            [sh, "-c", script], env=env, capture_output=True, text=True, timeout=30
        )

    for _ in range(2):  # a restarted pod runs it again over its read-only copies
        r = run("netdp-node-0")
        assert r.returncode == 0, r.stderr
        assert "identity of netdp-node-0" in r.stdout
    assert (tmp_path / "certs" / "cert.pem").read_bytes() == (
        tmp_path / "pki" / "netdp-node-0" / "cert.pem"
    ).read_bytes()
    assert (tmp_path / "certs" / "key.pem").stat().st_mode & 0o777 == 0o400
    assert (tmp_path / "data" / "values.txt").read_text() == "0.25\n"
    r = run("netdp-node-1")  # no values: none left over from the previous pod
    assert r.returncode == 0, r.stderr
    assert not (tmp_path / "data" / "values.txt").exists()
    r = run("netdp-node-2")
    assert r.returncode == 3 and "netdp-node-0" in r.stderr, r.stderr
    r = run("netdp-node-5")
    assert r.returncode == 3 and "netdp-node-5-tls" in r.stderr, r.stderr


# -- Kubernetes: hosts of M nodes (hosts.yaml) --------------------------------------------------
HOSTS_TOTAL = 1000  # the manifest's documented size: replicas x M


def _host_m() -> int:
    """M, the nodes per pod: the manifest's documented constant."""
    (m,) = re.findall(r"^# M = (\d+) nodes per pod\.", (K8S / "hosts.yaml").read_text(), re.M)
    return int(m)


def _listening(count: int) -> list[socket.socket]:
    """`count` sockets listening on consecutive ports of 127.0.0.1 (skip if none are found)."""
    for _ in range(50):
        first = socket.socket()
        first.bind(("127.0.0.1", 0))
        socks = [first]
        try:
            for k in range(1, count):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", first.getsockname()[1] + k))
        except OSError:
            for s in socks:
                s.close()
            continue
        for s in socks:
            s.listen()
        return socks
    pytest.skip(f"no {count} consecutive free ports on 127.0.0.1")


def _peer_selects(peer: dict[str, Any], labels: dict[str, str]) -> bool:
    """Whether a NetworkPolicy peer's podSelector selects a pod with these labels."""
    sel = peer["podSelector"]
    if any(labels.get(k) != v for k, v in sel.get("matchLabels", {}).items()):
        return False
    for e in sel.get("matchExpressions", []):
        assert e["operator"] == "In", e
        if labels.get(e["key"]) not in e["values"]:
            return False
    return True


def _allowed_in(policy: dict[str, Any], labels: dict[str, str], port: int) -> bool:
    for rule in policy["spec"]["ingress"]:
        if not any(_peer_selects(peer, labels) for peer in rule["from"]):
            continue
        for p in rule["ports"]:
            if p["protocol"] == "TCP" and p["port"] <= port <= p.get("endPort", p["port"]):
                return True
    return False


def _labels(component: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": "netdp", "app.kubernetes.io/component": component}


@pytest.mark.timeout(60)
def test_host_statefulset_runs_m_nodes_per_pod():
    sts = _one("StatefulSet", "netdp-host")
    svc = _one("Service", "netdp-host")
    m = _host_m()
    assert sts["spec"]["replicas"] * m == HOSTS_TOTAL  # 1,000 nodes = replicas 20
    # headless Service: netdp-host-<i>.netdp-host.netdp.svc.cluster.local, published before ready
    assert sts["spec"]["serviceName"] == svc["metadata"]["name"] == "netdp-host"
    assert svc["spec"]["clusterIP"] == "None" and svc["spec"]["publishNotReadyAddresses"] is True
    pod_labels = sts["spec"]["template"]["metadata"]["labels"]
    assert _selects(svc, pod_labels)
    assert not _selects(_one("Service", "netdp-node"), pod_labels)  # two separate sets of pods
    assert sts["spec"]["persistentVolumeClaimRetentionPolicy"] == {
        "whenDeleted": "Retain",
        "whenScaled": "Retain",
    }

    spec = sts["spec"]["template"]["spec"]
    # SIGTERM stops the M nodes at once; as compose's hosts: 30 s and about a second per node
    assert spec["terminationGracePeriodSeconds"] >= 30 + m
    (host,) = spec["containers"]
    args = host["args"]
    assert args[0] == "node" and not any(a.startswith("--certs") for a in args)
    assert _arg(args, "--listen") == "0.0.0.0:7601"
    assert _arg(args, "--advertise") == f"$(POD_NAME).netdp-host.{NAMESPACE}.{CLUSTER_DOMAIN}:7601"
    mounts = {m_["name"]: m_ for m_ in host["volumeMounts"]}
    (claim,) = sts["spec"]["volumeClaimTemplates"]
    ledger = _arg(args, "--ledger")  # each node's ledger: LEDGER/<node id> on the pod's volume
    assert ledger.startswith(mounts[claim["metadata"]["name"]]["mountPath"] + "/")
    volumes = {v["name"]: v for v in spec["volumes"]}
    ids_mount = [n for n, m_ in mounts.items() if m_["mountPath"] == _arg(args, "--identities")]
    assert len(ids_mount) == 1 and volumes[ids_mount[0]]["emptyDir"]["medium"] == "Memory"
    assert mounts[ids_mount[0]]["readOnly"] is True
    # every pod's Secrets, without items (key names unique over all Secrets), init container only
    (all_ids,) = [n for n, v in volumes.items() if "projected" in v]
    sources = [s_["secret"] for s_ in volumes[all_ids]["projected"]["sources"]]
    assert [s_["name"] for s_ in sources] == [
        f"netdp-host-{i}-{kind}"
        for i in range(sts["spec"]["replicas"])
        for kind in ("identities", "data")
    ]
    assert all(s_["optional"] is True and "items" not in s_ for s_ in sources)
    assert all_ids not in mounts, "the host container must not see the other pods' keys"
    (init,) = spec["initContainers"]
    init_mounts = {m_["name"]: m_["mountPath"] for m_ in init["volumeMounts"]}
    assert init_mounts[all_ids] == "/secrets" and ids_mount[0] in init_mounts

    # NetworkPolicy: the M ports of a host pod are open to node and host pods, and only to them
    hp = _one("NetworkPolicy", "netdp-host")
    assert all(pod_labels.get(k) == v for k, v in hp["spec"]["podSelector"]["matchLabels"].items())
    for port in (7601, 7601 + m - 1):
        assert _allowed_in(hp, _labels("host"), port) and _allowed_in(hp, _labels("node"), port)
        assert not _allowed_in(hp, _labels("submit"), port)
    assert not _allowed_in(hp, _labels("host"), 7601 + m)
    assert not _allowed_in(hp, _labels("host"), 7600)
    # a node pod and the bootstrap take traffic from host pods too
    assert _allowed_in(_one("NetworkPolicy", "netdp-node"), _labels("host"), 7601)
    boot = _one("NetworkPolicy", "netdp-bootstrap")
    for who in ("node", "host", "submit"):
        assert _allowed_in(boot, _labels(who), 7600), who
    assert not _allowed_in(boot, {"app.kubernetes.io/name": "other"}, 7600)


def _secrets_volume(docs: list[dict[str, Any]], root: Path) -> None:
    """What the projected volume of hosts.yaml shows the init container: every key of every
    Secret, decoded, at the volume's root (a key name in two Secrets would be a bug)."""
    import base64

    root.mkdir()
    for doc in docs:
        assert doc["kind"] == "Secret" and doc["metadata"]["namespace"] == NAMESPACE
        for key, value in doc["data"].items():
            assert not (root / key).exists(), f"key {key} in two Secrets"
            (root / key).write_bytes(base64.b64decode(value))


def _init_script(tmp_path: Path) -> str:
    sts = _one("StatefulSet", "netdp-host")
    (init,) = sts["spec"]["template"]["spec"]["initContainers"]
    assert init["command"] == ["/bin/sh", "-c"]
    script = init["args"][0]
    for d in ("secrets", "certs", "data"):
        script = re.sub(rf"(?<![\w.$/-])/{d}\b", str(tmp_path / d), script)
    return re.sub(r"\bpython3\b", shlex.quote(sys.executable), script)


@pytest.fixture
def fast_pki(monkeypatch: pytest.MonkeyPatch) -> Any:
    """netdp's pki module, without the fsync of every file (throwaway test keys)."""
    from netdp_node.security import pki

    monkeypatch.setattr(pki.os, "fsync", lambda fd: None)
    return pki


@pytest.mark.timeout(60)
def test_host_init_container_hands_each_pod_only_its_own_identities(tmp_path, fast_pki):
    """The Secrets `netdp pki k8s-secrets` writes for 11 pods of 2 nodes, as the projected volume
    shows them, and the init container's script run with /bin/sh for several pods."""
    sh = shutil.which("sh")
    if sh is None:
        pytest.skip("no /bin/sh")
    yaml = _yaml()
    from netdp_node.k8s import host_secrets

    pki_dir = tmp_path / "pki"
    fast_pki.init_ca(pki_dir)
    text, issued = host_secrets(pki_dir, hosts=11, per_host=2)
    assert len(issued) == 22
    _secrets_volume([d for d in yaml.safe_load_all(text) if d], tmp_path / "secrets")
    for d in ("certs", "data"):
        (tmp_path / d).mkdir()
    secrets = tmp_path / "secrets"
    (secrets / "netdp-host-1-0.txt").write_text("0.25\n")  # from a Secret netdp-host-1-data
    (secrets / "netdp-host-10-1.txt").write_text("0.5\n")
    # pod 3's second key pair is its first node's: the certificate does not match its key name
    for part in ("cert", "key"):
        shutil.copy(secrets / f"netdp-host-3-0.{part}.pem", secrets / f"netdp-host-3-1.{part}.pem")
    (secrets / "netdp-host-4-1.key.pem").unlink()
    script = _init_script(tmp_path)

    def run(pod: str) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "POD_NAME": pod, "PYTHONPATH": str(ROOT)}
        return subprocess.run(
            [sh, "-c", script], env=env, capture_output=True, text=True, timeout=30
        )

    def tree(d: str) -> dict[str, set[str]]:
        root = tmp_path / d
        return {
            p.name: {f.name for f in p.iterdir()} if p.is_dir() else set() for p in root.iterdir()
        }

    r = run("netdp-host-10")
    assert r.returncode == 0, r.stderr
    assert set(tree("certs")) == {"netdp-host-10-0", "netdp-host-10-1"}
    assert tree("data") == {"netdp-host-10-1.txt": set()}
    # pod 1, on the same volumes (a restarted pod runs it again over its read-only copies):
    # its two nodes, nothing left of the last run, not pod 10's or 11's (netdp-host-1... too)
    r = run("netdp-host-1")
    assert r.returncode == 0, r.stderr
    assert "identities of netdp-host-1: 2 node certificates" in r.stdout
    files = {"ca.pem", "cert.pem", "key.pem"}
    assert tree("certs") == {"netdp-host-1-0": files, "netdp-host-1-1": files}
    for nid in ("netdp-host-1-0", "netdp-host-1-1"):
        for f in files:
            assert (tmp_path / "certs" / nid / f).read_bytes() == (pki_dir / nid / f).read_bytes()
        assert (tmp_path / "certs" / nid / "key.pem").stat().st_mode & 0o777 == 0o400
    assert tree("data") == {"netdp-host-1-0.txt": set()}
    r = run("netdp-host-3")
    assert r.returncode == 3 and "netdp-host-3-0" in r.stderr and "netdp-host-3-1" in r.stderr
    r = run("netdp-host-4")
    assert r.returncode == 3 and "netdp-host-4-1.key.pem" in r.stderr, r.stderr
    r = run("netdp-host-11-0")  # not a pod name: no key is its own (not netdp-host-11-0-*)
    assert r.returncode == 3 and "netdp-host-11-0-identities" in r.stderr, r.stderr


@pytest.mark.timeout(60)
def test_host_pod_runs_its_own_nodes(tmp_path, fast_pki, monkeypatch, capsys):
    """The host container's command line, on the folders the init container makes: `--check`
    finds the pod's nodes (and only them), each with its own ledger folder and its values."""
    sh = shutil.which("sh")
    if sh is None:
        pytest.skip("no /bin/sh")
    yaml = _yaml()
    from netdp_node.k8s import host_secrets

    pki_dir = tmp_path / "pki"
    fast_pki.init_ca(pki_dir)
    (tmp_path / "values").mkdir()
    for i in range(2):
        for j in range(3):
            (tmp_path / "values" / f"netdp-host-{i}-{j}.txt").write_text(f"{i}.{j}\n")
    text, _ = host_secrets(pki_dir, hosts=2, per_host=3, data=tmp_path / "values")
    _secrets_volume([d for d in yaml.safe_load_all(text) if d], tmp_path / "secrets")
    for d in ("certs", "data"):
        (tmp_path / d).mkdir()
    env = {**os.environ, "POD_NAME": "netdp-host-1", "PYTHONPATH": str(ROOT)}
    r = subprocess.run(
        [sh, "-c", _init_script(tmp_path)], env=env, capture_output=True, text=True, timeout=30
    )
    assert r.returncode == 0, r.stderr
    sts = _one("StatefulSet", "netdp-host")
    (c,) = sts["spec"]["template"]["spec"]["containers"]
    cenv = {e["name"]: e for e in c["env"]}
    argv = _k8s_expand(c["args"], cenv, "netdp-host")
    argv = [
        a.replace("/run/netdp/certs", str(tmp_path / "certs")).replace(
            "/var/lib/netdp", str(tmp_path / "ledger")
        )
        for a in argv
    ]
    argv.append(f"--data={tmp_path / 'data'}")  # the commented --data argument, enabled
    assert "# - --data=/run/netdp/data" in (K8S / "hosts.yaml").read_text()
    _check(argv, {}, monkeypatch, capsys, "netdp-host")
    capsys.readouterr()
    assert main([*argv, "--check"]) == 0
    err = capsys.readouterr().err
    assert "ok: 3 nodes in one process" in err
    ledgers = re.findall(r"ledger (\S+), 1 value\(s\)", err)
    assert ledgers == [str(tmp_path / "ledger" / "ledger" / f"netdp-host-1-{j}") for j in range(3)]


@pytest.mark.timeout(60)
def test_host_readiness_probe_needs_every_hosted_node(tmp_path):
    """The readiness command, run with /bin/sh as the kubelet does, against nodes listening on
    consecutive ports: ready when there is a listener for every identity folder, not before."""
    sh = shutil.which("sh")
    if sh is None:
        pytest.skip("no /bin/sh")
    sts = _one("StatefulSet", "netdp-host")
    (c,) = sts["spec"]["template"]["spec"]["containers"]
    cmd = c["readinessProbe"]["exec"]["command"]
    assert cmd[:2] == ["/bin/sh", "-c"] and "livenessProbe" not in c
    certs = {m_["mountPath"] for m_ in c["volumeMounts"]} & {_arg(c["args"], "--identities")}
    assert len(certs) == 1 and certs.pop() in cmd[2]
    socks = _listening(3)
    try:
        port = socks[0].getsockname()[1]
        netdp = f"{shlex.quote(sys.executable)} -m netdp_node.cli"
        script = (
            cmd[2]
            .replace(_arg(c["args"], "--identities"), str(tmp_path))
            .replace("127.0.0.1:7601", f"127.0.0.1:{port}")
            .replace("exec netdp ", f"exec {netdp} ")
        )
        env = {**os.environ, "PYTHONPATH": str(ROOT)}

        def ready(nodes: int) -> subprocess.CompletedProcess[str]:
            for j in range(nodes):
                (tmp_path / f"netdp-host-0-{j}").mkdir(exist_ok=True)
            return subprocess.run(
                [sh, "-c", script], env=env, capture_output=True, text=True, timeout=30
            )

        assert ready(3).returncode == 0
        socks[2].close()  # the third node is down
        r = ready(3)
        assert r.returncode == 1 and f"127.0.0.1:{port + 2}" in r.stderr, r.stderr
    finally:
        for s_ in socks:
            s_.close()


@pytest.mark.timeout(60)
def test_pki_k8s_secrets_writes_one_secret_per_pod_and_scales(tmp_path, fast_pki, capsys, kv):
    yaml = _yaml()
    import base64

    from cryptography import x509

    pki_dir = tmp_path / "pki"
    assert main(["pki", "init", str(pki_dir)]) == 0
    out = tmp_path / "secrets.yaml"
    argv = ["pki", "k8s-secrets", str(pki_dir), "--per-host", "3", "-o", str(out)]
    assert main([*argv, "--hosts", "2"]) == 0
    assert out.stat().st_mode & 0o777 == 0o600  # private keys
    first = [d for d in yaml.safe_load_all(out.read_text()) if d]
    assert [d["metadata"]["name"] for d in first] == [
        "netdp-host-0-identities",
        "netdp-host-1-identities",
    ]
    for i, d in enumerate(first):
        ids = [f"netdp-host-{i}-{j}" for j in range(3)]
        assert set(d["data"]) == {f"{n}.{p}.pem" for n in ids for p in ("ca", "cert", "key")}
        for n in ids:
            cert = x509.load_pem_x509_certificate(base64.b64decode(d["data"][f"{n}.cert.pem"]))
            assert cert.subject.get_attributes_for_oid(x509.NameOID.COMMON_NAME)[0].value == n
            dns = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
            assert (
                f"netdp-host-{i}.netdp-host.{NAMESPACE}.{CLUSTER_DOMAIN}"
                in dns.get_values_for_type(x509.DNSName)
            )
    for d in first:
        kv.validate(d, K8S_VERSION, strict=True)
    # scaling: one more pod; the first two pods' Secrets are unchanged (nothing re-issued)
    capsys.readouterr()
    assert main([*argv, "--hosts", "3"]) == 0
    assert "3 new certificate(s)" in capsys.readouterr().err
    again = [d for d in yaml.safe_load_all(out.read_text()) if d]
    assert again[:2] == first and again[2]["metadata"]["name"] == "netdp-host-2-identities"
    # a revoked node is left out of its pod's Secret (it would stop the whole pod at start)
    assert main(["pki", "revoke", str(pki_dir), "netdp-host-0-1"]) == 0
    assert main([*argv, "--hosts", "3"]) == 0
    third = [d for d in yaml.safe_load_all(out.read_text()) if d]
    assert {k.split(".")[0] for k in third[0]["data"]} == {"netdp-host-0-0", "netdp-host-0-2"}
    assert third[1:] == again[1:]
    # bad input: a clear error, exit 2
    assert (
        main(["pki", "k8s-secrets", str(tmp_path / "none"), "--hosts", "1", "--per-host", "1"]) == 2
    )
    assert "netdp pki init" in capsys.readouterr().err
    assert main([*argv, "--hosts", "1", "--data", str(tmp_path)]) == 2
    assert "netdp-host-0-0.txt" in capsys.readouterr().err
    assert main([*argv, "--hosts", "0"]) == 2


# -- systemd ------------------------------------------------------------------------------------
UNITS = {
    "netdp-node.service": ("node", "/etc/netdp/node.env", "node.env"),
    "netdp-bootstrap.service": ("bootstrap", "/etc/netdp/bootstrap.env", "bootstrap.env"),
}


def _unit(path: Path) -> dict[str, list[tuple[str, str]]]:
    """A systemd unit file as {section: [(key, value), ...]}: comments skipped, backslash
    continuations joined, repeated keys kept in order (as systemd does)."""
    sections: dict[str, list[tuple[str, str]]] = {}
    current = None
    pending = ""
    for raw in path.read_text().splitlines():
        line = pending + raw.strip() if pending else raw.strip()
        pending = ""
        if not line or line[0] in "#;":
            continue
        if line.endswith("\\"):
            pending = line[:-1] + " "
            continue
        if line.startswith("[") and line.endswith("]"):
            current = line[1:-1]
            assert current not in sections, f"{path.name}: section [{current}] twice"
            sections[current] = []
            continue
        assert current is not None, f"{path.name}: {line!r} before any section"
        key, sep, value = line.partition("=")
        assert sep, f"{path.name}: {line!r} is not KEY=VALUE"
        sections[current].append((key.strip(), value.strip()))
    assert not pending, f"{path.name}: ends with a continuation"
    return sections


def _get(unit: dict[str, list[tuple[str, str]]], section: str, key: str) -> list[str]:
    return [v for k, v in unit.get(section, []) if k == key]


def _env_file(path: Path) -> dict[str, str]:
    """The assignments of a systemd EnvironmentFile (uncommented lines only)."""
    out = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line[0] in "#;":
            continue
        k, sep, v = line.partition("=")
        assert sep and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k), f"{path.name}: {line!r}"
        if len(v) >= 2 and v[0] == v[-1] and v[0] in "'\"":
            v = v[1:-1]
        out[k] = v
    return out


def _exec_start(unit: dict[str, list[tuple[str, str]]], env: dict[str, str]) -> list[str]:
    """ExecStart= as systemd runs it: ${VAR} is one word, $VAR is split on white space (no words
    when empty); a variable defined nowhere is an error here."""
    (line,) = _get(unit, "Service", "ExecStart")
    words: list[str] = []
    for word in shlex.split(line):
        m = re.fullmatch(r"\$([A-Za-z_][A-Za-z0-9_]*)", word)
        if m:
            assert m.group(1) in env, f"${m.group(1)} is not defined"
            words += env[m.group(1)].split()
            continue

        def sub(m: re.Match[str]) -> str:
            assert m.group(1) in env, f"${{{m.group(1)}}} is not defined"
            return env[m.group(1)]

        words.append(re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}", sub, word))
    return words


def _unit_env(name: str) -> dict[str, str]:
    """Environment= defaults of the unit, overridden by the documented example EnvironmentFile."""
    unit = _unit(SYSTEMD / name)
    env = {}
    for assignment in _get(unit, "Service", "Environment"):
        k, _, v = assignment.partition("=")
        env[k] = v
    env.update(_env_file(SYSTEMD / UNITS[name][2]))
    return env


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", sorted(UNITS))
def test_systemd_unit_has_the_hardening_and_restart_policy(name):
    unit = _unit(SYSTEMD / name)
    assert set(unit) == {"Unit", "Service", "Install"}
    assert _get(unit, "Unit", "Description")
    assert "network-online.target" in " ".join(_get(unit, "Unit", "After"))
    assert "network-online.target" in " ".join(_get(unit, "Unit", "Wants"))
    one = {k: _get(unit, "Service", k) for k, _ in unit["Service"]}
    expected = {
        "User": "netdp",
        "StateDirectory": "netdp",
        "ProtectSystem": "strict",
        "NoNewPrivileges": "yes",
        "PrivateTmp": "yes",
        "Restart": "on-failure",
        "KillSignal": "SIGTERM",
        "EnvironmentFile": UNITS[name][1],
    }
    for key, value in expected.items():
        assert one.get(key) == [value], f"{name}: {key}={one.get(key)}, expected {value}"
    assert set(" ".join(one["RestartPreventExitStatus"]).split()) == {"2", "3"}
    assert int(one["TimeoutStopSec"][0]) > 0
    assert "/var/lib/netdp" in " ".join(one["ReadWritePaths"]).split()
    assert _get(unit, "Install", "WantedBy") == ["multi-user.target"]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", sorted(UNITS))
def test_systemd_exec_start_parses_and_passes_check(name, tmp_path, monkeypatch, capsys):
    subcommand, _, env_name = UNITS[name]
    unit = _unit(SYSTEMD / name)
    env = _unit_env(name)
    words = _exec_start(unit, env)
    assert words[0] == NETDP_BIN and words[1] == subcommand, words[:2]
    argv = words[1:]
    a = _parse(argv, name, capsys)
    assert a.cmd == subcommand
    # the only writable paths are the state directory: the ledger / store must be in it
    state = "/var/lib/" + _get(unit, "Service", "StateDirectory")[0]
    path = a.ledger if subcommand == "node" else a.state
    assert path.startswith(state + "/"), path
    assert "${" not in path and "$" not in path, "ReadWritePaths= cannot follow a variable"
    if subcommand == "node":
        assert a.advertise and not a.advertise.startswith("0.0.0.0:")
    if getattr(a, "data", None):  # the example's data file is on the target host: use a stand-in
        (tmp_path / "values.txt").write_text("0.5\n")
        argv = [str(tmp_path / "values.txt") if w == a.data else w for w in argv]
    faults = {k: v for k, v in env.items() if k in FAULT_VARS}
    _check(argv, faults, monkeypatch, capsys, name)
    # every variable a user may set is documented in the example file (commented or not)
    documented = set(
        re.findall(r"^#?\s*([A-Z][A-Z0-9_]*)=", (SYSTEMD / env_name).read_text(), re.M)
    )
    used = set(re.findall(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)", _get(unit, "Service", "ExecStart")[0]))
    assert used <= documented, used - documented


@pytest.mark.timeout(60)
def test_systemd_analyze_verify_accepts_the_units(tmp_path):
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed")
    # verify wants ExecStart's binary to exist and the EnvironmentFile to be readable
    binary = shutil.which("netdp") or "/bin/true"
    paths = []
    for name, (_, env_path, env_name) in UNITS.items():
        shutil.copy(SYSTEMD / env_name, tmp_path / env_name)
        text = (SYSTEMD / name).read_text().replace(NETDP_BIN, binary)
        text = text.replace(f"EnvironmentFile={env_path}", f"EnvironmentFile={tmp_path / env_name}")
        (tmp_path / name).write_text(text)
        paths.append(str(tmp_path / name))
    r = subprocess.run(
        [analyze, "verify", "--man=no", *paths], capture_output=True, text=True, timeout=50
    )
    complaints = [
        line
        for line in (r.stdout + r.stderr).splitlines()
        if any(Path(p).name in line for p in paths)
    ]
    assert not complaints, "\n".join(complaints)


# -- the guides ---------------------------------------------------------------------------------
_SUBCOMMANDS = "demo|compose|pki|bootstrap|node|job|privacy"
_COMMAND = re.compile(rf"(?<![\w/.-])netdp (?:{_SUBCOMMANDS})(?=\s|$)[^|;&)<>`\n]*")


def _doc_commands(path: Path) -> list[str]:
    """The `netdp ...` command lines in the fenced code blocks of a Markdown file."""
    text = path.read_text()
    out = []
    for block in re.findall(r"^```[a-z]*\n(.*?)^```", text, re.M | re.S):
        block = re.sub(r"\\\n\s*", " ", block)
        for line in block.splitlines():
            line = re.sub(r"(^|\s)#.*$", "", line)  # shell comments
            for m in _COMMAND.finditer(line):
                out.append(m.group(0))
    return out


@pytest.mark.timeout(60)
def test_every_command_in_the_guides_parses(capsys):
    guides = [DEPLOY / "separate-machines.md", K8S / "README.md", SYSTEMD / "README.md"]
    total = 0
    for guide in guides:
        commands = _doc_commands(guide)
        assert commands, f"no netdp commands found in {guide}"
        for cmd in commands:
            expanded = re.sub(
                r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?", lambda m: DUMMIES.get(m.group(1), "x"), cmd
            )
            words = shlex.split(expanded, comments=True)
            _parse(words[1:], f"{guide.relative_to(ROOT)}: {cmd}", capsys)
            total += 1
    assert total >= 20
