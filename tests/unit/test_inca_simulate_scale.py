"""IncA under `netdp simulate` at scale: what a large run keeps and computes once.

* above the size where the per-node accountants run (`inca.hooks.SIM_AUDIT_NODES`), nothing
  reads the nodes' views (the outcome reads the outputs only), so none is kept by default, and the
  printed result is the same as with every view kept (`--record full`);
* one record travels as one FINAL message object to every peer, relays included (its digest is
  computed once, and the receivers' duplicate indexes share it).
"""

from __future__ import annotations

import gc
import json
from collections import defaultdict
from typing import Any

import numpy as np

from netdp_node.algorithms import get_algorithm
from netdp_node.algorithms.inca import hooks as inca_hooks
from netdp_node.algorithms.inca.engine import FINAL
from netdp_node.cli import main
from netdp_node.protocols.base import Message
from netdp_node.simulate import Simulator, synthetic_data

#: the size the test runs at, above the per-node accountants' limit (lowered for the test)
N = 10


def _simulate_cli(capsys: Any, monkeypatch: Any, *extra: str) -> tuple[dict[str, Any], Any]:
    monkeypatch.setattr(inca_hooks, "SIM_AUDIT_NODES", N - 2)
    kept: list[Any] = []
    run = Simulator.run

    def spy(self: Simulator, **kw: Any) -> Any:
        res = run(self, **kw)
        kept.append(res)
        return res

    monkeypatch.setattr(Simulator, "run", spy)
    code = main(
        ["simulate", "--algorithm", "inca", "--nodes", str(N), "--seed", "5", "--json", "--quiet"]
        + ["--param", "T=3", "--param", "k=2", *extra]
    )
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    out.pop("wall_s")
    return out, kept[0]


def test_a_large_inca_simulation_keeps_no_view_and_prints_the_same_result(capsys, monkeypatch):
    thresholds = gc.get_threshold()
    lean, res_lean = _simulate_cli(capsys, monkeypatch)
    full, res_full = _simulate_cli(capsys, monkeypatch, "--record", "full")
    assert gc.get_threshold() == thresholds  # the run's collector settings are undone
    assert res_lean.entries == {}  # no node's view kept
    assert len(res_full.entries) == N and all(res_full.entries.values())
    assert "note" in lean["privacy"]  # (the accountants are skipped at this size)
    assert lean == full  # estimate, finals, events, steps: all the same
    assert lean["final"] == N and lean["steps"] == N


def test_every_copy_of_a_record_is_one_message():
    n = 9
    ids = [f"node-{i}" for i in range(1, n + 1)]
    p = get_algorithm("inca").validate({"T": 2, "k": 2}, n)
    data, _ = synthetic_data("inca", ids, p, 1)
    finals: dict[int, list[Message]] = defaultdict(list)

    def watch(sender: str, to: str, msg: Message) -> None:
        if msg.kind == FINAL:
            finals[msg.seq].append(msg)  # (kept alive: ids stay distinct)
        return None

    res = Simulator("inca", ids, p, data, seed=1, public_seed=1, lose=watch).run()
    assert len(res.outputs) == n
    assert sorted(finals) == list(range(1, n + 1))
    for seq, msgs in finals.items():
        assert len(msgs) >= n - 1  # the origin's push, then the relays
        assert len({id(m) for m in msgs}) == 1, f"record {seq} travelled as {len(msgs)} objects"
    # and the result is the mean of the records that carried it
    o = next(iter(res.outputs.values()))
    assert np.isfinite(o.info["sum_omega"]) and o.info["final"] == ids
