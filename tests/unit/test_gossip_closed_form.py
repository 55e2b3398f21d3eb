"""The spectral gap of the public Muffliato graphs (ring, complete, hypercube) in closed form,
against NumPy's dense eigenvalues of their Metropolis matrices; preparing a job on them no longer
runs the O(n³) eigen-decomposition (about 10 s at n = 2048)."""

from __future__ import annotations

import numpy as np
import pytest

from netdp_node.algorithms import get_algorithm
from netdp_node.graphs import complete_edges, hypercube_edges, ring_edges
from netdp_node.privacy import gossip

EDGES = {"ring": ring_edges, "complete": complete_edges, "hypercube": hypercube_edges}


def _dense_gap(n: int, edges) -> float:
    """Definition 2 from NumPy's eigenvalues of the Metropolis matrix: drop one eigenvalue 1."""
    ev = np.sort(np.linalg.eigvalsh(gossip.metropolis_weights(n, edges)))
    return 1.0 if n == 1 else float(max(0.0, 1.0 - np.max(np.abs(ev[:-1]))))


@pytest.mark.parametrize("kind", sorted(EDGES))
@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 16, 31, 32, 64, 100, 128])
def test_closed_form_gap_matches_eigvalsh(kind, n):
    if kind == "hypercube" and n & (n - 1):
        with pytest.raises(ValueError, match="power-of-two"):
            gossip.metropolis_spectral_gap(kind, n)
        return
    got = gossip.metropolis_spectral_gap(kind, n)
    assert got == pytest.approx(_dense_gap(n, EDGES[kind](n)), abs=1e-12)


def test_closed_form_gap_known_values_and_unknown_kind():
    assert gossip.metropolis_spectral_gap("hypercube", 2048) == pytest.approx(1 / 6)
    assert gossip.metropolis_spectral_gap("ring", 8) == pytest.approx(0.195262, abs=1e-6)
    with pytest.raises(ValueError, match="no closed-form"):
        gossip.metropolis_spectral_gap("er", 10)


@pytest.mark.parametrize(
    ("alg", "graph", "n"),
    [("muffliato", "hypercube", 64), ("muffliato", "ring", 50), ("muffliato-gd", "ring", 40)]
    + [("muffliato", "complete", 20)],
)
def test_preparing_a_job_uses_the_closed_form(monkeypatch, alg, graph, n):
    """The parameters are those of the dense spectrum, and the dense path is not taken."""
    expect = _dense_gap(n, EDGES[graph](n))

    def dense(W):
        raise AssertionError("dense eigen-decomposition of a public graph with a closed form")

    monkeypatch.setattr(gossip, "spectral_gap", dense)
    p = get_algorithm(alg).validate({"graph": graph}, n)
    assert p["spectral_gap_used"] == pytest.approx(expect, abs=1e-12)
    assert p["gamma"] == pytest.approx(gossip.chebyshev_gamma(expect), abs=1e-12)
