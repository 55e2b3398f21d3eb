"""The engine mode of the reproductions (experiments/netdp_experiments/engine_runs.py) against the
vectorised NumPy versions, on the same seeded configuration at small n: the same schedule gives
the same loss figures exactly, the same walk the same model up to a tolerance computed from the
noise std, and every result JSON names its implementation."""

from __future__ import annotations

import json
import math
from argparse import Namespace
from pathlib import Path

import numpy as np
import pytest

from netdp_experiments import engine_runs as er
from netdp_experiments import muffliato_fig1a as f1
from netdp_experiments import muffliato_fig6 as f6
from netdp_experiments import run as run_experiment
from netdp_experiments import rw_table1 as t1
from netdp_experiments.muffliato_common import er_edges, metropolis_csr
from netdp_experiments.rw_fig2 import batched_sgd
from netdp_node.graphs import hypercube_edges
from netdp_node.privacy.discrete_gaussian import job_grid
from netdp_node.privacy.gossip import fixed_schedule

TINY_FIG1A = (3, 3, 8, 0.9)  # hypercube 8, grid 3×3, ER and RGG on 8 nodes
_GRAPHS = f1.graphs


def _tiny_graphs(quick: bool, size: object = None) -> dict[str, tuple[int, list[tuple[int, int]]]]:
    gs = _GRAPHS(True, size=TINY_FIG1A)
    return {k: gs[k] for k in ("hypercube", "grid")}


def _args(tmp_path: Path, implementation: str | None) -> Namespace:
    return Namespace(
        out=str(tmp_path), quick=True, runs=0, data_dir=None, implementation=implementation
    )


def test_fig1a_engine_schedule_gives_the_same_loss_figures() -> None:
    """Muffliato Fig. 1(a): the schedule the accountant rebuilds from the engines' ledgers is the
    vectorised fixed schedule, so every loss figure is equal exactly; the engines' outputs are
    the vectorised Chebyshev gossip of the same noisy inputs (to rounding)."""
    from netdp_experiments.muffliato_common import chebyshev_gossip  # (test only)

    for gname, (n, edges) in _tiny_graphs(True).items():
        eng = er.fig1a_graph_engine(gname, n, edges, seed=3)
        vec = f1.one_graph(gname, n, edges)
        assert eng["T"] == vec["T"] and eng["T"] >= 2
        for key in ("paper_out_code", "paper_out_thm1", "paper_in_thm1", "joint_view_in"):
            assert eng["by_distance"][key] == vec["by_distance"][key], (gname, key)
        assert eng["joint_view"] == vec["joint_view"]
        cc = eng["cross_check"]
        assert cc["same_schedule_as_vectorised"] and cc["same_loss_figures"]
        # independent replay: x^0 from the nodes' seeds, T vectorised rounds
        x = np.random.default_rng([3, 7]).random(n)
        x0 = er.replay_noisy_inputs([np.array([v]) for v in x], 3, 1.0, 1.0)
        W = metropolis_csr(n, np.asarray(edges))
        xT = chebyshev_gossip(W, x0, vec["T"], vec["gamma"])
        assert cc["final_values_max_abs_diff"] <= 1e-12 * max(1.0, float(np.abs(xT).max()))
        assert not np.allclose(xT, x0)  # the gossip did something


def test_fig1a_json_names_the_implementation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both modes write their JSON (the engine's beside the default's) naming the implementation,
    and hand it to the figure (drawing is slow on a loaded machine: the title is checked by
    `test_label_puts_the_implementation_in_the_title`)."""
    monkeypatch.setattr(f1, "graphs", _tiny_graphs)
    drawn: list[tuple[str, Path]] = []
    monkeypatch.setattr(f1, "plot", lambda res, path: drawn.append((res["implementation"], path)))
    eng = run_experiment("muffliato-fig1a", _args(tmp_path, "engine"))
    vec = run_experiment("muffliato-fig1a", _args(tmp_path, None))
    on_disk_eng = json.loads((tmp_path / "muffliato-fig1a-engine.json").read_text())
    on_disk_vec = json.loads((tmp_path / "muffliato-fig1a.json").read_text())
    assert on_disk_eng["implementation"] == er.ENGINE == eng["implementation"]
    assert on_disk_vec["implementation"] == er.VECTORISED == vec["implementation"]
    assert "engine_config" in on_disk_eng and "engine_config" not in on_disk_vec
    assert drawn == [
        (er.ENGINE, tmp_path / "muffliato-fig1a-engine.png"),
        (er.VECTORISED, tmp_path / "muffliato-fig1a.png"),
    ]
    for g in ("hypercube", "grid"):
        assert on_disk_eng["graphs"][g]["by_distance"] == on_disk_vec["graphs"][g]["by_distance"]


def test_label_puts_the_implementation_in_the_title() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig = plt.figure()
    fig.suptitle("Fig. 2")
    er.label(fig, {"implementation": er.ENGINE, "engine_config": {"note": "n=32, not 2048"}})
    text = fig._suptitle.get_text()  # type: ignore[attr-defined]
    assert text.startswith("Fig. 2\n") and er.ENGINE in text and "n=32, not 2048" in text
    fig2 = plt.figure()
    er.label(fig2, {"implementation": er.VECTORISED})
    assert fig2._suptitle.get_text() == f"[{er.VECTORISED}]"  # type: ignore[attr-defined]
    plt.close("all")


def test_reproduce_refuses_the_choice_for_single_implementation_experiments(
    tmp_path: Path,
) -> None:
    from netdp_node.errors import ConfigError

    with pytest.raises(ConfigError, match="one implementation"):
        run_experiment("network-dp-fig1a", _args(tmp_path, "engine"))


def _small_rows(n: int, m: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows of norm ≤ 0.9 (so the engine's per-example clip and the vectorised clip of the mean
    gradient, both to 1, are the identity and the two updates are the same function)."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, m, 9))
    X *= 0.9 / np.linalg.norm(X, axis=2, keepdims=True) * rng.random((n, m, 1))
    y = np.where(X[:, :, 0] + 0.3 * rng.normal(size=(n, m)) > 0, 1.0, -1.0)
    return X, y


def _split(X: np.ndarray, y: np.ndarray) -> Namespace:
    flat, lab = X.reshape(-1, 9), y.reshape(-1)
    return Namespace(X_train=flat, y_train=lab, X_test=flat, y_test=lab)


def test_rw_sgd_engine_matches_the_vectorised_update_on_its_walk() -> None:
    """Random-walk Fig. 2 / Table 1: the rw-sgd engine and `batched_sgd` on the engine's own walk
    differ only by their noise draws. Both steps u(w) = w − η g(w) are non-expansive (WalkSgd's
    docstring), so ‖w_eng − w_vec‖ ≤ η Σ_t ‖z_t − z'_t‖; E‖z − z'‖ ≤ σ'√(2d) with σ' the grid's
    std (≥ σ), plus the rounding of g to the grid (√d γ/2 per step): the tolerance is twice
    the expected sum."""
    n, m, T, cap, sigma, eta = 8, 8, 96, 10, 1e-5, 0.5
    X, y = _small_rows(n, m, 5)
    edges = hypercube_edges(n)
    w_eng, holders, _ = er.rw_sgd_engine_run(X, y, edges, T, cap, sigma, eta, seed=4)
    assert holders.shape == (T,)
    nb = {a: {b for e in edges for b in e if a in e and b != a} for a in range(n)}
    assert all(h2 == h1 or h2 in nb[h1] for h1, h2 in zip(holders, holders[1:]))
    vec = batched_sgd(
        X,
        y,
        holders[:, None],
        sigma,
        eta,
        "network",
        cap,
        np.random.default_rng(0),
        _split(X, y),
        every=T,
    )
    w_vec = np.asarray(vec["final_models"][0])
    grid = job_grid(sigma)
    s_eff = math.ceil(sigma / grid) * grid
    tol = 2.0 * eta * T * (s_eff * math.sqrt(2 * 9) + math.sqrt(9) * grid / 2)
    gap = float(np.linalg.norm(w_eng - w_vec))
    assert gap <= tol, (gap, tol)
    # the models moved far more than the tolerance: the check is not vacuous
    assert float(np.linalg.norm(w_eng)) > 20 * tol


def test_muffliato_gd_engine_matches_the_vectorised_gd() -> None:
    """Table 1's Muffliato-GD: the muffliato-gd engine on a fixed graph and `muffliato_gd_fixed`
    (K steps, T_g Chebyshev rounds each) differ only by the noise: with σ = 1e-7 the per-node
    models agree within 10·η·K·(σ' + γ)·√(nd) (gossip and the gradient step are non-expansive;
    a factor 10 of margin)."""
    n, m, sigma, eta = 8, 4, 1e-7, 0.5
    X, y = _small_rows(n, m, 9)
    edges = hypercube_edges(n)
    W = metropolis_csr(n, np.asarray(edges))
    from netdp_experiments.muffliato_common import gap_2  # (test only)
    from netdp_node.privacy.gossip import chebyshev_gamma  # (test only)

    gap = gap_2(W)
    T_g = 3
    theta, _ = er.muffliato_gd_engine_run(X, y, edges, t1.K, T_g, gap, sigma, eta, seed=2)
    vec = t1.muffliato_gd_fixed(
        X, y, W, T_g, chebyshev_gamma(min(1.0, gap)), sigma, eta, np.random.default_rng(1)
    )
    grid = job_grid(sigma)
    tol = 10 * eta * t1.K * (math.ceil(sigma / grid) * grid + grid) * math.sqrt(n * 9)
    assert float(np.max(np.abs(theta - vec))) <= tol
    assert float(np.abs(vec).max()) > 100 * tol


def test_fig6_engine_dropout_schedule() -> None:
    """Muffliato Fig. 6: without dropout the ledger's schedule is the vectorised fixed schedule
    (same Table 3 numbers exactly); with dropout some rounds lose edges, and the engines' final
    values are the vectorised replay of the realised schedule on the same noisy inputs."""
    n, T = 10, 5
    E = er_edges(n, 0.4, np.random.default_rng(2), connected=True)
    edges = [(int(a), int(b)) for a, b in E]
    d0 = er.dropout_run_engine(n, edges, T, 0.0, seed=3)
    assert er.same_schedule(d0["schedule"], fixed_schedule(n, edges, T))
    assert f6.account_schedule(d0["schedule"]) == f6.account(n, [E] * T)
    assert float(np.max(np.abs(d0["schedule"].run(d0["x0"])[-1] - d0["xT"]))) <= 1e-12
    d = er.dropout_run_engine(n, edges, T, 0.4, seed=3)
    assert d["down_rounds"] > 0
    full = metropolis_csr(n, E)
    assert any((M != full).nnz for M in d["schedule"].matrices)  # some edges did not realise
    it = d["schedule"].run(d["x0"])
    assert float(np.max(np.abs(it[-1] - d["xT"]))) <= 1e-12
    assert abs(float(it[-1].mean()) - float(d["x0"].mean())) <= 1e-12  # plain gossip keeps mass
    steps, errors, _ = er.stopping_step(d["x"], it)
    assert 1 <= steps <= T and len(errors) == steps + 1


@pytest.mark.slow
def test_fig1a_engine_quick_configuration_agrees_with_the_vectorised_figures() -> None:
    """`netdp reproduce muffliato-fig1a --engine --quick` (the four families at n ≈ 32): on every
    graph the ledger's schedule and loss figures are the vectorised ones."""
    res = er.fig1a_engine("muffliato-fig1a", Namespace(quick=True))
    assert set(res["graphs"]) == {"hypercube", "erdos_renyi", "random_geometric", "grid"}
    for gname, r in res["graphs"].items():
        n = r["n"]
        edges = f1.graphs(True, size=er.FIG1A_ENGINE_QUICK)[gname][1]
        vec = f1.one_graph(gname, n, edges)
        assert r["by_distance"] == vec["by_distance"], gname
        assert r["cross_check"]["final_values_max_abs_diff"] <= 1e-12
