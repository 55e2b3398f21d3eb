"""`netdp simulate`: the daemons' engines in virtual time; its outputs feed the accountants, the
audit and the reproductions."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy import stats

from netdp_node.algorithms import get_algorithm
from netdp_node.algorithms.accounting import JobView
from netdp_node.algorithms.budget import per_job_losses
from netdp_node.audit import audit_trace
from netdp_node.cli import main
from netdp_node.privacy.walk_audit import audit_walk
from netdp_node.report import ledger_report
from netdp_node.simulate import Simulator, read_trace, synthetic_data, write_ledgers, write_trace

pytestmark = pytest.mark.timeout(120)


def _ids(n: int) -> list[str]:
    return [f"u{i}" for i in range(n)]


def test_exact_sum_and_walk_law():
    n, T = 30, 3000
    ids = _ids(n)
    p = get_algorithm("walk-sum").prepare({"T": T, "clip": 100.0, "edge_cap": 10**6}, n)
    p["sigma"] = 0.0
    data = {u: np.array([float(i)]) for i, u in enumerate(ids)}
    res = Simulator("walk-sum", ids, p, data, seed=3, record="walk").run()
    holders = np.asarray(res.holders)
    assert len(holders) == T and len(res.outputs) == n
    counts = np.bincount(holders, minlength=n)
    assert res.value[0] == pytest.approx(float(np.sum(counts * np.arange(n))))
    # every hop is drawn uniformly over the n participants (self-loops included): chi-square
    assert stats.chisquare(counts).pvalue > 1e-4
    stay = np.mean(holders[1:] == holders[:-1])
    assert stay == pytest.approx(1 / n, abs=4 * np.sqrt(1 / n / T))


def test_trace_audit_and_ledgers_round_trip(tmp_path):
    n, T = 12, 600
    ids = _ids(n)
    p = get_algorithm("walk-sum").prepare({"T": T}, n)
    data, _ = synthetic_data("walk-sum", ids, p, 0)
    res = Simulator("walk-sum", ids, p, data, seed=1, record="full").run()
    write_trace(res, ids, tmp_path / "t.jsonl")
    header, holders = read_trace(tmp_path / "t.jsonl")
    assert header["n"] == n and np.array_equal(holders, res.holders)
    a = audit_trace(tmp_path / "t.jsonl")
    ref = audit_walk(np.asarray(res.holders), n, p["epsilon0"], p["delta"])
    assert a["ndp_mean"] == pytest.approx(ref.ndp_mean) and a["ldp_max"] == pytest.approx(
        ref.ldp_max
    )
    spec = {
        "job_id": "sim",
        "algorithm": "walk-sum",
        "participants": ids,
        "params": p,
        "public_seed": 0,
        "edges": [],
    }
    write_ledgers(res, spec, tmp_path / "ledgers")
    rep = ledger_report(tmp_path / "ledgers" / "u3", job_id="sim")
    direct = per_job_losses(JobView("sim", spec, res.entries["u3"]), "u3")
    # the accountant's own statement (its δ); the report's `epsilon` is that at the report's δ
    assert rep["jobs"][0]["native"]["epsilon"] == pytest.approx(
        max(x.epsilon for x in direct.values())
    )
    assert rep["jobs"][0]["contributions"] == sum(
        1 for e in res.entries["u3"] if e.event == "contribute"
    )
    # the merged ledgers give the same walk-conditional audit as the trace
    from netdp_node.audit import audit

    merged = audit([tmp_path / "ledgers" / u for u in ids])
    assert merged["ok"], merged["checks"]
    (wa,) = merged["walk_audits"]
    assert wa["T"] == T and wa["ndp_mean"] == pytest.approx(ref.ndp_mean)
    base = rep["jobs"][0]["baselines"]  # the same task under local DP and with a trusted curator
    assert 0 < base["central-dp"]["epsilon"] < base["local-dp"]["epsilon"]


def test_cli_simulate_json(capsys):
    assert main(["simulate", "--nodes", "40", "--param", "T=800", "--json", "--audit"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["steps"] == 800 and out["nodes"] == 40
    assert out["audit"]["ndp_mean"] < out["audit"]["ldp_mean"]
    assert out["privacy"]["epsilon_max"] <= 1.0 + 1e-9  # the calibrated target
    assert main(["simulate", "--nodes", "2"]) == 2
    assert main(["simulate", "--nodes", "10", "--param", "bogus=1"]) == 2


def test_cli_simulate_refuses_a_non_integer_step_count(capsys):
    """The simulator checks parameters as the bootstrap does: T=30.5 is refused naming T, not
    truncated to 30."""
    assert main(["simulate", "--nodes", "10", "--param", "T=30.5"]) == 2
    err = capsys.readouterr().err
    assert "T" in err and "integer" in err and "30.5" in err


def test_the_collector_is_off_while_a_simulation_runs_and_restored_after():
    """The cyclic collector does not run during a simulation (its passes over the run's
    long-lived objects found nothing to free); its state and thresholds are the same after, and
    only the command line (`exits_after`) leaves the run's objects frozen for the process's end."""
    import gc

    from netdp_node.simulate import simulation_collector

    n = 8
    ids = _ids(n)
    p = get_algorithm("muffliato").validate({"graph": "hypercube", "T": 3}, n)
    data, _ = synthetic_data("muffliato", ids, p, 1)
    seen: list[bool] = []

    async def after(sim: Simulator) -> None:
        seen.append(gc.isenabled())

    thresholds, frozen = gc.get_threshold(), gc.get_freeze_count()
    assert gc.isenabled()
    res = Simulator("muffliato", ids, p, data, seed=1, after=after).run()
    assert len(res.outputs) == n and seen == [False]
    assert gc.isenabled() and gc.get_threshold() == thresholds
    assert gc.get_freeze_count() == frozen
    gc.disable()  # a caller's own setting is kept
    try:
        with simulation_collector():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()
    with simulation_collector(exits_after=True):
        pass
    assert gc.isenabled() and gc.get_freeze_count() > frozen
    gc.unfreeze()


def test_gossip_with_leavers_reports_the_nodes_that_finished(capsys):
    """Muffliato with --leave: the nodes that left have no estimate; the report is over those that
    finished, against the mean of every node's clipped value (a KeyError before)."""
    assert main(["simulate", "--algorithm", "muffliato", "--nodes", "16", "--leave", "0.1",
                 "--seed", "3", "--json", "--quiet"]) == 0  # fmt: skip
    out = json.loads(capsys.readouterr().out)
    assert out["failed"] and out["nodes_with_estimate"] == 16 - len(out["failed"])
    assert out["estimate"] is not None and np.isfinite(out["error_max"])


def test_the_nodes_warnings_are_summarised_one_line_per_kind(capsys):
    """Every simulated node logs the same warning (the bulletin misses the leavers' schedules): one
    line names how many nodes said it, not one line per node."""
    assert main(["simulate", "--algorithm", "muffliato", "--nodes", "16", "--leave", "0.1",
                 "--seed", "3", "--quiet"]) == 0  # fmt: skip
    err = capsys.readouterr().err.splitlines()
    bulletin = [line for line in err if "the bulletin holds the schedule" in line]
    assert len(bulletin) == 1, err
    said = int(bulletin[0].removeprefix("warning from ").split(" ", 1)[0])
    assert said >= 2 and bulletin[0].endswith("the others never published")
    assert not any(line.startswith("[node=") for line in err)
