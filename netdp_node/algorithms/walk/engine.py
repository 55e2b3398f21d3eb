"""Token walks on the complete graph: Algorithms 3 (sum), 5 (histogram) and 4 (SGD) of Cyffers &
Bellet (AISTATS 2022), with the contribution cap of their experiments, the edge-usage cap of App. G
and custody of the token across crashes.

Accountants: `netdp_node.privacy.walk_accountant`.

The walk (one token, `WALK`):
* It starts at a participant fixed by the job's public seed. The holder adds its contribution
  (`step`), then draws the next holder uniformly from all participants with its private CSPRNG,
  never from the token. Drawing itself (a self-loop) means it holds the token again
  at once: no message.
* Per-user contribution cap `cap` (as in the paper's experiments, §5.2): past it the holder still
  adds its noise (sum and SGD: Perturb(0) / τ − ηZ; histogram: a uniformly random report) but no
  data. The same holds for a node that declined the job (budget) or has no data.
* Known sender (App. G): over mTLS the receiver knows the sender and the sender the
  receiver. `regime="edge-cap"` (netdp's own, docs/errata.md) draws the next holder BEFORE
  contributing and contributes data only if it has made fewer than `edge_cap` real contributions
  adjacent to both the sender and the next holder; `regime="lemma2"` contributes anyway and the
  accountant adds Lemma 2.
* Stop: `stop="counter"`: the hop counter t travels in the token's `round` field and the holder of
  step T releases (App. D: harmless for summation; for the histogram the token's total count IS t,
  so it is visible anyway). `stop="geometric"`: no counter travels (the SGD default; the
  paper does not say whether Theorems 4 and 6 tolerate a visible counter): each holder ends the walk
  after its step with probability 1/T, drawn privately, so the length is Geometric(1/T) with mean T.
* Private draws are exact (`netdp_node.privacy.exact_draws`: integers of the node's CSPRNG, no
  float): the next holder (uniform, or by the rational transition row of a graph walk), the
  geometric stop (Bernoulli(1/T)) and the histogram's randomized response (ε0 exactly).
* Release (App. C): the last holder sends the final token to every other
  participant; each counts it as one more observation.

Custody:
* A node that forwards a token keeps a durable copy (`Keep`, written in the same transaction as the
  step) until the receiver reports, with a `handoff` message, that ITS forward was acknowledged (or
  that the walk ended with it). The receiver acknowledges a token only after the step is durable, so
  at every instant some live-or-restartable node holds a durable copy.
* A restarted node resumes (`restore`): counters come from its ledger, kept copies are sent again
  (an exact re-send; the receiver recognises it).
* If no handoff arrives within `custody_timeout_s` (the receiver crashed and did not come back, or
  refused the token), the holder of the copy re-routes it: it draws a new holder uniformly among the
  participants not known to be gone (data-independent) and gives the new branch
  a newer epoch. The set of gone participants travels with the token and the release (as indices in
  the public `scalars`), so later holders skip them too, and every accountant evaluates the
  theorems at n minus that set (`walk_accountant.live_participants`). An undelivered handoff or
  release is retried (the peer may be restarting, with the token in its custody or waiting for the
  result). Receivers refuse tokens of an epoch older than one they have seen (fencing); a node whose
  handoff is refused because its sender re-routed learns that its branch is stale, discounts the
  contributions it made on it and tells its own receiver (`fence`, which names the newer epoch),
  down the chain. A holder whose token is refused as stale (or because the walk already ended
  there) ends its branch and hands the token on to its own sender. Every copy a node saw stays in
  its ledger and its accounting; the result lists the contributions it contains
  (`contributions_in_result`).
* Two holders of one branch can re-route at once: the downstream one (its forward was never
  acknowledged: its receiver died) and the upstream one (still waiting for the downstream one's
  handoff, which cannot come before that re-route). Epochs are therefore distinct and totally
  ordered (`_new_epoch`: a re-route counter, then whether the re-routed copy had been acknowledged,
  then a private random tie-break, never the re-router's identity), and the upstream re-route, the
  one whose fence kills the other branch, is the newer: the other branch is refused wherever it
  meets a node that saw it. With the hop counter, a node that holds the same step again on another
  branch adds noise only (`repeat`): no node gives its data twice to one step of the walk.
Residual risk (documented in the README): if a node is slower than `custody_timeout_s` but alive,
and the stale branch reaches the end before meeting a fenced node, two results can be released;
every node reports the epoch of the result it received, and the job result shows the disagreement.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from netdp_node.algorithms.ring.engine import clip_l2
from netdp_node.algorithms.walk.params import (
    RwSgdParams,
    WalkHistogramParams,
    WalkParams,
    WalkSgdParams,
    WalkSumParams,
)
from netdp_node.privacy.discrete_gaussian import GaussianPool, gaussian_on_grid, job_grid
from netdp_node.privacy.exact_draws import randomized_response, uniform_below, weighted_index
from netdp_node.privacy.rw_sgd import (
    neighbour_lists,
    transition_row_exact,
    weight_rule,
)
from netdp_node.protocols.base import (
    Action,
    Drop,
    Engine,
    JobContext,
    Keep,
    Message,
    Output,
    Record,
    RefusalCode,
    Refused,
    Send,
    SetTimer,
)

TOKEN = "token"
HANDOFF = "handoff"
FENCE = "fence"
RELEASE = "release"
WALK = "walk"
HOLD_EVENTS = ("contribute", "noise-only", "pass")  # ledger events of one holding of the token
_SEQ_MAX = 2**62
HANDOFF_RETRIES = 30  # an undelivered handoff or release is retried this many times ...
HANDOFF_RETRY_S = 1.0  # ... this many seconds apart (after the transport's own retries)
# A re-route's epoch (the wire's uint32): (counter, rank, tie) from the most significant bits down.
# counter: one more than the highest counter the re-router has seen; rank: 1 if the re-routed copy
# was acknowledged by its receiver (its holder is the upstream end of the custody chain), else 0;
# tie: drawn from the re-router's private CSPRNG (never its identity: an epoch must not say who
# held the token). So two concurrent re-routes get distinct epochs, and of an upstream holder's
# and a downstream holder's re-routes of the same walk the upstream one (which fences the other)
# is the newer (`_new_epoch`).
EPOCH_TIE_BITS = 20
EPOCH_COUNTER_SHIFT = EPOCH_TIE_BITS + 1
EPOCH_MAX = 2**32 - 1
SUPERSEDED_BY = "superseded_by"  # a fence's scalar: the epoch of the re-route that fenced it
# how the runtime refuses a token for a job that is over at the receiver (`NodeRuntime` _check_open)
_WALK_OVER = " is finished at "


def epoch_counter(epoch: int) -> int:
    """How many re-routes (one after another) led to a branch of this epoch."""
    return int(epoch) >> EPOCH_COUNTER_SHIFT


def start_holder(ctx: JobContext) -> str:
    """The participant that starts the walk: fixed by the public seed, known to everyone."""
    return ctx.participants[ctx.public_seed % len(ctx.participants)]


class CompleteGraphWalk(Engine):
    """The walk and its custody; subclasses define the token and one contribution (`step`)."""

    # after the release: a handoff (our copy's receiver handed it on; the release may overtake it)
    # and a fence (a branch we forwarded on went stale); never a second release or a token
    closing_kinds = frozenset({HANDOFF, FENCE})
    params: WalkParams

    def __init__(
        self,
        ctx: JobContext,
        data: np.ndarray | None,
        rng: np.random.Generator,
        contribute: bool = True,
    ) -> None:
        super().__init__(ctx, data, rng, contribute)
        p = self.params
        self.T = p.T
        self.cap = p.cap  # 0: no per-user cap
        self.regime = p.regime
        # the per-edge cap (regime "edge-cap"), on a contributing step's data under network DP
        self.edge_cap = 1 if p.edge_cap is None else p.edge_cap
        self.network_dp = (p.dp or "network") == "network"
        self.stop = p.stop
        self.custody_timeout = p.custody_timeout_s
        # the node's noise, drawn in batches from its private generator (a holder releases noise
        # at every holding; `GaussianPool`: the same distribution, without the per-call cost)
        self.noise = GaussianPool(rng)
        # -- state (rebuilt from the ledger by restore) --
        self.t_now = 0  # the step being taken (set by _hold)
        self.count = 0  # real contributions (with data)
        self.noise_only = 0
        self.holds = 0  # steps taken (times this node held the token)
        self.edges: Counter[str] = Counter()  # real contributions adjacent to each peer
        self.max_epoch = 0
        # steps (the hop counter after the step, as recorded) at which this node contributed its
        # data: with stop=counter it never contributes twice to one step, whichever branch of a
        # forked walk brings the token back to it (it adds noise only)
        self.stepped: set[int] = set()
        self.discarded = 0  # real contributions on branches fenced off (not in the result)
        # peers known to be gone: re-routed around by this node, or by a holder before it (the
        # token and the release carry the set, as participant indices: liveness is public and
        # data-independent); next hops are drawn among the others
        self.dead: set[str] = set()
        # retries of undelivered handoffs and releases: timer name -> (peer, message, attempts)
        self.handoffs: dict[str, tuple[str, Message, int]] = {}
        # tokens this node has handed off (sender, epoch, seq): a re-routed copy keeps its
        # came_from (a fence from that sender still kills it), but it is never handed off twice
        # (the sender dropped its copy at the first; a second would be refused as stale)
        self.handed: set[tuple[str, int, int]] = set()
        self._live_cache: Sequence[str] = self.ids  # (shared until a peer is found gone)
        self._live_for = 0  # len(self.dead) when _live_cache was computed (the set only grows)
        # copies this node keeps: key -> meta {to, epoch, seq, t, contrib, came_from, acked}
        self.custody: dict[str, dict[str, Any]] = {}
        self.copies: dict[str, np.ndarray] = {}
        self.release_epoch = -1

    # -- subclass interface --------------------------------------------------------------------
    def initial_token(self) -> np.ndarray:
        raise NotImplementedError

    def step(self, tau: np.ndarray, real: bool) -> tuple[np.ndarray, dict[str, Any]]:
        """One contribution: returns the new token and the public parameters of the step."""
        raise NotImplementedError

    def result_info(self, tau: np.ndarray) -> tuple[np.ndarray, dict[str, Any]]:
        return tau, {}

    # -- helpers -------------------------------------------------------------------------------
    def token_shape(self) -> tuple[int, ...]:
        return tuple(self.initial_token().shape)

    def payload_shape(self, kind: str) -> tuple[int, ...] | None:
        if kind in (TOKEN, RELEASE):
            return self.token_shape()
        return None

    def expected_steps(self) -> int:
        return max(1, round(self.T / self.n))

    def progress(self) -> int:
        return self.holds

    def _may_contribute(self, sender: str | None, nxt: str) -> bool:
        if not self.contribute or (self.cap and self.count >= self.cap):
            return False
        if self.regime == "edge-cap" and self.network_dp:
            adjacent = {w for w in (sender, nxt) if w is not None and w != self.ctx.me}
            return all(self.edges[w] < self.edge_cap for w in adjacent)
        return True

    def _live(self) -> Sequence[str]:
        """The participants not known to be gone (cached: recomputed when the set changes)."""
        if self._live_for != len(self.dead):
            self._live_cache = [v for v in self.ids if v not in self.dead or v == self.ctx.me]
            self._live_for = len(self.dead)
        return self._live_cache

    def _draw_next(self, live: Sequence[str]) -> str:
        """The next holder: uniform over the live participants (complete graph, Algorithm 3)."""
        return live[int(self.rng.integers(len(live)))]

    def _dead_scalars(self) -> dict[str, float]:
        return {f"dead:{self.position[v]}": 1.0 for v in sorted(self.dead)}

    def _learn_dead(self, msg: Message) -> None:
        for k in msg.scalars:
            if k.startswith("dead:"):
                i = int(k[5:])
                if not 0 <= i < self.n:
                    raise Refused(RefusalCode.INVALID_ARGUMENT, f"bad participant index in {k!r}")
                if self.ids[i] != self.ctx.me:
                    self.dead.add(self.ids[i])

    def _new_seq(self) -> int:
        return int(self.rng.integers(1, _SEQ_MAX))

    @staticmethod
    def _key(epoch: int, seq: int) -> str:
        return f"custody:{epoch}:{seq}"

    def _ends_after(self, t: int) -> bool:
        if self.stop == "counter":
            return t >= self.T
        return uniform_below(self.rng, self.T) == 0  # Bernoulli(1/T), exactly

    # -- the walk --------------------------------------------------------------------------------
    def _hold(
        self, tau: np.ndarray, t: int, epoch: int, came_from: tuple[str, int, int] | None
    ) -> list[Action]:
        """This node holds the token (received from came_from=(sender, epoch, seq), or at start)."""
        actions: list[Action] = []
        sender = None if came_from is None else came_from[0]
        contrib = 0
        self.max_epoch = max(self.max_epoch, epoch)
        while True:
            self.t_now = t  # the step this holding is (0-based); read by `_may_contribute`, `step`
            live = self._live()
            nxt = self._draw_next(live)
            repeat = self.stop == "counter" and t + 1 in self.stepped
            real = not repeat and self._may_contribute(sender, nxt)
            tau, params = self.step(tau, real)
            self.holds += 1
            t += 1
            if real:
                self.count += 1
                contrib += 1
                if self.stop == "counter":
                    self.stepped.add(t)
                for w in {w for w in (sender, nxt) if w is not None and w != self.ctx.me}:
                    self.edges[w] += 1
            else:
                self.noise_only += 1
            event = "contribute" if real else str(params.pop("event", "noise-only"))
            params.update(
                {"data": real, "epoch": epoch, "from": sender or "", "to": nxt, "live": len(live)}
            )
            if self.stop == "counter":
                params["t"] = t
            if repeat:
                params["repeat"] = True  # this node already gave its data to step t (a fork)
            actions.append(Record(event, params=params))
            if self._ends_after(t):
                return actions + self._release(tau, t, epoch, came_from)
            if nxt != self.ctx.me:
                return actions + self._forward(tau, t, epoch, nxt, came_from, contrib)
            sender = self.ctx.me  # self-loop: hold it again

    def _forward(
        self,
        tau: np.ndarray,
        t: int,
        epoch: int,
        to: str,
        came_from: tuple[str, int, int] | None,
        contrib: int,
    ) -> list[Action]:
        seq = self._new_seq()
        msg = Message(
            TOKEN,
            payload=tau,
            walk=WALK,
            epoch=epoch,
            seq=seq,
            round=t if self.stop == "counter" else 0,
            scalars=self._dead_scalars(),
        )
        key = self._key(epoch, seq)
        meta = {
            "to": to,
            "epoch": epoch,
            "seq": seq,
            "t": t,
            "contrib": contrib,
            "came_from": list(came_from) if came_from else None,
            "scalars": msg.scalars,
        }
        self.custody[key] = meta
        self.copies[key] = tau
        return [Keep(key, tau, meta), Send(to, msg), SetTimer(key, self.custody_timeout)]

    def _handoff(self, came_from: Sequence[Any] | None) -> list[Action]:
        if not came_from or came_from[0] == self.ctx.me:
            return []
        s, e, q = came_from
        if (str(s), int(e), int(q)) in self.handed:
            return []
        self.handed.add((str(s), int(e), int(q)))
        return [Send(str(s), Message(HANDOFF, walk=WALK, epoch=int(e), seq=int(q)))]

    def _release(
        self, tau: np.ndarray, t: int, epoch: int, came_from: tuple[str, int, int] | None
    ) -> list[Action]:
        actions: list[Action] = [Record("release", params={"epoch": epoch, "steps": t})]
        for v in self.ids:
            if v != self.ctx.me:
                actions.append(
                    Send(
                        v,
                        Message(
                            RELEASE,
                            payload=tau,
                            walk=WALK,
                            epoch=epoch,
                            seq=1,
                            round=t if self.stop == "counter" else 0,
                            scalars=self._dead_scalars(),
                        ),
                    )
                )
        actions += self._handoff(came_from)
        return actions + self._finish(tau, epoch, t)

    def _finish(self, tau: np.ndarray, epoch: int, t: int) -> list[Action]:
        self.done = True
        self.release_epoch = epoch
        # Copies still out when the result is released belong to a superseded branch (a re-route
        # forked the walk); their delivery no longer matters. Say so in the ledger (the audit
        # accepts a token that never arrived when its sender recorded why).
        actions: list[Action] = []
        for k, meta in self.custody.items():
            actions += [
                Drop(k),
                Record(
                    "abandoned",
                    peer=str(meta["to"]),
                    params={"epoch": meta["epoch"], "released_epoch": epoch},
                ),
            ]
        self.custody.clear()
        self.copies.clear()
        value, info = self.result_info(tau)
        info.update(
            {
                "epoch": epoch,
                "steps": t if self.stop == "counter" else None,
                "contributions_in_result": self.count - self.discarded,
                "noise_only_steps": self.noise_only,
                "excluded": sorted(self.dead),
                "live": self.n - len(self.dead),
            }
        )
        return actions + [Output(value=value, info=info)]

    def _reroute(self, key: str, why: str) -> list[Action]:
        """The receiver of the copy under `key` never handed it on: continue from the copy."""
        meta = self.custody.pop(key)
        tau = self.copies.pop(key)
        dead = str(meta["to"])
        self.dead.add(dead)
        came = meta["came_from"]
        upstream = bool(meta.get("acked")) or not came or came[0] == self.ctx.me
        epoch = self._new_epoch(int(meta["epoch"]), upstream)
        self.max_epoch = epoch
        live = self._live()
        nxt = self._draw_next(live)
        actions: list[Action] = [
            Drop(key),
            Record(
                "reroute",
                peer=dead,
                params={
                    "old_epoch": meta["epoch"],
                    "epoch": epoch,
                    "to": nxt,
                    "t": int(meta["t"]),
                    "reason": why[:300],
                },
            ),
            Send(
                dead,
                Message(
                    FENCE,
                    walk=WALK,
                    epoch=int(meta["epoch"]),
                    seq=int(meta["seq"]),
                    scalars={SUPERSEDED_BY: float(epoch)},
                ),
            ),
        ]
        came_from = tuple(meta["came_from"]) if meta["came_from"] else None
        if nxt == self.ctx.me:
            return actions + self._hold(tau, int(meta["t"]), epoch, came_from)
        return actions + self._forward(
            tau, int(meta["t"]), epoch, nxt, came_from, int(meta["contrib"])
        )

    def _new_epoch(self, old: int, upstream: bool) -> int:
        """The epoch of a re-route of a copy of epoch `old` (see EPOCH_TIE_BITS): newer than any
        this node has seen, distinct from a concurrent re-route's (but with probability 2^-20),
        and newer than a concurrent re-route by a holder downstream of this one on the same branch
        (`upstream`: the re-routed copy had been acknowledged, so its receiver, if alive, may be
        re-routing its own forward; there is no upstream copy of it that could be re-routed in
        turn). The fence this re-route sends reaches that downstream holder and kills its branch as
        far as custody reaches; beyond, the older epoch makes the branch refused wherever it meets
        a node that saw this one."""
        # 2^11 - 1 re-routes one after another: past that (a job its deadline will have failed
        # long before), later re-routes are ordered by rank and tie only
        counter = min(epoch_counter(max(self.max_epoch, old)) + 1, EPOCH_MAX >> EPOCH_COUNTER_SHIFT)
        tie = int(self.rng.integers(0, 1 << EPOCH_TIE_BITS))
        return (counter << EPOCH_COUNTER_SHIFT) | (int(upstream) << EPOCH_TIE_BITS) | tie

    def _discard(
        self, key: str, peer: str, epoch: int, superseded_by: int | None = None
    ) -> tuple[dict[str, Any], list[Action]]:
        """The copy under `key` is on a stale branch: drop it and discount the contributions made
        with it (they are not in the result; they stay in the ledger and the accounting).
        `superseded_by`: the epoch that made it stale, when known (then this node refuses the
        stale branch's tokens from now on, also after a restart)."""
        meta = self.custody.pop(key)
        self.copies.pop(key, None)
        self.discarded += int(meta["contrib"])
        params: dict[str, Any] = {"epoch": epoch, "discarded": meta["contrib"]}
        if superseded_by is not None and superseded_by > int(meta["epoch"]):
            self.max_epoch = max(self.max_epoch, superseded_by)
            params[SUPERSEDED_BY] = superseded_by
        return meta, [Drop(key), Record("fenced", peer=peer, params=params)]

    def _fence_branch(
        self, came_from: tuple[str, int, int], superseded_by: int | None = None
    ) -> list[Action]:
        """Our sender re-routed the token we got from it: our branch is stale; so is our
        receiver's, which we tell. `superseded_by`: the epoch of the re-route, when the fence says
        it; a node whose branch it fenced then refuses that branch's tokens from now on (the
        stale branch may have gone on beyond the custody chain)."""
        actions: list[Action] = []
        scalars = {} if superseded_by is None else {SUPERSEDED_BY: float(superseded_by)}
        for key, meta in list(self.custody.items()):
            if meta["came_from"] and tuple(meta["came_from"]) == came_from:
                _, dropped = self._discard(key, came_from[0], came_from[1], superseded_by)
                actions += dropped + [
                    Send(
                        str(meta["to"]),
                        Message(
                            FENCE,
                            walk=WALK,
                            epoch=int(meta["epoch"]),
                            seq=int(meta["seq"]),
                            scalars=scalars,
                        ),
                    )
                ]
        return actions

    # -- entry points ------------------------------------------------------------------------------
    def start(self) -> list[Action]:
        if self.ctx.me != start_holder(self.ctx):
            return []
        return self._hold(self.initial_token(), 0, 0, None)

    def on_message(self, sender: str, msg: Message) -> list[Action]:
        if msg.walk != WALK:
            raise Refused(RefusalCode.FAILED_PRECONDITION, f"unknown walk {msg.walk!r}")
        if msg.kind == TOKEN:
            return self._on_token(sender, msg)
        if msg.kind == HANDOFF:
            key = self._key(msg.epoch, msg.seq)
            meta = self.custody.get(key)
            if meta is None:
                if self.done:
                    return []  # the walk is over; nothing to keep
                raise Refused(
                    RefusalCode.FAILED_PRECONDITION,
                    f"no token {msg.epoch}/{msg.seq} in custody here: it was re-routed "
                    "(your branch of the walk is stale)",
                )
            if meta["to"] != sender:
                raise Refused(
                    RefusalCode.PERMISSION_DENIED,
                    f"token {msg.epoch}/{msg.seq} was sent to {meta['to']}, not {sender}",
                )
            del self.custody[key]
            self.copies.pop(key, None)
            return [Drop(key)]
        if msg.kind == FENCE:
            sup = msg.scalars.get(SUPERSEDED_BY)
            if sup is not None and not (float(sup).is_integer() and 0 <= sup <= EPOCH_MAX):
                raise Refused(RefusalCode.INVALID_ARGUMENT, f"bad {SUPERSEDED_BY} epoch {sup!r}")
            return self._fence_branch(
                (sender, msg.epoch, msg.seq), None if sup is None else int(sup)
            )
        if msg.kind == RELEASE:
            if self.done:
                if msg.epoch != self.release_epoch:
                    return [
                        Record(
                            "second-release",
                            peer=sender,
                            params={"epoch": msg.epoch, "kept_epoch": self.release_epoch},
                        )
                    ]
                return []
            assert msg.payload is not None
            tau = self.check_token(np.asarray(msg.payload, dtype=np.float64))
            self._learn_dead(msg)
            return [
                Record(
                    "observe-release",
                    peer=sender,
                    params={"epoch": msg.epoch, "live": self.n - len(self.dead)},
                )
            ] + self._finish(tau, msg.epoch, msg.round)
        raise Refused(RefusalCode.INVALID_ARGUMENT, f"unknown message kind {msg.kind!r}")

    def _on_token(self, sender: str, msg: Message) -> list[Action]:
        if self.done:
            raise Refused(
                RefusalCode.FAILED_PRECONDITION,
                f"the walk already ended here (released at epoch {self.release_epoch}): "
                "your branch is stale",
            )
        if msg.epoch < self.max_epoch:
            raise Refused(
                RefusalCode.FAILED_PRECONDITION,
                f"stale token: epoch {msg.epoch} < {self.max_epoch} (the walk was re-routed)",
            )
        if msg.seq < 1:
            raise Refused(RefusalCode.INVALID_ARGUMENT, "token without a sequence number")
        t = msg.round
        if self.stop == "counter" and not 0 < t < self.T:
            raise Refused(RefusalCode.INVALID_ARGUMENT, f"hop counter {t} outside 1..{self.T - 1}")
        assert msg.payload is not None
        tau = self.check_token(np.asarray(msg.payload, dtype=np.float64))
        self._learn_dead(msg)
        return self._hold(tau, t, msg.epoch, (sender, msg.epoch, msg.seq))

    def check_token(self, tau: np.ndarray) -> np.ndarray:
        if not np.all(np.isfinite(tau)):
            raise Refused(RefusalCode.INVALID_ARGUMENT, "token holds NaN or infinite values")
        return tau

    def on_timer(self, name: str) -> list[Action]:
        if name in self.handoffs:
            to, msg, _ = self.handoffs[name]
            return [Send(to, msg)]
        meta = self.custody.get(name)
        if meta is None or self.done:
            return []
        return self._reroute(name, f"no handoff from {meta['to']} within {self.custody_timeout:g}s")

    def on_delivered(self, to: str, msg: Message) -> list[Action]:
        if msg.kind in (HANDOFF, RELEASE):
            self.handoffs.pop(f"{msg.kind}:{to}:{msg.epoch}:{msg.seq}", None)
        if msg.kind != TOKEN:
            return []
        key = self._key(msg.epoch, msg.seq)
        meta = self.custody.get(key)
        if meta is None or meta.get("acked"):
            return []
        meta["acked"] = True
        return self._handoff(meta["came_from"])

    def on_undeliverable(
        self, to: str, msg: Message, code: str, detail: str
    ) -> list[Action] | None:
        if msg.kind == TOKEN:
            key = self._key(msg.epoch, msg.seq)
            if key not in self.custody or self.done:
                return []
            if "stale" in detail or _WALK_OVER in detail:
                # Fenced by the receiver (it saw a newer epoch), or the walk already ended there
                # (another branch released): our branch is stale, not the receiver gone; re-routing
                # would only carry the stale branch on at a new epoch. The branch ends here. Our
                # sender still keeps its copy (we never handed it on): hand it on now, or it would
                # re-route that stale copy at a NEWER epoch than the one that made ours stale, and
                # bring the stale branch back.
                meta, dropped = self._discard(key, to, msg.epoch)
                return dropped + ([] if meta.get("acked") else self._handoff(meta["came_from"]))
            return self._reroute(key, f"{code}: {detail}")
        if msg.kind == HANDOFF and "stale" in detail:
            return self._fence_branch((to, msg.epoch, msg.seq))
        if msg.kind in (HANDOFF, RELEASE) and code == "UNAVAILABLE":
            # The peer is down, maybe restarting: try again. A lost handoff would make the upstream
            # holder re-route a token that went on (a needless fork); a lost release would leave a
            # restarted participant without the result.
            name = f"{msg.kind}:{to}:{msg.epoch}:{msg.seq}"
            tries = self.handoffs.get(name, (to, msg, 0))[2] + 1
            if tries <= HANDOFF_RETRIES:
                self.handoffs[name] = (to, msg, tries)
                return [SetTimer(name, HANDOFF_RETRY_S)]
            self.handoffs.pop(name, None)
        return []  # a lost fence/release: the custody timer or the job deadline covers it

    def restore(
        self, entries: Sequence[Any], kept: Mapping[str, tuple[np.ndarray, Mapping[str, Any]]]
    ) -> list[Action] | None:
        for e in entries:
            if e.direction == "local" and e.event in HOLD_EVENTS:
                self.holds += 1
                self.max_epoch = max(self.max_epoch, int(e.params.get("epoch", 0)))
                if e.event == "contribute":
                    self.count += 1
                    if self.stop == "counter" and "t" in e.params:
                        self.stepped.add(int(e.params["t"]))
                    for w in {e.params.get("from"), e.params.get("to")} - {"", None, self.ctx.me}:
                        self.edges[str(w)] += 1
                else:
                    self.noise_only += 1
            elif e.direction == "local" and e.event == "reroute":
                self.dead.add(e.peer)
                self.max_epoch = max(self.max_epoch, int(e.params.get("epoch", 0)))
            elif e.direction == "local" and e.event == "fenced":
                self.discarded += int(e.params.get("discarded", 0))
                self.max_epoch = max(self.max_epoch, int(e.params.get(SUPERSEDED_BY, 0)))
            elif e.direction == "received":
                self.max_epoch = max(self.max_epoch, e.epoch)
            elif e.direction == "sent" and e.kind == HANDOFF:
                self.handed.add((e.peer, int(e.epoch), int(e.seq)))
        actions: list[Action] = []
        for key, (payload, meta) in kept.items():
            self.custody[key] = dict(meta)
            self.copies[key] = payload
            msg = Message(
                TOKEN,
                payload=payload,
                walk=WALK,
                epoch=int(meta["epoch"]),
                seq=int(meta["seq"]),
                round=int(meta["t"]) if self.stop == "counter" else 0,
                scalars=dict(meta.get("scalars") or {}),
            )
            self._learn_dead(msg)
            actions += [Send(str(meta["to"]), msg), SetTimer(key, self.custody_timeout)]
        actions.append(Record("resume", params={"copies": len(kept), "holds": self.holds}))
        return actions


# -- Algorithm 3: sum ------------------------------------------------------------------------------
class WalkSum(CompleteGraphWalk):
    """Algorithm 3 (§4.1): τ ← τ + x_u + N(0, σ²I), x clipped to L2 norm `clip` (Δ = 2·clip)."""

    algorithm = "walk-sum"
    params_class = WalkSumParams
    params: WalkSumParams

    def __init__(
        self,
        ctx: JobContext,
        data: np.ndarray | None,
        rng: np.random.Generator,
        contribute: bool = True,
    ) -> None:
        super().__init__(ctx, data, rng, contribute)
        self.dim = self.params.dim
        self.grid = job_grid(self.params.sigma)
        self.clip = self.params.clip
        if data is None or not contribute:
            self.x = np.zeros(self.dim)
            self.contribute = False
        else:
            x = np.asarray(data, dtype=np.float64).reshape(-1)
            if x.shape != (self.dim,):
                raise ValueError(f"data has shape {x.shape}, the job expects ({self.dim},)")
            self.x = clip_l2(x, self.clip)

    def initial_token(self) -> np.ndarray:
        return np.zeros(self.dim)

    def step(self, tau: np.ndarray, real: bool) -> tuple[np.ndarray, dict[str, Any]]:
        x = self.x if real else np.zeros(self.dim)
        sigma = self.params.sigma
        out = tau + gaussian_on_grid(self.rng, x, sigma, self.grid, pool=self.noise)
        return out, {"mechanism": "gaussian", "sigma": sigma, "sensitivity": 2.0 * self.clip}

    def result_info(self, tau: np.ndarray) -> tuple[np.ndarray, dict[str, Any]]:
        return tau, {"token": tau.tolist()}


# -- Algorithm 5: histogram -------------------------------------------------------------------------
class WalkHistogram(CompleteGraphWalk):
    """Algorithm 5 (App. E): the holder adds one L-ary randomized response RR_γ(x_u) to the
    count vector. Past the cap (or without data) it adds a uniformly random report (RR with γ = 1),
    which the debiasing treats as noise (docs/errata.md, E5)."""

    algorithm = "walk-histogram"
    params_class = WalkHistogramParams
    params: WalkHistogramParams

    def __init__(
        self,
        ctx: JobContext,
        data: np.ndarray | None,
        rng: np.random.Generator,
        contribute: bool = True,
    ) -> None:
        super().__init__(ctx, data, rng, contribute)
        self.L = self.params.bins
        self.gamma = self.params.gamma
        self.epsilon0 = self.params.epsilon0
        self.value = 0
        if data is None or not contribute:
            self.contribute = False
        else:
            v = np.asarray(data, dtype=np.float64).reshape(-1)
            if v.size != 1 or v[0] != int(v[0]) or not 0 <= v[0] < self.L:
                raise ValueError(f"histogram data must be one integer category in 0..{self.L - 1}")
            self.value = int(v[0])

    def initial_token(self) -> np.ndarray:
        return np.zeros(self.L)

    def check_token(self, tau: np.ndarray) -> np.ndarray:
        tau = super().check_token(tau)
        if np.any(tau < 0) or np.any(tau != np.round(tau)):
            raise Refused(RefusalCode.INVALID_ARGUMENT, "a histogram token holds counts only")
        return tau

    def step(self, tau: np.ndarray, real: bool) -> tuple[np.ndarray, dict[str, Any]]:
        # exact ε0-randomized response (probability 1 − γ + γ/L of the value; no float is drawn)
        y = randomized_response(self.rng, self.value if real else None, self.L, self.epsilon0)
        out = tau.copy()
        out[y] += 1.0
        return out, {
            "mechanism": "randomized-response",
            "gamma": self.gamma if real else 1.0,
            "bins": self.L,
        }

    def result_info(self, tau: np.ndarray) -> tuple[np.ndarray, dict[str, Any]]:
        reports = float(tau.sum())
        # counts, not frequencies (docs/errata.md, E5); noise-only reports are
        # uniform and counted in `reports`, so they are part of the γ·N/L term only approximately.
        est = (tau - self.gamma * reports / self.L) / (1.0 - self.gamma)
        return est, {"counts": tau.tolist(), "reports": reports}


# -- Algorithm 4: SGD -------------------------------------------------------------------------------
def logistic_coefficients(margins: np.ndarray, y: np.ndarray) -> np.ndarray:
    """d/dm of ln(1 + exp(−m)) times y, elementwise: −y / (1 + exp(margins)), margins = y wᵀx (the
    gradient of the logistic loss at x is this coefficient times x)."""
    return -y / (1.0 + np.exp(np.clip(margins, -500, 500)))


def logistic_gradient(w: np.ndarray, X: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Gradient of (1/m) Σ ln(1 + exp(−y wᵀx)) (labels ±1)."""
    coef = logistic_coefficients(y * (X @ w), y)
    return (X * coef[:, None]).mean(axis=0)


def logistic_accuracy(w: np.ndarray, X: np.ndarray, y: np.ndarray) -> float:
    return float(np.mean(np.where(X @ w >= 0, 1.0, -1.0) == y))


def clipped_logistic_gradient(
    w: np.ndarray, X: np.ndarray, y: np.ndarray, clip: float
) -> np.ndarray:
    """Mean over the rows of the logistic-loss gradients, each clipped to norm `clip` (per-example
    clipping): row i contributes −y_i x_i min(s_i, clip/‖x_i‖), s_i = 1/(1 + exp(y_i wᵀx_i)). The
    mean has norm ≤ clip, and it is the gradient of a convex loss (see `WalkSgd`)."""
    margins = y * (X @ w)
    s = 1.0 / (1.0 + np.exp(np.clip(margins, -500, 500)))
    norms = np.linalg.norm(X, axis=1)
    cap = np.divide(clip, norms, out=np.full_like(norms, np.inf), where=norms > 0)
    coef = -y * np.minimum(s, cap)
    return (X * coef[:, None]).mean(axis=0)


def sgd_row_bound(eta: float) -> float:
    """R = sqrt(8/η): rows of norm ≤ R make each example's logistic loss (R²/4 = 2/η)-smooth, so
    that a step of size η is non-expansive (`WalkSgd`)."""
    return math.sqrt(8.0 / eta)


def bound_rows(X: np.ndarray, bound: float) -> np.ndarray:
    """Scale every row longer than `bound` down to norm `bound` (the others are unchanged)."""
    norms = np.linalg.norm(X, axis=1, keepdims=True)
    return X * np.minimum(1.0, bound / np.maximum(norms, 1e-300))


class WalkSgd(CompleteGraphWalk):
    """Algorithm 4 (§4.2): the token is the model w ∈ R^d; the holder computes the
    gradient g of its full local logistic loss with every example's gradient clipped to norm L
    (`clipped_logistic_gradient`; ‖g‖ ≤ L, user-level sensitivity 2L), adds N(0, σ²I) and steps:
    w ← w − η(g + Z) (W = R^d, no projection, no clipping after the noise). Past the cap:
    w ← w − ηZ (network DP), or w unchanged with `dp=local` (local DP-SGD, the baseline of the
    paper's §5.2: σ calibrated so that the cap's local steps are (ε, δ)-DP to anyone). Node data:
    rows of d features then a ±1 (or 0/1) label, flattened; rows longer than R = sqrt(8/η) are
    scaled down to norm R (`sgd_row_bound`; never for the housing split, whose rows have norm √2).

    The update u(w) = w − ηg(w) (`descent`) is non-expansive, the premise of amplification by
    iteration (Feldman, Mironov, Talwar & Thakurta, FOCS 2018, Thm 23, behind Lemma 1).
    Proof: row i's clipped gradient is ∇ℓ_i(w) = y_i x_i h_i'(y_i wᵀx_i) with h_i'(m) =
    −min(1/(1 + e^m), L/‖x_i‖), non-decreasing and 1/4-Lipschitz in m; so ℓ_i is convex with a
    (‖x_i‖²/4 ≤ R²/4 = 2/η)-Lipschitz gradient, and so is their mean f (β = 2/η). By co-coercivity
    (Baillon–Haddad) ⟨g(w) − g(w'), w − w'⟩ ≥ ‖g(w) − g(w')‖²/β, hence ‖u(w) − u(w')‖² ≤
    ‖w − w'‖² − η(2/β − η)‖g(w) − g(w')‖² ≤ ‖w − w'‖². The final clip to L is the identity
    (‖g‖ ≤ L). Clipping the MEAN gradient instead (as before) is not non-expansive: with unit-norm
    features plus an intercept (‖x‖ = √2 > L = 1) it expanded distances by 1.0004 on the housing
    split (tests/unit/test_walk_sgd_nonexpansive.py)."""

    algorithm = "walk-sgd"
    params_class: ClassVar[type[WalkSgdParams | RwSgdParams]] = WalkSgdParams
    params: WalkSgdParams | RwSgdParams

    def __init__(
        self,
        ctx: JobContext,
        data: np.ndarray | None,
        rng: np.random.Generator,
        contribute: bool = True,
    ) -> None:
        super().__init__(ctx, data, rng, contribute)
        p = self.params
        self.dim = p.dim
        self.grid = job_grid(p.sigma)
        self.L = p.lipschitz
        self.eta = p.eta
        self.local = p.dp == "local"
        if data is None or not contribute:
            self.contribute = False
            self.X = np.zeros((0, self.dim))
            self.y = np.zeros(0)
        else:
            flat = np.asarray(data, dtype=np.float64).reshape(-1)
            if flat.size % (self.dim + 1):
                raise ValueError(
                    f"SGD data must be rows of {self.dim} features and a label; got "
                    f"{flat.size} numbers"
                )
            rows = flat.reshape(-1, self.dim + 1)
            self.X = rows[:, :-1]
            self.y = np.where(rows[:, -1] > 0, 1.0, -1.0)
        self.rows_bounded = 0
        if p.objective == "logistic" and len(self.X):
            R = sgd_row_bound(self.eta)
            self.rows_bounded = int(np.sum(np.linalg.norm(self.X, axis=1) > R))
            self.X = bound_rows(self.X, R)

    def gradient(self, w: np.ndarray) -> np.ndarray:
        """The node's contribution g(w), ‖g‖ ≤ L (class docstring)."""
        return clip_l2(clipped_logistic_gradient(w, self.X, self.y, self.L), self.L)

    def descent(self, w: np.ndarray) -> np.ndarray:
        """u(w) = w − ηg(w): a contributing step before its noise; non-expansive (class
        docstring)."""
        return w - self.eta * self.gradient(w)

    def initial_token(self) -> np.ndarray:
        return np.zeros(self.dim)

    def step(self, tau: np.ndarray, real: bool) -> tuple[np.ndarray, dict[str, Any]]:
        if not real and self.local:
            # local DP-SGD (the local baseline of §5.2): past the cap the model goes on unchanged
            return tau, {"event": "pass", "mechanism": "none", "sigma": 0.0}
        g = self.gradient(tau) if real else np.zeros(self.dim)
        noisy = gaussian_on_grid(self.rng, g, self.params.sigma, self.grid, pool=self.noise)
        return tau - self.eta * noisy, {
            "mechanism": "gaussian",
            "sigma": self.params.sigma,
            "sensitivity": 2.0 * self.L,
        }

    def result_info(self, tau: np.ndarray) -> tuple[np.ndarray, dict[str, Any]]:
        info: dict[str, Any] = {"model": tau.tolist()}
        if self.rows_bounded:
            info["rows_scaled_to_bound"] = self.rows_bounded
        if len(self.y):
            info["local_accuracy"] = logistic_accuracy(tau, self.X, self.y)
        return tau, info


# -- random-walk DP-SGD on any graph ----------------------------------------------------------------
class RandomWalkSgd(WalkSgd):
    """Algorithm 1 of Cyffers, Bellet & Upadhyay (ICML 2024, §5): the SGD token walks on the job's
    public graph; the holder takes one clipped gradient step with noise N(0, σ²Δ²I) (σ the noise
    multiplier, Δ = 2C for clip C under replace-one adjacency) and draws the next holder from its
    row of the public transition matrix W (Hamilton weights as coded, 1/(max(d_u, d_v) + 1) with a
    self-loop, or the paper's 1/max(d_u, d_v), §3) with its private CSPRNG. Past the cap it adds
    noise only (Remark 5). The token carries the step counter t. After a custody re-route the next
    hop is drawn from the row conditioned on liveness."""

    algorithm = "rw-sgd"
    params_class = RwSgdParams
    params: RwSgdParams

    def __init__(
        self,
        ctx: JobContext,
        data: np.ndarray | None,
        rng: np.random.Generator,
        contribute: bool = True,
    ) -> None:
        p = RwSgdParams.of_job(ctx)
        self.objective = p.objective
        if self.objective == "mean" and data is not None:
            # the averaging special case (eq. (8)): the node's vector y_v, stored as WalkSgd's
            # one row of features (with a dummy label)
            if np.size(data) != p.dim:
                raise ValueError(
                    f"the averaging case needs one vector of dim = "
                    f"{p.dim} numbers per node, got {np.size(data)}"
                )
            data = np.append(np.asarray(data, dtype=np.float64).reshape(-1), 1.0)
        super().__init__(ctx, data, rng, contribute)

        self.burn_in = p.burn_in
        self.T += self.burn_in  # the token walks burn_in steps, then T update steps

        edges = ctx.edge_indices()  # the job's graph: built once per job, shared
        if not edges:
            raise ValueError("rw-sgd needs the job's graph (edges)")
        nb = ctx.shared.get("neighbour-lists", lambda: neighbour_lists(self.n, edges))
        cols, probs = transition_row_exact(
            self.n,
            edges,
            self.position[ctx.me],
            weight_rule(p.weights),
            nb=nb,
        )
        self.row = [(self.ids[c], p) for c, p in zip(cols, probs) if p > 0]

    def _may_contribute(self, sender: str | None, nxt: str) -> bool:
        return self.t_now >= self.burn_in and super()._may_contribute(sender, nxt)

    def step(self, tau: np.ndarray, real: bool) -> tuple[np.ndarray, dict[str, Any]]:
        if self.t_now < self.burn_in:
            # burn-in: walk towards π without updating; nothing data-dependent
            return tau, {"event": "pass", "mechanism": "none", "sigma": 0.0, "burn_in": True}
        if self.objective == "logistic":
            return super().step(tau, real)
        # f_v(x) = ½‖x − y_v‖², ∇f_v = x − y_v, clipped to C, noise N(0, σ²Δ²I) (eq. (8))
        g = clip_l2(tau - self.X[0], self.L) if real else np.zeros(self.dim)
        noisy = gaussian_on_grid(self.rng, g, self.params.sigma, self.grid, pool=self.noise)
        return tau - self.eta * noisy, {
            "mechanism": "gaussian",
            "sigma": self.params.sigma,
            "sensitivity": 2.0 * self.L,
        }

    def result_info(self, tau: np.ndarray) -> tuple[np.ndarray, dict[str, Any]]:
        if self.objective == "logistic":
            return super().result_info(tau)
        return tau, {"model": tau.tolist()}

    def _draw_next(self, live: Sequence[str]) -> str:
        if self.dead:
            alive = set(live)
            cand = [(v, p) for v, p in self.row if v in alive or v == self.ctx.me]
        else:  # nobody gone: the whole row (no set of every participant per hop)
            cand = self.row
        # exactly by the rational transition probabilities, renormalised over the live ones
        return cand[weighted_index(self.rng, [p for _, p in cand])][0]
