"""The machinery of the network-namespace tests (tests/e2e): a private L2 network made of
namespaces, and a bootstrap plus node daemons running inside it. The fixtures are in conftest.py.

Topology (one per test; `<t>` is a random 6-hex tag, `x` a random /24 in 10.77.0.0/16):

    ndp-br-<t>     a namespace holding only the bridge `br0` and the bridge ends `p-b`, `p-1`, ...
    ndp-<t>-b      the bootstrap's namespace: `lo` and `v-b` = 10.77.x.1/24
    ndp-<t>-i      node-i's namespace:        `lo` and `v-i` = 10.77.x.(10+i)/24

Each `v-*`/`p-*` pair is a veth created directly inside its two namespaces (nothing is ever added
to the root namespace). There are no default routes: the only route in a host namespace is the
connected 10.77.x.0/24, so nothing can leave the bridge. The test process (root namespace) cannot
reach any of it: it runs the operator CLI inside the bootstrap's namespace (`NetnsCluster.operator`)
and reads ledgers from disk.

Tear-down (`NetnsCluster.stop`, `Topology.destroy`): processes first (SIGCONT + SIGTERM, SIGKILL
after a grace period), then any process still inside one of the namespaces (`ip netns pids`: the
test's own helpers, such as the proxy) is SIGKILLed by pid, then `ip netns del` for each namespace
(which destroys its veth ends and the bridge). An `atexit` hook repeats the namespace deletion for
anything a failed tear-down left registered, and each session starts by deleting the namespaces of
earlier runs whose owner process is dead (`sweep_orphans`: the bridge's alias names its owner).
"""

from __future__ import annotations

import atexit
import json
import os
import random
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from netdp_node.errors import LedgerError
from netdp_node.ledger import Entry, Ledger
from netdp_node.security import pki
from netdp_node.waiting import Probe, cpu_ticks, file_size, probes, tree_size, wait_progress

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
BOOTSTRAP_PORT = 7600
NODE_PORT = 7601
IP_TIMEOUT = 20.0

# Every namespace any test of this session created and has not deleted yet (for the atexit hook).
_LIVE_NAMESPACES: set[str] = set()


# -- ip(8) ----------------------------------------------------------------------------------------
class IpError(RuntimeError):
    pass


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run `ip ARGS...`; IpError (with stderr) if it fails and `check`."""
    try:
        r = subprocess.run(
            ["ip", *args],
            capture_output=True,
            text=True,
            timeout=IP_TIMEOUT,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise IpError(f"ip {' '.join(args)}: {e}") from e
    if check and r.returncode != 0:
        raise IpError(f"ip {' '.join(args)} exited {r.returncode}: {r.stderr.strip()}")
    return r


def netns_list() -> set[str]:
    r = ip("netns", "list", check=False)
    return {line.split()[0] for line in r.stdout.splitlines() if line.strip()}


def netns_pids(ns: str) -> list[int]:
    r = ip("netns", "pids", ns, check=False)
    return [int(x) for x in r.stdout.split() if x.isdigit()]


def _kill_pids(pids: Sequence[int], timeout: float = 10.0) -> list[int]:
    """SIGKILL these pids (SIGCONT first: a stopped process dies on SIGKILL anyway, but this keeps
    the intent obvious) and wait until they are gone; returns those still alive."""
    for pid in pids:
        for sig in (signal.SIGCONT, signal.SIGKILL):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                break
    deadline = time.monotonic() + timeout
    alive = list(pids)
    while alive and time.monotonic() < deadline:
        alive = [p for p in alive if _alive(p)]
        if alive:
            time.sleep(0.05)
    return alive


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def delete_namespaces(names: Sequence[str]) -> list[str]:
    """Kill every process left in these namespaces, delete them; returns the ones that remain."""
    for ns in names:
        pids = netns_pids(ns)
        if pids:
            _kill_pids(pids)
    for ns in names:
        for _ in range(20):
            r = ip("netns", "del", ns, check=False)
            if r.returncode == 0 or ns not in netns_list():
                break
            time.sleep(0.1)
        _LIVE_NAMESPACES.discard(ns)
    left = netns_list()
    return [ns for ns in names if ns in left]


@atexit.register
def _last_resort() -> None:
    if _LIVE_NAMESPACES:
        delete_namespaces(sorted(_LIVE_NAMESPACES))


def _starttime(pid: int) -> str | None:
    """The start time of process `pid` (field 22 of /proc/PID/stat), or None if it is gone:
    with the pid it identifies a process even if the pid is reused."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


OWNER_PREFIX = "netdp-e2e:"


def owner_mark() -> str:
    """Written as the alias of each topology's bridge: which process owns the namespaces."""
    return f"{OWNER_PREFIX}{os.getpid()}:{_starttime(os.getpid())}"


def sweep_orphans() -> list[str]:
    """Delete the namespaces of earlier runs whose owning process is gone (a run killed with
    SIGKILL cannot run its finalizers). Namespaces of live runs, and any not made by these tests
    (no owner mark on a `br0` in an `ndp-br-*` namespace), are left alone."""
    names = netns_list()
    removed: list[str] = []
    for br in sorted(n for n in names if n.startswith("ndp-br-")):
        r = ip("-n", br, "-j", "link", "show", "br0", check=False)
        try:
            alias = str(json.loads(r.stdout)[0].get("ifalias", ""))
        except (ValueError, IndexError, KeyError):
            continue
        if not alias.startswith(OWNER_PREFIX):
            continue
        pid, _, start = alias[len(OWNER_PREFIX) :].partition(":")
        if pid.isdigit() and _starttime(int(pid)) == start:
            continue  # its run is still going
        tag = br[len("ndp-br-") :]
        group = [br, *sorted(n for n in names if n.startswith(f"ndp-{tag}-"))]
        delete_namespaces(group)
        removed += group
    return removed


# -- topology -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Host:
    name: str  # "b" (bootstrap) or "1".."n"
    ns: str  # its namespace
    dev: str  # its veth end inside `ns`
    bridge_port: str  # the other end, enslaved to br0 in the bridge namespace
    ip: str


@dataclass
class Topology:
    """A bridge in its own namespace and one namespace per host, each with one veth on the bridge."""

    n_nodes: int
    tag: str = field(default_factory=lambda: secrets.token_hex(3))
    subnet: int = field(default_factory=lambda: random.randrange(256))
    hosts: dict[str, Host] = field(default_factory=dict)
    created: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.bridge_ns = f"ndp-br-{self.tag}"
        names = ["b", *(str(i) for i in range(1, self.n_nodes + 1))]
        for name in names:
            last = 1 if name == "b" else 10 + int(name)
            ns = f"ndp-{self.tag}-{name}"
            assert len(ns) <= 15 and len(self.bridge_ns) <= 15, ns
            self.hosts[name] = Host(
                name, ns, f"v-{name}", f"p-{name}", f"10.77.{self.subnet}.{last}"
            )

    def _add_ns(self, ns: str) -> None:
        ip("netns", "add", ns)
        self.created.append(ns)
        _LIVE_NAMESPACES.add(ns)

    def create(self) -> None:
        br = self.bridge_ns
        self._add_ns(br)
        ip("-n", br, "link", "set", "lo", "up")
        # STP off (the default) so ports forward at once; no address on the bridge.
        ip("-n", br, "link", "add", "br0", "type", "bridge", "stp_state", "0")
        ip("-n", br, "link", "set", "br0", "alias", owner_mark(), "up")
        for h in self.hosts.values():
            self._add_ns(h.ns)
            ip(
                "link",
                "add",
                h.dev,
                "netns",
                h.ns,
                "type",
                "veth",
                "peer",
                "name",
                h.bridge_port,
                "netns",
                br,
            )
            ip("-n", br, "link", "set", h.bridge_port, "master", "br0")
            ip("-n", br, "link", "set", h.bridge_port, "up")
            ip("-n", h.ns, "link", "set", "lo", "up")
            ip("-n", h.ns, "addr", "add", f"{h.ip}/24", "dev", h.dev)
            ip("-n", h.ns, "link", "set", h.dev, "up")

    def destroy(self) -> list[str]:
        """Delete every namespace this topology created; returns those that could not be."""
        left = delete_namespaces(list(reversed(self.created)))
        self.created = [ns for ns in self.created if ns in left]
        return left

    def node(self, i: int) -> Host:
        return self.hosts[str(i)]

    @property
    def bootstrap(self) -> Host:
        return self.hosts["b"]

    def link(self, host: Host, state: str) -> None:
        """`ip netns exec NS ip link set DEV up|down`, from outside the processes."""
        r = subprocess.run(
            ["ip", "netns", "exec", host.ns, "ip", "link", "set", host.dev, state],
            capture_output=True,
            text=True,
            timeout=IP_TIMEOUT,
            check=False,
        )
        if r.returncode != 0:
            raise IpError(f"ip link set {host.dev} {state} in {host.ns}: {r.stderr.strip()}")

    def bridge_port_bytes(self, host: Host) -> int:
        """Bytes through this host's port of the bridge (both directions)."""
        st = json.loads(
            ip("-n", self.bridge_ns, "-s", "-j", "link", "show", host.bridge_port).stdout
        )[0]["stats64"]
        return int(st["rx"]["bytes"]) + int(st["tx"]["bytes"])


# -- processes ------------------------------------------------------------------------------------
@dataclass
class Proc:
    name: str
    host: Host
    args: list[str]
    log: Path
    popen: subprocess.Popen[bytes]
    port_file: Path | None = None

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


def wait_until(
    cond: Callable[[], Any],
    timeout: float,
    what: str,
    interval: float = 0.05,
    *,
    progress: Probe | None = None,
    limit: float | None = None,
) -> Any:
    """Poll `cond` until it returns something truthy. Without `progress`: TimeoutError after
    `timeout` seconds. With a progress probe (e.g. `NetnsCluster.progress()`): TimeoutError once
    the probe has not changed for `timeout` seconds, or after `limit` (default
    waiting.DEFAULT_LIMIT) in all, so that a loaded machine makes a test slower, never red."""
    return wait_progress(
        cond, what, stall=timeout, limit=limit, progress=progress, interval=interval
    )


class NetnsCluster:
    """A bootstrap and n node daemons, each in its own namespace of a `Topology`."""

    def __init__(
        self,
        root: Path,
        topo: Topology,
        *,
        poll_interval: float = 0.2,
        peer_timeout: float = 8.0,
        job_deadline: float = 60.0,
    ) -> None:
        self.root = root
        self.topo = topo
        self.n = topo.n_nodes
        self.ids = [f"node-{i}" for i in range(1, self.n + 1)]
        self.poll_interval = poll_interval
        self.peer_timeout = peer_timeout
        self.job_deadline = job_deadline
        self.pki_dir = root / "pki"
        self.logs = root / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.procs: dict[str, Proc] = {}
        self.retired: list[Proc] = []  # killed/replaced processes, still reaped at teardown
        self.values: dict[str, float] = {}

    # addresses and paths
    @property
    def bootstrap_address(self) -> str:
        return f"{self.topo.bootstrap.ip}:{BOOTSTRAP_PORT}"

    def host(self, nid: str) -> Host:
        return self.topo.node(int(nid.rsplit("-", 1)[1]))

    def address(self, nid: str) -> str:
        return f"{self.host(nid).ip}:{NODE_PORT}"

    def ledger(self, nid: str) -> Path:
        return self.root / "ledgers" / nid

    def certs(self, ident: str) -> Path:
        return self.pki_dir / ident

    # certificates: each holder's certificate names the address the others dial
    def setup_pki(self) -> None:
        pki.init_ca(self.pki_dir, common_name="netdp e2e CA")
        pki.issue(self.pki_dir, "operator", role="operator", hosts=())
        pki.issue(self.pki_dir, "bootstrap", role="bootstrap", hosts=(self.topo.bootstrap.ip,))
        for nid in self.ids:
            pki.issue(self.pki_dir, nid, hosts=(self.host(nid).ip,))

    # processes
    def spawn(
        self, name: str, host: Host, argv: list[str], *, port_file: Path | None = None
    ) -> Proc:
        """Start `argv` inside `host`'s namespace (`ip netns exec` execs: the pid is the program's)."""
        log = self.logs / f"{name}.log"
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        with open(log, "ab") as fh:
            fh.write(
                f"\n=== {time.strftime('%H:%M:%S')} start in {host.ns}: {' '.join(argv)}\n".encode()
            )
            fh.flush()
            popen = subprocess.Popen(
                ["ip", "netns", "exec", host.ns, *argv],
                stdout=fh,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                cwd=REPO,
            )
        old = self.procs.get(name)
        if old is not None:
            self.retired.append(old)
        p = Proc(name, host, argv, log, popen, port_file)
        self.procs[name] = p
        return p

    def netdp_argv(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "netdp_node.cli", *args]

    def start_bootstrap(self) -> Proc:
        pf = self.root / "ports" / "bootstrap"
        pf.parent.mkdir(parents=True, exist_ok=True)
        pf.unlink(missing_ok=True)
        return self.spawn(
            "bootstrap",
            self.topo.bootstrap,
            self.netdp_argv(
                "bootstrap",
                "--certs",
                str(self.certs("bootstrap")),
                "--state",
                str(self.root / "bootstrap-state"),
                "--listen",
                self.bootstrap_address,
                "--crl",
                str(self.pki_dir / "crl.pem"),
                "--port-file",
                str(pf),
            ),
            port_file=pf,
        )

    def data_file(self, nid: str) -> Path:
        return self.root / "data" / f"{nid}.txt"

    def start_node(self, nid: str, extra: Sequence[str] = ()) -> Proc:
        """Start node `nid` in its namespace, listening on its address; "{ip}" in `extra` flags is
        replaced by that address (e.g. `--advertise {ip}:7602`)."""
        pf = self.root / "ports" / nid
        pf.parent.mkdir(parents=True, exist_ok=True)
        pf.unlink(missing_ok=True)
        args = [
            "node",
            "--certs",
            str(self.certs(nid)),
            "--bootstrap",
            self.bootstrap_address,
            "--ledger",
            str(self.ledger(nid)),
            "--listen",
            self.address(nid),
            "--port-file",
            str(pf),
            "--poll-interval",
            str(self.poll_interval),
            "--peer-timeout",
            str(self.peer_timeout),
            "--job-deadline",
            str(self.job_deadline),
        ]
        if nid in self.values:
            args += ["--data", str(self.data_file(nid))]
        extra = [f.replace("{ip}", self.host(nid).ip) for f in extra]
        return self.spawn(nid, self.host(nid), self.netdp_argv(*args, *extra), port_file=pf)

    def progress(self, cpu: bool = False) -> Probe:
        """Progress of the cluster: every process's log and every node's ledger size, plus (with
        `cpu`) every process's CPU time. Job waits leave CPU out: an idle daemon's polling uses a
        little CPU forever, and would keep a stuck wait alive until its hard bound."""
        procs = [*self.retired, *self.procs.values()]
        fns: list[Probe] = [lambda p=p: file_size(p.log) for p in procs]
        fns += [lambda n=n: tree_size(self.ledger(n)) for n in self.ids]
        if cpu:
            fns += [lambda p=p: cpu_ticks(p.pid) for p in procs]
        return probes(*fns)

    def wait_ready(self, p: Proc, timeout: float = 60.0) -> int:
        """Until the port file is written (a node writes it once registered with the bootstrap).
        Start-up is CPU-bound: `timeout` is how long the process may go without using CPU or
        logging (e.g. SIGSTOPped, or blocked) before the wait fails, not its total."""
        assert p.port_file is not None

        def ready() -> int:
            if p.port_file is not None and p.port_file.exists():
                text = p.port_file.read_text().strip()
                if text:
                    return int(text)
            if not p.alive():
                raise RuntimeError(
                    f"{p.name} exited with {p.popen.returncode} before it was "
                    f"ready:\n{p.log_text()[-3000:]}"
                )
            return 0

        try:
            return int(
                wait_until(
                    ready,
                    timeout,
                    f"{p.name} ready",
                    progress=probes(lambda: cpu_ticks(p.pid), lambda: file_size(p.log)),
                )
            )
        except TimeoutError as e:
            raise TimeoutError(f"{e}\n{p.log_text()[-3000:]}") from None

    def start(
        self,
        values: Sequence[float] | None = None,
        extra: dict[str, list[str]] | None = None,
        seed: int | None = 11,
    ) -> None:
        """PKI, bootstrap, then every node (with its value and flags); returns once all registered."""
        self.setup_pki()
        if values is not None:
            assert len(values) == self.n
            for nid, v in zip(self.ids, values):
                self.values[nid] = float(v)
                f = self.data_file(nid)
                f.parent.mkdir(parents=True, exist_ok=True)
                f.write_text(f"{float(v)!r}\n")
        assert self.wait_ready(self.start_bootstrap()) == BOOTSTRAP_PORT
        for i, nid in enumerate(self.ids):
            flags = list((extra or {}).get(nid, []))
            if seed is not None:
                flags += ["--seed", str(seed * 1000 + i)]
            self.start_node(nid, flags)
        for nid in self.ids:
            assert self.wait_ready(self.procs[nid]) == NODE_PORT

    def signal(self, name: str, sig: int) -> None:
        self.procs[name].popen.send_signal(sig)

    def kill(self, name: str) -> int:
        p = self.procs[name]
        p.popen.send_signal(signal.SIGKILL)
        return p.popen.wait(timeout=15)

    def stop(self, grace: float = 5.0) -> dict[str, int | None]:
        """SIGCONT + SIGTERM every process, SIGKILL what is left after `grace`; exit codes."""
        procs = [*self.retired, *self.procs.values()]
        for p in procs:
            if p.alive():
                for sig in (signal.SIGCONT, signal.SIGTERM):
                    try:
                        p.popen.send_signal(sig)
                    except ProcessLookupError:
                        pass
        deadline = time.monotonic() + grace
        for p in procs:
            try:
                p.popen.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.popen.kill()
                p.popen.wait(timeout=10)
        return {name: p.popen.returncode for name, p in self.procs.items()}

    # the operator: the CLI run inside the bootstrap's namespace
    def operator(self, *args: str, timeout: float = 90.0) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [
                "ip",
                "netns",
                "exec",
                self.topo.bootstrap.ns,
                *self.netdp_argv(
                    "job",
                    *args[:1],
                    "--bootstrap",
                    self.bootstrap_address,
                    "--certs",
                    str(self.certs("operator")),
                    *args[1:],
                ),
            ],
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=REPO,
            check=False,
            env=dict(os.environ, PYTHONUNBUFFERED="1"),
        )

    def submit(self, job_id: str, algorithm: str = "ring-sum", **params: Any) -> str:
        args = [
            "submit",
            "--job-id",
            job_id,
            "--participants",
            ",".join(self.ids),
            "--seed",
            "5",
            "--algorithm",
            algorithm,
        ]
        for k, v in params.items():
            args += ["--param", f"{k}={json.dumps(v)}"]
        r = self.operator(*args)
        assert r.returncode == 0, f"job submit exited {r.returncode}: {r.stderr}"
        assert r.stdout.strip() == job_id, r.stdout
        return job_id

    def result(self, job_id: str, wait: float = 60.0) -> tuple[int, dict[str, Any]]:
        """`netdp job result JOB --wait S --json` in the bootstrap namespace: (exit code, summary).
        Returns when every participant reported, one reported a failure, or after `wait`."""
        r = self.operator("result", job_id, "--wait", str(wait), "--json", timeout=wait + 60)
        try:
            return r.returncode, json.loads(r.stdout)
        except json.JSONDecodeError:
            raise AssertionError(
                f"job result exited {r.returncode}: {r.stdout}\n{r.stderr}"
            ) from None

    def job_spec(self, job_id: str) -> dict[str, Any]:
        """The job spec as the bootstrap serves it (GetJob, from inside its namespace)."""
        code = (
            "import asyncio, json, sys\n"
            "from netdp_node.bootstrap_client import BootstrapClient\n"
            "from netdp_node.security.pki import load_identity\n"
            "async def main():\n"
            "    c = BootstrapClient(sys.argv[1], load_identity(sys.argv[2]))\n"
            "    try:\n"
            "        j = await c.get_job(sys.argv[3])\n"
            "    finally:\n"
            "        await c.close()\n"
            "    print(json.dumps({'job_id': j.job_id, 'params': json.loads(j.params_json),\n"
            "        'participants': [{'node_id': p.node_id, 'address': p.address}\n"
            "                         for p in j.participants]}))\n"
            "asyncio.run(main())\n"
        )
        r = subprocess.run(
            [
                "ip",
                "netns",
                "exec",
                self.topo.bootstrap.ns,
                sys.executable,
                "-c",
                code,
                self.bootstrap_address,
                str(self.certs("operator")),
                job_id,
            ],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=REPO,
            check=False,
        )
        assert r.returncode == 0, r.stderr
        return dict(json.loads(r.stdout))

    # ledgers, read from disk
    def entries(self, nid: str, job_id: str) -> list[Entry]:
        try:
            led = Ledger.open_readonly(self.ledger(nid))
        except LedgerError:
            return []  # not created yet
        try:
            return led.entries(job_id)
        finally:
            led.close()

    def job_row(self, nid: str, job_id: str) -> Any:
        """The node's ledger row of the job (state, result, spec), or None (no ledger or job yet)."""
        try:
            led = Ledger.open_readonly(self.ledger(nid))
        except LedgerError:
            return None
        try:
            return led.job(job_id)
        finally:
            led.close()

    def tokens(self, nid: str, job_id: str, direction: str, peer: str) -> list[int]:
        """Rounds (seq) of the tokens `nid` committed as sent to / received from `peer`."""
        return [
            e.seq
            for e in self.entries(nid, job_id)
            if e.direction == direction and e.kind == "token" and e.peer == peer
        ]

    def dump_logs(self, tail: int = 4000) -> None:
        for p in [*self.retired, *self.procs.values()]:
            sys.stderr.write(
                f"\n----- {p.name} in {p.host.ns} ({p.log}) -----\n{p.log_text()[-tail:]}\n"
            )
