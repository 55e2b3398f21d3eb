"""Exact coins and choices (netdp_node.privacy.exact_draws) and the engines' private draws that use
them: randomized response of the ring and walk histograms, a graph walk's next hop, the geometric
stop of a walk. Before, these compared `rng.random()` floats with a float probability.

Two kinds of checks: exact enumeration (every sequence of integer draws a sampler can ask for is
explored with its exact probability, as a Fraction, down to a depth where the unexplored mass is
below 1e-12), compared with the exact target; and chi-square/binomial tests with fixed seeds for
probabilities whose denominators are too large to enumerate. Targets are computed here (exp, the
pmf of L-ary randomized response), not taken from the module.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from harness import IntegersOnly
from scipy import stats

from netdp_node.privacy import exact_draws as ex
from netdp_node.privacy.rw_sgd import transition_matrix, transition_row_exact


class _NeedDraw(Exception):
    def __init__(self, high: int) -> None:
        self.high = high


class _Replay:
    """Answers `integers(0, high)` from a fixed prefix, then asks for a branch."""

    def __init__(self, prefix: list[int]) -> None:
        self.prefix = prefix
        self.i = 0

    def integers(self, low: int, high: int | None = None, size: Any = None) -> int:
        assert size is None and low == 0 and high is not None
        if self.i == len(self.prefix):
            raise _NeedDraw(high)
        v = self.prefix[self.i]
        assert 0 <= v < high
        self.i += 1
        return v


def enumerate_outcomes(
    sampler: Callable[[Any], Any], smallest: Fraction = Fraction(1, 10**14)
) -> tuple[dict[Any, Fraction], Fraction]:
    """Every outcome of `sampler(rng)` with its exact probability, over all sequences of integer
    draws of probability at least `smallest`; returns (probabilities, the mass left unexplored)."""
    out: dict[Any, Fraction] = {}
    left = Fraction(0)
    stack: list[tuple[list[int], Fraction]] = [([], Fraction(1))]
    while stack:
        prefix, w = stack.pop()
        try:
            y = sampler(_Replay(prefix))
        except _NeedDraw as d:
            if w / d.high < smallest:
                left += w
                continue
            stack.extend((prefix + [v], w / d.high) for v in range(d.high))
            continue
        out[y] = out.get(y, Fraction(0)) + w
    return out, left


def rr_pmf(value: int, bins: int, e0: float) -> list[float]:
    """L-ary randomized response: e^ε0/(e^ε0 + L − 1) for the value, 1/(e^ε0 + L − 1) else."""
    z = math.exp(e0) + bins - 1
    return [math.exp(e0) / z if y == value else 1.0 / z for y in range(bins)]


# -- exact enumeration ---------------------------------------------------------------------------
@pytest.mark.parametrize("p", [Fraction(0), Fraction(1, 3), Fraction(5, 7), Fraction(1)])
def test_bernoulli_is_exact(p: Fraction) -> None:
    probs, left = enumerate_outcomes(lambda rng: ex.bernoulli(rng, p))
    assert left == 0
    assert probs.get(True, Fraction(0)) == p and probs.get(False, Fraction(0)) == 1 - p


@pytest.mark.parametrize(
    "x", [Fraction(0), Fraction(1, 2), Fraction(1), Fraction(5, 4), Fraction(2)]
)
def test_bernoulli_exp_is_exact(x: Fraction) -> None:
    probs, left = enumerate_outcomes(lambda rng: ex.bernoulli_exp(rng, x))
    assert left < Fraction(1, 10**10)
    true = probs.get(True, Fraction(0))
    assert abs(float(true) - math.exp(-float(x))) <= float(left) + 1e-15
    assert true + probs.get(False, Fraction(0)) + left == 1


@pytest.mark.parametrize(("value", "bins", "e0"), [(0, 2, 1.0), (2, 3, 0.5), (1, 4, 1.25)])
def test_randomized_response_is_exact(value: int, bins: int, e0: float) -> None:
    """One round of the rejection (`rr_attempt`) enumerated exactly: category y comes out with
    probability a_y = 1/L for the value and e^(−ε0)/L for the others; `randomized_response` repeats
    rounds until one is kept, so it returns y with probability a_y/Σa: the target pmf."""
    probs, left = enumerate_outcomes(lambda rng: ex.rr_attempt(rng, value, bins, Fraction(e0)))
    assert left < Fraction(1, 10**10)
    assert set(probs) == {*range(bins), None}
    for y in range(bins):
        exact = 1 / bins if y == value else math.exp(-e0) / bins
        assert abs(float(probs[y]) - exact) <= float(left) + 1e-15, (y, probs[y], exact)
    kept = 1 - probs[None]
    for y, target in enumerate(rr_pmf(value, bins, e0)):
        assert abs(float(probs[y] / kept) - target) <= 4 * float(left) + 1e-15, y
    # the engines' old parametrisation: keep the value with probability 1 − γ, else uniform
    gamma = bins / (math.exp(e0) + bins - 1)
    assert abs(float(probs[value] / kept) - (1 - gamma + gamma / bins)) <= 4 * float(left) + 1e-14


def test_a_report_without_data_is_exactly_uniform() -> None:
    probs, left = enumerate_outcomes(lambda rng: ex.randomized_response(rng, None, 5, 1.0))
    assert left == 0 and probs == {y: Fraction(1, 5) for y in range(5)}


def test_weighted_index_is_exact() -> None:
    w = [Fraction(1, 3), Fraction(1, 4), Fraction(0), Fraction(5, 12)]
    probs, left = enumerate_outcomes(lambda rng: ex.weighted_index(rng, w))
    assert left == 0 and probs == {0: Fraction(1, 3), 1: Fraction(1, 4), 3: Fraction(5, 12)}
    # not normalised: renormalised exactly (a walk's row without the peers gone)
    probs, _ = enumerate_outcomes(lambda rng: ex.weighted_index(rng, w[:2]))
    assert probs == {0: Fraction(4, 7), 1: Fraction(3, 7)}


@pytest.mark.parametrize("rule", ["coded", "paper"])
def test_exact_transition_rows_are_the_accountants_matrix(rule: str) -> None:
    edges = [(0, 1), (0, 2), (1, 2), (2, 3), (3, 4), (4, 0), (1, 4)]
    W = transition_matrix(5, edges, rule)  # type: ignore[arg-type]
    for u in range(5):
        cols, probs = transition_row_exact(5, edges, u, rule)  # type: ignore[arg-type]
        assert sum(probs) == 1 and all(p >= 0 for p in probs)
        row = np.zeros(5)
        row[cols] = [float(p) for p in probs]
        np.testing.assert_allclose(row, W[u], rtol=0, atol=1e-15)
        # the next-hop draw by that row is exact
        got, left = enumerate_outcomes(
            lambda rng, cols=cols, probs=probs: cols[ex.weighted_index(rng, probs)]
        )
        assert left == 0
        assert got == {c: p for c, p in zip(cols, probs) if p > 0}


# -- large denominators: frequency tests with fixed seeds ---------------------------------------
def test_uniform_below_beyond_64_bits() -> None:
    high = 3 * (1 << 70) + 5
    rng = IntegersOnly(7)
    u = np.array([ex.uniform_below(rng, high) for _ in range(20_000)], dtype=object)
    assert all(0 <= v < high for v in u)
    top = np.array([v // (1 << 70) for v in u], dtype=np.int64)  # 0, 1, 2 (3 with prob ~2^-70)
    assert stats.chisquare(np.bincount(top, minlength=3)[:3]).pvalue > 1e-4
    low = np.array([v % 11 for v in u], dtype=np.int64)
    assert stats.chisquare(np.bincount(low, minlength=11)).pvalue > 1e-4


@pytest.mark.parametrize("p", [0.1, 2.0**-60 * 3 + 0.25, 0.999])
def test_bernoulli_of_a_float_probability(p: float) -> None:
    rng = IntegersOnly(11)
    n = 20_000
    k = sum(ex.bernoulli(rng, Fraction(p)) for _ in range(n))
    assert stats.binomtest(k, n, p).pvalue > 1e-4


@pytest.mark.parametrize("x", [Fraction(7, 4), Fraction(0.3), Fraction(3.7)])
def test_bernoulli_exp_of_other_levels(x: Fraction) -> None:
    rng = IntegersOnly(13)
    n = 10_000
    k = sum(ex.bernoulli_exp(rng, x) for _ in range(n))
    assert stats.binomtest(k, n, math.exp(-float(x))).pvalue > 1e-4


@pytest.mark.parametrize(("value", "bins", "e0"), [(1, 4, 0.7), (0, 8, 2.3), (3, 5, 4.1)])
def test_randomized_response_with_a_float_level(value: int, bins: int, e0: float) -> None:
    rng = IntegersOnly(100 + bins)
    n = 10_000
    y = np.array([ex.randomized_response(rng, value, bins, e0) for _ in range(n)])
    counts = np.bincount(y, minlength=bins)
    expected = n * np.array(rr_pmf(value, bins, e0))
    assert stats.chisquare(counts, expected).pvalue > 1e-4


def test_bad_arguments_are_refused() -> None:
    rng = IntegersOnly(0)
    with pytest.raises(ValueError):
        ex.uniform_below(rng, 0)
    with pytest.raises(ValueError):
        ex.bernoulli(rng, Fraction(3, 2))
    with pytest.raises(ValueError):
        ex.bernoulli_exp(rng, Fraction(-1))
    with pytest.raises(ValueError):
        ex.randomized_response(rng, 4, 4, 1.0)
    with pytest.raises(ValueError):
        ex.randomized_response(rng, 0, 4, math.inf)
    with pytest.raises(ValueError):
        ex.weighted_index(rng, [Fraction(0), Fraction(0)])


# -- the engines draw no floats where privacy depends on the draw ---------------------------------
@pytest.mark.parametrize(
    ("algorithm", "raw", "data"),
    [
        ("ring-histogram", {"rounds": 3, "bins": 3, "epsilon0": 1.3}, "category"),
        ("walk-histogram", {"T": 30, "bins": 3}, "category"),
        ("walk-sum", {"T": 20, "stop": "geometric"}, "value"),
        ("rw-sgd", {"T": 30, "dim": 2, "objective": "mean"}, "vector"),
    ],
)
async def test_engines_draw_only_integers(tmp_path, algorithm: str, raw: dict, data: str) -> None:
    """Each node's private generator refuses every float draw: randomized response, the next hop
    (uniform, or by a graph walk's transition row), the geometric stop and the noise all come from
    integers, and the jobs end done. (Before: `rng.random()` for each of the first three.)"""
    from harness import contexts, make_net

    from netdp_node.algorithms import get_algorithm
    from netdp_node.graphs import hypercube_edges

    ids = [f"n{i}" for i in range(1, 9)]
    values = {
        "category": lambda i: np.array([float(i % 3)]),
        "value": lambda i: np.array([0.1 * i]),
        "vector": lambda i: np.array([0.1 * i, -0.05 * i]),
    }[data]
    net = await make_net("memory", ids, tmp_path, data={n: values(i) for i, n in enumerate(ids)})
    for i, nid in enumerate(ids):
        net.nodes[nid].rng_factory = lambda job, i=i: IntegersOnly(500 + i)  # type: ignore[assignment,misc]
    params = get_algorithm(algorithm).prepare(raw, len(ids))
    ctxs = contexts("j", algorithm, ids, params)
    if algorithm == "rw-sgd":
        edges = tuple((ids[a], ids[b]) for a, b in hypercube_edges(len(ids)))
        ctxs = {n: dataclasses.replace(c, edges=edges) for n, c in ctxs.items()}
    try:
        await net.run_job(ctxs)
        states = {n: (net.nodes[n].jobs["j"].state, net.nodes[n].jobs["j"].detail) for n in ids}
        assert all(s == "done" for s, _ in states.values()), states
    finally:
        await net.close()
