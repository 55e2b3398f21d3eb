"""The typed job parameters of the ring, walk and Muffliato algorithms (netdp issue 14): one frozen
class per algorithm, prepared at submission, carried as a JSON object, read back at every node."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest

from netdp_node.algorithms import get_algorithm
from netdp_node.algorithms.ring.engine import RingSum
from netdp_node.algorithms.walk.engine import WalkSum, start_holder
from netdp_node.privacy.discrete_gaussian import accounted_sensitivity, discrete_gaussian_epsilon
from netdp_node.privacy.rw_sgd import ldp_noise_multiplier
from netdp_node.protocols.base import JobContext

# algorithm -> (a submission, participants, the keys of its job spec's parameters)
CASES = {
    "ring-sum": (
        {"rounds": 3, "dim": 2},
        4,
        {"rounds", "dim", "clip", "epsilon", "delta", "delta_prime", "sensitivity", "sigma"},
    ),
    "ring-sum-r": (
        {"rounds": 2},
        5,
        {"rounds", "dim", "clip", "epsilon", "delta", "delta_prime", "sensitivity", "sigma"},
    ),
    "ring-histogram": (
        {"rounds": 2, "bins": 3},
        4,
        {"rounds", "bins", "epsilon0", "delta", "delta_prime", "gamma", "clip", "sigma"}
        | {"sensitivity", "dim"},
    ),
    "walk-sum": (
        {"T": 12, "dim": 2},
        4,
        {"T", "epsilon", "delta", "delta_prime", "delta_hat", "cap", "regime", "edge_cap"}
        | {"colluders", "stop", "custody_timeout_s", "dim", "clip", "epsilon0", "sensitivity"}
        | {"sigma"},
    ),
    "walk-histogram": (
        {"T": 12, "bins": 3},
        4,
        {"T", "epsilon", "delta", "delta_prime", "delta_hat", "cap", "regime", "edge_cap"}
        | {"colluders", "stop", "custody_timeout_s", "bins", "epsilon0", "gamma"},
    ),
    "walk-sgd": (
        {"T": 12, "dim": 3},
        4,
        {"T", "epsilon", "delta", "delta_prime", "delta_hat", "cap", "regime", "edge_cap"}
        | {"colluders", "stop", "custody_timeout_s", "dim", "lipschitz", "eta", "dp", "sigma"},
    ),
    "rw-sgd": (
        {"T": 12, "mc_walks": 100, "collusion_groups": [[2, 0], [1, 3]]},
        4,
        {"T", "cap", "epsilon", "delta", "lipschitz", "eta", "dim", "weights", "stop"}
        | {"custody_timeout_s", "regime", "dp", "mc_walks", "objective", "burn_in"}
        | {"collusion_groups", "sensitivity", "sigma", "noise_multiplier"},
    ),
    "muffliato": (
        {"graph": "ring", "deadline_s": 30},
        6,
        {"deadline_s", "dim", "graph", "delta", "calibrate", "clip", "sensitivity", "calls"}
        | {"d_max", "accelerated", "round_timeout_s", "suspend_rounds", "spectral_gap_used"}
        | {"gamma", "epsilon", "sigma", "T"},
    ),
    "muffliato-gd": (
        {"graph": "er", "spectral_gap": 0.3, "steps": 2, "sigma": 0.5, "T": 2},
        6,
        {"dim", "graph", "delta", "calibrate", "p", "lipschitz", "eta", "calls", "steps"}
        | {"sensitivity", "d_max", "accelerated", "round_timeout_s", "suspend_rounds"}
        | {"spectral_gap_used", "gamma", "sigma", "T"},
    ),
    "muffliato-random": (
        {"graph": "complete", "rate": 2.0},
        5,
        {"dim", "graph", "delta", "calibrate", "clip", "sensitivity", "calls", "d_max", "rate"}
        | {"duration_s", "grace_s", "exchange_timeout_s", "epsilon", "sigma"},
    ),
}

# algorithm -> [(a submission with one bad value, the field its error must name)]
BAD = {
    "ring-sum": [
        ({"rounds": 0}, "rounds"),
        ({"dim": 0}, "dim"),
        ({"clip": -1.0}, "clip"),
        ({"epsilon": 0}, "epsilon"),
        ({"delta": 1.5}, "delta"),
        ({"delta_prime": 0}, "delta_prime"),
        ({"epsilon": "much"}, "epsilon"),
        ({"rounds": 2.5}, "rounds"),
    ],
    "ring-sum-r": [({"rounds": 10**6}, "rounds"), ({"clip": float("inf")}, "clip")],
    "ring-histogram": [
        ({"bins": 1}, "bins"),
        ({"epsilon0": 0}, "epsilon0"),
        ({"delta": 0}, "delta"),
        ({"bins": "many"}, "bins"),
    ],
    "walk-sum": [
        ({"T": 0}, "T"),
        ({"epsilon": -1}, "epsilon"),
        ({"delta_hat": 1}, "delta_hat"),
        ({"cap": -1}, "cap"),
        ({"edge_cap": -2}, "edge_cap"),
        ({"regime": "free"}, "regime"),
        ({"stop": "never"}, "stop"),
        ({"colluders": 4}, "colluders"),
        ({"custody_timeout_s": 0}, "custody_timeout_s"),
        ({"dim": 0}, "dim"),
        ({"clip": 0}, "clip"),
        ({"epsilon": float("nan")}, "epsilon"),
    ],
    "walk-histogram": [({"bins": 70_000}, "bins")],
    "walk-sgd": [
        ({"dp": "central"}, "dp"),
        ({"delta": 0.6}, "delta"),
        ({"eta": 0}, "eta"),
        ({"lipschitz": -1}, "lipschitz"),
        ({"dp": "local", "cap": 0}, "cap"),
    ],
    "rw-sgd": [
        ({"objective": "hinge"}, "objective"),
        ({"burn_in": -1}, "burn_in"),
        ({"burn_in": 2, "stop": "geometric"}, "burn_in"),
        ({"collusion_groups": [[1]]}, "collusion_groups"),
        ({"collusion_groups": "ab"}, "collusion_groups"),
        ({"mc_walks": 5}, "mc_walks"),
        ({"weights": "heavy"}, "weights"),
        ({"objective": "mean", "eta": 3.0}, "eta"),
        ({"cap": 0}, "cap"),
    ],
    "muffliato": [
        ({"graph": "star"}, "graph"),
        ({"calibrate": "max"}, "calibrate"),
        ({"dim": 0}, "dim"),
        ({"graph": "er", "p": 0, "spectral_gap": 0.2}, "p"),
        ({"graph": "er"}, "spectral_gap"),
        ({"spectral_gap": 2}, "spectral_gap"),
        ({"clip": 0}, "clip"),
        ({"round_timeout_s": 0}, "round_timeout_s"),
        ({"suspend_rounds": -1}, "suspend_rounds"),
        ({"sigma": -1.0}, "sigma"),
        ({"epsilon": 0}, "epsilon"),
        ({"T": 10**6}, "T"),
    ],
    "muffliato-gd": [({"steps": 0}, "steps"), ({"eta": 0}, "eta")],
    "muffliato-random": [({"rate": 0}, "rate"), ({"exchange_timeout_s": -1}, "exchange_timeout_s")],
}


def _params(name: str):
    raw, n, _ = CASES[name]
    return get_algorithm(name).params.prepare(raw, n)


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_wire_form_reads_back_to_the_same_parameters(name):
    p = _params(name)
    cls = type(p)
    wire = p.to_wire()
    assert set(wire) == CASES[name][2]  # the job spec's keys, as before the typed classes
    assert cls.from_wire(wire) == p
    # through the JSON of the job spec (the bootstrap sorts its keys), as a node reads it
    back = cls.from_wire(json.loads(json.dumps(wire, sort_keys=True)))
    assert back == p and back.to_wire() == wire
    if name == "rw-sgd":  # lists in JSON (a tuple of tuples in the frozen object)
        assert wire["collusion_groups"] == [[0, 2], [1, 3]]
        assert p.collusion_groups == ((0, 2), (1, 3))
    # the record returns the same wire dict
    raw, n, _ = CASES[name]
    assert get_algorithm(name).prepare(raw, n) == wire


@pytest.mark.parametrize("name", sorted(CASES))
def test_parameters_are_frozen(name):
    p = _params(name)
    field = dataclasses.fields(p)[0].name
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(p, field, 1)


@pytest.mark.parametrize(
    ("name", "raw", "field"), [(name, raw, f) for name, bad in BAD.items() for raw, f in bad]
)
def test_a_bad_value_names_its_field(name, raw, field):
    _, n, _ = CASES[name]
    with pytest.raises(ValueError, match=field):
        get_algorithm(name).validate(raw, n)


@pytest.mark.parametrize("name", sorted(CASES))
def test_unknown_names_are_refused(name):
    raw, n, _ = CASES[name]
    cls = get_algorithm(name).params
    with pytest.raises(ValueError, match=f"^colour is not a {name} parameter"):
        cls.prepare({**raw, "colour": "blue"}, n)
    wire = cls.prepare(raw, n).to_wire()
    with pytest.raises(ValueError, match=f"^colour is not a {name} parameter"):
        cls.from_wire({**wire, "colour": "blue"})
    # a spec without a derived value is refused, naming it
    with pytest.raises(ValueError, match="^(sigma|gamma) is missing"):
        cls.from_wire({k: v for k, v in wire.items() if k not in ("sigma", "gamma")})


def test_the_runtime_deadline_passes_from_wire_for_every_algorithm():
    wire = get_algorithm("ring-sum").prepare({"rounds": 2}, 3)
    p = get_algorithm("ring-sum").params.from_wire({**wire, "deadline_s": 1.0})
    assert p.to_wire() == wire  # the runtime reads it; the engine's parameters have none


def test_from_wire_converts_each_value_to_its_fields_type():
    cls = get_algorithm("ring-sum").params
    wire = cls.prepare({"rounds": 2}, 3).to_wire()
    p = cls.from_wire({**wire, "rounds": 2.0, "sigma": 0})
    assert type(p.rounds) is int and p.rounds == 2
    assert type(p.sigma) is float and p.sigma == 0.0


def test_integer_parameters_come_from_the_int_fields():
    assert get_algorithm("ring-sum").integers == {"rounds", "dim"}
    assert get_algorithm("ring-histogram").integers == {"rounds", "bins"}
    assert get_algorithm("rw-sgd").integers == {"T", "cap", "dim", "mc_walks", "burn_in"}
    assert get_algorithm("muffliato-gd").integers == {"T", "dim", "steps", "suspend_rounds"}
    with pytest.raises(ValueError, match="^rounds must be an integer"):
        get_algorithm("ring-sum").validate({"rounds": 2.5}, 3)


def _epsilon_of(sigma: float, sensitivity: float, dim: int, delta: float) -> float:
    """The ε of one discrete Gaussian release at σ, for the sensitivity charged on its grid."""
    return discrete_gaussian_epsilon(sigma / accounted_sensitivity(sensitivity, sigma, dim), delta)


def test_ring_sigma_makes_one_window_epsilon_dp():
    p = get_algorithm("ring-sum").params.prepare(
        {"rounds": 4, "dim": 3, "clip": 0.5, "epsilon": 0.4, "delta": 1e-7}, 5
    )
    assert p.sensitivity == 1.0
    eps = _epsilon_of(p.sigma, 1.0, 3, 1e-7)
    assert eps <= 0.4 * (1 + 1e-9) and eps > 0.39  # the smallest σ that meets the target
    assert _epsilon_of(0.98 * p.sigma, 1.0, 3, 1e-7) > 0.4


def test_walk_sigma_makes_each_contribution_epsilon0_dp():
    p = get_algorithm("walk-sum").params.prepare({"T": 20, "clip": 2.0, "dim": 2}, 5)
    assert p.sensitivity == 4.0 and 0 < p.epsilon0 < 1
    eps = _epsilon_of(p.sigma, 4.0, 2, p.delta)
    assert eps <= p.epsilon0 * (1 + 1e-9) and eps > 0.97 * p.epsilon0


def test_rw_sgd_noise_multiplier_is_the_local_dp_level_of_the_cap():
    p = get_algorithm("rw-sgd").params.prepare({"T": 40, "dim": 5, "epsilon": 4.0}, 4)
    charged = accounted_sensitivity(p.sensitivity, p.sigma, p.dim)
    assert p.noise_multiplier == pytest.approx(p.sigma / charged)
    assert p.noise_multiplier >= ldp_noise_multiplier(p.cap, 4.0, p.delta) * (1 - 1e-12)
    assert p.cap == math.ceil(1.2 * 40 / 4)


def test_the_engines_of_a_job_share_one_parameters_object():
    ids = ("a", "b", "c", "d")
    wire = get_algorithm("ring-sum").prepare({"rounds": 2}, 4)
    ctx = JobContext("j", "ring-sum", "a", ids, wire, 1)
    engines = [RingSum(ctx.for_node(v), np.array([0.5]), np.random.default_rng(0)) for v in ids]
    assert all(e.params is engines[0].params for e in engines)
    assert engines[0].params == get_algorithm("ring-sum").params.from_wire(wire)
    # a walk job's too
    walk = get_algorithm("walk-sum").prepare({"T": 8}, 4)
    wctx = JobContext("w", "walk-sum", "a", ids, walk, 3)
    first = WalkSum(wctx.for_node(start_holder(wctx)), None, np.random.default_rng(1))
    second = WalkSum(wctx.for_node("b"), None, np.random.default_rng(2))
    assert first.params is second.params and first.params.sigma == walk["sigma"]


def test_a_spec_with_unknown_keys_fails_the_engine_with_a_named_error():
    ids = ("a", "b", "c")
    wire = {**get_algorithm("ring-sum").prepare({"rounds": 2}, 3), "colour": 1}
    with pytest.raises(ValueError, match="^colour is not a ring-sum parameter"):
        RingSum(JobContext("j", "ring-sum", "a", ids, wire, 1), None, np.random.default_rng(0))
