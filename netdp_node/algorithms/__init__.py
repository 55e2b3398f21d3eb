"""The registry of algorithms: one record per algorithm, owning its engine and its parameters."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from netdp_node.algorithms.inca import engine as inca
from netdp_node.algorithms.muffliato import engine as muffliato
from netdp_node.algorithms.ring import engine as ring
from netdp_node.algorithms.walk import engine as walk
from netdp_node.limits import MAX_MESSAGE_BYTES
from netdp_node.protocols.base import Engine

#: How deep a job parameter may nest lists and objects (collusion groups are lists of lists).
MAX_PARAM_DEPTH = 4
#: Bytes of a message kept for everything but its payload (ids, kind, counters, scalars, detail).
ENVELOPE_ALLOWANCE = 64 * 1024


def _dim(params: Mapping[str, Any], n: int) -> int:
    return int(params.get("dim", 1))


@dataclass(frozen=True)
class Algorithm:
    name: str
    engine: type[Engine]
    prepare: Callable[[dict[str, Any], int], dict[str, Any]]  # (params, n) -> validated params
    topology: str  # default topology kind
    # Each node's output stays on the node (its ledger), never reported to the bootstrap: for
    # gossip every node ends with its own estimate x_v^T, and showing them all to every participant
    # would give each observer P(x + η), i.e. x + η itself when P is invertible (muffliato.md §7.1
    # item 7: x^T is not sent).
    private_output: bool = False
    # the parameters that are integers (a non-integer value is refused, never truncated)
    integers: frozenset[str] = frozenset()
    # (prepared params, n) -> numbers in the largest message payload, and what sets that size
    payload: Callable[[Mapping[str, Any], int], int] = _dim
    payload_params: str = "dim"

    def validate(self, params: Mapping[str, Any], n: int) -> dict[str, Any]:
        """`prepare`, behind the checks every algorithm shares, for a job that is to run on the
        network (the bootstrap's SubmitJob): values are finite numbers, strings, booleans or
        shallow lists; an integer parameter gets an integer (2.7 is refused, not truncated to 2);
        and the largest message of the job fits the message limit (`netdp_node.limits`
        MAX_MESSAGE_BYTES). Raises ValueError naming the parameter."""
        raw = self.check_values(params)
        try:  # the size first when the raw parameters tell it (before any calibration runs)
            self._check_payload(self.payload(raw, n), MAX_MESSAGE_BYTES)
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
            named = f" (check {', '.join(suspects)})" if suspects else ""
            raise ValueError(f"invalid {self.name} parameters{named}: {text}") from None
        self._check_payload(self.payload(out, n), MAX_MESSAGE_BYTES)
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

    def _check_payload(self, elements: int, max_bytes: int) -> None:
        limit = (max_bytes - ENVELOPE_ALLOWANCE) // 8
        if elements > limit:
            raise ValueError(
                f"{self.payload_params}: a message of this {self.name} job would carry {elements} "
                f"numbers ({8 * elements} bytes), more than the message limit MAX_MESSAGE_BYTES = "
                f"{max_bytes} bytes allows ({limit} numbers); lower {self.payload_params}"
            )


def _short(v: Any) -> str:
    r = repr(v)
    return r if len(r) <= 40 else r[:37] + "..."


def _check_value(name: str, v: Any, depth: int) -> None:
    if depth > MAX_PARAM_DEPTH:
        raise ValueError(f"parameter {name} is nested more than {MAX_PARAM_DEPTH} levels deep")
    if isinstance(v, bool) or v is None or isinstance(v, str):
        return
    if isinstance(v, float):
        if not math.isfinite(v):
            raise ValueError(f"parameter {name} must be a finite number, got {v!r}")
    elif isinstance(v, int):
        if abs(v) >= 2**63:
            raise ValueError(f"parameter {name} is out of range (|value| < 2^63), got {_short(v)}")
    elif isinstance(v, (list, tuple)):
        for x in v:
            _check_value(name, x, depth + 1)
    elif isinstance(v, Mapping):
        for x in v.values():
            _check_value(name, x, depth + 1)
    else:
        raise ValueError(  # noqa: TRY004 - the caller's contract: ValueError, naming the field
            f"parameter {name} has an unsupported type {type(v).__name__}"
        )


def _integer(name: str, v: Any) -> int:
    if isinstance(v, int) and not isinstance(v, bool):
        return v
    if isinstance(v, float) and v.is_integer():
        return int(v)
    if isinstance(v, str):
        try:
            return int(v.strip())
        except ValueError:
            pass
    raise ValueError(f"parameter {name} must be an integer, got {_short(v)}")


def _inca_payload(p: Mapping[str, Any], n: int) -> int:
    dim, k, T = int(p["dim"]), int(p["k"]), int(p["T"])
    return max(inca.record_length(dim, n, k, T), dim + 1 + inca.history_length(n, k, T))


_RING = frozenset({"rounds", "dim"})
_RING_HISTOGRAM = frozenset({"rounds", "bins"})
_WALK = frozenset({"T", "cap", "edge_cap", "colluders", "dim", "bins"})
_RW_SGD = frozenset({"T", "cap", "dim", "mc_walks", "burn_in"})
_INCA = frozenset({"T", "k", "dim", "fanout", "calibration_runs"})
_MUFFLIATO = frozenset({"T", "dim", "steps", "suspend_rounds"})


ALGORITHMS: dict[str, Algorithm] = {
    "ring-sum": Algorithm("ring-sum", ring.RingSum, ring.prepare_params, "ring", integers=_RING),
    "ring-sum-r": Algorithm(
        "ring-sum-r", ring.RingSumR, ring.prepare_params, "ring", integers=_RING
    ),
    "ring-histogram": Algorithm(
        "ring-histogram",
        ring.RingHistogram,
        ring.prepare_histogram_params,
        "ring",
        integers=_RING_HISTOGRAM,
        payload_params="bins",
    ),
    "walk-sum": Algorithm(
        "walk-sum",
        walk.WalkSum,
        functools.partial(walk.prepare_params, "walk-sum"),
        "complete",
        integers=_WALK,
    ),
    "walk-histogram": Algorithm(
        "walk-histogram",
        walk.WalkHistogram,
        functools.partial(walk.prepare_params, "walk-histogram"),
        "complete",
        integers=_WALK,
        payload=lambda p, n: int(p["bins"]),
        payload_params="bins",
    ),
    "walk-sgd": Algorithm(
        "walk-sgd",
        walk.WalkSgd,
        functools.partial(walk.prepare_params, "walk-sgd"),
        "complete",
        integers=_WALK,
    ),
    "rw-sgd": Algorithm(
        "rw-sgd", walk.RandomWalkSgd, walk.prepare_rw_sgd, "exponential", integers=_RW_SGD
    ),
    "inca": Algorithm(
        "inca",
        inca.Inca,
        inca.prepare_params,
        "complete",
        integers=_INCA,
        payload=_inca_payload,
        payload_params="dim, T or k (or the participants)",
    ),
    "muffliato": Algorithm(
        "muffliato",
        muffliato.MuffliatoSync,
        functools.partial(muffliato.prepare_params, "muffliato"),
        "ring",
        True,
        integers=_MUFFLIATO,
    ),
    "muffliato-random": Algorithm(
        "muffliato-random",
        muffliato.MuffliatoRandom,
        functools.partial(muffliato.prepare_params, "muffliato-random"),
        "ring",
        True,
        integers=_MUFFLIATO,
    ),
    "muffliato-gd": Algorithm(
        "muffliato-gd",
        muffliato.MuffliatoGd,
        functools.partial(muffliato.prepare_params, "muffliato-gd"),
        "ring",
        True,
        integers=_MUFFLIATO,
    ),
}


def get_algorithm(name: str) -> Algorithm:
    try:
        return ALGORITHMS[name]
    except KeyError:
        raise ValueError(f"unknown algorithm {name!r}; available: {sorted(ALGORITHMS)}") from None
