"""Argument checks shared by the privacy formulas (each raises ValueError naming the argument)."""

from __future__ import annotations

import math
from typing import Any

from netdp_node.lazy import lazy_module

np = lazy_module("numpy")  # lazy: start-up cost


def open_unit(name: str, value: float) -> float:
    """Return value as a float; ValueError unless 0 < value < 1 (rejects NaN)."""
    if not (0.0 < value < 1.0):
        raise ValueError(f"{name} must satisfy 0 < {name} < 1, got {value!r}")
    return float(value)


def positive(name: str, value: float) -> float:
    """Return value as a float; ValueError unless it is finite and > 0."""
    if not (0.0 < value < math.inf):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return float(value)


def int_at_least(name: str, value: Any, minimum: int) -> int:
    """Return value as an int; ValueError unless it is an integer ≥ minimum (bools rejected)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def renyi_order(alpha: float) -> None:
    """ValueError unless 1 < alpha < inf."""
    if not (1.0 < alpha < math.inf):
        raise ValueError(f"the Rényi order alpha must satisfy 1 < alpha < inf, got {alpha!r}")
