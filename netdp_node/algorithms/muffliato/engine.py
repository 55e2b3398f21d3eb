"""Muffliato (Cyffers, Even, Bellet, Massoulié, NeurIPS 2022) over the real network: private gossip
averaging (Algorithm 1, synchronous and Chebyshev-accelerated; Algorithm 2, randomized pairwise
gossip on Poisson clocks) and gossip gradient descent (Algorithm 3), as sans-IO engines.

Accountants:
`netdp_node.privacy.muffliato_accountant` (registered in `privacy.accountant`).

Random draws. The noise is exact (`netdp_node.privacy.discrete_gaussian`); the neighbour a
randomized-gossip node activates is an exact uniform integer draw. The Poisson clocks of Algorithm 2
(`MuffliatoRandom._delay`, `rng.exponential`) stay floating point on purpose: they only decide when a
node wakes, and no guarantee depends on their distribution. The accountant charges the realised
schedule (every node publishes its activation list, and the merged order is what it evaluates),
never an expectation over the clocks, and a wake-up time carries no data (the values exchanged do
not depend on it). A float's rounding can bias a timing, not a privacy loss.

Every node adds `η_v ~ N(0, σ² I_D)` once per gossip call, from its private CSPRNG, to its clipped
input (`clip` is an L2 bound B, so the replace-one sensitivity is Δ = 2B), and then only ever sends
linear combinations of noisy values . Noise samples never reach the
ledger; the ledger holds the public schedule (who exchanged with whom, in which round).

Graphs (`graph`): "ring", "complete", "hypercube" (n a power of two), "topology" (the job's public
edges, `JobContext.edges`) or "er": a fresh Erdős–Rényi graph G(n, p) per gossip call, drawn from
a generator seeded with (public_seed, call) so that every node and every accountant recompute the
same graph (Remark 3). The graph is public: Theorem 4's amplification by a SECRET graph is not
claimed.

Synchronous rounds over the network (`muffliato`, `muffliato-gd`; Algorithm 1, §3.2)
-------------------------------------------------------------------------
Round r (a global counter over all gossip calls; it travels in `Message.round`): the node sends its
current value `x^t` to every neighbour of the call's public graph, once (the same value to all),
and accepts the neighbours' round-r values. A value for a future round is
accepted and kept (early); a value for a round this node has closed, a second value from the same
neighbour for a round, a value for a round beyond the job, or from a non-neighbour are refused
(`Refused`, FAILED_PRECONDITION / PERMISSION_DENIED, with the reason); a refused message is never
averaged in. The acceptance window of round r closes when every neighbour's value arrived, or when
the round's timer (`round_timeout_s`) fires, whichever is first.

Agreement rule (acknowledgement-based). The runtime acknowledges a message (`on_delivered`) only
after the receiving engine accepted it and the receiving node made it durable (a round's values in
one commit, when the window closes: `defer_receipts`); a refusal or giving
up reaches the sender as `on_undeliverable`. The edge {v, w} is REALISED in round r iff

    v accepted w's round-r value  AND  w accepted v's round-r value.

v knows the first fact itself and the second from the outcome of its own send; w knows the same two
facts the other way round. So both ends evaluate the same predicate, and a node finishes round r
only once its window is closed AND every one of its round-r sends has an outcome (delivered or not).
Limits (documented in the README): (1) the transport's give-up time bounds a round's duration, not
`round_timeout_s` alone: a node waits for the outcome of a send to an unreachable neighbour; (2) a
neighbour whose link gave up (UNAVAILABLE) is presumed gone for `suspend_rounds` rounds (doubled
after every further give-up in a row, up to 8 times as many): this node neither sends to it nor
accepts its values in those rounds (the predicate stays the same on both ends: an unsent value is
not accepted), then tries again; this bounds the cost of a departed neighbour to a few give-up times
per job (a round that waits for a give-up delays the node's next value, so its neighbours may close
that round without it when `round_timeout_s` is shorter than the transport's give-up time); (3) if
an acknowledgement is lost AND the link then gives up (the receiver accepted, the sender was told
UNAVAILABLE), the two ends disagree on that edge for that round: the receiver averages it in, the
sender does not; the ledgers then show a one-sided edge, which the audit and the accountant detect
(they fall back to the local-DP level). A link that gives up on one end only (the partitioned node
sees "network unreachable" at once and gives up; its peers' streams hang, and re-send once the
link is back) does not cause it: the re-sent value of a round the receiver finished without that
edge is refused (`on_duplicate`), not acknowledged as a duplicate, so the sender learns the
receiver's decision. What is left (no finite exchange can close it: the two generals) is the node
whose link gives up after its acknowledgement of the neighbour's value got through while the
neighbour's acknowledgement of its own value did not; (4) a value that reaches a node after it
closed the round is refused, but the node did receive its bytes: the accountant therefore treats
every message of the public graph as observed (conservative), whether or not the round realised
it.

Weights of a round: the Metropolis weights of the PUBLIC graph of the call
restricted to the realised edges, `W_vw = 1/(1 + max(d_v, d_w))` for realised {v, w} (d the public
degrees), `W_vv = 1 − Σ_w W_vw`. Both ends know both public degrees, so they agree on W_vw with no
further exchange; with no drop it is exactly the Metropolis matrix; an isolated node keeps its
value. (Metropolis weights of the realised degrees would need a second agreed exchange per round,
itself subject to the same problem.) The ledger records the realised neighbours of every round
(event "round"), the accountant rebuilds the realised schedule from them.

Chebyshev acceleration (`accelerated`, Definition 3; docs/errata.md): `x^1 = W x^0`, then
`x^{t+1} = γ W_t x^t + (1 − γ) x^{t−1}`, γ from the public spectral-gap bound. A node restarts the
recursion (plain step) at the start of every call and whenever its own row of W changes (its
realised neighbourhood changed). Whether W changed ELSEWHERE cannot be known locally, so with drops
the nodes' coefficients differ, the total mass is not conserved exactly and the run is not a
schedule with one coefficient per round: the accountant then reports the local-DP level. Under
expected dropouts use `accelerated=false` (plain gossip, as the paper's dropout experiment,
App. H.6), which conserves the survivors' mass exactly and is always accounted exactly.

T comes from a public bound (Theorem 2, `gossip.gossip_rounds`): the spectral
gap of the public graph (or the `spectral_gap` parameter for ER graphs) and a public bound on the
data spread, never from the data.

Dropouts: a node that stops answering is left out of the realised edges; it
takes its mass with it. The output lists, per neighbour, the rounds in which the edge did not
realise (`missing`), and the realised neighbours of every round.

Publication of the schedule: at the end each node publishes its realised neighbourhoods ONCE on
the job's public bulletin (`Publish`; the bootstrap's bulletin in a deployment: a `schedule`
message, as public scalars "round:neighbour", the edges of its public graph that did NOT realise,
so it is empty without drops). The runtime records the publication in the node's ledger before it
uploads it, then reads the bulletin and hands every other participant's schedule to
`on_published`, which checks them and records each batch as received in one ledger entry
("schedules": the publishers taken, and the [round, neighbour] pairs of those whose schedule is not
empty; `_take_schedules`). Ledgers written before hold one "schedule" entry per publisher (its
`missing` pairs, or, earlier still, the expanded form `realised`: the realised neighbours of every
round) and are still read. A malformed one is recorded as "bulletin-refused", with the reason, and
counts as never published. A schedule sent over a peer link is refused. With
those of every participant (or at least one end of every realised edge) the accountant rebuilds the
realised schedule from the public graph; before that, or if some never arrive, it does not show the
joint view.

Why every node must hear from every other node, and why through the bulletin. The joint view of
any observer depends on the whole realised schedule (T is at least the graph's diameter), and an
edge's fate is known only at its two ends. The accountant may use an edge only if one of its ENDS
told it how the edge went, over a channel that authenticates that end; it never infers it.
Options weighed: (a) every node sends its schedule to every other: n(n − 1) messages (what this
engine did before; each cheap, but a single process simulating all n nodes pays all of them:
4.2 million at n = 2048). (b) nodes with an empty schedule stay silent: unsound. Silence does not
tell "finished, nothing missing" from "crashed" or "its message was lost": two adjacent nodes that
both crash in round r leave their common edge unreported by either end, and silence would count it
as realised in every later round. A drop changes the restricted Metropolis weights, so the joint
view of a wrong schedule is no bound (it is not monotone in the realised edges). (c) relaying
schedules along the public graph lets a relay forge both ends of an edge, which the accountant's
disagreement check cannot catch: sound only with per-origin signatures. (d) the bulletin (done):
each node uploads its schedule once to the bootstrap, which authenticates the uploader by its mTLS
identity (nobody can publish another node's schedule), keeps one entry per node and refuses a
different second one; each node downloads the job's bulletin (n uploads, n downloads). It adds no
trust beyond what the accountant already places in the bootstrap (participants, graph, public
seed). Which nodes published is part of what a reader learns: a node that never publishes is left
out, not read as empty.

Algorithm 2 (`muffliato-random`): see `MuffliatoRandom`. Algorithm 3 (`muffliato-gd`): see
`MuffliatoGd`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, ClassVar

import numpy as np

from netdp_node.algorithms.muffliato.params import (
    MAX_ROUNDS,
    GossipParams,
    MuffliatoAverageParams,
    MuffliatoGdParams,
    MuffliatoRandomParams,
    degrees,
    ldp_sigma,
)
from netdp_node.algorithms.ring.engine import clip_l2
from netdp_node.algorithms.walk.engine import logistic_accuracy, logistic_gradient
from netdp_node.privacy.discrete_gaussian import gaussian_on_grid, job_grid
from netdp_node.privacy.muffliato_accountant import public_graph
from netdp_node.protocols.base import (
    Action,
    Engine,
    Flush,
    JobContext,
    Message,
    Output,
    Publish,
    Record,
    RefusalCode,
    Refused,
    Send,
    SetTimer,
)

VALUE = "value"
SCHEDULE = "schedule"
OFFER = "offer"
REPLY = "reply"
PAIR = "pair-value"

__all__ = ["MuffliatoGd", "MuffliatoRandom", "MuffliatoSync", "degrees", "ldp_sigma"]


# -- public graphs (`muffliato_accountant.public_graph`) ------------------------------------------
def _topology_indices(ctx: JobContext) -> list[tuple[int, int]]:
    return ctx.edge_indices()  # built once per job, shared by its engines


def _adjacency(n: int, edges: Iterable[tuple[int, int]]) -> list[list[int]]:
    """Every node's neighbours (sorted) in an undirected edge list."""
    adj: list[list[int]] = [[] for _ in range(n)]
    for a, b in edges:
        adj[a].append(b)
        if a != b:
            adj[b].append(a)
    for row in adj:
        row.sort()
    return adj


def _check_payload(x: np.ndarray) -> np.ndarray:
    a = np.asarray(x, dtype=np.float64)
    if not np.isfinite(a).all():
        raise Refused(RefusalCode.INVALID_ARGUMENT, "a gossip value must be finite")
    return a


#: Why a schedule sent over a peer link is refused: schedules are read from the job's bulletin.
_SCHEDULE_BY_BULLETIN = "a schedule is published on the job's bulletin, not sent to peers"


#: The ledger event of a batch of schedules taken from the bulletin (see `_take_schedules`).
SCHEDULES = "schedules"


def _checked(ctx: JobContext) -> dict[str, tuple[Message, tuple[Any, ...]]]:
    """The schedules already checked at this job, by sender: (the bulletin's entry, what it is
    recorded as: a tuple of tuples, empty for a Muffliato schedule without drops). The check
    depends only on the entry and the public job, so the engines of the nodes a process holds (n
    of them in `netdp simulate`) check each entry once, not once each: an engine reuses the result
    only for the very same entry object; a different one (e.g. read from the bulletin by another
    process) is checked afresh. What each node records is the same. Public and immutable: the
    records share it."""
    return ctx.shared.get("muffliato-checked-schedules", dict)


def _take_schedules(
    engine: MuffliatoSync | MuffliatoRandom, kind: str, published: Mapping[str, Message]
) -> list[Action]:
    """The peers' schedules of one batch of the job's bulletin, each checked, recorded as ONE
    ledger entry (event "schedules"): `peers`, the publishers taken, in the bulletin's order (the
    runtime's resumption reads it), and per publisher what its schedule holds, in the engine's
    field (`SCHEDULE_FIELD`): Algorithm 1 "missing" (only the publishers whose schedule is not
    empty: the [round, neighbour] edges of their public graph that did not realise), Algorithm 2
    "activations" (every publisher: its [initiator, id, peer, committed] exchanges in its order).
    A publisher in `peers` and not in that field published an empty schedule. A malformed
    schedule, or a second one from a participant, is recorded as refused ("bulletin-refused",
    with the reason: the accountant then treats it as never published). One entry per batch
    instead of one per publisher: every node records the n − 1 others (n(n − 1) entries in a
    simulation of n nodes)."""
    if kind != SCHEDULE:
        return []
    peers: list[str] = []
    held: dict[str, tuple[Any, ...]] = {}
    refused: list[Action] = []
    checked, taken_before = _checked(engine.ctx), engine.schedules
    every = engine.SCHEDULE_FIELD == "activations"  # Algorithm 2 holds even an empty list
    for sender, msg in published.items():
        hit = checked.get(sender)
        if hit is not None and hit[0] is msg and sender not in taken_before:
            got = hit[1]  # the same entry, checked by another engine (`_on_schedule`, inlined)
            taken_before.add(sender)
        else:
            try:
                got = engine._on_schedule(sender, msg)
            except Refused as e:
                refused.append(
                    Record(
                        "bulletin-refused", peer=sender, params={"kind": kind, "reason": e.reason}
                    )
                )
                continue
        peers.append(sender)
        if got or every:
            held[sender] = got
    taken: list[Action] = []
    if peers:
        taken.append(Record(SCHEDULES, params={"peers": peers, engine.SCHEDULE_FIELD: held}))
    return taken + refused


# -- Algorithm 1 (and the gossip calls of Algorithm 3) ---------------------------------------------
class MuffliatoSync(Engine):
    """Algorithm 1 (§3.2) with the network rules of the module docstring; `calls` gossip calls
    of T rounds each (1 for averaging). Subclasses choose each call's input (`call_input`).

    Receipts are deferred (`defer_receipts`): the values of a round are made durable together, in
    one commit, when the round's window closes (`Flush`) or when the round finishes, and only then
    acknowledged; a node's acknowledgements are what its neighbours wait for to finish the round.
    """

    defer_receipts = True
    #: what the "schedules" ledger entry holds per publisher (`_take_schedules`)
    SCHEDULE_FIELD: ClassVar[str] = "missing"

    algorithm = "muffliato"
    params_class: ClassVar[type[GossipParams]] = MuffliatoAverageParams
    params: GossipParams

    def __init__(
        self,
        ctx: JobContext,
        data: np.ndarray | None,
        rng: np.random.Generator,
        contribute: bool = True,
    ) -> None:
        super().__init__(ctx, data, rng, contribute)
        p = self.params
        self.me = self.position[ctx.me]
        self.dim = p.dim
        self.grid = job_grid(p.sigma)  # values and noise on this grid (discrete_gaussian)
        self.T = p.T
        self.calls = p.calls
        self.gamma = p.gamma if p.accelerated else 1.0
        self.round_timeout = p.round_timeout_s
        self.suspend_rounds = p.suspend_rounds
        self.topology = _topology_indices(ctx)
        self.total = self.T * self.calls
        if self.total > MAX_ROUNDS:
            raise ValueError(f"T × calls = {self.total} rounds is more than {MAX_ROUNDS}")
        self._graphs: dict[int, tuple[list[int], dict[int, float]]] = {}
        # every node's public neighbours, by call: public, built once per job and shared by its
        # engines (`JobContext.shared`)
        self._adjacency: dict[int, list[list[int]]] = ctx.shared.get("muffliato-adjacency", dict)
        # -- state --
        self.r = -1  # current round (global over calls); -1 before start
        self.x = np.zeros(self.dim)  # x^t of the current round
        self.prev = np.zeros(self.dim)  # x^{t−1}
        self.prev_realised: tuple[int, ...] | None = None
        self.inbox: dict[int, dict[int, np.ndarray]] = {}  # round -> sender -> value
        self.outcome: dict[int, dict[int, bool]] = {}  # round -> receiver -> accepted
        self.closed = -1  # highest round whose acceptance window is closed
        self.sent: dict[int, set[int]] = {}  # round -> neighbours this node sent its value to
        self.suspended: dict[int, int] = {}  # neighbour presumed gone -> first round to retry
        self.give_ups: dict[int, int] = {}  # consecutive give-ups per neighbour (backoff)
        self.realised: list[list[int]] = []  # per finished round, realised neighbour indices
        self.missing: dict[str, list[int]] = {}
        self.schedules: set[str] = set()  # the peers whose schedule arrived

    # -- public graph of the call of round r ----------------------------------------------------
    def _neighbours(self, v: int, call: int) -> list[int]:
        """Participant v's neighbours (indices, sorted) in call `call`'s public graph (cached)."""
        key = call if self.params.graph == "er" else 0
        adj = self._adjacency.get(key)
        if adj is None:
            adj = [[] for _ in range(self.n)]
            for a, b in public_graph(
                self.params.to_wire(), self.n, self.ctx.public_seed, key, self.topology
            ):
                adj[a].append(b)
                adj[b].append(a)
            for row in adj:
                row.sort()
            self._adjacency[key] = adj
            if len(self._adjacency) > 4:
                self._adjacency.pop(next(iter(self._adjacency)))
        return adj[v]

    def graph(self, call: int) -> tuple[list[int], dict[int, float]]:
        """(neighbours of this node, {neighbour: W_vw}) in call `call`'s public graph (cached)."""
        key = call if self.params.graph == "er" else 0
        if key not in self._graphs:
            nb = self._neighbours(self.me, key)
            adj = self._adjacency[key]
            self._graphs[key] = (nb, {w: 1.0 / (1 + max(len(nb), len(adj[w]))) for w in nb})
            if len(self._graphs) > 4:
                self._graphs.pop(next(iter(self._graphs)))
        return self._graphs[key]

    def payload_shape(self, kind: str) -> tuple[int, ...] | None:
        return (self.dim,) if kind == VALUE else None

    def expected_steps(self) -> int:
        return self.total

    def progress(self) -> int:
        return len(self.realised)

    # -- inputs ------------------------------------------------------------------------------------
    def clipped_input(self) -> np.ndarray:
        if self.data is None or not self.contribute:
            return np.zeros(self.dim)
        x = np.asarray(self.data, dtype=np.float64).reshape(-1)
        if x.shape != (self.dim,):
            raise ValueError(f"data has shape {x.shape}, the job expects ({self.dim},)")
        if self.params.clip is None:
            raise ValueError(f"{self.algorithm} parameters have no clip")
        return clip_l2(x, self.params.clip)

    def call_input(self, call: int) -> tuple[np.ndarray, dict[str, Any]]:
        """The noisy input of gossip call `call` and the public parameters of its noise."""
        x = gaussian_on_grid(self.rng, self.clipped_input(), self.params.sigma, self.grid)
        return x, {
            "mechanism": "gaussian",
            "sigma": self.params.sigma,
            "sensitivity": self.params.sensitivity,
        }

    def call_output(self, call: int, x: np.ndarray) -> None:
        """The result of gossip call `call` (x^T of this node)."""
        self.x = x

    # -- rounds ----------------------------------------------------------------------------------
    def has_data(self) -> bool:
        return bool(self.contribute and self.data is not None)

    def _begin_call(self, call: int) -> list[Action]:
        x, noise = self.call_input(call)
        real = self.has_data()
        self.x, self.prev, self.prev_realised = x, x, None
        return [
            Record(
                "contribute" if real else "noise-only", params={"call": call, "data": real, **noise}
            )
        ]

    def _enter(self, r: int) -> list[Action]:
        """Enter round r: send x^t to every neighbour, arm the round's timer."""
        self.r = r
        nb, _ = self.graph(r // self.T)
        self.outcome.setdefault(r, {})
        targets = [w for w in nb if self.suspended.get(w, -1) <= r]
        self.sent[r] = set(targets)
        value = Message(VALUE, payload=self.x.copy(), round=r)  # one message, every neighbour
        actions: list[Action] = [Send(self.ids[w], value) for w in targets]
        actions.append(SetTimer(f"round:{r}", self.round_timeout))
        return actions

    def _maybe_close(self) -> None:
        if self.closed >= self.r:
            return
        got = self.inbox.get(self.r, {})
        sent = self.sent.get(self.r, ())
        # (the count first: this runs at every value and acknowledgement of the round)
        if len(got) >= len(sent) and all(w in got for w in sent):
            self.closed = self.r

    def _maybe_finish(self) -> list[Action]:
        """Finish the current round once its window is closed and every send has an outcome."""
        actions: list[Action] = []
        while 0 <= self.r < self.total and not self.done:
            self._maybe_close()
            nb, weights = self.graph(self.r // self.T)
            out = self.outcome.get(self.r, {})
            sent = self.sent.get(self.r, set())
            if self.closed < self.r or any(w not in out for w in sent):
                if self.closed >= self.r:  # the neighbours wait for our acknowledgements now
                    actions.append(Flush())
                return actions
            got = self.inbox.pop(self.r, {})
            self.outcome.pop(self.r, None)
            self.sent.pop(self.r, None)
            R = tuple(w for w in nb if w in sent and w in got and out[w])
            actions += self._update(R, got, weights)
            nxt = self.r + 1
            if nxt == self.total:
                self.call_output(self.r // self.T, self.x)
                return actions + self._finish()
            if nxt % self.T == 0:
                self.call_output(self.r // self.T, self.x)
                actions += self._begin_call(nxt // self.T)
            actions += self._enter(nxt)
        return actions

    def _update(
        self, R: tuple[int, ...], got: Mapping[int, np.ndarray], weights: Mapping[int, float]
    ) -> list[Action]:
        t = self.r % self.T
        mix = self.x * (1.0 - sum(weights[w] for w in R))
        for w in R:  # fixed (sorted) order: bitwise reproducible
            mix = mix + weights[w] * got[w]
        plain = t == 0 or self.gamma == 1.0 or R != self.prev_realised
        nxt = mix if plain else self.gamma * mix + (1.0 - self.gamma) * self.prev
        self.prev, self.x, self.prev_realised = self.x, nxt, R
        nb, _ = self.graph(self.r // self.T)
        for w in nb:
            if w not in R:
                self.missing.setdefault(self.ids[w], []).append(self.r)
        self.realised.append(list(R))
        return [
            Record(
                "round",
                params={
                    "round": self.r,
                    "call": self.r // self.T,
                    "realised": [self.ids[w] for w in R],
                    "step": "plain" if plain else "chebyshev",
                    "late_or_lost": sorted(self.ids[w] for w in nb if w not in R),
                },
            )
        ]

    def _finish(self) -> list[Action]:
        self.done = True
        self.r = self.total
        # the edges of this node's public graph that did NOT realise ("round:neighbour"): empty
        # without drops; the receivers rebuild the realised ones from the public graph
        scalars: dict[str, float] = {}
        for r, R in enumerate(self.realised):
            nb, _ = self.graph(r // self.T)
            scalars.update((f"{r}:{w}", 0.0) for w in nb if w not in R)
        # on the job's bulletin (durable here first), for every participant to read
        return [Publish(Message(SCHEDULE, scalars=scalars)), self.output()]

    def output(self) -> Output:
        return Output(
            value=self.x.copy(),
            info={
                "rounds": self.total,
                "T": self.T,
                "calls": self.calls,
                "realised": [[self.ids[w] for w in R] for R in self.realised],
                "missing": {k: v for k, v in sorted(self.missing.items())},
            },
        )

    # -- entry points ------------------------------------------------------------------------------
    def start(self) -> list[Action]:
        actions = self._begin_call(0) + self._enter(0)
        return actions + self._maybe_finish()

    def on_message(self, sender: str, msg: Message) -> list[Action]:
        if msg.kind == SCHEDULE:
            raise Refused(RefusalCode.INVALID_ARGUMENT, _SCHEDULE_BY_BULLETIN)
        if msg.kind != VALUE:
            raise Refused(RefusalCode.INVALID_ARGUMENT, f"unknown message kind {msg.kind!r}")
        r = int(msg.round)
        if not 0 <= r < self.total:
            raise Refused(
                RefusalCode.FAILED_PRECONDITION,
                f"foreign round {r}: this job has rounds 0..{self.total - 1}",
            )
        w = self.position[sender]
        nb, _ = self.graph(r // self.T)
        if w not in nb:
            raise Refused(
                RefusalCode.PERMISSION_DENIED,
                f"{sender} is not a neighbour of {self.ctx.me} in round {r}",
            )
        if self.suspended.get(w, -1) > r:
            raise Refused(
                RefusalCode.FAILED_PRECONDITION,
                f"{sender} is presumed gone until round {self.suspended[w]} (its "
                "link gave up); this round does not use the edge",
            )
        if r <= self.closed or r < self.r or self.done:
            raise Refused(
                RefusalCode.FAILED_PRECONDITION,
                f"late value for round {r} from {sender}: {self.ctx.me} closed it "
                f"(now in round {self.r})",
            )
        if w in self.inbox.get(r, {}):
            raise Refused(
                RefusalCode.FAILED_PRECONDITION, f"duplicate value for round {r} from {sender}"
            )
        assert msg.payload is not None
        self.inbox.setdefault(r, {})[w] = _check_payload(msg.payload)
        return self._maybe_finish() if r == self.r else []

    def on_published(self, kind: str, published: Mapping[str, Message]) -> list[Action]:
        return _take_schedules(self, kind, published)

    def _on_schedule(self, sender: str, msg: Message) -> tuple[Any, ...]:
        """`sender`'s published schedule, checked: its public edges that did not realise, as
        ((round, neighbour), ...) sorted (empty without drops; `_take_schedules` records it);
        Refused if it is malformed or a second one."""
        if sender in self.schedules:
            raise Refused(RefusalCode.FAILED_PRECONDITION, f"second schedule from {sender}")
        hit = _checked(self.ctx).get(sender)
        if hit is not None and hit[0] is msg:  # the same entry, checked by another engine
            self.schedules.add(sender)
            return hit[1]
        s = self.position[sender]
        missing: set[tuple[int, int]] = set()
        for k in msg.scalars:  # "round:neighbour index" of each public edge that did not realise
            rs, sep, ws = k.partition(":")
            try:
                r, w = int(rs), int(ws)
            except ValueError:
                r = w = -1
            if not (sep and 0 <= r < self.total and 0 <= w < self.n):
                raise Refused(
                    RefusalCode.INVALID_ARGUMENT,
                    f"bad schedule key {k!r} (round:neighbour within the job)",
                )
            if w not in self._neighbours(s, r // self.T):
                raise Refused(
                    RefusalCode.INVALID_ARGUMENT,
                    f"schedule key {k!r}: not an edge of {sender} in that round",
                )
            missing.add((r, w))
        self.schedules.add(sender)
        # recorded as received (compact: empty without drops); the accountant rebuilds the
        # realised rounds from the public graph when it needs them (`accountant._reports`)
        held = tuple((r, self.ids[w]) for r, w in sorted(missing))
        _checked(self.ctx)[sender] = (msg, held)
        return held

    def on_timer(self, name: str) -> list[Action]:
        if name.startswith("round:") and int(name[6:]) == self.r and not self.done:
            self.closed = max(self.closed, self.r)
            return self._maybe_finish()
        return []

    def _settle(self, msg: Message, to: str, ok: bool, code: str = "") -> list[Action]:
        if msg.kind != VALUE:
            return []
        r = int(msg.round)
        w = self.position[to]
        if code == "UNAVAILABLE":  # the link gave up: skip the peer for a few rounds, doubling
            k = self.give_ups[w] = self.give_ups.get(w, 0) + 1
            skip = self.suspend_rounds * 2 ** min(k - 1, 3)
            self.suspended[w] = max(self.suspended.get(w, -1), r + 1 + skip)
        elif ok:
            self.give_ups.pop(w, None)
        if r in self.outcome or r > self.r:
            self.outcome.setdefault(r, {})[self.position[to]] = ok
        return self._maybe_finish() if r == self.r else []

    def on_delivered(self, to: str, msg: Message) -> list[Action]:
        return self._settle(msg, to, True)

    def on_undeliverable(
        self, to: str, msg: Message, code: str, detail: str
    ) -> list[Action] | None:
        return self._settle(msg, to, False, code)

    def on_duplicate(self, sender: str, msg: Message) -> None:
        """A re-sent value (its first acknowledgement was lost) for a round this node finished
        WITHOUT the sender's edge (its own value to the sender was not acknowledged in time: the
        link gave up) is refused, not acknowledged: the sender, still waiting for the outcome of
        that send, must not count the edge this node left out (it would average our value in
        while we did not average its one). A re-send for a round that realised the edge, or that
        is not finished here, is acknowledged as before."""
        if msg.kind != VALUE:
            return
        r, w = int(msg.round), self.position[sender]
        if 0 <= r < len(self.realised) and w not in self.realised[r]:
            raise Refused(
                RefusalCode.FAILED_PRECONDITION,
                f"round {r} finished at {self.ctx.me} without the edge to {sender} "
                f"(its value to {sender} was not acknowledged in time); the re-sent "
                "value is not used",
            )


# -- Algorithm 3 --------------------------------------------------------------------------------
class MuffliatoGd(MuffliatoSync):
    """Algorithm 3 (§4; Fig. 1(c), App. H.5): Muffliato-GD for logistic regression. Per step c: the
    full local gradient g_v of ln(1 + exp(−y θᵀx)) at θ_v, clipped to L2 norm `lipschitz` L (so the
    per-step sensitivity is Δ = 2L: clip before the noise), the noisy local step `θ̂_v = θ_v − ν
    (g_v + z_v)`, `z_v ~ N(0, σ² I)` (= noise N(0, ν²σ²) on θ̂), then one full Muffliato call of T
    rounds on the call's graph (a fresh ER graph per step with graph=er, Remark 3). Data: rows of
    `dim` features and a ±1 (or 0/1) label, flattened (as walk-sgd). θ^0 = 0."""

    algorithm = "muffliato-gd"
    params_class = MuffliatoGdParams
    params: MuffliatoGdParams

    def __init__(
        self,
        ctx: JobContext,
        data: np.ndarray | None,
        rng: np.random.Generator,
        contribute: bool = True,
    ) -> None:
        super().__init__(ctx, data, rng, contribute)
        self.eta = self.params.eta
        self.L = self.params.lipschitz
        self.theta = np.zeros(self.dim)
        if data is None or not contribute:
            self.X, self.y = np.zeros((0, self.dim)), np.zeros(0)
        else:
            flat = np.asarray(data, dtype=np.float64).reshape(-1)
            if flat.size % (self.dim + 1):
                raise ValueError(
                    f"GD data must be rows of {self.dim} features and a label; got "
                    f"{flat.size} numbers"
                )
            rows = flat.reshape(-1, self.dim + 1)
            self.X, self.y = rows[:, :-1], np.where(rows[:, -1] > 0, 1.0, -1.0)

    def has_data(self) -> bool:
        return bool(self.contribute and len(self.y))

    def call_input(self, call: int) -> tuple[np.ndarray, dict[str, Any]]:
        real = self.has_data()
        g = (
            clip_l2(logistic_gradient(self.theta, self.X, self.y), self.L)
            if real
            else np.zeros(self.dim)
        )
        step = gaussian_on_grid(self.rng, g, self.params.sigma, self.grid)
        return self.theta - self.eta * step, {
            "mechanism": "gaussian",
            "sigma": self.params.sigma,
            "sensitivity": 2.0 * self.L,
        }

    def call_output(self, call: int, x: np.ndarray) -> None:
        self.theta = x
        self.x = x

    def output(self) -> Output:
        out = super().output()
        info = dict(out.info)
        info["model"] = self.theta.tolist()
        if len(self.y):
            info["local_accuracy"] = logistic_accuracy(self.theta, self.X, self.y)
        return Output(value=self.theta.copy(), info=info)


# -- Algorithm 2 --------------------------------------------------------------------------------
class MuffliatoRandom(Engine):
    """Algorithm 2 (§3.3): randomized pairwise gossip without a global clock.

    Each node runs a Poisson clock of rate `rate` (exponential delays from its private generator)
    for `duration_s` seconds of its own time. At a tick, if it is idle, it activates an incident
    edge of the public graph (a neighbour drawn uniformly) and runs one exchange-and-average:

        v → w  offer            (no value; w refuses it if busy or finished: nothing revealed)
        w → v  reply(x_w)       (w accepted: w is busy with v until v's value arrives or times out)
        v → w  pair-value(x_v)  (v is busy with w from its offer until this send has an outcome)
        both:  x ← (x_v + x_w)/2, committed by v when pair-value is acknowledged and by w when it
               accepts pair-value (the acknowledgement rule of the module docstring: both agree).

    A busy node refuses offers (concurrent activations on one node are serialised; a tick while busy
    is skipped). w gives up after `exchange_timeout_s` without v's value and then refuses it; v then
    learns it was refused and does not commit either. An exchange that revealed a value without
    committing is recorded as "aborted" (the accountant counts it as a round in which the pair saw
    each other's values without averaging, W = I: conservative). Each node records its exchanges
    ("activation" events) in its local order; the accountant merges the nodes' orders into one
    sequence (they are consistent: the responder's commit instant orders them). After its clock
    stops, a node answers offers for `grace_s` more seconds, then publishes its activation list
    (`schedule`) on the job's bulletin (`Publish`, as Algorithm 1's schedule: the runtime hands
    the other participants' lists to `on_published`) and outputs its value.
    """

    algorithm = "muffliato-random"
    SCHEDULE_FIELD: ClassVar[str] = "activations"  # (`_take_schedules`)
    params_class = MuffliatoRandomParams
    params: MuffliatoRandomParams

    def __init__(
        self,
        ctx: JobContext,
        data: np.ndarray | None,
        rng: np.random.Generator,
        contribute: bool = True,
    ) -> None:
        super().__init__(ctx, data, rng, contribute)
        p = self.params
        self.me = self.position[ctx.me]
        self.dim = p.dim
        self.grid = job_grid(p.sigma)
        self.rate = p.rate
        self.duration = p.duration_s
        self.grace = p.grace_s
        self.timeout = p.exchange_timeout_s
        adjacency = ctx.shared.get(
            "muffliato-random-adjacency",
            lambda: _adjacency(
                self.n,
                public_graph(p.to_wire(), self.n, ctx.public_seed, 0, _topology_indices(ctx)),
            ),
        )
        self.nb = adjacency[self.me]  # sorted; shared, read-only
        self.x = np.zeros(self.dim)
        self.clock_on = False
        self.k = 0  # offers made
        self.busy: tuple[str, int, int, str] | None = None  # (role, peer, id, phase)
        self.peer_value: np.ndarray | None = None
        self.log: list[tuple[int, int, int, bool]] = []  # (initiator, id, peer, committed)
        self.schedules: set[str] = set()
        self.ticks = 0

    def payload_shape(self, kind: str) -> tuple[int, ...] | None:
        return (self.dim,) if kind in (REPLY, PAIR) else None

    def progress(self) -> int:
        return len(self.log)

    def start(self) -> list[Action]:
        x = np.zeros(self.dim)
        real = bool(self.contribute and self.data is not None)
        if real:
            x = np.asarray(self.data, dtype=np.float64).reshape(-1)
            if x.shape != (self.dim,):
                raise ValueError(f"data has shape {x.shape}, the job expects ({self.dim},)")
            x = clip_l2(x, self.params.clip)
        self.x = gaussian_on_grid(self.rng, x, self.params.sigma, self.grid)
        self.clock_on = bool(self.nb)
        return [
            Record(
                "contribute" if real else "noise-only",
                params={
                    "call": 0,
                    "data": real,
                    "mechanism": "gaussian",
                    "sigma": self.params.sigma,
                    "sensitivity": self.params.sensitivity,
                },
            ),
            SetTimer("tick", self._delay()),
            SetTimer("stop", self.duration),
        ]

    def _delay(self) -> float:
        return float(self.rng.exponential(1.0 / self.rate))

    def _log(self, initiator: int, k: int, peer: int, committed: bool) -> Record:
        self.log.append((initiator, k, peer, committed))
        return Record(
            "activation",
            peer=self.ids[peer],
            params={
                "initiator": self.ids[initiator],
                "id": k,
                "status": "committed" if committed else "aborted",
            },
        )

    def on_timer(self, name: str) -> list[Action]:
        if self.done:
            return []
        if name == "tick":
            if not self.clock_on:
                return []
            self.ticks += 1
            actions: list[Action] = [SetTimer("tick", self._delay())]
            if self.busy is None:
                w = self.nb[int(self.rng.integers(len(self.nb)))]
                self.k += 1
                self.busy = ("initiator", w, self.k, "offer")
                actions += [
                    Send(self.ids[w], Message(OFFER, seq=self.k)),
                    SetTimer(f"x:{self.k}", self.timeout),
                ]
            return actions
        if name == "stop":
            self.clock_on = False
            return [SetTimer("end", self.grace)]
        if name == "end":
            if self.busy is not None:
                return [SetTimer("end", min(self.grace, 0.5))]
            return self._finish()
        if name.startswith("x:") and self.busy is not None:
            role, peer, k, phase = self.busy
            if role == "initiator" and phase == "offer" and k == int(name[2:]):
                self.busy = None  # no reply: nothing was revealed by this node
                return []
        if name.startswith("r:") and self.busy is not None:
            role, peer, k, _ = self.busy
            if role == "responder" and name == f"r:{peer}:{k}":
                self.busy = None  # our value was revealed, theirs never came: aborted
                return [self._log(peer, k, peer, False)]
        return []

    def _finish(self) -> list[Action]:
        self.done = True
        scalars = {
            f"{i}:{a}:{k}:{b}": (1.0 if c else 0.0) for i, (a, k, b, c) in enumerate(self.log)
        }
        # on the job's bulletin (durable here first), for every participant to read
        return [
            Publish(Message(SCHEDULE, scalars=scalars)),
            Output(
                value=self.x.copy(),
                info={
                    "activations": [[self.ids[a], k, self.ids[b], c] for a, k, b, c in self.log],
                    "committed": sum(1 for *_, c in self.log if c),
                    "ticks": self.ticks,
                },
            ),
        ]

    def on_message(self, sender: str, msg: Message) -> list[Action]:
        s = self.position[sender]
        if msg.kind == SCHEDULE:
            raise Refused(RefusalCode.INVALID_ARGUMENT, _SCHEDULE_BY_BULLETIN)
        if s not in self.nb:
            raise Refused(
                RefusalCode.PERMISSION_DENIED, f"{sender} is not a neighbour of {self.ctx.me}"
            )
        if msg.kind == OFFER:
            if self.done:
                raise Refused(RefusalCode.FAILED_PRECONDITION, f"{self.ctx.me} has finished")
            if self.busy is not None:
                raise Refused(
                    RefusalCode.FAILED_PRECONDITION, f"{self.ctx.me} is busy in another exchange"
                )
            self.busy = ("responder", s, int(msg.seq), "reply")
            return [
                Send(sender, Message(REPLY, payload=self.x.copy(), seq=msg.seq)),
                SetTimer(f"r:{s}:{msg.seq}", self.timeout),
            ]
        if msg.kind == REPLY:
            if self.busy != ("initiator", s, int(msg.seq), "offer"):
                raise Refused(
                    RefusalCode.FAILED_PRECONDITION,
                    f"late or foreign reply {msg.seq} from {sender}",
                )
            assert msg.payload is not None
            self.peer_value = _check_payload(msg.payload)
            self.busy = ("initiator", s, int(msg.seq), "value")
            return [Send(sender, Message(PAIR, payload=self.x.copy(), seq=msg.seq))]
        if msg.kind == PAIR:
            if self.busy != ("responder", s, int(msg.seq), "reply"):
                raise Refused(
                    RefusalCode.FAILED_PRECONDITION,
                    f"late or foreign value {msg.seq} from {sender}",
                )
            assert msg.payload is not None
            self.x = (self.x + _check_payload(msg.payload)) / 2.0
            self.busy = None
            return [self._log(s, int(msg.seq), s, True)]
        raise Refused(RefusalCode.INVALID_ARGUMENT, f"unknown message kind {msg.kind!r}")

    def on_published(self, kind: str, published: Mapping[str, Message]) -> list[Action]:
        return _take_schedules(self, kind, published)

    def _on_schedule(self, sender: str, msg: Message) -> tuple[Any, ...]:
        """`sender`'s published activation list, checked: ((initiator, id, peer, committed), ...)
        in its order (`_take_schedules` records it); Refused if malformed or a second one."""
        if sender in self.schedules:
            raise Refused(RefusalCode.FAILED_PRECONDITION, f"second schedule from {sender}")
        hit = _checked(self.ctx).get(sender)
        if hit is not None and hit[0] is msg:  # the same entry, checked by another engine
            self.schedules.add(sender)
            return hit[1]
        acts: list[tuple[int, tuple[str, int, str, bool]]] = []
        for key, val in msg.scalars.items():
            try:
                i, a, k, b = (int(s) for s in key.split(":"))
            except ValueError:
                raise Refused(RefusalCode.INVALID_ARGUMENT, f"bad activation {key!r}") from None
            if not (0 <= a < self.n and 0 <= b < self.n):
                raise Refused(RefusalCode.INVALID_ARGUMENT, f"activation {key!r} out of range")
            acts.append((i, (self.ids[a], k, self.ids[b], bool(val))))
        self.schedules.add(sender)
        held = tuple(a for _, a in sorted(acts, key=lambda x: x[0]))
        _checked(self.ctx)[sender] = (msg, held)
        return held

    def _settle(self, to: str, msg: Message, ok: bool) -> list[Action]:
        if self.busy is None or msg.kind not in (OFFER, PAIR, REPLY):
            return []
        role, peer, k, phase = self.busy
        if self.ids[peer] != to or int(msg.seq) != k:
            return []
        if msg.kind == OFFER and not ok and role == "initiator" and phase == "offer":
            self.busy = None  # refused (busy peer) or unreachable: nothing revealed
            return []
        if msg.kind == PAIR and role == "initiator" and phase == "value":
            self.busy = None
            if ok:
                assert self.peer_value is not None
                self.x = (self.x + self.peer_value) / 2.0
            self.peer_value = None
            return [self._log(self.me, k, peer, ok)]
        if msg.kind == REPLY and not ok and role == "responder":
            self.busy = None  # the initiator gave up: our value may have been seen
            return [self._log(peer, k, peer, False)]
        return []

    def on_delivered(self, to: str, msg: Message) -> list[Action]:
        return self._settle(to, msg, True)

    def on_undeliverable(
        self, to: str, msg: Message, code: str, detail: str
    ) -> list[Action] | None:
        return self._settle(to, msg, False)
