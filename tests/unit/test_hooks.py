"""Each algorithm's hooks (netdp issue 14): the tools ask the record, and what they list comes from
the registry (issue 16: `netdp demo --help` names every algorithm)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from netdp_node.algorithms import ALGORITHMS, get_algorithm
from netdp_node.algorithms.hooks import NO_HOOKS, Hooks
from netdp_node.algorithms.muffliato.hooks import gd_exact_average
from netdp_node.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]


def _demo_help() -> str:
    out = subprocess.run(
        [sys.executable, "-m", "netdp_node.cli", "demo", "--help"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_demo_help_lists_every_algorithm_of_the_registry():
    text = _demo_help()
    listing = text[text.index("algorithms (--algorithm):") : text.index("options:")]
    demos = [k for k, a in ALGORITHMS.items() if a.hooks.demo]
    assert len(demos) >= 9 and "muffliato-gd" in demos
    for name, a in ALGORITHMS.items():
        assert name in listing, name  # with its one line, or among those without a demo
        if a.hooks.demo:
            assert f"  {name}  " in listing and a.hooks.demo.split()[0] in listing
    # the --algorithm option names exactly the algorithms with a demo, in the registry's order
    words = " ".join(text[text.index("options:") :].split())
    words = words[words.index("--algorithm ALGORITHM") :]
    assert words.startswith("--algorithm ALGORITHM " + ", ".join(demos) + " (default ring-sum)")


def test_the_demo_runs_what_its_help_lists():
    from netdp_node import demo

    assert list(demo.ALGORITHMS) == [k for k, a in ALGORITHMS.items() if a.hooks.demo]
    for name in ALGORITHMS:
        a = build_parser().parse_args(["demo", "--algorithm", name])
        if name in demo.ALGORITHMS:
            params = demo.check_args(a)
            assert get_algorithm(name).hooks.describe(params, "exponential")
        else:
            from netdp_node.errors import ConfigError

            with pytest.raises(ConfigError, match="--algorithm must be one of"):
                demo.check_args(a)


def test_every_record_has_hooks_and_every_audit_check_exists():
    from netdp_node.audit import CHECKS

    for name, a in ALGORITHMS.items():
        assert isinstance(a.hooks, Hooks) and a.hooks is not NO_HOOKS, name
        assert a.hooks.audit_checks <= set(CHECKS), name


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_every_algorithm_has_synthetic_data_for_simulate(name):
    from netdp_node.simulate import synthetic_data

    ids = [f"node-{i}" for i in range(1, 7)]
    params = get_algorithm(name).validate({}, len(ids))
    data, split = synthetic_data(name, ids, params, 3, 2)
    assert sorted(data) == ids and all(np.all(np.isfinite(v)) for v in data.values())
    assert (split is not None) == (not get_algorithm(name).hooks.demo_takes_values)


def test_gd_baseline_takes_the_clipped_mean_gradient_step():
    """One noiseless step from θ = 0: the gradient of ln(1 + exp(−y θᵀx)) at 0 is −y x / 2 per
    row, averaged over a user's rows, clipped to L, then averaged over users."""
    X1, y1 = np.array([[1.0, 0.0], [0.0, 2.0]]), np.array([1.0, -1.0])
    X2, y2 = np.array([[3.0, 4.0]]), np.array([0.0])  # a 0/1 label: 0 is the negative class
    g1 = np.array([-0.25, 0.5])  # mean of (−1·[1, 0], +1·[0, 2]) / 2, norm < 1
    g2 = np.array([1.5, 2.0]) / 2.5  # +[3, 4] / 2, norm 2.5, clipped to 1
    theta = gd_exact_average([(X1, y1), (X2, y2)], 1, 0.5, 1.0, 0.0, np.random.default_rng(0))
    np.testing.assert_allclose(theta, -0.5 * (g1 + g2) / 2)
