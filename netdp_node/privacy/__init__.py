"""Pure privacy accountants (no I/O, no global state).

`composition`: Gaussian calibration, basic/advanced composition, RDP curves and conversion, and the
cross-job composition rule (`compose_losses`). `network_dp`: Network DP ring summation (Cyffers &
Bellet 2022, Algorithm 1 / Theorem 1). Section numbers in docstrings refer to `network-dp.md`.
"""

from __future__ import annotations

from netdp_node.privacy.composition import (
    DEFAULT_ORDERS,
    PrivacyLoss,
    advanced_composition,
    basic_composition,
    compose_losses,
    gaussian_rdp,
    gaussian_sigma,
    rdp_to_dp,
)
from netdp_node.privacy.network_dp import (
    ldp_sum_std,
    ring_adds_noise,
    ring_noise_count,
    ring_sum_loss,
    ring_sum_std,
    theorem1,
)

__all__ = [
    "DEFAULT_ORDERS",
    "PrivacyLoss",
    "advanced_composition",
    "basic_composition",
    "compose_losses",
    "gaussian_rdp",
    "gaussian_sigma",
    "ldp_sum_std",
    "rdp_to_dp",
    "ring_adds_noise",
    "ring_noise_count",
    "ring_sum_loss",
    "ring_sum_std",
    "theorem1",
]
