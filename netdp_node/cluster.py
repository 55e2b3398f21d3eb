"""A bootstrap and N node daemons as real OS processes on loopback, each with its own certificate,
port and ledger. Used by `netdp demo`, the multi-process tests and the benchmarks.

Every wait is bounded, and follows progress (netdp_node.waiting): it fails when the processes
stop advancing, not when a loaded machine is merely slow. `stop()` terminates (SIGTERM, then
SIGKILL after a grace period) every process it started, and is safe to call twice.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from netdp_node.bootstrap_client import BootstrapClient
from netdp_node.security import pki
from netdp_node.waiting import await_progress, cpu_ticks, file_size, probes, wait_progress


@dataclass
class Proc:
    name: str
    args: list[str]
    log: Path
    port_file: Path
    popen: subprocess.Popen[bytes] | None = None
    port: int = 0

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


def node_id(i: int) -> str:
    return f"node-{i}"


def _runs(ids: list[str], seeds: dict[str, int]) -> list[list[str]]:
    """`ids` cut where the next node's seed is not the previous one's + 1."""
    out: list[list[str]] = []
    for nid in ids:
        if out and seeds[nid] == seeds[out[-1][-1]] + 1:
            out[-1].append(nid)
        else:
            out.append([nid])
    return out


@dataclass
class LocalCluster:
    workdir: Path
    n: int
    log_level: str = "info"
    poll_interval: float = 0.2
    procs: dict[str, Proc] = field(default_factory=dict)
    # node id -> the process that hosts it (a host process runs several nodes: `start_host`)
    host_of: dict[str, str] = field(default_factory=dict)
    ports: dict[str, int] = field(default_factory=dict)  # node id -> port, once ready

    def __post_init__(self) -> None:
        self.workdir = Path(self.workdir)
        self.pki_dir = self.workdir / "pki"
        self.logs = self.workdir / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.ids = [node_id(i) for i in range(1, self.n + 1)]

    # -- certificates --------------------------------------------------------------------------
    def setup_pki(self) -> None:
        pki.init_ca(self.pki_dir, common_name="netdp demo CA")
        pki.issue_many(
            self.pki_dir,
            [
                pki.Request("operator", role="operator", hosts=()),
                pki.Request("bootstrap", role="bootstrap"),
                *(pki.Request(nid) for nid in self.ids),
            ],
        )

    def certs(self, ident: str) -> Path:
        return self.pki_dir / ident

    def ledger(self, nid: str) -> Path:
        return self.workdir / "ledgers" / nid

    def write_data(self, lines: Mapping[str, str]) -> dict[str, Path]:
        """Each node's data file, DIR/data/NODE_ID.txt (where a host process reads its nodes'
        files), holding its line of values; node id -> the file, for `start(data=...)`."""
        out = {}
        for nid, line in lines.items():
            f = self.workdir / "data" / f"{nid}.txt"
            f.parent.mkdir(parents=True, exist_ok=True)
            f.write_text(f"{line}\n")
            out[nid] = f
        return out

    @property
    def operator(self) -> pki.Identity:
        return pki.load_identity(self.certs("operator"))

    # -- processes -----------------------------------------------------------------------------
    def _spawn(self, name: str, args: list[str]) -> Proc:
        port_file = self.workdir / "ports" / name
        port_file.parent.mkdir(parents=True, exist_ok=True)
        port_file.unlink(missing_ok=True)
        log = self.logs / f"{name}.log"
        full = [
            sys.executable,
            "-m",
            "netdp_node.cli",
            *args,
            "--port-file",
            str(port_file),
            "--log-level",
            self.log_level,
        ]
        # Many node processes share this machine: one BLAS thread each (the IncA audit's SVDs
        # ran 100x slower with OpenBLAS's default threads on a loaded 2-core machine).
        env = {
            "OPENBLAS_NUM_THREADS": "1",
            "OMP_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
            **os.environ,
            "PYTHONUNBUFFERED": "1",
        }
        with open(log, "ab") as fh:
            popen = subprocess.Popen(
                full, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env
            )
        p = Proc(name, full, log, port_file, popen)
        self.procs[name] = p
        return p

    def start_bootstrap(self, listen: str = "127.0.0.1:0", extra: list[str] | None = None) -> Proc:
        crl = self.pki_dir / "crl.pem"
        args = [
            "bootstrap",
            "--certs",
            str(self.certs("bootstrap")),
            "--state",
            str(self.workdir / "bootstrap-state"),
            "--listen",
            listen,
            "--crl",
            str(crl),
            *(extra or []),
        ]
        return self._spawn("bootstrap", args)

    @property
    def bootstrap_address(self) -> str:
        return self.procs["bootstrap"].address

    def start_node(
        self,
        nid: str,
        *,
        data: Path | None = None,
        extra: list[str] | None = None,
        certs: Path | None = None,
    ) -> Proc:
        args = [
            "node",
            "--certs",
            str(certs or self.certs(nid)),
            "--bootstrap",
            self.bootstrap_address,
            "--ledger",
            str(self.ledger(nid)),
            "--listen",
            "127.0.0.1:0",
            "--poll-interval",
            str(self.poll_interval),
            *(extra or []),
        ]
        if data is not None:
            args += ["--data", str(data)]
        self.host_of[nid] = nid
        return self._spawn(nid, args)

    def start_host(
        self,
        name: str,
        nids: list[str],
        *,
        data_dir: Path | None = None,
        extra: list[str] | None = None,
    ) -> Proc:
        """One process hosting the nodes `nids` (`netdp node --certs A --certs B ...`): ledgers
        under workdir/ledgers/NODE_ID, values from data_dir/NODE_ID.txt, `extra` flags for all
        (a `--seed S` gives the i-th node S+i). Its port file is {node id: port}."""
        if len(nids) < 2:
            raise ValueError("a host process runs at least 2 nodes (else use start_node)")
        certs = [x for nid in nids for x in ("--certs", str(self.certs(nid)))]
        args = [
            "node",
            *certs,
            "--bootstrap",
            self.bootstrap_address,
            "--ledger",
            str(self.workdir / "ledgers"),
            "--listen",
            "127.0.0.1:0",
            "--poll-interval",
            str(self.poll_interval),
            *(extra or []),
        ]
        if data_dir is not None:
            args += ["--data", str(data_dir)]
        for nid in nids:
            self.host_of[nid] = name
        return self._spawn(name, args)

    def hosted(self, name: str) -> list[str]:
        """The node ids process `name` runs."""
        return [nid for nid, h in self.host_of.items() if h == name]

    def address(self, nid: str) -> str:
        """Where node `nid` serves (once its process is ready)."""
        return f"127.0.0.1:{self.ports[nid]}"

    def wait_host(self, p: Proc, timeout: float = 30.0, limit: float | None = None) -> None:
        """Until the host process `p` wrote its port file (every node it hosts registered); the
        wait fails only when it stalls (see `wait_port`)."""

        def ready() -> dict[str, int] | None:
            if p.port_file.exists():
                text = p.port_file.read_text().strip()
                if text:
                    return {k: int(v) for k, v in json.loads(text).items()}
            if not p.alive():
                raise RuntimeError(
                    f"{p.name} exited with {p.popen.returncode if p.popen else '?'}"
                    f" before it was ready:\n{p.log_text()[-3000:]}"
                )
            return None

        try:
            got = wait_progress(
                ready, f"{p.name} ready", stall=timeout, limit=limit, progress=self.progress(p.name)
            )
        except TimeoutError as e:
            raise TimeoutError(f"{e}\n{p.log_text()[-3000:]}") from None
        self.ports.update(got or {})

    def progress(self, *names: str) -> Callable[[], Hashable]:
        """A progress probe of these processes (all by default): their CPU time and log sizes."""
        procs = [self.procs[n] for n in names] if names else list(self.procs.values())
        return probes(
            *[lambda p=p: cpu_ticks(p.popen.pid) if p.popen else None for p in procs],
            *[lambda p=p: file_size(p.log) for p in procs],
        )

    def wait_port(self, p: Proc, timeout: float = 30.0, limit: float | None = None) -> int:
        """Until `p` wrote its port file (a node: once registered). Start-up is CPU-bound: the
        wait fails when the process has neither used CPU nor logged for `timeout` seconds (or
        after `limit`, default waiting.DEFAULT_LIMIT), not when a loaded machine is slow."""

        def ready() -> int:
            if p.port_file.exists() and p.port_file.read_text().strip():
                return int(p.port_file.read_text())
            if not p.alive():
                raise RuntimeError(
                    f"{p.name} exited with {p.popen.returncode if p.popen else '?'}"
                    f" before it was ready:\n{p.log_text()[-3000:]}"
                )
            return 0

        try:
            p.port = wait_progress(
                ready, f"{p.name} ready", stall=timeout, limit=limit, progress=self.progress(p.name)
            )
        except TimeoutError as e:
            raise TimeoutError(f"{e}\n{p.log_text()[-3000:]}") from None
        return p.port

    def start(
        self,
        data: dict[str, Path] | None = None,
        extra: dict[str, list[str]] | None = None,
        timeout: float = 60.0,
        *,
        workers: int = 0,
        seeds: dict[str, int] | None = None,
        wait: bool = True,
        common: list[str] | None = None,
    ) -> None:
        """PKI, bootstrap, then every node; returns once each node registered (`wait`; else call
        `wait_ready`). `workers` = 0: one process per node. `workers` = W: the nodes are packed
        into W host processes (contiguous slices of the ids), except nodes with `extra` flags of
        their own (e.g. faults), which get a process each. `seeds`: each node's --seed (in a host
        process, consecutive in id order). `common`: flags for every node process."""
        self.setup_pki()
        self.wait_port(self.start_bootstrap(), timeout)
        extra = extra or {}
        seeds = seeds or {}

        def seed_flags(nid: str) -> list[str]:
            return [*(common or []), *(["--seed", str(seeds[nid])] if nid in seeds else [])]

        packed = [nid for nid in self.ids if not extra.get(nid)] if workers > 0 else []
        for nid in self.ids:
            if nid not in packed:
                self.start_node(
                    nid, data=(data or {}).get(nid), extra=[*extra.get(nid, []), *seed_flags(nid)]
                )
        w = min(workers, len(packed))
        parts = [packed[k * len(packed) // w : (k + 1) * len(packed) // w] for k in range(w)]
        if seeds:  # a host gives its i-th node --seed S+i: split where the seeds are not
            parts = [run for part in parts for run in _runs(part, seeds)]
        for k, part in enumerate(parts):
            if len(part) == 1:
                self.start_node(part[0], data=(data or {}).get(part[0]), extra=seed_flags(part[0]))
                continue
            dirs = {Path(data[x]).parent for x in part} if data else set()
            if len(dirs) > 1 or (data and any(Path(data[x]).stem != x for x in part)):
                raise ValueError("hosted nodes read DIR/NODE_ID.txt from one folder")
            self.start_host(
                f"host-{k + 1}", part, data_dir=next(iter(dirs), None), extra=seed_flags(part[0])
            )
        if wait:
            self.wait_ready(timeout)

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Until every node process and host process wrote its port file."""
        for name in dict.fromkeys(self.host_of[nid] for nid in self.ids):
            p = self.procs[name]
            if name in self.ids:
                self.ports[name] = self.wait_port(p, timeout)
            else:
                self.wait_host(p, timeout)

    async def wait_registered(
        self,
        ids: list[str],
        timeout: float = 30.0,
        on_progress: Callable[[int, int], None] | None = None,
    ) -> None:
        """Until every node of `ids` is registered; fails when no process of the cluster used CPU
        or logged for `timeout` seconds (see `wait_port`). `on_progress(registered, total)` is
        called whenever the count changes."""
        c = BootstrapClient(self.bootstrap_address, self.operator)
        missing: list[str] = list(ids)
        seen = [-1]

        async def registered() -> bool:
            have = {n.node_id for n in await c.list_nodes()}
            missing[:] = sorted(set(ids) - have)
            for name in dict.fromkeys(self.host_of.get(nid, nid) for nid in missing):
                p = self.procs.get(name)
                if p is not None and p.popen is not None and not p.alive():
                    raise RuntimeError(
                        f"{name} exited with {p.popen.returncode} before "
                        f"{'its nodes' if name not in self.ids else 'it'} "
                        f"registered:\n{p.log_text()[-3000:]}"
                    )
            if on_progress is not None and len(ids) - len(missing) != seen[0]:
                seen[0] = len(ids) - len(missing)
                on_progress(seen[0], len(ids))
            return not missing

        try:
            await await_progress(
                registered,
                f"{len(ids)} nodes to register",
                stall=timeout,
                progress=self.progress(),
                interval=0.1 if len(ids) <= 64 else 1.0,
            )
        except TimeoutError as e:
            raise TimeoutError(f"{e} (not registered: {missing})") from None
        finally:
            await c.close()

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        """Signal process `name` (a node, or a host process: every node it runs) and reap it."""
        p = self.procs[name]
        if p.alive() and p.popen is not None:
            p.popen.send_signal(sig)
            p.popen.wait(timeout=15)

    def stop(self, grace: float = 8.0) -> dict[str, int | None]:
        """SIGTERM everything, wait up to `grace` seconds, SIGKILL what is left. Returns exit codes."""
        for p in self.procs.values():
            if p.alive() and p.popen is not None:
                p.popen.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace
        for p in self.procs.values():
            if p.popen is None:
                continue
            try:
                p.popen.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.popen.kill()
                p.popen.wait(timeout=5)
        return {name: (p.popen.returncode if p.popen else None) for name, p in self.procs.items()}
