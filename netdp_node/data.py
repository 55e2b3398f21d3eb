"""Loading a node's private values from a file (never sent anywhere, never written to the ledger)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from netdp_node.errors import ConfigError
from netdp_node.lazy import lazy_module

if TYPE_CHECKING:
    import numpy as np
else:
    np = lazy_module("numpy")  # lazy: start-up cost


def load_values(path: str | Path) -> np.ndarray:
    """A 1-D float vector from a .npy file or a text file of numbers (comma/space/newline separated).
    NaN and infinite values are refused."""
    p = Path(path)
    if not p.exists():
        raise ConfigError(f"--data file {p} does not exist")
    try:
        if p.suffix == ".npy":
            arr = np.load(p, allow_pickle=False)
        else:
            text = p.read_text().replace(",", " ")
            arr = np.array([float(t) for t in text.split() if t], dtype=np.float64)
    except (ValueError, OSError) as e:
        raise ConfigError(f"cannot read values from {p}: {e}") from e
    arr = np.asarray(arr, dtype=np.float64).reshape(-1)
    if arr.size == 0:
        raise ConfigError(f"{p} holds no values")
    if not np.all(np.isfinite(arr)):
        raise ConfigError(f"{p} holds NaN or infinite values")
    return arr
