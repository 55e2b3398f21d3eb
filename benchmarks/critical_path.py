"""The critical path of a token hop, step by step: from the moment node B has the token's bytes to
the moment C has them, where does the wall time go? Companion to profile_hop.py (CPU) and
bench_transport.py (the verdict).

    python benchmarks/critical_path.py [--rounds 300] [--runs 3] [--config NAME=FLAGS ...]

A ring of 8 node processes (LocalCluster, mTLS, durable ledgers) whose node processes run under
hop_trace.py: every step of every message is timestamped on the machine's monotonic clock. One
ring-sum job of `rounds` rounds after a warm-up; then, per token hop B -> C, the segments

  net        B's call.write begins -> C's Link handler has the bytes (B's grpc write, loopback,
             C's grpc threads, C's loop waking up, the handler's task resuming)
  decode     -> the envelope is decoded
  step       -> the step is staged (job lock, duplicate check, engine, actions to ledger rows)
  to_write   -> the staged batch starts being written (the group commit's loop callback)
  insert     -> its COMMIT begins (rows inserted; with write threads: the hand-off to a thread)
  fsync      -> the COMMIT returns
  back       -> the batch settles on the loop (with write threads: the thread -> loop hand-off)
  effects    -> the forward is handed to the transport (the step's done callback, _act)
  wake       -> the Link writer's call.write begins (the writer task waking up)

whose sum is the hop (median per segment over every hop of the job). Configurations
(`--config NAME=FLAGS`: extra `netdp node` flags, and hop_trace.py variants as `variant:NAME`)
run alternately, `--runs` times each, on fresh clusters; the machine's load is recorded per run.
Writes benchmarks/results/critical_path.json and .txt.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import bench_transport as bt
import common
import profile_hop as ph

from netdp_node.cluster import LocalCluster, Proc

HERE = Path(__file__).resolve().parent
TRACER = HERE / "hop_trace.py"
SEGMENTS = [
    ("net", "w0@B", "rx"),
    ("decode", "rx", "decoded"),
    ("step", "decoded", "stage"),
    ("to_write", "stage", "write0"),
    ("insert", "write0", "commit0"),
    ("fsync", "commit0", "commit1"),
    ("back", "commit1", "written"),
    ("effects", "written", "send"),
    ("wake", "send", "w0"),
]


class TracedCluster(LocalCluster):
    """LocalCluster whose node processes run under hop_trace.py."""

    trace_dir: Path
    variants: list[str]

    def _spawn(self, name: str, args: list[str]) -> Proc:
        if not name.startswith("node-"):
            return super()._spawn(name, args)
        port_file = self.workdir / "ports" / name
        port_file.parent.mkdir(parents=True, exist_ok=True)
        port_file.unlink(missing_ok=True)
        log = self.logs / f"{name}.log"
        full = [
            sys.executable,
            str(TRACER),
            "--trace",
            str(self.trace_dir / f"{name}.jsonl"),
            *[f"--variant={v}" for v in self.variants],
            "--",
            *args,
            "--port-file",
            str(port_file),
            "--log-level",
            self.log_level,
        ]
        env = dict(os.environ, PYTHONUNBUFFERED="1", OPENBLAS_NUM_THREADS="1")
        with open(log, "ab") as fh:
            popen = subprocess.Popen(
                full, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env
            )
        p = Proc(name, full, log, port_file, popen)
        self.procs[name] = p
        return p


def _signal_nodes(c: LocalCluster) -> None:
    for name, p in c.procs.items():
        if name.startswith("node-") and p.popen is not None and p.alive():
            p.popen.send_signal(signal.SIGUSR1)


def _read(path: Path) -> list[tuple[int, int, str, str]]:
    if not path.exists():
        return []
    return [tuple(json.loads(line)) for line in path.read_text().splitlines() if line]  # type: ignore[misc]


def hops(traces: dict[str, list[tuple[Any, ...]]], job: str) -> list[dict[str, Any]]:
    """Per token hop B -> C of job `job`: the times (ns) of B's steps, the CPU time of B's event
    loop thread at each (`NAME_cpu`), and the time of C's receipt (`rx@C`). With the commit on the
    loop (no write threads) the batch settles as soon as its COMMIT returns: `written` is then
    `commit1`."""
    jk = job[:8]
    token = jk + "/token/"
    recv: dict[str, dict[str, dict[str, Any]]] = {}
    for node, ev in traces.items():
        cur: dict[str, Any] | None = None
        nxt: list[str] = []
        by_key: dict[str, dict[str, Any]] = {}
        last_rx: tuple[int, int, int] | None = None
        loop_cpu = 0
        for t, tid, name, key, cpu in sorted(ev):
            if last_rx is not None and tid == last_rx[1]:
                loop_cpu = cpu
            if name == "rx":
                last_rx = (t, tid, cpu)
                loop_cpu = cpu
            elif name == "decoded":
                cur = None
                if key.startswith(token) and last_rx is not None:
                    cur = {"rx": last_rx[0], "rx_cpu": last_rx[2], "decoded": t}
                    cur["decoded_cpu"] = cpu
                    by_key[key] = cur
                    nxt = ["stage", "write0", "commit0", "commit1", "written"]
            elif cur is None:
                continue
            elif nxt and name == nxt[0]:
                cur[name], cur[name + "_cpu"] = t, loop_cpu
                nxt.pop(0)
            elif name == "send" and key.startswith(token) and "send" not in cur:
                if nxt == ["written"]:  # settled on the loop right after its COMMIT
                    cur["written"], cur["written_cpu"] = cur["commit1"], cur["commit1_cpu"]
                    nxt.pop(0)
                cur["send"], cur["send_cpu"] = t, loop_cpu
                cur["fwd"], _, cur["to"] = key.partition(">")
            elif name == "w0" and cur.get("fwd") == key and "w0" not in cur:
                cur["w0"], cur["w0_cpu"] = t, loop_cpu
        recv[node] = by_key
    out = []
    for d in recv.values():
        for step in d.values():
            fwd, to = step.get("fwd"), step.get("to")
            if fwd is None or "w0" not in step or fwd not in recv.get(to, {}):
                continue
            out.append({**step, "rx@C": recv[to][fwd]["rx"]})
    return out


def segments(rows: list[dict[str, Any]]) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Per segment, the microseconds of each hop: wall time, and CPU time of B's event loop thread
    (net: none; fsync: the loop's CPU while the COMMIT ran, 0 with write threads)."""
    names = [name for name, _, _ in SEGMENTS]
    wall: dict[str, list[float]] = {name: [] for name in [*names, "hop"]}
    cpu: dict[str, list[float]] = {name: [] for name in [*names, "B"]}
    need = ("rx", "decoded", "stage", "write0", "commit0", "commit1", "written", "send", "w0")
    for r in rows:
        if not all(k in r for k in need):
            continue
        for name, a, b in SEGMENTS:
            if name == "net":
                wall[name].append((r["rx@C"] - r["w0"]) / 1e3)
                continue
            wall[name].append((r[b] - r[a]) / 1e3)
            cpu[name].append((r[b + "_cpu"] - r[a + "_cpu"]) / 1e3)
        wall["hop"].append((r["rx@C"] - r["rx"]) / 1e3)
        cpu["B"].append((r["w0_cpu"] - r["rx_cpu"]) / 1e3)
    return wall, cpu


def one_run(workdir: Path, rounds: int, flags: list[str], variants: list[str]) -> dict[str, Any]:
    c = TracedCluster(workdir, 8, log_level="info", poll_interval=0.2)
    c.trace_dir = workdir / "trace"
    c.trace_dir.mkdir(parents=True, exist_ok=True)
    c.variants = variants
    data = common.ring_values(c)
    c.start(data=data, timeout=60, extra={nid: list(flags) for nid in c.ids} if flags else None)
    try:

        async def run() -> tuple[str, dict[str, Any]]:
            await ph.ready(c)
            _signal_nodes(c)  # the warm-up's events: written, then dropped below
            await asyncio.sleep(0.5)
            for f in c.trace_dir.glob("*.jsonl"):
                f.unlink()
            with bt.CpuMeter() as m:
                jid, secs = await ph.submit_and_wait(c, rounds)
            a = bt.analyse_job(c, jid, c.ids, rounds)
            _signal_nodes(c)
            await asyncio.sleep(1.0)
            return jid, {"job_s": secs, "analysis": bt._strip(a), "cpu": m.result}

        load0 = os.getloadavg()[0]
        jid, info = asyncio.run(run())
        traces = {n: _read(c.trace_dir / f"{n}.jsonl") for n in c.ids}
        rows = hops(traces, jid)
        seg, cpu = segments(rows)
        med = {k: statistics.median(v) if v else float("nan") for k, v in seg.items()}
        return {
            "flags": flags,
            "variants": variants,
            "load_start": load0,
            "load_end": os.getloadavg()[0],
            "foreign_share_of_machine": info["cpu"]["foreign_share_of_machine"],
            "hops_traced": len(seg["hop"]),
            "steady_hops_per_s": info["analysis"].get("steady_hops_per_s"),
            "median_us": med,
            "p90_us": {
                k: sorted(v)[int(0.9 * (len(v) - 1))] if v else float("nan") for k, v in seg.items()
            },
            "loop_cpu_median_us": {
                k: statistics.median(v) if v else float("nan") for k, v in cpu.items()
            },
        }
    finally:
        c.stop()


def render(res: dict[str, Any]) -> str:
    lines = [
        f"critical path of a token hop, {res['date']}, {res['machine'].get('cpu_model', '')}, "
        f"K = {res['rounds']}: median us per segment, wall (CPU of B's event-loop thread)",
    ]
    for name, runs in res["configs"].items():
        lines.append(f"\n[{name}] flags {runs[0]['flags']} variants {runs[0]['variants']}")
        for r in runs:
            med, cpu = r["median_us"], r["loop_cpu_median_us"]
            lines.append(
                f"  {r['steady_hops_per_s']:.0f} hops/s, load {r['load_start']:.1f}, others "
                f"{r['foreign_share_of_machine']:.0%}, {r['hops_traced']} hops; wall (loop CPU):"
            )
            parts = [f"{k} {med[k]:.0f} ({cpu.get(k, float('nan')):.0f})" for k, _, _ in SEGMENTS]
            parts.append(f"hop {med['hop']:.0f} (B {cpu['B']:.0f})")
            lines.append("    " + "  ".join(parts))
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=300)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument(
        "--config",
        action="append",
        default=[],
        help="NAME=FLAGS: extra node flags (space separated; variant:V for a hop_trace variant)",
    )
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("--out", type=Path, default=common.result_path("critical_path"))
    a = ap.parse_args(argv)
    configs: dict[str, tuple[list[str], list[str]]] = {}
    for spec in a.config or ["as-is="]:
        name, _, rest = spec.partition("=")
        words = rest.split()
        configs[name] = (
            [w for w in words if not w.startswith("variant:")],
            [w.split(":", 1)[1] for w in words if w.startswith("variant:")],
        )
    import tempfile

    base = a.workdir or Path(tempfile.mkdtemp(prefix="netdp-cpath-"))
    res: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": common.machine(["grpcio"]),
        "rounds": a.rounds,
        "configs": {name: [] for name in configs},
    }
    for run in range(a.runs):  # alternating configurations
        for name, (flags, variants) in configs.items():
            r = one_run(base / f"{name}-{run}", a.rounds, flags, variants)
            res["configs"][name].append(r)
            print(
                "\n".join(render({**res, "configs": {name: [r]}}).splitlines()[-3:]),
                file=sys.stderr,
            )
    a.out.write_text(json.dumps(res, indent=1))
    a.out.with_suffix(".txt").write_text(render(res))
    print(render(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
