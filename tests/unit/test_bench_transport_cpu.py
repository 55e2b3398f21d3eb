"""The transport benchmark's per-process CPU and ledger-commit counts (benchmarks/bench_transport.py
`ProcCpu`, `cpu_per_hop`, `analyse_job`): what it reports per token hop is what the processes and
the ledgers say, computed here independently."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import pytest

from netdp_node.ledger import Entry, Ledger

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCH))
import bench_transport as bt  # noqa: E402

pytestmark = pytest.mark.timeout(30)


def _thread_cpu(seconds: float) -> None:
    """Burn about `seconds` of CPU in this thread (bounded by a wall-clock deadline too)."""
    start, deadline = time.thread_time(), time.monotonic() + 20 * seconds
    while time.thread_time() - start < seconds and time.monotonic() < deadline:
        sum(range(1000))


def test_proc_cpu_tells_the_main_thread_from_the_others():
    worker = threading.Thread(target=_thread_cpu, args=(0.3,))
    with bt.ProcCpu({}) as m:
        worker.start()
        worker.join()
    got = m.result["driver"]
    # the worker's CPU is in "other threads"; the main thread only waited for it
    assert got["other_threads_s"] >= 0.2
    assert got["main_thread_s"] < got["other_threads_s"]
    with bt.ProcCpu({}) as m:
        _thread_cpu(0.3)
    got = m.result["driver"]
    assert got["main_thread_s"] >= 0.2 and got["other_threads_s"] < got["main_thread_s"]


def test_cpu_per_hop_sums_nodes_and_splits_threads():
    by = {
        "node-1": {"main_thread_s": 0.3, "other_threads_s": 0.1},
        "node-2": {"main_thread_s": 0.5, "other_threads_s": 0.2},
        "node-3": {"main_thread_s": 0.1, "other_threads_s": 0.0},
        "bootstrap": {"main_thread_s": 0.05, "other_threads_s": 0.01},
        "driver": {"main_thread_s": 0.02, "other_threads_s": 0.0},
    }
    c = bt.cpu_per_hop(by, 1000)
    assert c["nodes"] == pytest.approx((0.4 + 0.7 + 0.1) / 1000 * 1e6)
    assert c["nodes_event_loop_threads"] == pytest.approx(0.9 / 1000 * 1e6)
    assert c["nodes_grpc_threads"] == pytest.approx(0.3 / 1000 * 1e6)
    assert c["busiest_node"] == pytest.approx(0.7e3)
    assert c["median_node"] == pytest.approx(0.4e3)
    assert c["bootstrap"] == pytest.approx(0.06e3)
    assert c["driver"] == pytest.approx(0.02e3)


class _Cluster:
    def __init__(self, root: Path) -> None:
        self.root = root

    def ledger(self, nid: str) -> Path:
        return self.root / nid


def _token(job: str, direction: str, peer: str, seq: int, ts: float) -> Entry:
    return Entry(
        job,
        direction,
        "token",
        peer=peer,
        kind="token",
        walk="ring",
        seq=seq,
        ts=ts,
        digest=f"d{seq}",
    )


def test_analyse_job_counts_the_ledger_commits_per_token_hop(tmp_path):
    # a ring of two nodes, two rounds: a -> b -> a -> b -> a; every hop is one commit at its
    # receiver (received + sent), plus one commit of `acked` notes alone at a
    job, order = "j", ["a", "b"]
    la, lb = Ledger(tmp_path / "a", "a"), Ledger(tmp_path / "b", "b")
    t = 1000.0
    la.commit([_token(job, "sent", "b", 1, t)])  # a starts
    lb.commit([_token(job, "received", "a", 1, t + 1), _token(job, "sent", "a", 1, t + 1)])
    la.commit([_token(job, "received", "b", 1, t + 2), _token(job, "sent", "b", 2, t + 2)])
    la.commit([Entry(job, "local", "acked", peer="b", kind="token", seq=2, ts=t + 2.5)])
    lb.commit([_token(job, "received", "a", 2, t + 3), _token(job, "sent", "a", 2, t + 3)])
    la.commit([_token(job, "received", "b", 2, t + 4)])
    la.close()
    lb.close()
    a = bt.analyse_job(_Cluster(tmp_path), job, order, rounds=2)  # type: ignore[arg-type]
    assert a["complete"] and a["token_hops"] == 4
    assert a["ledger_commits"] == 6  # a: 4 transactions, b: 2
    assert a["ledger_commits_per_token_hop"] == pytest.approx(6 / 4)
