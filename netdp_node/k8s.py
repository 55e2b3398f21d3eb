"""`netdp pki k8s-secrets`: the per-host Secrets of deploy/k8s/hosts.yaml, from a pki folder.

The StatefulSet `netdp-host` of deploy/k8s/hosts.yaml runs M nodes in each pod: pod `<prefix>-<i>`
hosts the nodes `<prefix>-<i>-0 .. <prefix>-<i>-<M-1>` (an id names the pod that runs it, so a node
never moves to another pod's ledger volume). Their identities are in ONE Secret per pod,
`<prefix>-<i>-identities`, holding each node's identity folder as three keys:

    <node id>.ca.pem, <node id>.cert.pem, <node id>.key.pem

(unique over all Secrets, so that the pod template's projected volume can list every host Secret
without items; the pod's init container maps its own keys back to folders <node id>/{ca,cert,key}.pem
and checks each certificate's id). Optional private values go to `<prefix>-<i>-data`, keys
`<node id>.txt` (or `.npy`).

`host_secrets` issues the identities that are missing from the CA folder (existing ones are kept:
idempotent, so that scaling is "run it again with more hosts, apply"), leaves out the revoked ones
(`netdp pki revoke`: a node the bootstrap refuses stops its whole host process at start), and
returns the Secrets as a YAML stream for `kubectl apply -f` (it holds private keys: written with
mode 0600).
"""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

from netdp_node.errors import ConfigError
from netdp_node.security import pki

#: A Secret holds at most 1 MiB (all keys' values together, before base64).
SECRET_LIMIT = 1024 * 1024
PARTS = ("ca", "cert", "key")


def host_ids(prefix: str, host: int, per_host: int) -> list[str]:
    """The node ids pod `<prefix>-<host>` runs."""
    return [f"{prefix}-{host}-{j}" for j in range(per_host)]


def host_secrets(
    directory: str | os.PathLike[str],
    *,
    hosts: int,
    per_host: int,
    prefix: str = "netdp-host",
    namespace: str = "netdp",
    cluster_domain: str = "cluster.local",
    data: str | os.PathLike[str] | None = None,
) -> tuple[str, list[str]]:
    """(the YAML stream of the Secrets of pods 0..hosts-1, the node ids issued by this call)."""
    if hosts < 1:
        raise ConfigError(f"--hosts must be at least 1, got {hosts}")
    if per_host < 1:
        raise ConfigError(f"--per-host must be at least 1, got {per_host}")
    root = Path(directory)
    if not (root / pki.CA_CERT_FILE).is_file():
        raise ConfigError(f"{root}: no CA (create one with `netdp pki init {root}`)")
    values = Path(data) if data is not None else None
    if values is not None and not values.is_dir():
        raise ConfigError(f"--data {values}: not a folder")
    revoked = pki.revoked_ids(root)
    # the missing certificates, issued in one batch; a node's extra host name is its pod's stable
    # DNS name through the headless Service (optional for netdp callers)
    missing = [
        pki.Request(nid, hosts=(f"{prefix}-{i}.{prefix}.{namespace}.svc.{cluster_domain}",))
        for i in range(hosts)
        for nid in host_ids(prefix, i, per_host)
        if nid not in revoked and not (root / nid / pki.CERT_FILE).is_file()
    ]
    pki.issue_many(root, missing)
    issued = [r.node_id for r in missing]
    docs: list[str] = []
    for i in range(hosts):
        pod = f"{prefix}-{i}"
        keys: dict[str, bytes] = {}
        vals: dict[str, bytes] = {}
        for nid in host_ids(prefix, i, per_host):
            if nid in revoked:
                continue  # left out: a revoked node would stop its whole pod at start
            ident = pki.load_identity(root / nid)
            if (ident.node_id, ident.role) != (nid, "node"):
                raise ConfigError(
                    f"{root / nid} holds the {ident.role} certificate of {ident.node_id!r}, "
                    f"not the node certificate of {nid!r}"
                )
            for part in PARTS:
                keys[f"{nid}.{part}.pem"] = (root / nid / f"{part}.pem").read_bytes()
            if values is not None:
                found = [values / f"{nid}{ext}" for ext in (".txt", ".npy")]
                found = [f for f in found if f.is_file()]
                if not found:
                    raise ConfigError(f"--data {values}: no {nid}.txt or {nid}.npy")
                vals[found[0].name] = found[0].read_bytes()
        docs.append(_secret(f"{pod}-identities", namespace, keys))
        if values is not None:
            docs.append(_secret(f"{pod}-data", namespace, vals))
    return "".join(docs), issued


def _secret(name: str, namespace: str, items: dict[str, bytes]) -> str:
    size = sum(len(v) for v in items.values())
    if size > SECRET_LIMIT:
        raise ConfigError(
            f"Secret {name} would hold {size} bytes, above Kubernetes' limit of {SECRET_LIMIT}: "
            "use a smaller --per-host"
        )
    lines = [
        "---",
        "apiVersion: v1",
        "kind: Secret",
        "type: Opaque",
        "metadata:",
        f"  name: {json.dumps(name)}",
        f"  namespace: {json.dumps(namespace)}",
        "  labels:",
        '    app.kubernetes.io/name: "netdp"',
        '    app.kubernetes.io/component: "host"',
        '    app.kubernetes.io/part-of: "netdp"',
        "data:",
        *(f"  {k}: {json.dumps(base64.b64encode(v).decode())}" for k, v in sorted(items.items())),
    ]
    return "\n".join(lines) + "\n"


def write_private(path: str | os.PathLike[str], text: str) -> None:
    """Write `text` to `path` readable by its owner only (it holds private keys)."""
    target = Path(path)
    tmp = target.with_name(f".{target.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(tmp, 0o600)
    tmp.replace(target)
