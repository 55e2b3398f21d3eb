"""A node's privacy report over many peers: the accountants give every peer the same loss object,
so the report converts and composes it once per distinct loss, not once per peer (the demo's
report step at 1,000 nodes was O(n²) conversions), and every per-peer value stays exactly what
the per-peer computation gives."""

from __future__ import annotations

import pytest

import netdp_node.algorithms.budget as budget
import netdp_node.report as report
from netdp_node.algorithms import get_algorithm
from netdp_node.algorithms.accounting import JobView
from netdp_node.algorithms.budget import per_job_losses
from netdp_node.ledger import Entry, Ledger
from netdp_node.privacy.composition import compose_losses

N = 300


def _ledger(root, counts: dict[str, int], me: str = "node-1") -> tuple[Ledger, dict]:
    """One node's ledger with walk-sum jobs over N participants, `counts[job]` contributions each
    (as the walk records them)."""
    ids = [f"node-{i}" for i in range(1, N + 1)]
    led = Ledger(root / me, me)
    specs = {}
    for job_id, k in counts.items():
        params = get_algorithm("walk-sum").validate({"T": 10 * N}, N)
        spec = {"job_id": job_id, "algorithm": "walk-sum", "participants": ids, "params": params}
        led.begin_job(job_id, "walk-sum", spec, True)
        led.commit(
            [Entry(job_id=job_id, direction="local", event="contribute") for _ in range(k)],
            job_update={"job_id": job_id, "state": "done"},
        )
        specs[job_id] = spec
    return led, specs


def _counting(monkeypatch) -> list[int]:
    calls = [0]

    def counted(losses, delta_target):
        calls[0] += 1
        return compose_losses(losses, delta_target)

    monkeypatch.setattr(report, "compose_losses", counted)
    monkeypatch.setattr(budget, "compose_losses", counted)
    return calls


@pytest.mark.parametrize("budget_eps", [None, 5.0])
def test_report_converts_each_distinct_loss_once_and_keeps_every_peer_exact(
    tmp_path, monkeypatch, budget_eps
):
    led, specs = _ledger(tmp_path, {"j0": 12, "j1": 25})
    me = led.node_id
    raw = {j: per_job_losses(JobView(j, s, led.entries(j)), me) for j, s in specs.items()}
    led.close()
    d = 1e-5
    # independently, peer by peer, as the unoptimised report did
    each = {j: {p: report.at_delta(x, d) for p, x in r.items()} for j, r in raw.items()}
    totals = {p: compose_losses([raw["j0"][p], raw["j1"][p]], d) for p in raw["j0"]}
    assert len(totals) == N - 1

    calls = _counting(monkeypatch)
    budget_arg = None if budget_eps is None else (budget_eps, d)
    rep = report.ledger_report(tmp_path / me, delta_target=d, budget=budget_arg)
    # one loss object per job towards every peer: per job its conversion and its two baselines,
    # the total (and the budget's total) once: a handful, not one per peer (≈ 3 N before)
    assert calls[0] <= 12, calls[0]

    for job in rep["jobs"]:
        assert len(job["peers"]) == N - 1
        for row in job["peers"]:
            x = each[job["job_id"]][row["peer"]]
            assert (row["epsilon"], row["delta"], row["method"]) == (x.epsilon, x.delta, x.method)
    for row in rep["total"]["peers"]:
        x = totals[row["peer"]]
        assert (row["epsilon"], row["delta"], row["method"]) == (x.epsilon, x.delta, x.method)
    worst = max(totals.values(), key=lambda x: x.epsilon)
    assert rep["total"]["epsilon"] == worst.epsilon
    if budget_eps is not None:
        assert rep["budget"]["spent"] == worst.epsilon


def test_total_losses_composes_per_peer_when_the_losses_differ(tmp_path):
    """Distinct loss objects towards different peers (an accountant that gives each peer its own
    loss) are composed peer by peer: grouping by identity never mixes two peers' parts."""
    led, specs = _ledger(tmp_path, {"j0": 3, "j1": 40})
    me = led.node_id
    views = [JobView(j, s, led.entries(j)) for j, s in specs.items()]
    led.close()
    a, b = (per_job_losses(v, me) for v in views)
    peers = sorted(a)
    # peer by peer a different mix: j0 then j1 towards half of them, j1 twice towards the rest
    extra = {p: (a if i % 2 else b)[p] for i, p in enumerate(peers)}
    got = budget.total_losses(views, me, 1e-5, extra=extra)
    for p in peers:
        expect = compose_losses([a[p], b[p], extra[p]], 1e-5)
        assert (got[p].epsilon, got[p].delta, got[p].method) == (
            expect.epsilon,
            expect.delta,
            expect.method,
        )
    assert got[peers[0]].epsilon != got[peers[1]].epsilon
