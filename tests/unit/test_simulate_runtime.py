"""`netdp simulate` is the daemon's runtime: the same seeded job gives the same per-node ledgers,
custody copies, outputs and refusals in the simulator (virtual clock, in-memory ledgers) as over
real gRPC with mTLS on loopback (the engine tests' harness, SQLite ledgers); every algorithm of the
registry can be simulated, with results checked against independent computations."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from typing import Any

import numpy as np
import pytest
from harness import contexts, make_net

from netdp_node.algorithms import ALGORITHMS, get_algorithm
from netdp_node.algorithms.accounting import contributions_in_result
from netdp_node.algorithms.ring.engine import clip_l2, ring_release_noise_count
from netdp_node.algorithms.walk.engine import TOKEN, WALK
from netdp_node.cli import main
from netdp_node.faults import FaultPlan, plan_from_flags
from netdp_node.ledger import Entry
from netdp_node.memledger import MemoryLedger
from netdp_node.protocols.base import JobContext, Message
from netdp_node.simulate import Simulator, recorded_noise_std, synthetic_data
from netdp_node.transport.base import DeliveryError
from netdp_node.vclock import SimulationStalled, VirtualClockLoop, run_virtual

pytestmark = pytest.mark.timeout(120)

SEED = 4
PUBLIC_SEED = 1


def _ids(n: int) -> list[str]:
    return [f"n{i}" for i in range(n)]


def _view(entries: list[Entry]) -> list[tuple[Any, ...]]:
    """A node's ledger view, timestamps and row ids aside; `acked` notes aside (they are written
    with a later commit, whose timing is the transport's), in a canonical order. A record of a
    batch of the bulletin's schedules ("schedules") counts as one row per publisher, with what it
    holds for that publisher: which batch a publisher's entry was read in, and in which order,
    depends on the timing of the publications (the transport's); what is recorded does not."""
    rows = []
    for e in entries:
        if e.event == "acked":
            continue
        fields = (e.direction, e.event, e.peer, e.kind, e.walk, e.epoch, e.seq, e.round, e.digest)
        if e.event == "schedules" and e.direction == "local":
            held = "missing" if "missing" in e.params else "activations"
            for v in e.params["peers"]:
                per = {held: e.params[held].get(v, [])}
                rows.append((*fields[:2], v, *fields[3:], json.dumps(per, sort_keys=True)))
            continue
        rows.append((*fields, json.dumps(e.params, sort_keys=True)))
    return sorted(rows)


def _bad_traffic(ids: list[str], job: str, dim: int) -> list[tuple[str, str, str, Message]]:
    """Messages every receiver must refuse once the job is over: (sender, receiver, job, msg)."""
    return [
        # a payload of the wrong shape for a job that is over: FAILED_PRECONDITION (the runtime
        # refuses anything new for a finished job before it looks at the shape)
        (
            ids[1],
            ids[0],
            job,
            Message(TOKEN, payload=np.zeros(dim + 1), walk=WALK, epoch=0, seq=77, round=1),
        ),
        # a new token for a job that is over here: FAILED_PRECONDITION
        (
            ids[2],
            ids[0],
            job,
            Message(TOKEN, payload=np.zeros(dim), walk=WALK, epoch=0, seq=78, round=1),
        ),
        # a job the receiver does not know: NOT_FOUND
        (ids[1], ids[2], "no-such-job", Message(TOKEN, payload=np.zeros(dim), walk=WALK)),
    ]


async def _send_all(send: Any, traffic: list[tuple[str, str, str, Message]]) -> list[str]:
    codes = []
    for sender, to, job, msg in traffic:
        try:
            await send(sender, to, job, msg)
            codes.append("OK")
        except DeliveryError as e:
            codes.append(e.code)
    return codes


def _grpc_run(
    tmp_path: Any,
    algorithm: str,
    ids: list[str],
    params: dict[str, Any],
    data: dict[str, np.ndarray],
    traffic: list[tuple[str, str, str, Message]],
) -> dict[str, Any]:
    async def go() -> dict[str, Any]:
        net = await make_net("grpc", ids, tmp_path / "grpc", data=data, seed=SEED)
        try:
            await net.run_job(contexts("j", algorithm, ids, params, seed=PUBLIC_SEED))
            # the close-down traffic (handoffs, releases, schedules) is over once no node has
            # a send pending; bounded
            for _ in range(2000):
                if not any(
                    link.pending
                    for rt in net.nodes.values()
                    for link in rt.transport.links.values()
                ):  # type: ignore[attr-defined]
                    break
                await asyncio.sleep(0.01)
            codes = await _send_all(
                lambda s, t, j, m: net.nodes[s].transport.send(t, j, m), traffic
            )
            out = {}
            for nid in ids:
                rt = net.nodes[nid]
                rt.ledger.flush()
                runner = rt.jobs["j"]
                out[nid] = (
                    runner.state,
                    None if runner.output is None else np.asarray(runner.output.value),
                    _view(rt.ledger.entries("j")),
                    {k: (v[0].tolist(), v[1]) for k, v in rt.ledger.kept("j").items()},
                )
            return {"nodes": out, "codes": codes}
        finally:
            await net.close()

    return asyncio.run(go())


def _sim_run(
    algorithm: str,
    ids: list[str],
    params: dict[str, Any],
    data: dict[str, np.ndarray],
    traffic: list[tuple[str, str, str, Message]],
) -> dict[str, Any]:
    codes: list[str] = []

    async def after(sim: Simulator) -> None:
        codes.extend(
            await _send_all(lambda s, t, j, m: sim.runtimes[s].transport.send(t, j, m), traffic)
        )

    sim = Simulator(
        algorithm,
        ids,
        params,
        data,
        seed=SEED,
        public_seed=PUBLIC_SEED,
        job_id="j",
        record="full",
        after=after,
    )
    res = sim.run()
    out = {}
    for nid in ids:
        rt = sim.runtimes[nid]
        runner = rt.jobs["j"]
        out[nid] = (
            runner.state,
            None if runner.output is None else np.asarray(runner.output.value),
            _view(res.entries[nid]),
            {k: (v[0].tolist(), v[1]) for k, v in rt.ledger.kept("j").items()},
        )
    return {"nodes": out, "codes": codes}


#: How a token walk's custody copy ends (walk engine, "Custody"): the receiver's `handoff` once its
#: own forward was acknowledged, or an `abandoned` record when the walk's result reached the holder
#: of the copy first. Which one depends on the order of two messages on two different streams:
#: the acknowledgement of a forward and the release (or, at the releasing node, the token coming
#: back to it). The simulator's order is fixed by its virtual clock; over gRPC it is the machine's
#: timing (e.g. the last but one holder hands its copy on in one run, its sender abandons it in
#: another). So these rows are not compared between the runs; `_assert_every_custody_copy_ends`
#: checks, in each run, what holds in every order.
CUSTODY_END = ("handoff", "abandoned")


def _split_custody(
    view: list[tuple[Any, ...]],
) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """(the view without the rows that end custody copies, those rows)."""
    return (
        [row for row in view if row[1] not in CUSTODY_END],
        [row for row in view if row[1] in CUSTODY_END],
    )


def _assert_every_custody_copy_ends(
    ids: list[str], views: dict[str, list[tuple[Any, ...]]]
) -> None:
    """Every token a node forwarded ends handed off (a `handoff` from its receiver) or abandoned
    (the result came first; a late handoff may still arrive), and no more of either than tokens;
    every handoff one node sent, the other received."""
    sent_handoffs: Counter[tuple[Any, ...]] = Counter()
    got_handoffs: Counter[tuple[Any, ...]] = Counter()
    for nid in ids:
        tokens: Counter[str] = Counter()
        handoffs: Counter[str] = Counter()
        abandoned: Counter[str] = Counter()
        for row in views[nid]:
            direction, event, peer = row[:3]
            if direction == "sent" and event == TOKEN:
                tokens[peer] += 1
            elif event == "handoff" and direction == "received":
                handoffs[peer] += 1
                got_handoffs[(peer, nid, *row[4:9])] += 1  # (sender, receiver, the message)
            elif event == "handoff" and direction == "sent":
                sent_handoffs[(nid, peer, *row[4:9])] += 1
            elif direction == "local" and event == "abandoned":
                abandoned[peer] += 1
        for peer in tokens | handoffs | abandoned:
            assert handoffs[peer] <= tokens[peer] and abandoned[peer] <= tokens[peer], (nid, peer)
            assert tokens[peer] <= handoffs[peer] + abandoned[peer], (nid, peer)
    assert sent_handoffs == got_handoffs


@pytest.mark.parametrize(
    "algorithm,n,params",
    [
        # token custody: Keep at every hop, Drop at the handoff; the release to every node
        ("walk-sum", 5, {"T": 25, "edge_cap": 100}),
        # deferred receipts made durable by Flush when a round's window closes; public schedules
        ("muffliato", 4, {"graph": "ring", "T": 3}),
    ],
)
def test_simulator_and_grpc_give_the_same_ledgers_outputs_and_refusals(
    tmp_path, algorithm, n, params
):
    ids = _ids(n)
    p = get_algorithm(algorithm).validate(params, n)
    data, _ = synthetic_data(algorithm, ids, p, SEED)
    traffic = _bad_traffic(ids, "j", int(p.get("dim", 1)))
    grpc = _grpc_run(tmp_path, algorithm, ids, p, data, traffic)
    sim = _sim_run(algorithm, ids, p, data, traffic)
    assert grpc["codes"] == ["FAILED_PRECONDITION", "FAILED_PRECONDITION", "NOT_FOUND"]
    assert sim["codes"] == grpc["codes"]
    for nid in ids:
        g_state, g_out, g_view, g_kept = grpc["nodes"][nid]
        s_state, s_out, s_view, s_kept = sim["nodes"][nid]
        assert g_state == s_state == "done", nid
        np.testing.assert_array_equal(s_out, g_out)
        # every message, record and output the same, the end of custody copies aside (below)
        assert _split_custody(s_view)[0] == _split_custody(g_view)[0], nid
        assert s_kept == g_kept, nid  # custody copies (Keep/Drop) the same at the end
    for run in (grpc, sim):
        _assert_every_custody_copy_ends(ids, {nid: run["nodes"][nid][2] for nid in ids})
    kinds = {row[1] for nid in ids for row in sim["nodes"][nid][2]}
    assert "received" not in kinds  # (events are kinds or records, never the direction)


def test_engines_share_the_public_job_context():
    """Every node's engine holds the same participant tuple, position map and graph objects (one
    per job), not copies: memory per node does not grow with n."""
    n = 16
    ids = _ids(n)
    p = get_algorithm("muffliato").validate({"graph": "hypercube", "T": 2}, n)
    data, _ = synthetic_data("muffliato", ids, p, 0)
    sim = Simulator("muffliato", ids, p, data, seed=0, record="none")
    sim.run()
    e0, e1 = sim.engines[ids[0]], sim.engines[ids[5]]
    assert e0.ids is e1.ids and e0.position is e1.position
    assert e0._adjacency is e1._adjacency  # type: ignore[attr-defined]
    ctx = JobContext("j", "walk-sum", ids[0], tuple(ids), {}, 0)
    other = ctx.for_node(ids[3])
    assert other.me == ids[3] and other.position is ctx.position and other.ids is ctx.ids


def test_virtual_clock_runs_an_hour_of_timers_without_sleeping():
    async def main() -> float:
        loop = asyncio.get_running_loop()
        fired: list[float] = []
        loop.call_later(1800.0, lambda: fired.append(loop.time()))
        await asyncio.sleep(3600.0)
        assert fired == [1800.0]
        return loop.time()

    result, end = run_virtual(main())
    assert result == end == 3600.0

    async def stuck() -> None:
        await asyncio.Event().wait()

    loop = VirtualClockLoop()
    with pytest.raises(SimulationStalled):
        loop.run_until_complete(stuck())
    loop.close()


def test_memory_ledger_refuses_a_second_receipt_as_sqlite_does(tmp_path):
    from netdp_node.errors import LedgerError
    from netdp_node.ledger import Ledger

    for led in (MemoryLedger("a"), Ledger(tmp_path / "a", "a")):
        led.begin_job("j", "walk-sum", {"job_id": "j"}, True)
        e = Entry(
            job_id="j",
            direction="received",
            event="token",
            peer="b",
            kind="token",
            seq=3,
            digest="x",
        )
        led.commit([e])
        with pytest.raises(LedgerError):
            led.commit([e])
        assert led.received_digest("j", "b", ("token", "", 0, 3, 0)) == "x"
        led.close()


@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS))
def test_every_registered_algorithm_can_be_simulated(algorithm, capsys):
    extra = {
        "inca": ["--param", "T=3", "--param", "k=2"],
        "muffliato-random": ["--param", "duration_s=2", "--param", "rate=2"],
        "walk-sgd": ["--param", "T=64"],
        "rw-sgd": ["--param", "T=64", "--param", "mc_walks=50"],
        "muffliato-gd": ["--param", "T=2", "--param", "steps=2"],
    }.get(algorithm, [])
    code = main(
        [
            "simulate",
            "--algorithm",
            algorithm,
            "--nodes",
            "8",
            "--seed",
            "3",
            "--json",
            "--quiet",
            *extra,
        ]
    )
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["algorithm"] == algorithm and out["nodes"] == 8
    assert "failed" not in out


def _ring(algorithm: str, n: int, K: int, seed: int) -> tuple[Any, dict[str, Any], dict]:
    ids = _ids(n)
    p = get_algorithm(algorithm).validate({"rounds": K, "dim": 2}, n)
    data, _ = synthetic_data(algorithm, ids, p, seed)
    res = Simulator(algorithm, ids, p, data, seed=seed, public_seed=seed).run()
    return res, p, data


@pytest.mark.parametrize("algorithm", ["ring-sum", "ring-sum-r"])
def test_ring_sums_release_the_true_sum_plus_the_recorded_noise(algorithm):
    n, K = 12, 3
    errs = []
    for seed in range(6):
        res, p, data = _ring(algorithm, n, K, seed)
        ids = _ids(n)
        assert len(res.outputs) == n  # every node released the same value
        values = {tuple(np.round(o.value, 12)) for o in res.outputs.values()}
        assert len(values) == 1
        truth = np.sum([clip_l2(np.asarray(data[v]), p["clip"]) for v in ids], axis=0)
        # the noise the ledgers say was added, against the protocol's schedule (independent)
        std = recorded_noise_std(res, ids)
        sigma = p["sigma"]
        expected = (
            np.sqrt(ring_release_noise_count(n, K)) * sigma
            if algorithm == "ring-sum"
            else np.sqrt(sigma**2 * (2 + (n * K - 1) / (n - 1)))
        )
        assert std == pytest.approx(expected, rel=1e-9)
        errs.append((res.value - truth) * K / std)  # the token's noise, standardised
    z = np.concatenate(errs)
    assert np.all(np.abs(z) < 6) and abs(z.mean()) < 6 / np.sqrt(z.size)


def test_ring_histogram_counts_every_report_once():
    n, K = 10, 4
    ids = _ids(n)
    p = get_algorithm("ring-histogram").validate({"rounds": K, "bins": 3}, n)
    data, _ = synthetic_data("ring-histogram", ids, p, 2)
    res = Simulator("ring-histogram", ids, p, data, seed=2, public_seed=2).run()
    info = res.outputs[ids[0]].info
    counts = np.asarray(info["counts"])
    # one report per visit (n·K) plus the pre- and post-load of ⌈γn⌉ uniform elements each
    assert counts.sum() == n * K + 2 * info["blanket"]
    assert np.all(counts >= 0)
    est = (counts - info["gamma"] * n * K / 3 - 2 * info["blanket"] / 3) / (1 - info["gamma"])
    np.testing.assert_allclose(res.value, est)
    contributes = sum(1 for v in ids for e in res.entries[v] if e.event == "contribute")
    assert contributes == n * K


def test_rw_sgd_walks_the_graph_and_averages(tmp_path):
    """rw-sgd (the averaging objective) over the exponential graph: every hop follows an edge of
    the public graph (or the self-loop), T steps, and the model ends near the mean."""
    from netdp_bootstrap.topology import build

    n, T = 16, 400
    ids = _ids(n)
    edges = [(str(a), str(b)) for a, b in build("exponential", ids).edges]
    p = get_algorithm("rw-sgd").validate(
        {"T": T, "objective": "mean", "dim": 2, "epsilon": 1e6, "lipschitz": 10.0, "eta": 0.05}, n
    )
    data, _ = synthetic_data("rw-sgd", ids, p, 1)
    res = Simulator("rw-sgd", ids, p, data, seed=1, public_seed=1, edges=edges, record="full").run()
    assert len(res.outputs) == n and len(res.holders) == T + int(p.get("burn_in", 0))
    adjacent = {(ids.index(a), ids.index(b)) for a, b in edges}
    adjacent |= {(b, a) for a, b in adjacent} | {(i, i) for i in range(n)}
    assert all((a, b) in adjacent for a, b in zip(res.holders, res.holders[1:]))
    truth = np.mean([data[v] for v in ids], axis=0)
    assert np.linalg.norm(res.value - truth) < 0.5 * np.linalg.norm(truth) + 0.5


def test_fault_flags_act_in_the_simulator():
    """The daemon's --fault-* flags: a node that leaves at its first step is routed around
    (the walk completes at the others, the result counts every contribution it holds), and a
    lossy node's drops are recorded in its ledger as the daemon records them."""
    n, T = 8, 60
    ids = _ids(n)
    p = get_algorithm("walk-sum").validate({"T": T, "edge_cap": 100, "clip": 100.0}, n)
    p["sigma"] = 0.0
    data = {v: np.array([float(i + 1)]) for i, v in enumerate(ids)}
    faults = {
        ids[3]: plan_from_flags(["--fault-leave-at-step", "1"]),
        ids[5]: plan_from_flags(["--fault-drop=0.5", "--fault-seed", "2"]),
    }
    res = Simulator("walk-sum", ids, p, data, seed=7, faults=faults, record="full").run()
    assert ids[3] not in res.outputs and len(res.outputs) == n - 1
    # each node's contributions in the result, from its own ledger (the accountant's reading)
    counted = np.array([contributions_in_result(res.entries[v]) for v in ids])
    assert counted[3] == 0 and counted.sum() > 0
    assert res.value[0] == pytest.approx(float(np.dot(counted, np.arange(1, n + 1))))
    assert any(
        e.event == "fault" and e.params == {"fault": "leave", "step": 1}
        for e in res.entries[ids[3]]
    )
    drops = [e for e in res.entries[ids[5]] if e.event == "fault"]
    assert drops and all(e.params == {"fault": "drop"} for e in drops)
    assert FaultPlan(drop_prob=0.5, seed=2) == faults[ids[5]]


def test_simulated_fault_flags_are_the_daemons():
    """`netdp simulate --fault NODE:FLAGS` takes exactly the --fault-* flags of `netdp node`, and a
    bad one is a clear error (exit 2), not a traceback."""
    import argparse

    from netdp_node.cli import build_parser
    from netdp_node.faults import FLAGS

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    node_flags = {
        o
        for a in sub.choices["node"]._actions
        for o in a.option_strings
        if o.startswith("--fault-")
    }
    assert node_flags == set(FLAGS)
    assert plan_from_flags(["--fault-offline", "1:2", "--fault-offline=5:1"]).offline == (
        (1.0, 2.0),
        (5.0, 1.0),
    )
    assert main(["simulate", "--nodes", "5", "--fault", "n9:--fault-drop 0.1"]) == 2
    assert main(["simulate", "--nodes", "5", "--fault", "node-2:--fault-bogus 1"]) == 2
