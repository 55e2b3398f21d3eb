"""Several node daemons in one process: `netdp node --certs A --certs B ...` or `--identities DIR`.

Each hosted node is a full node to its peers and to the bootstrap, exactly as in a process of its
own: its own certificate, its own mTLS gRPC server and port (grpc binds one set of server
credentials to a server, so nodes do not share one), its own client channels (they present its
certificate), its own bootstrap channel and registration, its own durable ledger, private RNG,
budget and fault injector. The process shares what carries no identity: the interpreter and its
imported modules, the asyncio loop, grpc's core (poller thread, completion queue), logging,
ONE SIGTERM/SIGINT handler that stops every hosted node (each closes its server, links and
ledger), and ONE watch of the bootstrap's news (netdp_node.jobwatch: a long poll that tells only
whether any job or revocation list is new, held on one hosted node's channel), on which every
hosted node asks the bootstrap for its own jobs and list, with its own certificate: idle, the
process costs the bootstrap one call per long poll, not one per hosted node. A crash of the
process (SIGKILL, --fault-crash-*, a power cut) takes down every node it hosts at once; each comes
back from its own ledger when the process restarts, having forgotten nothing it acknowledged or
spent (a token walk resumes; a job that cannot ends failed there).

Per-node values of the flags (`node_configs`), for n hosted identities in order 0..n-1:

    --ledger DIR           DIR/<node id> (one ledger folder per node)
    --data DIR             DIR/<node id>.txt or DIR/<node id>.npy (every node needs one)
    --listen HOST:P        port P+i (P = 0: any free port for each)
    --advertise HOST:P     port P+i
    --seed S               S+i (tests only: NOT PRIVATE)
    --fault-seed F         F+i (the other fault flags apply to every hosted node as given)
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gc
import json
import logging
import re
import signal
from collections.abc import Callable, Sequence
from pathlib import Path

from netdp_node.daemon import NodeConfig, NodeDaemon
from netdp_node.errors import ConfigError
from netdp_node.jobwatch import JobWatch
from netdp_node.security.pki import CERT_FILE, load_identity

log = logging.getLogger("netdp.host")

#: How many hosted nodes may be starting (serving, registering) at once.
START_WINDOW = 32


def _natural(name: str) -> list[object]:
    """node-2 before node-10."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


def identity_folders(certs: Sequence[str], identities: Sequence[str]) -> list[Path]:
    """The identity folders to host: every --certs folder as given, then, for each --identities
    DIR, every subfolder of DIR holding a node certificate (as `netdp pki issue DIR ID` writes
    them; the operator's and the bootstrap's folders of a CA directory are skipped), in natural
    order of their names."""
    out = [Path(c) for c in certs]
    for d in identities:
        root = Path(d)
        if not root.is_dir():
            raise ConfigError(f"--identities {root}: not a folder")
        found = []
        for sub in sorted(
            (p for p in root.iterdir() if (p / CERT_FILE).is_file()), key=lambda p: _natural(p.name)
        ):
            if load_identity(sub).role == "node":
                found.append(sub)
        if not found:
            raise ConfigError(
                f"--identities {root}: no node identity folder in it (each is a "
                f"subfolder with ca.pem, cert.pem and key.pem, as `netdp pki issue` "
                f"writes them)"
            )
        out += found
    return out


def _shift_port(addr: str | None, i: int) -> str | None:
    if addr is None:
        return None
    host, _, port = addr.rpartition(":")
    p = int(port)
    if p == 0:
        return addr
    if p + i > 65535:
        raise ConfigError(f"port {p}+{i} of hosted node #{i + 1} is above 65535")
    return f"{host}:{p + i}"


def node_configs(base: object, folders: Sequence[Path]) -> list[object]:
    """One NodeConfig per hosted identity, from the one `base` the flags gave (module docstring).
    One folder: `base` as it is (a process of one node, as before)."""
    assert isinstance(base, NodeConfig)
    if len(folders) == 1:
        return [dataclasses.replace(base, certs=folders[0])]
    ids = [load_identity(f).node_id for f in folders]
    seen: dict[str, Path] = {}
    for nid, f in zip(ids, folders):
        if nid in seen:
            raise ConfigError(f"node {nid} is given twice: {seen[nid]} and {f}")
        seen[nid] = f
    if base.data is not None and not base.data.is_dir():
        raise ConfigError(
            f"--data {base.data}: with several identities, --data names a folder "
            "holding NODE_ID.txt (or .npy) for each hosted node"
        )
    out: list[object] = []
    for i, (nid, folder) in enumerate(zip(ids, folders)):
        data = None
        if base.data is not None:
            data = next(
                (
                    base.data / f"{nid}{ext}"
                    for ext in (".txt", ".npy")
                    if (base.data / f"{nid}{ext}").is_file()
                ),
                None,
            )
            if data is None:
                raise ConfigError(
                    f"--data {base.data}: no {nid}.txt or {nid}.npy for hosted node {nid}"
                )
        faults = base.faults
        if faults.active:
            faults = dataclasses.replace(faults, seed=faults.seed + i)
        out.append(
            dataclasses.replace(
                base,
                certs=folder,
                ledger=base.ledger / nid,
                data=data,
                listen=_shift_port(base.listen, i) or base.listen,
                advertise=_shift_port(base.advertise, i),
                seed=None if base.seed is None else base.seed + i,
                faults=faults,
            )
        )
    return out


#: The cyclic collector's thresholds in a node process once it serves (`settle_heap`): a young
#: collection every 50,000 net allocations instead of 700, an older one every 20 of them. A job's
#: messages, futures and grpc calls make objects by the hundred thousand and almost no garbage
#: cycles; with the defaults the collector took about a seventh of a host's event-loop thread in a
#: 1,000-node walk-sum job. Paired demo jobs, hosts' CPU: 500 nodes 57.1 / 59.2 → 46.8 / 47.0 s,
#: 1,000 nodes 129.2 / 127.7 → 108.4 / 117.3 s (benchmarks/results/host_job-gc.json); the
#: hosts' peak memory per node was the same.
NODE_GC_THRESHOLDS = (50_000, 20, 10)


def settle_heap() -> None:
    """Every hosted node is serving: what start-up made (modules, certificates, each node's state)
    lives as long as the process. Collect start-up's garbage once, then freeze the rest
    (`gc.freeze`): the cyclic collector's full collections, which the links and messages of a long
    job trigger again and again, then scan only what came after instead of the whole heap (a 300-node
    walk-sum job spent about 2.3 of its 48 CPU-s per host process in 9 full collections); and
    collect less often from then on (`NODE_GC_THRESHOLDS`)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*NODE_GC_THRESHOLDS)


async def run_host(
    configs: Sequence[object], on_ready: Callable[[dict[str, int]], None] | None = None
) -> int:
    """Run every node of `configs` on this loop until SIGTERM/SIGINT (one handler for all).

    `on_ready({node id: port})` is called once every node has registered. A node that cannot start
    (its certificate, its ledger, the bootstrap refusing it) stops them all: the error is raised
    (the command's exit code), after every other node shut down cleanly. A node that stops by
    itself later (its certificate revoked) stops alone; the others keep running, and the exit code
    is the worst of all nodes' codes once they have all stopped."""
    first = configs[0]
    assert isinstance(first, NodeConfig)
    # one watch of the bootstrap's news for the whole process (the flags give every node the same
    # bootstrap, wait and poll interval)
    watch = JobWatch(wait=first.long_poll, poll_interval=first.poll_interval)
    daemons = [NodeDaemon(cfg, watch) for cfg in configs]  # type: ignore[arg-type]
    loop = asyncio.get_running_loop()

    def stop_all() -> None:
        for d in daemons:
            d.stop_event.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop_all)
    readies: list[asyncio.Future[int]] = [loop.create_future() for _ in daemons]
    # at most START_WINDOW nodes between start and registration at a time: hundreds of TLS
    # handshakes and registrations at once only slow each other (and the bootstrap) down
    window = asyncio.Semaphore(START_WINDOW)

    async def run_one(d: NodeDaemon, ready: asyncio.Future[int]) -> int:
        async with window:
            if d.stop_event.is_set():
                return 0  # stopped before its turn came
            task = asyncio.ensure_future(d.run(ready, signals=False))
            await asyncio.wait({task, ready}, return_when=asyncio.FIRST_COMPLETED)
        return await task

    tasks = [asyncio.ensure_future(run_one(d, r)) for d, r in zip(daemons, readies)]
    if len(daemons) > 1:
        log.info(
            "hosting %d nodes in this process: %s",
            len(daemons),
            ", ".join(d.node_id for d in daemons),
        )

    async def announce() -> None:
        await asyncio.gather(*readies)
        settle_heap()
        if len(daemons) > 1:
            log.info("all %d hosted nodes registered", len(daemons))
        if on_ready is not None:
            on_ready({d.node_id: r.result() for d, r in zip(daemons, readies)})

    announcer = asyncio.ensure_future(announce())
    first_error: BaseException | None = None
    pending = set(tasks)
    try:
        while pending:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for t in done:
                d = daemons[tasks.index(t)]
                if t.cancelled():
                    continue
                err = t.exception()
                if err is not None:
                    if first_error is None:
                        first_error = err
                        if len(daemons) > 1:
                            log.error(
                                "[node=%s] could not run (%s: %s); stopping the %d other "
                                "hosted node(s)",
                                d.node_id,
                                type(err).__name__,
                                err,
                                len(pending),
                            )
                    stop_all()
                elif len(daemons) > 1 and pending and t.result() != 0:
                    log.error(
                        "[node=%s] stopped with code %d; the other hosted nodes keep running",
                        d.node_id,
                        t.result(),
                    )
    finally:
        announcer.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await announcer
        await watch.close()
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.remove_signal_handler(sig)
    if len(daemons) > 1:
        log.info("all %d hosted nodes stopped", len(daemons))
    if first_error is not None:
        raise first_error
    return max((t.result() for t in tasks), default=0)


def write_port_file(path: str | Path, ports: dict[str, int]) -> None:
    """One node: its port (as before). Several: a JSON object {node id: port}."""
    text = str(next(iter(ports.values()))) if len(ports) == 1 else json.dumps(ports)
    tmp = Path(f"{path}.tmp")
    tmp.write_text(text)
    tmp.replace(path)  # a reader never sees half of it
