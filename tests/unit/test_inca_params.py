"""IncA's typed parameters (`IncaParams`) and its accountant's explicit audit cache."""

from __future__ import annotations

import json

import numpy as np
import pytest

from netdp_node.algorithms import get_algorithm
from netdp_node.algorithms.inca.accountant import ACCOUNTANT, AuditCache, IncaAccountant
from netdp_node.algorithms.inca.engine import Inca
from netdp_node.algorithms.inca.params import IncaParams
from netdp_node.privacy.composition import PrivacyLoss
from netdp_node.protocols.base import JobContext


def test_wire_round_trip_and_reprepare_are_identities():
    p = IncaParams.prepare({"T": 4, "k": 1, "dim": 2, "deadline_s": 30}, 6)
    wire = p.to_wire()
    assert wire == get_algorithm("inca").prepare({"T": 4, "k": 1, "dim": 2, "deadline_s": 30}, 6)
    back = IncaParams.from_wire(json.loads(json.dumps(wire)))
    assert back == p and back.to_wire() == wire
    assert IncaParams.prepare(wire, 6) == p  # re-preparing prepared parameters changes nothing
    # deadline_s is optional: absent from the wire when not given, and read back as None
    q = IncaParams.prepare({"T": 4}, 6)
    assert "deadline_s" not in q.to_wire() and IncaParams.from_wire(q.to_wire()).deadline_s is None


@pytest.mark.parametrize(
    ("raw", "n", "field"),
    [
        ({"T": 0}, 5, "T"),
        ({"k": 5}, 5, "k"),
        ({"scheme": "late"}, 5, "scheme"),
        ({"threat": "spy:1"}, 5, "threat"),
        ({"colour": 1}, 5, "colour"),
        ({"sigma_delta": -1.0}, 5, "sigma_delta"),
    ],
)
def test_bad_values_name_the_field(raw, n, field):
    with pytest.raises(ValueError, match=field):
        IncaParams.prepare(raw, n)


def test_from_wire_refuses_unknown_keys():
    wire = IncaParams.prepare({"T": 3}, 5).to_wire()
    with pytest.raises(ValueError, match="bogus"):
        IncaParams.from_wire({**wire, "bogus": 1})


def test_engines_of_one_job_share_one_parsed_parameter_object():
    ids = [f"n{i}" for i in range(5)]
    wire = IncaParams.prepare({"T": 3, "k": 2}, 5).to_wire()
    ctx = JobContext("j", "inca", ids[0], ids, wire, 7)
    engines = [
        Inca(ctx.for_node(v), np.zeros(1), np.random.default_rng(i)) for i, v in enumerate(ids)
    ]
    assert all(e.params is engines[0].params for e in engines)
    assert engines[0].params == IncaParams.from_wire(wire)


def test_audit_cache_is_bounded_least_recently_used_first_out():
    cache = AuditCache(capacity=2)
    v = (PrivacyLoss(1.0, 1e-5, "x"), {})
    cache.put("a", v)
    cache.put("b", v)
    assert cache.get("a") is v  # a is now the most recently used
    cache.put("c", v)
    assert cache.get("b") is None and cache.get("a") is v and cache.get("c") is v
    assert len(cache) == 2
    with pytest.raises(ValueError, match="capacity"):
        AuditCache(0)


def test_accountant_is_registered_and_owns_its_cache():
    assert get_algorithm("inca").accountant is ACCOUNTANT
    a, b = IncaAccountant(), IncaAccountant()
    assert a.cache is not b.cache
