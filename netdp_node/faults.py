"""Fault injection: a node misbehaving as a real machine would, on purpose and reproducibly.

A `FaultPlan` is built once from `netdp node --fault-*` flags (or `NETDP_FAULT_*` environment
variables, for docker compose). It never bypasses mTLS, the ledger or the accountant: the node still
records every message it really sends or receives, and each injected fault is itself recorded in
the ledger (event "fault") and logged with the node and job.

    crash          exit with code 70 when the node is about to take protocol step N of a job
                   (`--fault-crash-at-step N`), or N seconds after start (`--fault-crash-after S`)
    offline        refuse all traffic, in and out, from S to S+D seconds after start, then come back
                   (`--fault-offline S:D`, repeatable): a temporary dropout
    leave          from protocol step N on, refuse all traffic for good (`--fault-leave-at-step N`):
                   a permanent dropout; the process stays up but silent
    drop           drop each outgoing message with probability p (`--fault-drop P`); the link
                   retransmits it after a timeout, as over a lossy network
    delay          delay each outgoing message by d ± j milliseconds (`--fault-delay-ms D`,
                   `--fault-jitter-ms J`)
    partition      refuse traffic to and from the given peers (`--fault-partition a,b`)

Random choices (drops, jitter) come from a generator seeded with `--fault-seed` (default 0), so a
scenario replays identically.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from netdp_node.errors import ConfigError
from netdp_node.lazy import lazy_module

np = lazy_module("numpy")  # lazy: start-up cost

EXIT_CRASHED = 70


@dataclass(frozen=True)
class FaultPlan:
    crash_at_step: int | None = None
    crash_after_s: float | None = None
    offline: tuple[tuple[float, float], ...] = ()  # (start seconds, duration seconds)
    leave_at_step: int | None = None
    drop_prob: float = 0.0
    delay_ms: float = 0.0
    jitter_ms: float = 0.0
    partition: frozenset[str] = field(default_factory=frozenset)
    seed: int = 0

    def __post_init__(self) -> None:
        if not 0.0 <= self.drop_prob < 1.0:
            raise ConfigError("--fault-drop must be in [0, 1)")
        if (
            self.delay_ms < 0
            or self.jitter_ms < 0
            or self.jitter_ms > self.delay_ms + 1e-9
            and self.delay_ms > 0
        ):
            raise ConfigError(
                "--fault-delay-ms and --fault-jitter-ms must be >= 0, jitter <= delay"
            )
        for n, v in (
            ("--fault-crash-at-step", self.crash_at_step),
            ("--fault-leave-at-step", self.leave_at_step),
        ):
            if v is not None and v < 1:
                raise ConfigError(f"{n} must be >= 1")
        if self.crash_after_s is not None and self.crash_after_s < 0:
            raise ConfigError("--fault-crash-after must be >= 0")
        for start, dur in self.offline:
            if start < 0 or dur <= 0:
                raise ConfigError("--fault-offline takes START:DURATION seconds, both positive")

    @property
    def active(self) -> bool:
        return self != FaultPlan(seed=self.seed)

    def describe(self) -> dict[str, Any]:
        d: dict[str, Any] = {}
        for k in ("crash_at_step", "crash_after_s", "leave_at_step"):
            if getattr(self, k) is not None:
                d[k] = getattr(self, k)
        if self.offline:
            d["offline"] = [list(w) for w in self.offline]
        for k in ("drop_prob", "delay_ms", "jitter_ms"):
            if getattr(self, k):
                d[k] = getattr(self, k)
        if self.partition:
            d["partition"] = sorted(self.partition)
        if d:
            d["seed"] = self.seed
        return d


def parse_offline(spec: str) -> tuple[float, float]:
    start, sep, dur = spec.partition(":")
    try:
        if not sep:
            raise ValueError
        return float(start), float(dur)
    except ValueError:
        raise ConfigError(
            f"--fault-offline takes START:DURATION in seconds, got {spec!r}"
        ) from None


def plan_from(values: Mapping[str, Any], env: Mapping[str, str] | None = None) -> FaultPlan:
    """Build a plan from parsed flags (keys as in FaultPlan) with NETDP_FAULT_* environment variables
    as fallbacks (NETDP_FAULT_DROP, NETDP_FAULT_DELAY_MS, NETDP_FAULT_JITTER_MS,
    NETDP_FAULT_CRASH_AT_STEP, NETDP_FAULT_CRASH_AFTER, NETDP_FAULT_LEAVE_AT_STEP,
    NETDP_FAULT_OFFLINE (comma-separated START:DURATION), NETDP_FAULT_PARTITION, NETDP_FAULT_SEED)."""
    env = os.environ if env is None else env

    def get(key: str, envname: str, conv: Callable[[str], Any]) -> Any:
        v = values.get(key)
        if v is not None:
            return v
        raw = env.get(envname, "").strip()
        if not raw:
            return None
        try:
            return conv(raw)
        except ValueError:
            raise ConfigError(f"{envname}={raw!r} is not valid") from None

    offline = values.get("offline") or [
        parse_offline(s) for s in env.get("NETDP_FAULT_OFFLINE", "").split(",") if s.strip()
    ]
    partition = values.get("partition")
    if partition is None:
        partition = env.get("NETDP_FAULT_PARTITION", "")
    if isinstance(partition, str):
        partition = [p.strip() for p in partition.split(",") if p.strip()]
    return FaultPlan(
        crash_at_step=get("crash_at_step", "NETDP_FAULT_CRASH_AT_STEP", int),
        crash_after_s=get("crash_after_s", "NETDP_FAULT_CRASH_AFTER", float),
        offline=tuple(offline),
        leave_at_step=get("leave_at_step", "NETDP_FAULT_LEAVE_AT_STEP", int),
        drop_prob=get("drop_prob", "NETDP_FAULT_DROP", float) or 0.0,
        delay_ms=get("delay_ms", "NETDP_FAULT_DELAY_MS", float) or 0.0,
        jitter_ms=get("jitter_ms", "NETDP_FAULT_JITTER_MS", float) or 0.0,
        partition=frozenset(partition),
        seed=get("seed", "NETDP_FAULT_SEED", int) or 0,
    )


#: The daemon's fault flags (`netdp node --fault-*`): flag -> (FaultPlan field, conversion).
FLAGS: dict[str, tuple[str, Callable[[str], Any]]] = {
    "--fault-crash-at-step": ("crash_at_step", int),
    "--fault-crash-after": ("crash_after_s", float),
    "--fault-offline": ("offline", parse_offline),  # repeatable
    "--fault-leave-at-step": ("leave_at_step", int),
    "--fault-drop": ("drop_prob", float),
    "--fault-delay-ms": ("delay_ms", float),
    "--fault-jitter-ms": ("jitter_ms", float),
    "--fault-partition": ("partition", str),
    "--fault-seed": ("seed", int),
}


def plan_from_flags(argv: Sequence[str]) -> FaultPlan:
    """A plan from the daemon's --fault-* flags as words (`--fault-offline 3:2` or
    `--fault-offline=3:2`; no environment fallback), e.g. for one simulated node."""
    values: dict[str, Any] = {}
    words = list(argv)
    i = 0
    while i < len(words):
        flag, eq, value = words[i].partition("=")
        if flag not in FLAGS:
            raise ConfigError(f"unknown fault flag {flag!r}; known: {', '.join(FLAGS)}")
        if not eq:
            i += 1
            if i >= len(words):
                raise ConfigError(f"{flag} needs a value")
            value = words[i]
        key, conv = FLAGS[flag]
        try:
            v = conv(value)
        except ValueError:
            raise ConfigError(f"{flag} {value!r} is not valid") from None
        if key == "offline":
            values.setdefault("offline", []).append(v)
        else:
            values[key] = v
        i += 1
    return plan_from(values, env={})


class FaultInjector:
    """The live side of a plan: answers the runtime's and the transport's questions.

    `clock` returns seconds since the node started (injected, so tests can drive it)."""

    def __init__(self, plan: FaultPlan, clock: Callable[[], float]) -> None:
        self.plan = plan
        self.clock = clock
        self.rng = random.Random(plan.seed)
        self.left = False

    def offline_now(self) -> bool:
        if self.left:
            return True
        t = self.clock()
        return any(s <= t < s + d for s, d in self.plan.offline)

    def blocked(self, peer: str) -> str | None:
        """Why traffic with `peer` is refused right now, or None."""
        if self.left:
            return "left for good (--fault-leave-at-step)"
        if self.offline_now():
            return "offline (--fault-offline)"
        if peer in self.plan.partition:
            return f"partitioned from {peer} (--fault-partition)"
        return None

    def step(self, step: int) -> str | None:
        """Called before protocol step `step` (1-based) of a job: 'crash', 'leave' or None."""
        if self.plan.crash_at_step is not None and step >= self.plan.crash_at_step:
            return "crash"
        if self.plan.leave_at_step is not None and step >= self.plan.leave_at_step:
            self.left = True
            return "leave"
        return None

    def drop(self) -> bool:
        return self.plan.drop_prob > 0 and self.rng.random() < self.plan.drop_prob

    def delay_s(self) -> float:
        if self.plan.delay_ms <= 0:
            return 0.0
        j = self.plan.jitter_ms
        return max(0.0, self.plan.delay_ms + (self.rng.uniform(-j, j) if j else 0.0)) / 1000.0


def inca_dropout_flags(
    ids: Sequence[str],
    *,
    leave: float,
    miss: float,
    seed: int,
    T: int,
    k: int,
    round_s: float,
    horizon: float,
) -> dict[str, list[str]]:
    """Node fault flags for an IncA job with dropouts (`netdp demo --leave/--miss`, `netdp simulate
    --leave/--miss`): round(leave·n) nodes leave for good at a random protocol step of the mixing
    phase (about 2k steps, MIX and CLOSE, per iteration: iterations 2..T-1), round(miss·n) others
    are offline for 2·round_s every 6·round_s from a random phase until `horizon` seconds (each
    window outlasts an iteration's deadline, so they miss iterations, and rejoin), seeded."""
    if not (0 <= leave < 1 and 0 <= miss < 1 and leave + miss < 1):
        raise ConfigError("--leave and --miss must be fractions in [0, 1) with a sum below 1")
    rng = np.random.default_rng([seed, 21])
    order = rng.permutation(len(ids))
    nl, nm = int(round(leave * len(ids))), int(round(miss * len(ids)))
    out: dict[str, list[str]] = {}
    for i in order[:nl]:
        d = int(rng.integers(2, max(3, T)))
        out[ids[int(i)]] = [
            "--fault-leave-at-step",
            str(1 + 2 * k * (d - 1) + int(rng.integers(0, 2 * k))),
        ]
    for i in order[nl : nl + nm]:
        phase = float(rng.uniform(0, 6 * round_s))
        flags: list[str] = []
        start = 2.0 + phase
        while start < horizon:
            flags += ["--fault-offline", f"{start:.2f}:{2 * round_s:.2f}"]
            start += 6 * round_s
        out[ids[int(i)]] = flags
    return out
