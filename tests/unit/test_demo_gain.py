"""Where each demo's method gains over local DP: the "gains from n ≈ N" line is computed from the
registry's calibration and the accountant (not hard-coded), every estimate is printed with its std
beside local DP's, and the methods held at the local-DP level say in one line that they cannot
gain under the proven accounting."""

from __future__ import annotations

import argparse
import math

import numpy as np
import pytest

from netdp_node.algorithms import get_algorithm
from netdp_node.algorithms.hooks import GAIN_MIN, NO_GAIN_PROVEN, DemoRun, gain_starts_at
from netdp_node.algorithms.walk.accountant import walk_sum_std
from netdp_node.algorithms.walk.hooks import rr_count_std, sum_gain_starts_at
from netdp_node.cli import main
from netdp_node.demo import check_args
from netdp_node.privacy.walk_accountant import ldp_sum_sigma, prospective_count
from netdp_node.simulate import render_simulation

pytestmark = pytest.mark.timeout(60)

DEMO = {"delta": 1e-6, "clip": 1.0, "epsilon": 1.0}


def _walk_sum_ratio(n: int) -> float:
    """Local DP's std over walk-sum's at n for the demo's job (10 steps per node), through the
    registry's validation (what the bootstrap runs) and the accountant's estimate_std."""
    p = get_algorithm("walk-sum").validate({**DEMO, "T": 10 * n}, n)
    spec = {"participants": [f"n{i}" for i in range(n)], "params": p}
    netdp, _ = walk_sum_std(spec)
    ldp = math.sqrt(int(p["T"])) * ldp_sum_sigma(p, prospective_count(p, n))
    return ldp / netdp


def test_gain_search_finds_the_threshold_of_a_known_ratio():
    # ratio n/100 reaches GAIN_MIN at n = 105; the search stops within 5 %
    got = gain_starts_at(lambda n: n / 100, 3)
    assert got is not None and 105 <= got <= 105 * 1.05 + 1
    assert gain_starts_at(lambda n: 2.0, 7) == 7  # already gains at lo
    assert gain_starts_at(lambda n: 1.0, 3, hi=1000) is None  # never


def test_walk_sum_gain_starts_where_the_accountant_says():
    start = sum_gain_starts_at(lambda n: {**DEMO, "T": 10 * n}, 32)
    assert start is not None and 32 < start < 256
    # at the size found the walk's std is GAIN_MIN below local DP's; a size below the search's
    # tolerance does not gain
    assert _walk_sum_ratio(start) >= GAIN_MIN
    below = start - max(1, int(0.05 * start)) - 1
    assert _walk_sum_ratio(below) < GAIN_MIN


def _walk_sum_run(n: int) -> DemoRun:
    ns = argparse.Namespace(clip=1.0, delta=1e-6, epsilon=None, steps=0, seed=0)
    p = get_algorithm("walk-sum").validate(get_algorithm("walk-sum").hooks.demo_params(ns, n), n)
    ids = [f"node-{i}" for i in range(1, n + 1)]
    return DemoRun(
        flags=ns,  # type: ignore[arg-type]
        ids=ids,
        summary={"contributions": {v: 10 for v in ids}},
        params=p,
        values={v: np.array([0.5]) for v in ids},
        split=None,
        value=np.array([3.0]),
        privacy=[],
        faults={},
        job_rows=dict,
        check=lambda name: (True, []),
    )


def test_walk_sum_demo_says_from_what_n_it_gains():
    hooks = get_algorithm("walk-sum").hooks
    res = {"nodes": 16, "contributions": {"node-1": 10}, **hooks.demo_outcome(_walk_sum_run(16))}
    text = "\n".join(hooks.render_demo(res, "nodes in 2 host processes", "(job j)"))
    start = res["gain_starts_at"]
    assert start == sum_gain_starts_at(lambda n: {**DEMO, "T": 10 * n}, 16)
    assert f"gains over local DP from n ≈ {start} (try --nodes {start})" in text
    assert f"± {res['netdp_std']:.4f}" in text and "local DP" in text
    assert res["netdp_std"] == pytest.approx(res["ldp_std"], rel=0.01)


def test_walk_sum_demo_default_shows_the_gain():
    # the default --nodes of walk-sum is a size where the walk needs less noise than local DP
    a = argparse.Namespace(
        algorithm="walk-sum", nodes=None, workers=None, rounds=10, steps=0, delta=1e-6,
        epsilon=None, target_epsilon=None, clip=1.0, topology="", seed=0,
    )  # fmt: skip
    check_args(a)
    assert _walk_sum_ratio(a.nodes) >= GAIN_MIN
    b = argparse.Namespace(**{**vars(a), "algorithm": "ring-sum", "nodes": None})
    check_args(b)
    assert b.nodes == 8


def test_histogram_std_matches_the_spread_of_randomized_response():
    """`rr_count_std` against an independent Monte Carlo of the debiased counts."""
    rng = np.random.default_rng(1)
    gamma, L, truth, reports = 0.6, 4, np.array([5, 10, 0, 20]), 50
    vals = np.repeat(np.arange(L), truth)
    ests = []
    for _ in range(4000):
        y = np.where(rng.random(vals.size) >= gamma, vals, rng.integers(L, size=vals.size))
        y = np.concatenate([y, rng.integers(L, size=reports - vals.size)])
        tau = np.bincount(y, minlength=L)
        ests.append((tau - gamma * reports / L) / (1 - gamma))
    np.testing.assert_allclose(
        np.std(ests, axis=0), rr_count_std(gamma, L, truth, reports), rtol=0.06
    )


def test_histogram_render_labels_negative_counts_and_compares():
    hooks = get_algorithm("walk-histogram").hooks
    res = {
        "nodes": 8,
        "estimate": [12.0, -3.5],
        "truth": [10.0, 2.0],
        "netdp_std": [4.0, 4.0],
        "ldp_std": [5.0, 5.0],
        "contributions": {"node-1": 3},
    }
    text = "\n".join(hooks.render_demo(res, "nodes", "(job j)"))
    assert "12.0 ± 4.0, -3.5 ± 4.0" in text
    assert "negative counts are noise" in text and "clamped at 0: 12.0, 0.0" in text
    assert "netdp 4.00  vs  local DP 5.00" in text and "1.25x less noise" in text


@pytest.mark.parametrize("alg", ["walk-sgd", "rw-sgd"])
def test_sgd_render_gives_runs_and_says_it_cannot_gain(alg):
    hooks = get_algorithm(alg).hooks
    base = {"sigma": 2.0, "test_accuracy": 0.6, "test_accuracy_std": 0.05, "runs": 5}
    res = {
        "nodes": 8,
        "data": "synthetic",
        "test_accuracy": 0.55,
        "sigma": 2.0,
        "baselines": {"local": base, "central": {**base, "sigma": 0.1}},
        "privacy": [],
    }
    text = "\n".join(hooks.render_demo(res, "nodes", "(job j)"))
    assert "1 run: this job" in text and "0.6000 ± 0.0500 (σ=2, 5 runs)" in text
    assert NO_GAIN_PROVEN.format(name=alg) in text


def test_simulate_prints_the_comparison_and_where_the_walk_gains(capsys):
    assert main(["simulate", "--algorithm", "walk-sum", "--nodes", "16", "--quiet"]) == 0
    out = capsys.readouterr().out
    start = sum_gain_starts_at(lambda n: {**DEMO, "T": 10 * n}, 16)
    assert "noise std of the sum: netdp" in out and "vs  local DP" in out
    assert f"it gains from n ≈ {start} (try --nodes {start})" in out
    o = {
        "algorithm": "x",
        "nodes": 9,
        "steps": 1,
        "data_steps": 1,
        "events": 1,
        "wall_s": 0.1,
        "params": {"epsilon": 1.0},
        "estimate": [1.0],
        "truth": [0.0],
        "noise_std": 2.0,
        "ldp_std": 4.0,
        "privacy": {
            "epsilon_max": 1.0,
            "epsilon_mean": 1.0,
            "method": "m",
            "contributions_max": 1,
            "contributions_mean": 1.0,
        },
    }
    text = render_simulation(o)
    assert "netdp 2  vs  local DP 4" in text and "2.00x less noise" in text
    assert "|error| 1 = 0.50 netdp std" in text
