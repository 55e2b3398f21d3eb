"""An algorithm's record: the one place that ties its name to its engine, its parameters (checked
once, with errors naming the field) and the size of its messages. Each family's folder builds its
records (`RECORDS` in `netdp_node/algorithms/<family>/__init__.py`); `netdp_node.algorithms` lists
the families."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from netdp_node.algorithms.accounting import Accountant
from netdp_node.algorithms.hooks import NO_HOOKS, Hooks
from netdp_node.limits import ENVELOPE_ALLOWANCE, MAX_MESSAGE_BYTES
from netdp_node.privacy.threat import ThreatModel
from netdp_node.protocols.base import Engine, Params, integer, invalid

__all__ = ["ENVELOPE_ALLOWANCE", "MAX_PARAM_DEPTH", "Algorithm", "Params"]

#: How deep a job parameter may nest lists and objects (collusion groups are lists of lists).
MAX_PARAM_DEPTH = 4


def _dim(params: Mapping[str, Any], n: int) -> int:
    return int(params.get("dim", 1))


#: who a job's ε holds against, from its public spec, optionally for one reporting node
Threat = Callable[[Mapping[str, Any], str | None], ThreatModel]


@dataclass(frozen=True)
class Algorithm:
    name: str
    engine: type[Engine]
    # its job parameters: the typed class (`Params`: prepare, from_wire, to_wire)
    params: type[Params]
    topology: str  # default topology kind
    # Each node's output stays on the node (its ledger), never reported to the bootstrap: for
    # gossip every node ends with its own estimate x_v^T, and showing them all to every participant
    # would give each observer P(x + η), i.e. x + η itself when P is invertible (so x^T is
    # not sent).
    private_output: bool = False
    # the parameters that are integers (a non-integer value is refused, never truncated); for a
    # `Params` class, derived from its fields typed int when left empty
    integers: frozenset[str] = frozenset()
    # (prepared params, n) -> numbers in the largest message payload, and what sets that size
    payload: Callable[[Mapping[str, Any], int], int] = _dim
    payload_params: str = "dim"
    # what `netdp demo`, `simulate`, `compose` and `audit` ask it (`algorithms.hooks`)
    hooks: Hooks = NO_HOOKS
    # its accountant: the node's privacy loss from its own view (algorithms/<family>/accountant.py)
    accountant: Accountant = dataclasses.field(kw_only=True)
    # its threat model: (public job spec, the reporting node or None) -> who its ε holds against
    # (`privacy.threat`)
    threat: Threat = dataclasses.field(kw_only=True)

    def __post_init__(self) -> None:
        cls = self.params
        if cls.algorithm != self.name:
            raise ValueError(f"{self.name}: its parameters are {cls.algorithm!r}'s")
        reads = self.engine.params_class
        if reads is not None and not issubclass(cls, reads):
            raise ValueError(f"{self.name}: its engine reads {self.engine.params_class}")
        if not self.integers:
            object.__setattr__(self, "integers", cls.integer_inputs())

    def prepare(self, params: Mapping[str, Any], n: int) -> dict[str, Any]:
        """The job spec's parameters (the wire dict) of a submission's `params` for n
        participants: defaults filled, values checked (ValueError naming the field), noise
        calibrated."""
        return self.params.prepare(params, n).to_wire()

    def validate(self, params: Mapping[str, Any], n: int) -> dict[str, Any]:
        """`prepare`, behind the checks every algorithm shares, for a job that is to run on the
        network (the bootstrap's SubmitJob): values are finite numbers, strings, booleans or
        shallow lists; an integer parameter gets an integer (2.7 is refused, not truncated to 2);
        and the largest message of the job fits the message limit (`netdp_node.limits`
        MAX_MESSAGE_BYTES). Raises ValueError naming the parameter."""
        raw = self.check_values(params)
        try:  # the size first when the raw parameters tell it (before any calibration runs)
            self._check_payload(self.payload(raw, n), MAX_MESSAGE_BYTES, raw)
        except (KeyError, TypeError, ArithmeticError):
            pass  # it needs the prepared parameters: checked below
        try:
            out = self.prepare(raw, n)
        except (TypeError, ArithmeticError, ValueError) as e:
            # a value of the wrong type (a list or a word where a number belongs): name it
            text = str(e)
            suspects = sorted(
                k
                for k, v in raw.items()
                if isinstance(v, (list, tuple, Mapping)) or (isinstance(v, str) and repr(v) in text)
            )
            if isinstance(e, ValueError) and (not suspects or any(k in text for k in suspects)):
                raise  # the algorithm's own message, naming the parameter
            # no check of the algorithm's caught it: name what is suspect, else what was given
            named = suspects or sorted(raw)
            first = named[0] if named else "params"
            also = f"; or check {', '.join(named[1:])}" if named[1:] else ""
            raise invalid(
                first, f"valid for {self.name}", raw.get(first, raw), f"{text}{also}"
            ) from None
        self._check_payload(self.payload(out, n), MAX_MESSAGE_BYTES, out)
        return out

    def check_values(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """The checks of `validate` that do not need the number of participants (types, finite
        numbers, integers): a client can run them before it knows who will take part. Returns the
        parameters with integer parameters as int. Raises ValueError naming the parameter."""
        raw = dict(params)
        for k, v in raw.items():
            _check_value(k, v, 0)
        for k in self.integers & raw.keys():
            raw[k] = _integer(k, raw[k])
        return raw

    def _check_payload(self, elements: int, max_bytes: int, params: Mapping[str, Any]) -> None:
        limit = (max_bytes - ENVELOPE_ALLOWANCE) // 8
        if elements > limit:
            first, _, rest = self.payload_params.partition(", ")
            raise invalid(
                first,
                "lower",
                params.get(first),
                f"a message of this {self.name} job would carry {elements} numbers "
                f"({8 * elements} bytes), more than the message limit MAX_MESSAGE_BYTES = "
                f"{max_bytes} bytes allows ({limit} numbers)"
                + (f"; or lower {rest}" if rest else ""),
            )


def _check_value(name: str, v: Any, depth: int) -> None:
    if depth > MAX_PARAM_DEPTH:
        raise ValueError(f"{name} must be nested at most {MAX_PARAM_DEPTH} levels deep")
    if isinstance(v, bool) or v is None or isinstance(v, str):
        return
    if isinstance(v, float):
        if not math.isfinite(v):
            raise invalid(name, "a finite number", v)
    elif isinstance(v, int):
        if abs(v) >= 2**63:
            raise invalid(name, "in range (|value| < 2^63)", v)
    elif isinstance(v, (list, tuple)):
        for x in v:
            _check_value(name, x, depth + 1)
    elif isinstance(v, Mapping):
        for x in v.values():
            _check_value(name, x, depth + 1)
    else:
        raise ValueError(  # noqa: TRY004 - the caller's contract: ValueError, naming the field
            f"{name} must be a number, string, boolean, list or object, got a {type(v).__name__}"
        )


def _integer(name: str, v: Any) -> int:
    return integer({name: v}, name, None)
