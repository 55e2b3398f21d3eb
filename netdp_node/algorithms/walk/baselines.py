"""Reference SGD loops for the baselines of the token-walk SGD (Cyffers & Bellet, AISTATS 2022,
§5.2 and Fig. 2).

These run in NumPy, in one process, on the same users' data as a netdp job: they answer "what would
a trusted curator (central DP-SGD) or local DP-SGD reach with the same data, steps and guarantee",
which the demo and `netdp reproduce` print beside the networked result. The networked variant
itself runs through the real engine (`WalkSgd`, via the daemons or `netdp simulate`); `mode=
"network"` here is the same update rule, for the many repetitions of the figure reproductions.

Update rules:
* `central`: every step a uniformly random user's full local gradient, noise σ, no cap;
* `local`: per-user cap K; past it the user forwards the model unchanged;
* `network`: per-user cap K; past it the user still adds its noise, w ← w − ηZ.
`order="theorem"` clips the gradient to L, then adds N(0, σ²I) (as Lemma 1 needs); `order="code"` is
what the authors' code does for Fig. 2: u = ∇f + N(0, σ²I), then u ← L·u/‖u‖ if ‖u‖ > L (noise
included), no clipping before. `per_example=True` computes the gradient as the engine does (every
example's gradient clipped to L, rows bounded by sqrt(8/η): `WalkSgd`, non-expansive steps); the
default clips the mean gradient, as the papers' experiments do.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from netdp_node.algorithms.ring.engine import clip_l2
from netdp_node.algorithms.walk.engine import (
    bound_rows,
    clipped_logistic_gradient,
    logistic_accuracy,
    logistic_gradient,
    sgd_row_bound,
)
from netdp_node.privacy.rw_sgd import ldp_noise_multiplier

Mode = Literal["central", "local", "network"]
Order = Literal["theorem", "code"]


@dataclass
class SgdRun:
    w: np.ndarray
    iterations: list[int] = field(default_factory=list)
    objective: list[float] = field(default_factory=list)
    accuracy: list[float] = field(default_factory=list)


def logistic_objective(w: np.ndarray, X: np.ndarray, y: np.ndarray) -> float:
    return float(np.mean(np.logaddexp(0.0, -y * (X @ w))))


def sgd_walk(
    users: Sequence[tuple[np.ndarray, np.ndarray]],
    T: int,
    sigma: float,
    eta: float,
    lipschitz: float,
    mode: Mode,
    rng: np.random.Generator,
    *,
    cap: int = 0,
    order: Order = "theorem",
    X_test: np.ndarray | None = None,
    y_test: np.ndarray | None = None,
    X_obj: np.ndarray | None = None,
    y_obj: np.ndarray | None = None,
    every: int = 0,
    per_example: bool = False,
) -> SgdRun:
    n = len(users)
    if per_example:
        users = [(bound_rows(X, sgd_row_bound(eta)), y) for X, y in users]
    d = users[0][0].shape[1]
    w = np.zeros(d)
    counts = np.zeros(n, dtype=np.int64)
    run = SgdRun(w)
    holders = rng.integers(n, size=T)
    for t in range(1, T + 1):
        u = int(holders[t - 1])
        counts[u] += 1
        over = mode != "central" and cap > 0 and counts[u] > cap
        if over and mode == "local":
            pass  # forwards the model unchanged
        else:
            z = rng.normal(0.0, sigma, size=d)
            if over:
                g = np.zeros(d)
            elif per_example:
                g = clipped_logistic_gradient(w, *users[u], lipschitz)
            else:
                g = logistic_gradient(w, *users[u])
            if order == "theorem":
                step = (g if over else clip_l2(g, lipschitz)) + z
            else:
                step = clip_l2(g + z, lipschitz)
            w = w - eta * step
        if every and (t % every == 0 or t == T):
            run.iterations.append(t)
            if X_obj is not None and y_obj is not None:
                run.objective.append(logistic_objective(w, X_obj, y_obj))
            if X_test is not None and y_test is not None:
                run.accuracy.append(logistic_accuracy(w, X_test, y_test))
    run.w = w
    return run


def local_sgd_sigma(cap: int, epsilon: float, delta: float, lipschitz: float) -> float:
    """Smallest σ with which `cap` local Gaussian steps (sensitivity 2L) compose, in RDP, to at most
    (ε, δ) towards anyone who sees them all: the local-DP baseline at the same guarantee."""
    return ldp_noise_multiplier(cap, epsilon, delta) * 2.0 * lipschitz
