"""walk-sgd's contributing update u(w) = w − ηg(w) is non-expansive on the project's own data split
(`learning_split`: the housing split when the file is found, else synthetic rows of the same
layout), the premise of amplification by iteration behind its accountant (Lemma 1); clipping the mean
gradient (the previous update) is not.

Checked numerically, independently of the proof in `WalkSgd`'s docstring: random pairs (w, w'), and
pairs along the direction the update stretches most (the top right singular vector of a
finite-difference Jacobian), which is where an expansion shows.
"""

from __future__ import annotations

import numpy as np
import pytest

from netdp_node.algorithms import get_algorithm
from netdp_node.algorithms.ring.engine import clip_l2
from netdp_node.algorithms.walk.engine import WalkSgd, logistic_gradient
from netdp_node.datasets import learning_split
from netdp_node.protocols.base import JobContext

N, POINTS = 16, 8  # the README's walk-sgd demo: 16 nodes, 8 rows each


def _engines(eta: float) -> tuple[list[WalkSgd], list[tuple[np.ndarray, np.ndarray]]]:
    split = learning_split(N, POINTS, 0)
    ids = tuple(f"node-{i}" for i in range(1, N + 1))
    params = get_algorithm("walk-sgd").prepare(
        {"T": 25 * N, "dim": 9, "lipschitz": 1.0, "eta": eta}, N
    )
    engines = [
        WalkSgd(JobContext("j", "walk-sgd", me, ids, params, 1), rows, np.random.default_rng(0))
        for me, rows in zip(ids, split.per_user(N, POINTS))
    ]
    return engines, split.user_arrays(N, POINTS)


def _ratio(u, w1: np.ndarray, w2: np.ndarray) -> float:
    return float(np.linalg.norm(u(w1) - u(w2)) / np.linalg.norm(w1 - w2))


def _points(X: np.ndarray, y: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Where to look: random models, and random models at which the user's mean logistic gradient
    has norm in (1, 1.15), just past the clip L = 1 (where clipping the mean can stretch)."""
    W = rng.normal(size=(4000, 9)) * rng.uniform(0.1, 20.0, size=(4000, 1))
    coef = -y / (1.0 + np.exp(np.clip(y * (W @ X.T), -500, 500)))  # all the gradients at once
    norms = np.linalg.norm(coef @ X / len(y), axis=1)
    near = W[(norms > 1.0) & (norms < 1.15)][:20]
    return np.vstack([W[:10], near])


def _worst_ratio(u, points: np.ndarray, rng: np.random.Generator, h: float = 1e-4) -> float:
    """The largest ‖u(w) − u(w')‖/‖w − w'‖ over random pairs around each point w, and over the
    close pair along the direction of the top singular value of u's Jacobian (central
    differences) at w."""
    worst = 0.0
    for w in points:
        far = rng.normal(size=9) * rng.uniform(0.1, 20.0)
        worst = max(worst, _ratio(u, w, far), _ratio(u, w, w + 1e-2 * rng.normal(size=9)))
        J = np.column_stack([(u(w + e) - u(w - e)) / (2 * 1e-6) for e in np.eye(9) * 1e-6])
        v = np.linalg.svd(J)[2][0]
        worst = max(worst, _ratio(u, w - h * v, w + h * v))
    return worst


@pytest.mark.parametrize("eta", [0.05, 0.1])  # the engine's default step, the demo's
def test_walk_sgd_update_is_non_expansive_on_the_project_split(eta):
    engines, users = _engines(eta)
    rng = np.random.default_rng(1)
    new = old = 0.0
    for e, (X, y) in zip(engines, users):
        points = _points(X, y, rng)
        new = max(new, _worst_ratio(e.descent, points, rng))
        # the previous update on the same rows and points: the mean gradient clipped to L = 1
        old = max(
            old,
            _worst_ratio(
                lambda w, X=X, y=y: w - eta * clip_l2(logistic_gradient(w, X, y), 1.0), points, rng
            ),
        )
    print(f"eta={eta}: worst stretch {old:.6f} (mean clipped), {new:.12f} (engine)")
    assert old > 1.0 + 1e-5, old  # the check finds the old configuration's expansion
    assert new <= 1.0 + 1e-9, new  # up to float rounding


def test_the_engine_steps_with_its_non_expansive_update_and_bounds_long_rows():
    """A contributing step is `descent` plus the same noise step a noise-only step takes (two
    engines with the same generator); every example's gradient is clipped, so ‖g‖ ≤ L with no
    final clip binding; rows longer than sqrt(8/η) are scaled down to it."""
    ids = ("a", "b", "c")
    params = get_algorithm("walk-sgd").prepare({"T": 30, "dim": 2, "eta": 2.0, "lipschitz": 0.5}, 3)
    rows = np.array([[3.0, 0.0, 1.0], [0.0, 1.0, -1.0], [-0.5, 0.5, 1.0]])

    def engine() -> WalkSgd:
        return WalkSgd(
            JobContext("j", "walk-sgd", "a", ids, params, 1),
            rows.reshape(-1),
            np.random.default_rng(5),
        )

    e = engine()
    assert np.allclose(np.linalg.norm(e.X, axis=1), [2.0, 1.0, np.hypot(0.5, 0.5)])  # R = 2
    w = np.array([-4.0, 3.0])
    real, _ = e.step(w, True)
    noise_only, _ = engine().step(w, False)
    # equal up to the noise grid: the released step is η·γ·(round(g/γ) + Z), |rounding| ≤ γ/2
    np.testing.assert_allclose(
        real - noise_only, e.descent(w) - w, rtol=0, atol=e.eta * e.grid / 2 + 1e-12
    )
    # independent per-example computation: −y x min(σ(−m), L/‖x‖), averaged
    X, y = e.X, np.array([1.0, -1.0, 1.0])
    per = [
        -yi * xi * min(1 / (1 + np.exp(yi * xi @ w)), 0.5 / np.linalg.norm(xi))
        for xi, yi in zip(X, y)
    ]
    np.testing.assert_allclose(e.gradient(w), np.mean(per, axis=0), rtol=1e-12)
    assert np.linalg.norm(e.gradient(w)) <= 0.5 + 1e-12
    assert e.result_info(w)[1]["rows_scaled_to_bound"] == 1
