"""`netdp compose`: generate a docker compose file for a bootstrap and N nodes.

Services: `pki` (one shot: `netdp pki setup`, certificates into the `pki` volume), `bootstrap`,
`node-1..node-N` (each mounts only its own identity folder, a ledger volume of its own and its value
file; fault flags as NETDP_FAULT_* environment variables) and `submit` (one shot: waits for the N
nodes, submits a ring sum, writes the result to the `results` volume). The root
`docker-compose.yml` is this generator's output for 8 nodes; tests/unit/test_compose.py runs every
service's command with `--check`, so the file cannot drift from the CLI.

With `per_host` = M (`netdp compose --per-host M`), the nodes run M to a service instead:
`host-1..host-K` (K = ceil(N/M)), each one `netdp node --identities /certs` process whose /certs is
the volume subpath `hosts/host-k` that `netdp pki setup --per-host M` fills with the identity folders
of that host's nodes and nothing else (no other node's key is in its file system). Node i of a host
listens on 7601+i and advertises `host-k:7601+i`; each node keeps its own ledger volume
`ledger-node-<n>`, mounted at /ledger/node-<n> (what `--ledger /ledger` gives it): the very volumes of
the one-service-per-node file, so a node's ledger follows its id whatever the grouping (changing M
never starts a node on an empty ledger). Faults are given per host. deploy/compose/hosts-64.yml is
the output for 64 nodes, 16 per host.

The submitter's job id is fixed by the job's spec (`job_id_for`): Compose restarts a failed
submitter (`restart: on-failure`), and a restart then re-attaches to the job it submitted (the
bootstrap returns the existing job for the same id and spec) instead of submitting a new one that
would spend every node's privacy budget again. Every service runs the one image built from the
Dockerfile (`pull_policy: build`: never pulled from a registry); the bootstrap and the nodes have
a health check (`netdp probe`), and what depends on the bootstrap waits until it is healthy.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

from netdp_node.algorithms import ALGORITHMS, DEFAULT, get_algorithm
from netdp_node.errors import ConfigError
from netdp_node.security.pki import HOSTS_DIR, host_groups

FAULT_KEYS = {
    "crash_at_step": "NETDP_FAULT_CRASH_AT_STEP",
    "crash_after": "NETDP_FAULT_CRASH_AFTER",
    "offline": "NETDP_FAULT_OFFLINE",
    "leave_at_step": "NETDP_FAULT_LEAVE_AT_STEP",
    "drop": "NETDP_FAULT_DROP",
    "delay_ms": "NETDP_FAULT_DELAY_MS",
    "jitter_ms": "NETDP_FAULT_JITTER_MS",
    "partition": "NETDP_FAULT_PARTITION",
    "seed": "NETDP_FAULT_SEED",
}
PEER_PORT = 7601
#: Where the value files node-<i>.txt are, relative to the compose file's folder.
DATA_DIR = "./deploy/compose/data"
#: One service per node stops at 256 services; hosts of M nodes go further.
MAX_NODES = 10000
BOOTSTRAP_PORT = 7600
#: Docker sends SIGKILL this long after SIGTERM. A node's own shutdown takes its gRPC server's
#: grace period (2 s) plus closing links and the ledger; the margin covers a loaded host, so that a
#: node is never killed in the middle of a ledger write (Docker's default is 10 s).
STOP_GRACE_PERIOD = "30s"
#: Minimum versions (documented in the file's header): `volume.subpath` needs Docker Engine 26.0,
#: the health checks' `start_interval` Engine 25.0; tested with Engine 26.1.5 and Compose 2.26.1.
MIN_ENGINE = "26.0"
MIN_COMPOSE = "2.26"


def healthcheck(port: int, count: int = 1) -> dict[str, Any]:
    """`netdp probe` (a TCP connect to the service's own port, no TLS handshake; a host of `count`
    nodes: to each of its ports port..port+count-1): checked every second while starting
    (start_interval), every 30 s after."""
    more = ["--count", str(count)] if count > 1 else []
    return {
        "test": ["CMD", "netdp", "probe", f"127.0.0.1:{port}", *more],
        "interval": "30s",
        "timeout": "5s",
        "retries": 3,
        "start_period": "300s",
        "start_interval": "1s",
    }


def job_id_for(command: list[str]) -> str:
    """The submitter's fixed job id: `compose-` and a digest of its job flags. The same spec gives
    the same id (a restart re-attaches to the job), another spec another id."""
    digest = hashlib.sha256(json.dumps(command).encode()).hexdigest()[:10]
    return f"compose-{digest}"


def data_value(index: int) -> float:
    """The value of node-<index> in the generated data files: 0.1, 0.2, ..., 1.0, 0.1, ..."""
    return ((index - 1) % 10 + 1) / 10


def ensure_data(data_dir: Path, nodes: int) -> list[Path]:
    """Write the missing value files node-1.txt .. node-<nodes>.txt of data_dir (one value each,
    `data_value`); existing files are kept as they are. Returns the files written."""
    if data_dir.exists() and not data_dir.is_dir():
        raise ConfigError(f"--data-dir {data_dir} is not a directory")
    made: list[Path] = []
    for i in range(1, nodes + 1):
        f = data_dir / f"node-{i}.txt"
        if f.exists():
            continue
        data_dir.mkdir(parents=True, exist_ok=True)
        f.write_text(f"{data_value(i)}\n")
        made.append(f)
    return made


def parse_faults(
    specs: list[str], ids: list[str], *, hosts: bool = False
) -> dict[str, dict[str, str]]:
    """`node-3:drop=0.2,delay_ms=50` -> {"node-3": {"NETDP_FAULT_DROP": "0.2", ...}}. With
    `hosts`, `ids` are host services: the faults of a host apply to every node it runs (a crash
    fault crashes the host)."""
    out: dict[str, dict[str, str]] = {}
    what = "HOST" if hosts else "NODE"
    for spec in specs:
        node, sep, rest = spec.partition(":")
        if not sep or node not in ids:
            raise ConfigError(
                f"--fault {spec!r}: expected {what}:KEY=VALUE with {what} in {ids[0]}..{ids[-1]}"
                + (" (with --per-host, faults apply to a whole host service)" if hosts else "")
            )
        env = out.setdefault(node, {})
        # values of offline/partition may hold commas: KEY=VALUE pairs are split on ',' only
        # before a known key
        for item in _split_pairs(rest):
            k, eq, v = item.partition("=")
            if not eq or k not in FAULT_KEYS:
                raise ConfigError(
                    f"--fault {spec!r}: unknown key {k!r}; known: {', '.join(FAULT_KEYS)}"
                )
            env[FAULT_KEYS[k]] = v
    return out


def _split_pairs(text: str) -> list[str]:
    parts: list[str] = []
    for chunk in text.split(","):
        if parts and "=" not in chunk:
            parts[-1] += "," + chunk
        elif chunk:
            parts.append(chunk)
    return parts


#: The algorithms a compose deployment runs (their hooks make the job's flags).
COMPOSED = tuple(k for k, a in ALGORITHMS.items() if a.hooks.composed)


def _names(names: tuple[str, ...]) -> str:
    return ", ".join(names[:-1]) + f" or {names[-1]}" if len(names) > 1 else "".join(names)


def host_grace(per_host: int) -> str:
    """stop_grace_period of a host of `per_host` nodes. SIGTERM stops them all at once, so their
    servers' grace periods run concurrently; what grows with the count is closing every node's
    links and ledger on one event loop: STOP_GRACE_PERIOD plus a second for every node, far above
    what it takes (50 idle nodes of one process stopped in under a second on a loaded 2-core
    machine, 16 in half a second)."""
    return f"{int(STOP_GRACE_PERIOD.rstrip('s')) + per_host}s"


def services(
    nodes: int,
    topology: str,
    rounds: int,
    faults: list[str],
    image: str,
    data_dir: str,
    algorithm: str = "ring-sum",
    per_host: int = 0,
    build_context: str = ".",
) -> dict[str, Any]:
    if not 3 <= nodes <= MAX_NODES:
        raise ConfigError(f"--nodes must be between 3 and {MAX_NODES}")
    if per_host < 0:
        raise ConfigError(f"--per-host must be 0 (one service per node) or more, not {per_host}")
    if not per_host and nodes > 256:
        raise ConfigError("--nodes above 256 need --per-host M (M nodes in each host service)")
    if PEER_PORT + per_host - 1 > 65535:
        raise ConfigError(f"--per-host {per_host}: ports {PEER_PORT}.. would pass 65535")
    ids = [f"node-{i}" for i in range(1, nodes + 1)]
    groups = host_groups(ids, per_host) if per_host else {nid: [nid] for nid in ids}
    envs = parse_faults(faults, list(groups), hosts=bool(per_host))

    def identity(name: str) -> dict[str, Any]:
        return {
            "type": "volume",
            "source": "pki",
            "target": "/certs",
            "read_only": True,
            "volume": {"subpath": name},
        }

    after_pki = {"pki": {"condition": "service_completed_successfully"}}
    bootstrap_healthy = {"bootstrap": {"condition": "service_healthy"}}
    svc: dict[str, Any] = {
        "pki": {
            "image": image,
            "build": build_context,
            "pull_policy": "build",
            "command": [
                "pki",
                "setup",
                "/pki",
                "--nodes",
                str(nodes),
                "--bootstrap-host",
                "bootstrap",
                *(["--per-host", str(per_host)] if per_host else []),
            ],
            "volumes": ["pki:/pki"],
        },
        "bootstrap": {
            "image": image,
            "pull_policy": "build",
            "command": [
                "bootstrap",
                "--certs",
                "/certs",
                "--state",
                "/state",
                "--listen",
                f"0.0.0.0:{BOOTSTRAP_PORT}",
            ],
            "volumes": [identity("bootstrap"), "bootstrap-state:/state"],
            "depends_on": after_pki,
            "healthcheck": healthcheck(BOOTSTRAP_PORT),
            "stop_signal": "SIGTERM",
            "stop_grace_period": STOP_GRACE_PERIOD,
        },
    }
    for host, members in groups.items() if per_host else ():
        svc[host] = {
            "image": image,
            "pull_policy": "build",
            "command": [
                "node",
                "--identities",
                "/certs",
                "--bootstrap",
                f"bootstrap:{BOOTSTRAP_PORT}",
                "--ledger",
                "/ledger",
                "--listen",
                f"0.0.0.0:{PEER_PORT}",
                "--advertise",
                f"{host}:{PEER_PORT}",
                "--data",
                "/data",
            ],
            # its own nodes' identity folders only (`netdp pki setup --per-host`), and each node's
            # own ledger volume at /ledger/NODE_ID (what --ledger /ledger gives it)
            "volumes": [
                identity(f"{HOSTS_DIR}/{host}"),
                *(f"ledger-{nid}:/ledger/{nid}" for nid in members),
                f"{data_dir}:/data:ro",
            ],
            "depends_on": {**after_pki, **bootstrap_healthy},
            "healthcheck": healthcheck(PEER_PORT, len(members)),
            "stop_signal": "SIGTERM",
            "stop_grace_period": host_grace(len(members)),
        }
        if host in envs:
            svc[host]["environment"] = envs[host]
    for nid in ids if not per_host else ():
        node: dict[str, Any] = {
            "image": image,
            "pull_policy": "build",
            "command": [
                "node",
                "--certs",
                "/certs",
                "--bootstrap",
                f"bootstrap:{BOOTSTRAP_PORT}",
                "--ledger",
                "/ledger",
                "--listen",
                f"0.0.0.0:{PEER_PORT}",
                "--advertise",
                f"{nid}:{PEER_PORT}",
                "--data",
                f"/data/{nid}.txt",
            ],
            "volumes": [identity(nid), f"ledger-{nid}:/ledger", f"{data_dir}:/data:ro"],
            "depends_on": {**after_pki, **bootstrap_healthy},
            "healthcheck": healthcheck(PEER_PORT),
            "stop_signal": "SIGTERM",
            "stop_grace_period": STOP_GRACE_PERIOD,
        }
        if nid in envs:
            node["environment"] = envs[nid]
        svc[nid] = node
    if algorithm not in COMPOSED:
        raise ConfigError(f"compose runs {_names(COMPOSED)} (one value per node)")
    hooks = get_algorithm(algorithm).hooks
    job = hooks.compose_job(rounds, nodes, topology)
    if algorithm != DEFAULT:
        job = ["--algorithm", algorithm, *job]
    if hooks.compose_topology:
        job = ["--topology", topology, *job]
    job = [*job, "--wait-nodes", str(nodes)]
    svc["submit"] = {
        "image": image,
        "pull_policy": "build",
        "command": [
            "job",
            "submit",
            "--bootstrap",
            f"bootstrap:{BOOTSTRAP_PORT}",
            "--certs",
            "/certs",
            "--job-id",
            job_id_for(job),
            *job,
            "--wait",
            "600",
            "--out",
            "/results/result.json",
        ],
        "volumes": [identity("operator"), "results:/results"],
        "depends_on": bootstrap_healthy,
        # a restart re-attaches to the same job (fixed --job-id): it never spends budget again
        "restart": "on-failure:3",
    }
    volumes: dict[str, dict[str, Any]] = {
        "pki": {},
        "bootstrap-state": {},
        "results": {},
        **{f"ledger-{nid}": {} for nid in ids},
    }
    return {"name": "netdp", "services": svc, "volumes": volumes}


def generate(
    *,
    nodes: int = 8,
    topology: str = "ring",
    rounds: int = 10,
    faults: list[str] | None = None,
    image: str = "netdp:latest",
    data_dir: str = DATA_DIR,
    algorithm: str = "ring-sum",
    per_host: int = 0,
    build_context: str = ".",
    file: str | None = None,
) -> str:
    """The compose file as YAML text (block style, every value quoted as JSON, so that no value is
    reinterpreted by a YAML parser). `file`: where it is written, for the commands of its header
    (None or docker-compose.yml: the file Compose reads by default)."""
    doc = services(
        nodes, topology, rounds, faults or [], image, data_dir, algorithm, per_host, build_context
    )
    args = (
        f"--nodes {nodes}"
        + (f" --per-host {per_host}" if per_host else "")
        + f" --topology {topology} --rounds {rounds}"
        + (f" --algorithm {algorithm}" if algorithm != DEFAULT else "")
        + "".join(f" --fault {f}" for f in faults or [])
        + (f" --data-dir {data_dir}" if data_dir != DATA_DIR else "")
        + (f" --build-context {build_context}" if build_context != "." else "")
    )
    dc = "docker compose"
    if file not in (None, "docker-compose.yml"):
        args += f" -o {file}"
        dc += f" -f {file}"
    hosts = ""
    if per_host:
        groups = host_groups([f"node-{i}" for i in range(1, nodes + 1)], per_host)
        spans = [f"{h} {m[0]}..{m[-1]}" for h, m in groups.items()]
        if len(spans) > 3:
            spans = [spans[0], spans[1], "...", spans[-1]]
        hosts = (
            f"# Hosts of {per_host} nodes, each one `netdp node --identities` process: "
            f"{', '.join(spans)}.\n"
            f"# A host serves its nodes on ports {PEER_PORT}.., mounts only their keys, and each "
            "node's own ledger volume ledger-node-I\n"
            "# at /ledger/node-I (as with one service per node: a node keeps its ledger whatever "
            "the grouping).\n"
            "# A host crash takes down all its nodes; each restarts from its own ledger.\n"
        )
    header = (
        f"# Generated by `netdp compose {args}`; regenerate rather than edit.\n"
        f"# Needs Docker Engine >= {MIN_ENGINE} and Compose >= {MIN_COMPOSE} (volume "
        "subpaths, health check start_interval).\n"
        + hosts
        + "# Run and wait for the result (the exit code is submit's: 0 released, 1 failed, "
        "5 timed out):\n"
        f"#   {dc} up -d --build && {dc} wait submit\n"
        f"#   {dc} logs submit      # the released result; also "
        "/results/result.json in the `results` volume\n"
        + (
            "# Fault injection per host (all its nodes): NETDP_FAULT_* variables (see `netdp "
            "node --help`).\n"
            if per_host
            else "# Fault injection per node: NETDP_FAULT_* variables (see `netdp node --help`).\n"
        )
    )
    return header + _yaml(doc, 0) + "\n"


def _key(k: str) -> str:
    return k if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.-]*", k) else json.dumps(k)


def _yaml(v: Any, indent: int) -> str:
    pad = "  " * indent
    if isinstance(v, dict):
        if not v:
            return "{}"
        lines = []
        for k, x in v.items():
            flat = isinstance(x, list) and all(not isinstance(y, (dict, list)) for y in x)
            if flat:
                lines.append(f"{pad}{_key(k)}: " + _yaml(x, 0))
            elif isinstance(x, (dict, list)) and x:
                lines.append(f"{pad}{_key(k)}:\n{_yaml(x, indent + 1)}")
            else:
                lines.append(f"{pad}{_key(k)}: {_yaml(x, indent + 1)}")
        return "\n".join(lines)
    if isinstance(v, list):
        if not v:
            return "[]"
        if all(not isinstance(x, (dict, list)) for x in v):
            return pad + "[" + ", ".join(json.dumps(x) for x in v) + "]"
        out = []
        for x in v:
            body = _yaml(x, indent + 1).lstrip()
            out.append(f"{pad}- {body}")
        return "\n".join(out)
    return json.dumps(v)
