"""The engines draw their Gaussian noise with the exact discrete sampler, on the job's grid, from
uniform integers of the node's generator only (netdp issue 13, defect 6)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from harness import IntegersOnly

from netdp_node.algorithms import get_algorithm
from netdp_node.algorithms.inca.engine import Inca
from netdp_node.algorithms.muffliato.engine import MuffliatoSync
from netdp_node.algorithms.ring.engine import RingSum, RingSumR
from netdp_node.algorithms.walk.engine import WalkSgd, WalkSum
from netdp_node.privacy.discrete_gaussian import grid_for, grid_scale
from netdp_node.protocols.base import JobContext, Message, Record, Send


def _ids(n: int) -> tuple[str, ...]:
    return tuple(f"n{i}" for i in range(n))


def _sent(actions: list[Any]) -> np.ndarray:
    return np.asarray(next(a for a in actions if isinstance(a, Send)).msg.payload, dtype=float)


def _on_grid(v: np.ndarray, grid: float) -> bool:
    k = np.asarray(v, dtype=float) / grid
    return bool(np.array_equal(k, np.round(k)))


@pytest.mark.parametrize("engine", [RingSum, RingSumR])
def test_ring_token_is_on_the_grid_without_float_draws(engine: type[RingSum]) -> None:
    p = get_algorithm("ring-sum").prepare({"rounds": 2, "dim": 3, "clip": 1.0}, 4)
    ctx = JobContext("j", "ring-sum", "n0", _ids(4), p, 0)
    x = np.array([0.123456789, -0.3, 0.7])
    tau = _sent(engine(ctx, x, IntegersOnly(1)).start())  # type: ignore[arg-type]
    grid = grid_for(p["sigma"])
    assert _on_grid(tau, grid)
    assert not np.allclose(tau, x, atol=1e-3 * p["sigma"])  # noise was added
    # the same key gives the same draw: γ·(round(x/γ) + Z) with Z from the integers
    again = _sent(engine(ctx, x, IntegersOnly(1)).start())  # type: ignore[arg-type]
    assert np.array_equal(tau, again)


def test_walk_sum_and_sgd_draw_no_floats() -> None:
    ids = _ids(4)
    p = get_algorithm("walk-sum").prepare({"T": 8, "dim": 2}, 4)
    start = ids[0 % 4]
    ctx = JobContext("j", "walk-sum", start, ids, p, 0)
    acts = WalkSum(ctx, np.array([0.25, -0.5]), IntegersOnly(3)).start()  # type: ignore[arg-type]
    sends = [a for a in acts if isinstance(a, Send)]
    tau = np.asarray(sends[0].msg.payload if sends else acts[-1].value, dtype=float)
    assert _on_grid(tau, grid_for(p["sigma"]))
    q = get_algorithm("walk-sgd").prepare({"T": 8, "dim": 2, "stop": "counter"}, 4)
    ctx = JobContext("j", "walk-sgd", start, ids, q, 0)
    data = np.array([1.0, 0.5, 1.0, -0.5, 0.25, 0.0])
    WalkSgd(ctx, data, IntegersOnly(4)).start()  # type: ignore[arg-type]


def test_muffliato_and_inca_draw_no_floats() -> None:
    ids = _ids(6)
    p = get_algorithm("muffliato").prepare({"graph": "ring", "T": 3, "sigma": 0.5, "dim": 2}, 6)
    eng = MuffliatoSync(
        JobContext("j", "muffliato", "n0", ids, p, 1), np.array([0.2, 0.4]), IntegersOnly(5)
    )  # type: ignore[arg-type]
    x, _ = eng.call_input(0)
    assert _on_grid(x, grid_for(0.5))
    q = get_algorithm("inca").prepare({"T": 3, "k": 2, "round_s": 2.0, "dim": 2}, 6)
    inca = Inca(JobContext("j", "inca", "n0", ids, q, 2), np.array([0.3, 0.6]), IntegersOnly(6))  # type: ignore[arg-type]
    inca.start()
    assert _on_grid(inca.trace_eta, grid_for(q["sigma_eta"]))
    assert _on_grid(inca.trace_x, grid_for(q["sigma_eta"]))
    assert _on_grid(inca.trace_delta, grid_for(q["sigma_delta"]))


@pytest.mark.parametrize("engine", [RingSum, RingSumR])
def test_ring_visits_draw_fresh_noise_of_the_scheduled_std(engine: type[RingSum]) -> None:
    """Each noisy visit adds new draws of γ·N_Z(0, m²), m = ⌈std/γ⌉ for the std the visit records
    (the engine draws them in batches, `GaussianPool`): over many visits their variance is (mγ)²,
    no visit repeats another's draws, and a visit without noise adds exactly γ·round(x/γ)."""
    n, rounds, dim = 4, 400, 5
    p = get_algorithm(engine.algorithm).prepare({"rounds": rounds, "dim": dim, "clip": 1.0}, n)
    ids = _ids(n)
    ctx = JobContext("j", engine.algorithm, ids[1], ids, p, 1)
    x = np.array([0.3, -0.2, 0.1, 0.0, 0.25])
    eng = engine(ctx, x, np.random.default_rng(11))
    grid = grid_for(p["sigma"])
    base = grid * np.rint(x / grid)
    added: dict[float, list[np.ndarray]] = {}
    for k in range(1, rounds + 1):
        token = Message("token", payload=np.zeros(dim), walk="ring", seq=k)
        acts = eng.on_message(ids[0], token)
        [rec] = [a for a in acts if isinstance(a, Record)]
        added.setdefault(float(rec.params["sigma"]), []).append(_sent(acts) - base)
    for quiet in added.pop(0.0, []):
        assert np.array_equal(quiet, np.zeros(dim))
    assert added, "no visit added noise"
    for std, draws in added.items():
        z = np.array(draws) / grid
        assert np.array_equal(z, np.rint(z))  # on the grid
        assert len({d.tobytes() for d in z}) == len(z)  # fresh draws at every visit
        if z.size < 500:
            continue
        m = grid_scale(std, grid)
        ratio = z.var() / m**2
        assert abs(ratio - 1) < 5 * (2 / z.size) ** 0.5, (std, m, ratio)
