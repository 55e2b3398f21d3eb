"""`netdp demo --algorithm walk-sum` at its default size (real node daemons packed in host
processes, mTLS on loopback): the printed noise std of netdp's sum is below local DP's for the same
per-peer guarantee."""

from __future__ import annotations

import re

import pytest

from netdp_node.algorithms import get_algorithm

pytestmark = pytest.mark.slow


@pytest.mark.timeout(600)
def test_walk_sum_demo_default_prints_its_gain_over_local_dp(tmp_path, nd):
    n = get_algorithm("walk-sum").hooks.demo_nodes
    r = nd.netdp(
        "demo",
        "--algorithm",
        "walk-sum",
        "--workdir",
        str(tmp_path / "demo"),
        "--timeout",
        "400",
        timeout=580,
    )
    try:
        assert r.returncode == 0, f"demo exited {r.returncode}:\n{r.stderr[-4000:]}"
    finally:
        assert nd.reap(str(tmp_path / "demo")) == []
    out = r.stdout
    assert f"over {n} nodes" in out
    m = re.search(r"noise std of the sum: netdp ([\d.]+)\s+vs\s+local DP ([\d.]+)", out)
    assert m, out
    netdp, ldp = float(m.group(1)), float(m.group(2))
    assert 0 < netdp < ldp
    assert "less noise" in out and "no gain over local DP" not in out
    est = re.search(r"estimate\s+(-?[\d.]+) ± ([\d.]+)", out)
    assert est and float(est.group(2)) == pytest.approx(netdp, rel=1e-3)
