"""IncA under `netdp simulate` at scale: what a large run keeps.

Above the size where the per-node accountants run (`inca.hooks.SIM_AUDIT_NODES`), nothing reads
the nodes' views (the outcome reads the outputs only), so none is kept by default, and the
printed result is the same as with every view kept (`--record full`). (The dissemination's
message count: `test_inca_dissemination`.)
"""

from __future__ import annotations

import gc
import json
from typing import Any

from netdp_node.algorithms.inca import hooks as inca_hooks
from netdp_node.cli import main
from netdp_node.simulate import Simulator

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
