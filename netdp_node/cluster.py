"""A bootstrap and N node daemons as real OS processes on loopback, each with its own certificate,
port and ledger. Used by `netdp demo`, the multi-process tests and the benchmarks.

Every wait is bounded, and follows progress (netdp_node.waiting): it fails when the processes
stop advancing, not when a loaded machine is merely slow. `stop()` terminates (SIGTERM, then
SIGKILL after a grace period) every process it started, and is safe to call twice.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Hashable
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


@dataclass
class LocalCluster:
    workdir: Path
    n: int
    log_level: str = "info"
    poll_interval: float = 0.2
    procs: dict[str, Proc] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.workdir = Path(self.workdir)
        self.pki_dir = self.workdir / "pki"
        self.logs = self.workdir / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.ids = [node_id(i) for i in range(1, self.n + 1)]

    # -- certificates --------------------------------------------------------------------------
    def setup_pki(self) -> None:
        pki.init_ca(self.pki_dir, common_name="netdp demo CA")
        pki.issue(self.pki_dir, "operator", role="operator", hosts=())
        pki.issue(self.pki_dir, "bootstrap", role="bootstrap", hosts=("127.0.0.1", "localhost"))
        for nid in self.ids:
            pki.issue(self.pki_dir, nid, hosts=("127.0.0.1", "localhost"))

    def certs(self, ident: str) -> Path:
        return self.pki_dir / ident

    def ledger(self, nid: str) -> Path:
        return self.workdir / "ledgers" / nid

    @property
    def operator(self) -> pki.Identity:
        return pki.load_identity(self.certs("operator"))

    # -- processes -----------------------------------------------------------------------------
    def _spawn(self, name: str, args: list[str]) -> Proc:
        port_file = self.workdir / "ports" / name
        port_file.parent.mkdir(parents=True, exist_ok=True)
        port_file.unlink(missing_ok=True)
        log = self.logs / f"{name}.log"
        full = [sys.executable, "-m", "netdp_node.cli", *args, "--port-file", str(port_file),
                "--log-level", self.log_level]
        # Many node processes share this machine: one BLAS thread each (the IncA audit's SVDs
        # ran 100x slower with OpenBLAS's default threads on a loaded 2-core machine).
        env = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
               **os.environ, "PYTHONUNBUFFERED": "1"}
        with open(log, "ab") as fh:
            popen = subprocess.Popen(full, stdout=fh, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, env=env)
        p = Proc(name, full, log, port_file, popen)
        self.procs[name] = p
        return p

    def start_bootstrap(self, listen: str = "127.0.0.1:0", extra: list[str] | None = None) -> Proc:
        crl = self.pki_dir / "crl.pem"
        args = ["bootstrap", "--certs", str(self.certs("bootstrap")), "--state",
                str(self.workdir / "bootstrap-state"), "--listen", listen, "--crl", str(crl),
                *(extra or [])]
        return self._spawn("bootstrap", args)

    @property
    def bootstrap_address(self) -> str:
        return self.procs["bootstrap"].address

    def start_node(self, nid: str, *, data: Path | None = None, extra: list[str] | None = None,
                   certs: Path | None = None) -> Proc:
        args = ["node", "--certs", str(certs or self.certs(nid)), "--bootstrap",
                self.bootstrap_address, "--ledger", str(self.ledger(nid)), "--listen",
                "127.0.0.1:0", "--poll-interval", str(self.poll_interval), *(extra or [])]
        if data is not None:
            args += ["--data", str(data)]
        return self._spawn(nid, args)

    def progress(self, *names: str) -> Callable[[], Hashable]:
        """A progress probe of these processes (all by default): their CPU time and log sizes."""
        procs = [self.procs[n] for n in names] if names else list(self.procs.values())
        return probes(*[lambda p=p: cpu_ticks(p.popen.pid) if p.popen else None for p in procs],
                      *[lambda p=p: file_size(p.log) for p in procs])

    def wait_port(self, p: Proc, timeout: float = 30.0, limit: float | None = None) -> int:
        """Until `p` wrote its port file (a node: once registered). Start-up is CPU-bound: the
        wait fails when the process has neither used CPU nor logged for `timeout` seconds (or
        after `limit`, default waiting.DEFAULT_LIMIT), not when a loaded machine is slow."""

        def ready() -> int:
            if p.port_file.exists() and p.port_file.read_text().strip():
                return int(p.port_file.read_text())
            if not p.alive():
                raise RuntimeError(f"{p.name} exited with {p.popen.returncode if p.popen else '?'}"
                                   f" before it was ready:\n{p.log_text()[-3000:]}")
            return 0

        try:
            p.port = wait_progress(ready, f"{p.name} ready", stall=timeout, limit=limit,
                                   progress=self.progress(p.name))
        except TimeoutError as e:
            raise TimeoutError(f"{e}\n{p.log_text()[-3000:]}") from None
        return p.port

    def start(self, data: dict[str, Path] | None = None,
              extra: dict[str, list[str]] | None = None, timeout: float = 60.0) -> None:
        """PKI, bootstrap, then every node; returns once each node registered."""
        self.setup_pki()
        self.wait_port(self.start_bootstrap(), timeout)
        for nid in self.ids:
            self.start_node(nid, data=(data or {}).get(nid), extra=(extra or {}).get(nid))
        for nid in self.ids:
            self.wait_port(self.procs[nid], timeout)

    async def wait_registered(self, ids: list[str], timeout: float = 30.0) -> None:
        """Until every node of `ids` is registered; fails when no process of the cluster used CPU
        or logged for `timeout` seconds (see `wait_port`)."""
        c = BootstrapClient(self.bootstrap_address, self.operator)
        missing: list[str] = list(ids)

        async def registered() -> bool:
            have = {n.node_id for n in await c.list_nodes()}
            missing[:] = sorted(set(ids) - have)
            return not missing

        try:
            await await_progress(registered, f"{ids} to register", stall=timeout,
                                 progress=self.progress(), interval=0.1)
        except TimeoutError as e:
            raise TimeoutError(f"{e} (not registered: {missing})") from None
        finally:
            await c.close()

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
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
