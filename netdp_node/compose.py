"""`netdp compose`: generate a docker compose file for a bootstrap and N nodes.

Services: `pki` (one shot: `netdp pki setup`, certificates into the `pki` volume), `bootstrap`,
`node-1..node-N` (each mounts only its own identity folder, a ledger volume of its own and its value
file; fault flags as NETDP_FAULT_* environment variables) and `submit` (one shot: waits for the N
nodes, submits a ring sum, writes the result to the `results` volume). The root
`docker-compose.yml` is this generator's output for 8 nodes; tests/unit/test_compose.py runs every
service's command with `--check`, so the file cannot drift from the CLI.

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
BOOTSTRAP_PORT = 7600
#: Docker sends SIGKILL this long after SIGTERM. A node's own shutdown takes its gRPC server's
#: grace period (2 s) plus closing links and the ledger; the margin covers a loaded host, so that a
#: node is never killed in the middle of a ledger write (Docker's default is 10 s).
STOP_GRACE_PERIOD = "30s"
#: Minimum versions (documented in the file's header): `volume.subpath` needs Docker Engine 26.0,
#: the health checks' `start_interval` Engine 25.0; tested with Engine 26.1.5 and Compose 2.26.1.
MIN_ENGINE = "26.0"
MIN_COMPOSE = "2.26"


def healthcheck(port: int) -> dict[str, Any]:
    """`netdp probe` (a TCP connect to the service's own port, no TLS handshake): checked every
    second while starting (start_interval), every 30 s after."""
    return {
        "test": ["CMD", "netdp", "probe", f"127.0.0.1:{port}"],
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


def parse_faults(specs: list[str], ids: list[str]) -> dict[str, dict[str, str]]:
    """`node-3:drop=0.2,delay_ms=50` -> {"node-3": {"NETDP_FAULT_DROP": "0.2", ...}}."""
    out: dict[str, dict[str, str]] = {}
    for spec in specs:
        node, sep, rest = spec.partition(":")
        if not sep or node not in ids:
            raise ConfigError(
                f"--fault {spec!r}: expected NODE:KEY=VALUE with NODE in {ids[0]}..{ids[-1]}"
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


def services(
    nodes: int,
    topology: str,
    rounds: int,
    faults: list[str],
    image: str,
    data_dir: str,
    algorithm: str = "ring-sum",
) -> dict[str, Any]:
    if not 3 <= nodes <= 256:
        raise ConfigError("--nodes must be between 3 and 256")
    ids = [f"node-{i}" for i in range(1, nodes + 1)]
    envs = parse_faults(faults, ids)

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
            "build": ".",
            "pull_policy": "build",
            "command": [
                "pki",
                "setup",
                "/pki",
                "--nodes",
                str(nodes),
                "--bootstrap-host",
                "bootstrap",
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
    for nid in ids:
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
    data_dir: str = "./deploy/compose/data",
    algorithm: str = "ring-sum",
) -> str:
    """The compose file as YAML text (block style, every value quoted as JSON, so that no value is
    reinterpreted by a YAML parser)."""
    doc = services(nodes, topology, rounds, faults or [], image, data_dir, algorithm)
    args = (
        f"--nodes {nodes} --topology {topology} --rounds {rounds}"
        + (f" --algorithm {algorithm}" if algorithm != DEFAULT else "")
        + "".join(f" --fault {f}" for f in faults or [])
    )
    header = (
        f"# Generated by `netdp compose {args}`; regenerate rather than edit.\n"
        f"# Needs Docker Engine >= {MIN_ENGINE} and Compose >= {MIN_COMPOSE} (volume "
        "subpaths, health check start_interval).\n"
        "# Run and wait for the result (the exit code is submit's: 0 released, 1 failed, "
        "5 timed out):\n"
        "#   docker compose up -d --build && docker compose wait submit\n"
        "#   docker compose logs submit      # the released result; also "
        "/results/result.json in the `results` volume\n"
        "# Fault injection per node: NETDP_FAULT_* variables (see `netdp node --help`).\n"
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
