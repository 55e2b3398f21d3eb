"""Algorithm 1 of Cyffers & Bellet (AISTATS 2022): private real summation on the directed ring.

Accountant: Theorem 1 (with docs/errata.md, E1) in `netdp_node.privacy.ring`.

The token starts at the first node of the public ring order and goes round K times. At its k-th
visit the node at 1-indexed position p adds its (clipped) value, and Gaussian noise N(0, σ²I) iff
(p + k − 2) mod (n − 1) = 0: noise once every n − 1 hops, so that every window an observer sees
holds noise added by somebody else. Because the result is released, the last node also adds noise
in round K (`ring_release_adds_noise`: without it the release would show some observers the last
inputs with no noise but their own). The node counts its own visits, so no step counter travels
with the token; the per-link sequence number is the round.

Release (App. C): after round K the first node sends the final token once
more around the ring unchanged ("release"), so every participant receives the result; it is one more
observation by each, which the accountant counts (`netdp_node.privacy.accountant`).

A node that declined the job (budget) contributes zero but still adds the noise the schedule gives
it, so the job completes and the others keep their guarantee.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np

from netdp_node.algorithms.ring.params import (
    MAX_ROUNDS,
    RingHistogramParams,
    RingParams,
    RingSumParams,
    RingSumRParams,
)
from netdp_node.privacy.discrete_gaussian import GaussianPool, gaussian_on_grid, job_grid
from netdp_node.privacy.exact_draws import randomized_response
from netdp_node.privacy.ring import ring_release_adds_noise, ring_release_noise_count
from netdp_node.protocols.base import (
    Action,
    Engine,
    JobContext,
    Message,
    Output,
    Record,
    RefusalCode,
    Refused,
    Send,
)

TOKEN = "token"
RELEASE = "release"
WALK = "ring"

__all__ = ["MAX_ROUNDS", "RingHistogram", "RingSum", "RingSumR", "clip_l2"]


def clip_l2(x: np.ndarray, bound: float) -> np.ndarray:
    """Scale x down to L2 norm `bound` if it is longer (the public sensitivity bound)."""
    norm = float(np.linalg.norm(x))
    return x if norm <= bound else x * (bound / norm)


class RingSum(Engine):
    algorithm = "ring-sum"
    mechanism = "gaussian"
    params_class: ClassVar[type[RingParams]] = RingSumParams
    params: RingParams

    def __init__(
        self,
        ctx: JobContext,
        data: np.ndarray | None,
        rng: np.random.Generator,
        contribute: bool = True,
    ) -> None:
        super().__init__(ctx, data, rng, contribute)
        p = self.params
        self.order = self.ids
        if self.n < 3:
            raise ValueError("the ring sum needs at least 3 participants")
        self.pos = self.position[ctx.me] + 1  # 1-indexed, as in the paper
        self.pred = self.order[self.pos - 2]  # position 1's predecessor is the last node
        self.succ = self.order[self.pos % self.n]
        self.rounds = p.rounds
        self.dim = p.dim
        self.grid = job_grid(p.sigma)  # values and noise on this grid (discrete_gaussian)
        # the node's noise, drawn in batches from its private generator (a node adds noise at
        # every visit; `GaussianPool`: the same distribution, without the per-call cost)
        self.noise = GaussianPool(rng)
        self.clip = p.clip
        if data is None or not contribute:
            self.x = np.zeros(self.dim)
        else:
            x = np.asarray(data, dtype=np.float64).reshape(-1)
            if x.shape != (self.dim,):
                raise ValueError(f"data has shape {x.shape}, the job expects ({self.dim},)")
            self.x = clip_l2(x, self.clip)
        self.received = 0  # tokens received
        self.visits = 0  # rounds in which this node added to the token
        self._x_on_grid: np.ndarray | None = None  # (`_add`)

    # -- helpers -------------------------------------------------------------------------------
    def expected_steps(self) -> int:
        return self.rounds + (0 if self.pos == 1 else 1)

    def progress(self) -> int:
        return self.visits + (1 if self.done and self.pos != 1 else 0)

    def payload_shape(self, kind: str) -> tuple[int, ...] | None:
        return (self.dim,)

    def _check(self, tau: np.ndarray) -> np.ndarray:
        return tau

    def _add(self, round_: int, tau: np.ndarray) -> tuple[np.ndarray, float]:
        """This node's contribution at its visit of round `round_`: (new token, noise std added).
        Algorithm 1: Gaussian noise on the schedule of `ring_release_adds_noise`; the value and the
        noise on the job's grid (`discrete_gaussian.gaussian_on_grid`)."""
        if not ring_release_adds_noise(self.pos, round_, self.n, self.rounds):
            # no noise: γ·round(x/γ), the same at every such visit (computed once; draws nothing)
            if self._x_on_grid is None:
                self._x_on_grid = gaussian_on_grid(self.rng, self.x, 0.0, self.grid)
            return tau + self._x_on_grid, 0.0
        std = self.params.sigma
        return tau + gaussian_on_grid(self.rng, self.x, std, self.grid, pool=self.noise), std

    def _visit(self, round_: int, tau: np.ndarray) -> list[Action]:
        """This node's k-th visit: add value (+ scheduled noise) and pass the token on."""
        out, noise = self._add(round_, tau)
        self.visits += 1
        params: dict[str, Any] = {
            "round": round_,
            "data": bool(self.contribute),
            "mechanism": self.mechanism if noise else "none",
            "sigma": noise,
            "sensitivity": self.params.sensitivity,
            "clip": self.clip,
        }
        event = "contribute" if self.contribute else ("noise-only" if noise else "pass")
        return [
            Record(event, params=params),
            Send(self.succ, Message(TOKEN, payload=out, walk=WALK, seq=round_)),
        ]

    def _output(self, tau: np.ndarray) -> Output:
        return Output(
            value=tau / self.rounds,
            info={
                "token": tau.tolist(),
                "rounds": self.rounds,
                "noise_additions": ring_release_noise_count(self.n, self.rounds),
                "estimate_std": self.total_noise_std() / self.rounds,
            },
        )

    def total_noise_std(self) -> float:
        return ring_release_noise_count(self.n, self.rounds) ** 0.5 * self.params.sigma

    # -- entry points --------------------------------------------------------------------------
    def start(self) -> list[Action]:
        if self.pos == 1:
            return self._visit(1, np.zeros(self.dim))
        return []

    def on_message(self, sender: str, msg: Message) -> list[Action]:
        if msg.kind not in (TOKEN, RELEASE):
            raise Refused(RefusalCode.INVALID_ARGUMENT, f"unknown message kind {msg.kind!r}")
        if sender != self.pred:
            raise Refused(
                RefusalCode.PERMISSION_DENIED,
                f"only {self.pred} (the ring predecessor of {self.ctx.me}) may send it a "
                f"{msg.kind}; {sender} may not",
            )
        if msg.walk != WALK or msg.epoch != 0:
            raise Refused(RefusalCode.FAILED_PRECONDITION, f"unknown walk {msg.walk!r}/{msg.epoch}")
        assert msg.payload is not None
        tau = self._check(np.asarray(msg.payload, dtype=np.float64))
        if msg.kind == TOKEN:
            if msg.seq != self.received + 1 or self.received >= self.rounds:
                raise Refused(
                    RefusalCode.FAILED_PRECONDITION,
                    f"token for round {msg.seq} out of order (expected round "
                    f"{self.received + 1} of {self.rounds})",
                )
            self.received += 1
            if self.pos != 1:
                return self._visit(self.received, tau)
            if self.received < self.rounds:
                return self._visit(self.received + 1, tau)
            # Round K is complete: release the result around the ring once.
            self.done = True
            return [
                Send(self.succ, Message(RELEASE, payload=tau, walk=WALK, seq=1)),
                self._output(tau),
            ]
        # RELEASE
        if self.pos == 1 or msg.seq != 1 or self.received != self.rounds or self.done:
            raise Refused(
                RefusalCode.FAILED_PRECONDITION,
                f"unexpected release (received {self.received}/{self.rounds} tokens)",
            )
        self.done = True
        actions: list[Action] = []
        if self.pos != self.n:
            actions.append(Send(self.succ, Message(RELEASE, payload=tau, walk=WALK, seq=1)))
        actions.append(self._output(tau))
        return actions


class RingSumR(RingSum):
    """Algorithm 1-R (Remark 1; docs/errata.md, E2): every visit adds noise, σ/√(n−1) (the
    correction of the paper's σ/√n, so that the n − 1 other users of any window add std σ
    together), the first contribution the full σ. As for Algorithm 1, the released result needs one
    more: the last step (node n, round K) adds a full N(0, σ²) as well, so that the steps after an
    observer's last visit (seen in the release) hold std ≥ σ from others. Accounted as Theorem 1
    (one window of std ≥ σ per contribution); Remark 1's purpose, less damage from colluding
    neighbours, is not credited by the accountant."""

    algorithm = "ring-sum-r"
    params_class = RingSumRParams

    def _add(self, round_: int, tau: np.ndarray) -> tuple[np.ndarray, float]:
        sigma = self.params.sigma
        first = self.pos == 1 and round_ == 1
        var = sigma**2 if first else sigma**2 / (self.n - 1)
        if self.pos == self.n and round_ == self.rounds:
            var += sigma**2
        std = var**0.5
        return tau + gaussian_on_grid(self.rng, self.x, std, self.grid, pool=self.noise), std

    def total_noise_std(self) -> float:
        steps = self.n * self.rounds
        return (self.params.sigma**2 * (2 + (steps - 1) / (self.n - 1))) ** 0.5


class RingHistogram(RingSum):
    """Algorithm 2 (§3.2; docs/errata.md, E5, E6): the token is a vector of L counts, pre-loaded by
    node 1 with ⌈γn⌉ uniformly random elements; at each visit the holder adds one L-ary randomized
    response RR_γ(x) (a uniform report if it does not contribute). As for the sum, the release needs
    the steps after an observer's last visit to be protected too: the last node also adds ⌈γn⌉
    uniform elements at the end ("post-load"), symmetric to the pre-load. Debiasing for counts
    (E5): ĥ = (τ − γ·nK/L − (pre + post)/L)/(1 − γ)."""

    algorithm = "ring-histogram"
    mechanism = "randomized-response"
    params_class = RingHistogramParams
    params: RingHistogramParams

    def __init__(
        self,
        ctx: JobContext,
        data: np.ndarray | None,
        rng: np.random.Generator,
        contribute: bool = True,
    ) -> None:
        p = RingHistogramParams.of_job(ctx)
        self.L = p.bins
        self.gamma = p.gamma
        self.epsilon0 = p.epsilon0
        value = 0
        if data is not None and contribute:
            v = np.asarray(data, dtype=np.float64).reshape(-1)
            if v.size != 1 or v[0] != int(v[0]) or not 0 <= v[0] < self.L:
                raise ValueError(f"histogram data must be one integer category in 0..{self.L - 1}")
            value = int(v[0])
        super().__init__(ctx, None, rng, contribute)
        self.contribute = contribute and data is not None
        self.value = value
        self.blanket = math.ceil(self.gamma * self.n)

    def _check(self, tau: np.ndarray) -> np.ndarray:
        if not np.all(np.isfinite(tau)) or np.any(tau < 0) or np.any(tau != np.round(tau)):
            raise Refused(RefusalCode.INVALID_ARGUMENT, "a histogram token holds counts only")
        return tau

    def _uniform(self, count: int) -> np.ndarray:
        return np.bincount(self.rng.integers(self.L, size=count), minlength=self.L).astype(float)

    def _add(self, round_: int, tau: np.ndarray) -> tuple[np.ndarray, float]:
        out = tau.copy()
        if self.pos == 1 and round_ == 1:
            out += self._uniform(self.blanket)
        # exact ε0-randomized response (probability 1 − γ + γ/L of the value; no float is drawn)
        value = self.value if self.contribute else None
        out[randomized_response(self.rng, value, self.L, self.epsilon0)] += 1.0
        if self.pos == self.n and round_ == self.rounds:
            out += self._uniform(self.blanket)
        return out, self.gamma

    def _output(self, tau: np.ndarray) -> Output:
        reports = self.n * self.rounds
        est = (tau - self.gamma * reports / self.L - 2 * self.blanket / self.L) / (1 - self.gamma)
        return Output(
            value=est,
            info={
                "counts": tau.tolist(),
                "rounds": self.rounds,
                "gamma": self.gamma,
                "blanket": self.blanket,
            },
        )
