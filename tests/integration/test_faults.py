"""Fault-injection flags on real node processes: each fault happens, is recorded in the ledger and
the log, and the job ends as it should (completes despite drops, delays and a temporary dropout;
fails with an error naming the node that crashed or left for good)."""

from __future__ import annotations

import numpy as np
import pytest

from netdp_node.bootstrap_client import BootstrapClient
from netdp_node.cluster import LocalCluster
from netdp_node.errors import ConfigError
from netdp_node.faults import EXIT_CRASHED, FaultPlan, parse_offline, plan_from

VALUES = [0.1, 0.2, 0.3, 0.4]


def _start(tmp_path, extra: dict[str, list[str]], n: int = 4) -> LocalCluster:
    c = LocalCluster(tmp_path / "c", n, poll_interval=0.2)
    data = {}
    for nid, v in zip(c.ids, VALUES):
        f = tmp_path / f"{nid}.txt"
        f.write_text(f"{v}\n")
        data[nid] = f
    common = ["--peer-timeout", "6", "--job-deadline", "30"]
    c.start(data=data, extra={nid: common + extra.get(nid, []) for nid in c.ids})
    return c


@pytest.fixture
def cluster_factory(tmp_path):
    made: list[LocalCluster] = []

    def make(extra: dict[str, list[str]], n: int = 4) -> LocalCluster:
        c = _start(tmp_path / str(len(made)), extra, n)
        made.append(c)
        return c

    yield make
    for c in made:
        c.stop()


def test_plan_parsing_and_environment():
    plan = plan_from(
        {"drop_prob": 0.1, "offline": [parse_offline("2:3")]},
        env={
            "NETDP_FAULT_DELAY_MS": "5",
            "NETDP_FAULT_PARTITION": "a, b",
            "NETDP_FAULT_SEED": "7",
            "NETDP_FAULT_DROP": "0.9",
        },
    )
    assert plan.drop_prob == 0.1  # the flag wins over the environment
    assert plan.delay_ms == 5 and plan.partition == {"a", "b"} and plan.seed == 7
    assert plan.offline == ((2.0, 3.0),)
    assert plan.active and not FaultPlan().active
    with pytest.raises(ConfigError):
        plan_from({}, env={"NETDP_FAULT_DROP": "lots"})
    with pytest.raises(ConfigError):
        FaultPlan(drop_prob=1.0)
    with pytest.raises(ConfigError):
        parse_offline("5")


async def _run(c: LocalCluster, job: str, rounds: int, wait: float = 40.0) -> dict:
    from netdp_node.jobs import result_summary, wait_result

    op = BootstrapClient(c.bootstrap_address, c.operator)
    try:
        await op.submit(
            "ring-sum", {"rounds": rounds, "epsilon": 0.5}, participants=c.ids, job_id=job
        )
        return result_summary(await wait_result(op, job, wait))
    finally:
        await op.close()


def _faults(c: LocalCluster, nid: str, job: str) -> list[dict]:
    from netdp_node.ledger import Ledger

    led = Ledger.open_readonly(c.ledger(nid))
    try:
        return [e.params for e in led.entries(job) if e.event in ("fault", "fault-plan")]
    finally:
        led.close()


@pytest.mark.slow
@pytest.mark.timeout(120)
async def test_drops_and_delays_are_survived_and_recorded(cluster_factory):
    c = cluster_factory(
        {
            "node-2": [
                "--fault-drop",
                "0.3",
                "--fault-seed",
                "3",
                "--fault-delay-ms",
                "20",
                "--fault-jitter-ms",
                "10",
            ]
        }
    )
    s = await _run(c, "lossy", rounds=6)
    assert s["state"] == "done" and s["complete"] and s["outputs_agree"], s
    recorded = _faults(c, "node-2", "lossy")
    assert recorded[0]["drop_prob"] == 0.3 and recorded[0]["delay_ms"] == 20  # the plan
    drops = [r for r in recorded if r.get("fault") == "drop"]
    assert drops, "with p=0.3 over 7 sends, seed 3 drops at least one"
    assert "fault injection: drop" in c.procs["node-2"].log_text()


@pytest.mark.slow
@pytest.mark.timeout(120)
async def test_crash_at_step_exits_70_and_the_job_fails_naming_it(cluster_factory):
    c = cluster_factory({"node-3": ["--fault-crash-at-step", "2"]})
    s = await _run(c, "crashy", rounds=5)
    p = c.procs["node-3"]
    assert p.popen is not None and p.popen.wait(timeout=10) == EXIT_CRASHED
    assert [r for r in _faults(c, "node-3", "crashy") if r.get("fault") == "crash"]
    assert "fault injection: crash at step 2" in p.log_text()
    # node-2 could not hand the token to node-3: its failure names node-3.
    assert s["state"] == "failed", s
    assert "node-3" in s["failed"]["node-2"]
    assert "node-3" in s["missing"]


@pytest.mark.slow
@pytest.mark.timeout(120)
async def test_temporary_offline_then_back_completes(cluster_factory):
    # node-2 refuses all traffic for its first 5 seconds after start, then comes back; the token
    # waits (node-1 retries with backoff) and the job completes.
    c = cluster_factory({"node-2": ["--fault-offline", "0:5"]})
    s = await _run(c, "flaky", rounds=3)
    assert s["state"] == "done" and s["outputs_agree"], s
    assert (
        "is unavailable: offline" in c.procs["node-1"].log_text()
        or "UNAVAILABLE" in c.procs["node-1"].log_text()
    )
    value = np.array(s["value"])
    assert value.shape == (1,)


@pytest.mark.slow
@pytest.mark.timeout(120)
async def test_partition_and_leave_fail_the_ring_with_a_named_node(cluster_factory):
    c = cluster_factory(
        {"node-1": ["--fault-partition", "node-2"], "node-4": ["--fault-leave-at-step", "1"]}
    )
    s = await _run(c, "cut", rounds=3)
    assert s["state"] == "failed", s
    assert "node-2" in s["failed"]["node-1"]
    assert (
        "partitioned from node-2" in c.procs["node-1"].log_text()
        or "cannot reach node-2" in s["failed"]["node-1"]
    )
