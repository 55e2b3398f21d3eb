"""Every refusal of a job's parameters names the one field at fault first, in one form:
`<field> must be <rule>, got <value>` (`protocols.base.invalid`), for every registered algorithm
and every parameter it takes, whichever way the submission reaches it: `Algorithm.validate` (the
bootstrap's SubmitJob, `netdp job submit`, `netdp demo`, `netdp simulate`, `netdp plan`), the
typed class's `prepare`, and `from_wire` at the nodes. The fields come from the registry (each
class's `inputs`), never from a list of names here."""

from __future__ import annotations

import dataclasses
import typing

import pytest

from netdp_node.algorithms import ALGORITHMS
from netdp_node.protocols.base import RUNTIME_KEYS

#: participants of every job here (a power of two: Muffliato's hypercube takes it)
N = 8

#: (algorithm, field) for every input field of every registered algorithm
FIELDS = [(name, field) for name, a in ALGORITHMS.items() for field in sorted(a.params.inputs)]


def _refusal(call: typing.Callable[[], object]) -> str | None:
    """The message of the ValueError `call` raises (None when it accepts)."""
    try:
        call()
    except ValueError as e:
        return str(e)
    return None


def _names_first(field: str, message: str) -> bool:
    return message.startswith(f"{field} must be ") or message.startswith(f"{field} is ")


@pytest.mark.parametrize(("name", "field"), FIELDS, ids=[f"{a}-{f}" for a, f in FIELDS])
def test_a_word_where_a_value_belongs_names_the_field_first(name, field):
    """A word no field takes ('bogus': not a number, not a choice, not a threat, not a list of
    groups, not a boolean) is refused by the submission's check and by `prepare`, naming the
    field first."""
    a = ALGORITHMS[name]
    for how, call in (("validate", a.validate), ("prepare", a.params.prepare)):
        msg = _refusal(lambda call=call: call({field: "bogus"}, N))
        assert msg is not None, f"{how} accepted {field}='bogus'"
        assert _names_first(field, msg), f"{how}: {msg}"
        assert "'bogus'" in msg, msg  # the value given


@pytest.mark.parametrize(("name", "field"), FIELDS, ids=[f"{a}-{f}" for a, f in FIELDS])
def test_an_out_of_range_number_names_the_field_first(name, field):
    """The first of -1, 10^12 and 0.5 the field refuses (a count below 1, a probability below 0,
    a fraction where an integer belongs, a number where a word belongs, a bound past hi, ...) is
    refused naming it first, with the value given."""
    if field in RUNTIME_KEYS:
        pytest.skip("the runtime's deadline takes any number (<= 0: none)")
    a = ALGORITHMS[name]
    for v in (-1, 10**12, 0.5):
        msg = _refusal(lambda v=v: a.validate({field: v}, N))
        if msg is not None:
            assert _names_first(field, msg), msg
            assert repr(v) in msg or repr(float(v)) in msg, msg
            return
    pytest.fail(f"{field} took -1, 10^12 and 0.5")


def test_too_few_participants_names_the_participants():
    for name, a in ALGORITHMS.items():
        msg = _refusal(lambda a=a: a.validate({}, 1))
        assert msg is not None and msg.startswith("participants must be "), (name, msg)


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_from_wire_names_the_field_it_cannot_read(name):
    """A node reads a job spec with no checks of the values, but a value that is not of its
    field's type (a word for a number) is an error naming the field, as are a missing field and
    an unknown one."""
    a = ALGORITHMS[name]
    cls = a.params
    wire = a.prepare({"T": N} if "T" in cls.inputs else {}, N)
    hints = typing.get_type_hints(cls)
    numeric = [k for k in wire if hints[k] in (int, float, int | None, float | None)]
    assert numeric
    for k in numeric:
        msg = _refusal(lambda k=k: cls.from_wire({**wire, k: "bogus"}))
        assert msg is not None and msg.startswith(f"{k} must be "), msg
    required = [
        f.name
        for f in dataclasses.fields(cls)
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]
    gone = {k: v for k, v in wire.items() if k != required[-1]}
    if required[-1] in wire:
        msg = _refusal(lambda: cls.from_wire(gone))
        assert msg is not None and msg.startswith(f"{required[-1]} is missing"), msg
    msg = _refusal(lambda: cls.from_wire({**wire, "colour": 1, "zz": 2}))
    assert msg is not None and msg.startswith(f"colour is not a {name} parameter"), msg
    assert "zz" in msg  # the other unknown name, after


def test_a_rule_on_two_fields_names_the_one_given():
    """rounds × delta + delta_prime < 1 (the ring's δ over its windows): the field named first
    is the one the submission gave, the others after."""
    ring = ALGORITHMS["ring-sum"]
    msg = _refusal(lambda: ring.validate({"delta": 0.2}, N))
    assert msg is not None and msg.startswith("delta must be < "), msg
    assert "delta_prime" in msg and "rounds" in msg
    msg = _refusal(lambda: ring.validate({"rounds": 10**5, "delta_prime": 0.95}, N))
    assert msg is not None and msg.startswith("delta_prime must be < "), msg
