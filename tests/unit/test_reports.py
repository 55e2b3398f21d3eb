"""Reports people can look at (issue 16 item 4): `netdp privacy report` states every ε at one δ
(the total never below one job's ε), shows the budget spent and remaining, draws the node × peer
heatmap (--plot); `netdp audit` marks the checks that do not apply.

Real ring-sum jobs run over the in-memory transport into real on-disk ledgers (the harness)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from harness import contexts, make_net

from netdp_node.algorithms import get_algorithm
from netdp_node.algorithms.accounting import JobView
from netdp_node.algorithms.budget import per_job_losses
from netdp_node.cli import main
from netdp_node.ledger import Ledger
from netdp_node.privacy.composition import rdp_to_dp

pytestmark = pytest.mark.timeout(60)

IDS = ["n1", "n2", "n3", "n4"]


async def _jobs(root, jobs=(("j0", IDS),)):
    """Run ring-sum jobs, each over its participants (ledgers under root/ID, shared by jobs)."""
    for job_id, ids in jobs:
        net = await make_net("memory", ids, root, data={i: np.array([0.2]) for i in ids})
        try:
            await net.run_job(
                contexts(
                    job_id,
                    "ring-sum",
                    ids,
                    get_algorithm("ring-sum").prepare({"rounds": 3}, len(ids)),
                )
            )
        finally:
            await net.close()
    return root


def _report(capsys, *args: str) -> str:
    assert main(["privacy", "report", *args]) == 0
    return capsys.readouterr().out


def _raw(ledger_dir, me: str, job: str):
    led = Ledger.open_readonly(ledger_dir)
    try:
        row = led.job(job)
        return per_job_losses(JobView(job, row.spec, led.entries(job)), me)
    finally:
        led.close()


async def test_one_delta_and_the_total_is_never_below_a_job(tmp_path, capsys):
    root = await _jobs(tmp_path)
    rep = json.loads(_report(capsys, "--ledger", str(root / "n1"), "--json"))
    d = rep["delta_target"]
    assert d == 1e-5
    (job,) = rep["jobs"]
    raw = _raw(root / "n1", "n1", "j0")
    for p in job["peers"]:
        r = raw[p["peer"]]
        # independently: the accountant's own (ε, δ') if δ' ≤ δ, or its RDP curve at δ
        expect = min(([r.epsilon] if r.delta <= d else []) + [rdp_to_dp(*r.rdp, d)[0]])
        assert p["epsilon"] == pytest.approx(expect, rel=1e-12)
        assert p["delta"] <= d
    total = {p["peer"]: p["epsilon"] for p in rep["total"]["peers"]}
    for p in job["peers"]:
        assert total[p["peer"]] >= p["epsilon"] - 1e-12, (total, job["peers"])
    assert rep["total"]["epsilon"] >= job["epsilon"] - 1e-12
    for name, b in job["baselines"].items():  # at the same δ (their RDP curves at δ)
        assert b["delta"] <= d, name
    text = _report(capsys, "--ledger", str(root / "n1"))
    assert "every ε below holds at δ = 1e-05" in text
    assert "at δ=1e-06" not in text and "6e-06" not in text.split("the accountant states")[-1]


async def test_budget_spent_and_remaining(tmp_path, capsys):
    root = await _jobs(tmp_path, (("j0", IDS), ("j1", IDS[:3])))
    led = Ledger(root / "n1", "n1")
    led.record_budget(3.0, 1e-5)  # as `netdp node --budget-epsilon 3` does at start
    led.close()
    rep = json.loads(_report(capsys, "--ledger", str(root / "n1"), "--json"))
    b = rep["budget"]
    # independently: the two jobs' RDP curves summed towards n2, converted at the budget's δ
    curves = [_raw(root / "n1", "n1", j)["n2"].rdp for j in ("j0", "j1")]
    spent = rdp_to_dp(curves[0][0], np.add(curves[0][1], curves[1][1]), 1e-5)[0]
    assert b["worst_peer"] in ("n2", "n3") and b["spent"] == pytest.approx(spent, rel=1e-9)
    assert b["remaining"] == pytest.approx(3.0 - spent) and b["within"] == (spent <= 3.0)
    text = _report(capsys, "--ledger", str(root / "n1"))
    assert f"remaining ε = {3.0 - spent:.4g}" in text and "recorded in the ledger" in text
    # the budget on the command line wins over the recorded one
    rep = json.loads(
        _report(capsys, "--ledger", str(root / "n1"), "--json", "--budget-epsilon", "0.5")
    )
    assert rep["budget"]["epsilon"] == 0.5 and not rep["budget"]["within"]


async def test_audit_says_na_for_checks_that_do_not_apply(tmp_path, capsys):
    root = await _jobs(tmp_path)
    args = ["audit"] + [x for i in IDS for x in ("--ledger", str(root / i))]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "n/a  inca-shares (no IncA job" in out
    assert "ok   inca-shares" not in out and "ok   gossip-mass-conserved" not in out
    assert "ok   tokens-conserved" in out


async def test_heatmap_png_shows_the_pairwise_loss(tmp_path, capsys):
    import matplotlib
    import matplotlib.image as mpimg

    from netdp_node.report import HEATMAP_DPI, heatmap_size, ledger_report, plot_heatmap

    # n1..n3 take part in two jobs, n4 in one: towards n4 they lose less than towards each other
    root = await _jobs(tmp_path, (("j0", IDS), ("j1", IDS[:3])))
    png = tmp_path / "heat.png"
    _report(capsys, "--ledger", str(root), "--plot", str(png))  # a folder of ledgers
    img = mpimg.imread(png)
    w, h = heatmap_size(len(IDS))
    assert img.shape[:2] == (round(h * HEATMAP_DPI), round(w * HEATMAP_DPI))
    reps = [ledger_report(root / i) for i in IDS]
    meta = plot_heatmap(reps, tmp_path / "again.png")
    two = _raw(root / "n1", "n1", "j0")["n2"].rdp, _raw(root / "n1", "n1", "j1")["n2"].rdp
    eps_two = rdp_to_dp(two[0][0], np.add(two[0][1], two[1][1]), 1e-5)[0]
    one = _raw(root / "n1", "n1", "j0")["n4"]
    eps_one = min(one.epsilon, rdp_to_dp(*one.rdp, 1e-5)[0])
    assert eps_two > eps_one

    def colour(a, b):
        x, y = meta["cells"][f"{a}→{b}"]
        return img[round(y), round(x), :3]

    vmax = max(v for row in meta["epsilon"] for v in row if v is not None)
    cmap = matplotlib.colormaps["viridis"]
    for (a, b), e in (((("n1", "n2")), eps_two), (("n1", "n4"), eps_one)):
        assert np.allclose(colour(a, b), cmap(e / vmax)[:3], atol=0.02), (a, b)
    assert not np.allclose(colour("n1", "n2"), colour("n1", "n4"), atol=0.05)
    assert np.allclose(colour("n1", "n2"), colour("n3", "n2"), atol=0.02)
    # the diagonal (no loss towards oneself) is grey, not a colour of the scale
    assert np.allclose(colour("n2", "n2"), [0xDD / 255] * 3, atol=0.02)


async def test_heatmap_marks_the_cells_over_budget(tmp_path, capsys):
    import matplotlib.image as mpimg

    root = await _jobs(tmp_path, (("j0", IDS), ("j1", IDS[:3])))
    eps_one = json.loads(_report(capsys, "--ledger", str(root / "n1"), "--json"))
    towards = {p["peer"]: p["epsilon"] for p in eps_one["total"]["peers"]}
    limit = (towards["n2"] + towards["n4"]) / 2  # n1..n3 over it towards each other, not n4
    png = tmp_path / "b.png"
    assert (
        main(
            [
                "privacy",
                "report",
                "--ledger",
                str(root),
                "--plot",
                str(png),
                "--budget-epsilon",
                str(limit),
            ]
        )
        == 0
    )
    err = capsys.readouterr().err
    assert "6 pair(s) over budget" in err
    img = mpimg.imread(png)
    assert ((img[..., 0] > 0.9) & (img[..., 1] < 0.1) & (img[..., 2] < 0.1)).sum() > 50  # red


def test_plot_without_matplotlib_says_what_to_install(tmp_path, capsys, monkeypatch):
    import builtins

    real = builtins.__import__

    def no_mpl(name, *a, **k):
        if name.split(".")[0] == "matplotlib":
            raise ImportError("no matplotlib")
        return real(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_mpl)
    assert (
        main(["privacy", "report", "--ledger", str(tmp_path), "--plot", str(tmp_path / "x.png")])
        == 2
    )
    assert capsys.readouterr().err.strip() == "install netdp[experiments] (matplotlib) for --plot"


async def test_job_result_shows_the_estimate_with_its_noise_std(tmp_path):
    from netdp.v1 import bootstrap_pb2, common_pb2
    from netdp_node.jobs import render_result, result_summary
    from netdp_node.wire import ndarray_to_tensor

    root = await _jobs(tmp_path)
    params = get_algorithm("ring-sum").prepare({"rounds": 3}, len(IDS))
    led = Ledger.open_readonly(root / "n1")
    try:
        row = led.job("j0")
    finally:
        led.close()
    value = np.asarray(row.result["value"])
    engine_std = row.result["info"]["estimate_std"]  # what the ring engine itself states
    # independently: the noise additions every node's ledger records (σ each), over K = 3 rounds
    added = 0
    for n in IDS:
        led = Ledger.open_readonly(root / n)
        try:
            added += sum(1 for e in led.entries("j0") if e.params.get("sigma", 0) > 0)
        finally:
            led.close()
    assert engine_std == pytest.approx(np.sqrt(added) * params["sigma"] / 3)
    job = common_pb2.JobSpec(
        job_id="j0",
        algorithm="ring-sum",
        params_json=json.dumps(params),
        participants=[common_pb2.NodeInfo(node_id=n) for n in IDS],
    )
    results = [
        bootstrap_pb2.NodeResult(
            job_id="j0",
            node_id=n,
            state="done",
            contributed=True,
            contributions=3,
            output=ndarray_to_tensor(value),
        )
        for n in IDS
    ]
    s = result_summary(bootstrap_pb2.GetResultReply(job=job, results=results))
    assert s["std"]["std"] == pytest.approx(engine_std)
    text = render_result(s)
    assert f"released result: {value[0]:.6g} ± {engine_std:.4g} (noise std)" in text
    # an algorithm without a closed form says so instead of printing a bare value
    job.algorithm = "walk-histogram"
    assert "noise std: no closed form" in render_result(
        result_summary(bootstrap_pb2.GetResultReply(job=job, results=results))
    )
