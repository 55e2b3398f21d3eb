"""Two concurrent custody re-routes must not fork the walk into two branches of equal standing.

The fault campaign (seeds 1301, 1307) showed it: after node-1's SIGKILL, node-3 (whose forward to
node-1 was never acknowledged) re-routed around node-1, and node-4 (still waiting for node-3's
handoff, since node-3 could not hand on) re-routed around node-3 0.06 s later; both chose epoch 1,
neither branch could fence the other, and a node held the same step on both. The engines are
driven here directly (sans-IO), over a small FIFO message pump, so the interleaving is exact."""

from __future__ import annotations

from collections import Counter, deque
from typing import Any

import numpy as np
import pytest

from netdp_node.algorithms import get_algorithm
from netdp_node.algorithms.walk.engine import TOKEN, WalkSum, epoch_counter, start_holder
from netdp_node.protocols.base import (
    JobContext,
    Message,
    Output,
    Record,
    Refused,
    Send,
    SetTimer,
)

IDS = [f"node-{i}" for i in range(1, 6)]
T = 60
HOLD = ("contribute", "noise-only")


class Pump:
    """Engines of every node, a FIFO of messages in flight and each node's ledger records."""

    def __init__(self, seed: int) -> None:
        p = get_algorithm("walk-sum").prepare({"T": T, "clip": 1e9, "custody_timeout_s": 5.0}, 5)
        p["sigma"] = 0.0  # exact arithmetic: the release is the sum of the data it contains
        self.x = {v: float(10**i) for i, v in enumerate(IDS)}
        self.eng = {
            v: WalkSum(
                JobContext("j", "walk-sum", v, tuple(IDS), dict(p), 3),
                np.array([self.x[v]]),
                np.random.default_rng([seed, i]),
            )
            for i, v in enumerate(IDS)
        }
        self.records: dict[str, list[Record]] = {v: [] for v in IDS}
        self.outputs: dict[str, Output] = {}
        self.log: list[tuple[str, Record]] = []  # every node's records, in the order made
        self.timers: dict[str, set[str]] = {v: set() for v in IDS}
        self.armed: list[tuple[str, str]] = []  # (node, timer) in the order they were set
        self.queue: deque[tuple[str, str, Message]] = deque()
        self.dead: set[str] = set()
        self.refusals: list[tuple[str, str, Message, str]] = []
        self.tokens: list[tuple[str, str, Message]] = []  # every token delivered (src, dst, msg)

    def run(self, node: str, actions: list[Any] | None) -> None:
        for a in actions or []:
            if isinstance(a, Send):
                self.queue.append((node, a.to, a.msg))
            elif isinstance(a, Record):
                self.records[node].append(a)
                self.log.append((node, a))
            elif isinstance(a, Output):
                self.outputs[node] = a
            elif isinstance(a, SetTimer):
                self.timers[node].add(a.name)
                self.armed.append((node, a.name))

    def deliver_one(self) -> tuple[str, str, Message] | None:
        src, dst, msg = self.queue.popleft()
        if dst in self.dead:
            return None  # a SIGKILLed node: no answer yet (the transport is still retrying)
        try:
            acts = self.eng[dst].on_message(src, msg)
        except Refused as r:
            self.refusals.append((src, dst, msg, r.reason))
            self.run(src, self.eng[src].on_undeliverable(dst, msg, r.code.name, r.reason))
            return None
        self.run(dst, acts)
        self.run(src, self.eng[src].on_delivered(dst, msg))
        if msg.kind == TOKEN:
            self.tokens.append((src, dst, msg))
        return src, dst, msg

    def drain(self, limit: int = 20000) -> None:
        for _ in range(limit):
            if not self.queue:
                return
            self.deliver_one()
        raise AssertionError("the message pump did not settle")

    def settle(self, limit: int = 200) -> None:
        """Deliver everything; when nothing is in flight, let time pass: the custody timer set
        first among those still pending fires (all have the same timeout)."""
        for _ in range(limit):
            self.drain()
            pending = [
                (v, k)
                for v, k in self.armed
                if v not in self.dead and k in self.eng[v].custody and not self.eng[v].done
            ]
            if not pending:
                return
            self.armed.remove(pending[0])
            self.fire(*pending[0])
        raise AssertionError("the walk did not settle")

    def fire(self, node: str, key: str) -> None:
        self.run(node, self.eng[node].on_timer(key))

    def contributions(self, node: str) -> list[Record]:
        return [r for r in self.records[node] if r.event == "contribute"]


def _two_reroutes(seed: int) -> Pump | None:
    """Run the walk until a holder B, which got the token from A, forwards it to C; then C dies
    (before acknowledging), B's custody timer fires (it re-routes around C) and, before B's handoff
    can reach A, A's fires too (it re-routes around B). None if the walk ends first."""
    pump = Pump(seed)
    pump.run(
        start_holder(pump.eng[IDS[0]].ctx), pump.eng[start_holder(pump.eng[IDS[0]].ctx)].start()
    )
    while pump.queue:
        src, dst, msg = pump.queue[0]
        came = [(s, d) for s, d, m in pump.tokens if d == src]
        if msg.kind == TOKEN and came and came[-1][0] not in (src, dst) and msg.round > 5:
            a, b, c = came[-1][0], src, dst
            pump.queue.popleft()
            pump.dead.add(c)
            key_b = next(
                k
                for k in pump.timers[b]
                if k in pump.eng[b].custody and pump.eng[b].custody[k]["to"] == c
            )
            key_a = next(
                k
                for k in pump.timers[a]
                if k in pump.eng[a].custody and pump.eng[a].custody[k]["to"] == b
            )
            # everything B and A sent so far is delivered, except the token to C
            pump.drain()
            pump.fire(b, key_b)  # "node-3 re-routed around node-1"
            pump.fire(a, key_a)  # "node-4 re-routed around node-3", before B's handoff came
            pump.armed = [(v, k) for v, k in pump.armed if (v, k) not in ((a, key_a), (b, key_b))]
            pump.settle()
            return pump
        pump.deliver_one()
    return None


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5, 6])
def test_concurrent_reroutes_leave_one_branch_and_no_step_twice(seed):
    pump = _two_reroutes(seed)
    assert pump is not None, "the walk ended before a three-holder chain formed"
    reroutes = [(v, r) for v, r in pump.log if r.event == "reroute"]
    assert len(reroutes) >= 2
    # no node contributed twice at the same step of the walk (whatever the epoch)
    for v in IDS:
        steps = Counter(int(r.params["t"]) for r in pump.contributions(v))
        assert not [t for t, c in steps.items() if c > 1], (v, steps)
    # distinct, totally ordered epochs for the two concurrent re-routes
    first_two = [int(r.params["epoch"]) for _, r in reroutes[:2]]
    assert len({int(r.params["epoch"]) for _, r in reroutes}) == len(reroutes), reroutes
    assert epoch_counter(first_two[0]) == epoch_counter(first_two[1]) == 1
    # one surviving branch: every live node output the same release, of one epoch
    live = [v for v in IDS if v not in pump.dead]
    assert set(pump.outputs) == set(live)
    epochs = {int(o.info["epoch"]) for o in pump.outputs.values()}
    assert len(epochs) == 1, epochs
    released = [(v, r) for v in live for r in pump.records[v] if r.event == "release"]
    assert len(released) == 1, released
    assert not any(r.event == "second-release" for v in live for r in pump.records[v])
    # the release holds exactly the steps of the surviving branch, read from the records alone:
    # the steps of its epoch, then back along the re-routes that led to it, the steps of each older
    # epoch up to the re-routed copy
    (epoch,) = epochs
    by_epoch = {int(r.params["epoch"]): r for _, r in reroutes}
    lineage: list[tuple[int, int]] = [(epoch, T)]  # (epoch, last step of it on the branch)
    while lineage[-1][0] != 0:
        r = by_epoch[lineage[-1][0]]
        lineage.append((int(r.params["old_epoch"]), int(r.params["t"])))
    on_branch = [
        (v, r)
        for v in IDS
        for r in pump.records[v]
        if r.event in HOLD
        and any(int(r.params["epoch"]) == e and int(r.params["t"]) <= last for e, last in lineage)
    ]
    assert sorted(int(r.params["t"]) for _, r in on_branch) == list(range(1, T + 1))
    expect = sum(pump.x[v] for v, r in on_branch if r.event == "contribute")
    assert float(pump.outputs[live[0]].value[0]) == pytest.approx(expect)


def test_a_token_refused_because_the_walk_ended_there_is_not_rerouted():
    """A stale branch's token reaches a node where another branch already released the result:
    the runtime refuses it (the job is over there). The holder's branch is over; re-routing it
    would carry it on at a newer epoch than the released one (and release a second result). It
    drops its copy, discounts what it added and hands the token on to its sender (which keeps a
    copy until then: without the handoff it would re-route that stale copy in turn)."""
    pump = Pump(7)
    a, b = IDS[0], IDS[1]
    e_b = pump.eng[b]
    token = Message(TOKEN, payload=np.zeros(1), walk="walk", epoch=0, seq=5, round=3)
    acts = e_b.on_message(a, token)
    fwd = [x for x in acts if isinstance(x, Send) and x.msg.kind == TOKEN]
    assert len(fwd) == 1, "with this seed b forwards the token at once"
    c = fwd[0].to
    out = e_b.on_undeliverable(
        c, fwd[0].msg, "FAILED_PRECONDITION", f"job j is finished at {c}; a new token is not taken"
    )
    assert not any(isinstance(x, Record) and x.event == "reroute" for x in out)
    assert not any(isinstance(x, Send) and x.msg.kind == TOKEN for x in out)
    assert [x.event for x in out if isinstance(x, Record)] == ["fenced"]
    assert [(x.to, x.msg.kind, x.msg.epoch, x.msg.seq) for x in out if isinstance(x, Send)] == [
        (a, "handoff", 0, 5)
    ]
    assert not e_b.custody and c not in e_b.dead
    real = sum(1 for x in acts if isinstance(x, Record) and x.event == "contribute")
    assert e_b.discarded == real


def test_a_step_held_twice_makes_the_rw_accountant_take_its_fork_fallback():
    """A node that held one step on two branches of a forked walk (the second time noise only,
    `repeat`) saw a fork, whether or not a fence reached it: the single-walk law of the sound
    random-walk accountant does not describe its view, which must fall back (as for a fenced copy
    or a second release)."""
    from netdp_node.algorithms.walk.accountant import _rw_realised_law
    from netdp_node.privacy.rw_sgd import transition_matrix

    ids = [f"p{i}" for i in range(6)]
    W = transition_matrix(6, [(i, (i + 1) % 6) for i in range(6)])
    spec = {"participants": ids, "params": {}}

    def entry(event: str, **params: object) -> Any:
        return type("E", (), {"event": event, "direction": "local", "peer": "", "params": params})()

    one_walk = [entry("contribute", epoch=0, t=4, live=6)]
    assert _rw_realised_law(spec, one_walk, W, ids) == ([], {})
    forked = one_walk + [entry("noise-only", epoch=2 << 21, t=4, live=6, repeat=True)]
    assert _rw_realised_law(spec, forked, W, ids) is None
