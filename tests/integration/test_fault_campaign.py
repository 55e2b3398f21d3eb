"""A bounded fault campaign (Jepsen-style): seeded random schedules of real faults during jobs of
every algorithm, then the invariants of tests/campaign.py over the merged ledgers.

Each schedule starts a fresh bootstrap and 5 node processes (each behind a userspace TCP proxy on
loopback), submits 4-5 short jobs at once (the algorithm groups of `campaign.GROUPS`: three
schedules cover every algorithm), and applies 4-6 faults drawn from its seed: SIGKILL + restart on
the same ledger, restart on a wiped ledger (`campaign.WIPE_ENABLED`), SIGKILL +
restart of the bootstrap, a partition, delays and connection resets. Then: (a) no acknowledged
entry lost, (b) no node's spent privacy decreased across its restarts, (c) no value contributed
more often than its schedule allows, (d) every job ended done or failed with a reason, (e) `netdp
audit` passes.

    NETDP_CAMPAIGN_SCHEDULES=12     more schedules (default 3, seeds BASE..BASE+11)
    NETDP_CAMPAIGN_SEED=BASE        first seed (default 1300)
    NETDP_CAMPAIGN_SEEDS=1301,1307  replay exactly these schedules
    NETDP_CAMPAIGN_WIPE=0           no ledger wipes (=1: wipes, the default)
    NETDP_CAMPAIGN_WORKDIR=DIR      keep every cluster (ledgers, logs) under DIR
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from campaign import CampaignRun, make_schedule

pytestmark = pytest.mark.slow


def _seeds() -> list[int]:
    if os.environ.get("NETDP_CAMPAIGN_SEEDS"):
        return [int(s) for s in os.environ["NETDP_CAMPAIGN_SEEDS"].split(",") if s.strip()]
    base = int(os.environ.get("NETDP_CAMPAIGN_SEED", "1300"))
    return list(range(base, base + int(os.environ.get("NETDP_CAMPAIGN_SCHEDULES", "3"))))


# every wait inside has its own deadline; this is the backstop: about 4 minutes per schedule
@pytest.mark.timeout(240 * len(_seeds()) + 120)
async def test_fault_campaign(tmp_path, nd):
    outcomes = []
    root = Path(os.environ.get("NETDP_CAMPAIGN_WORKDIR") or tmp_path)
    for seed in _seeds():
        schedule = make_schedule(seed)
        try:
            out = await CampaignRun(schedule, root / f"s{seed}").run()
        except Exception:
            sys.stderr.write(f"schedule seed={seed} could not run: {schedule.describe()}\n")
            raise
        outcomes.append(out)
        status = "ok" if not out.violations else f"{len(out.violations)} violation(s)"
        sys.stderr.write(
            f"schedule seed={seed} ({', '.join(schedule.algorithms)}): "
            f"{out.faults_done} faults, {out.seconds:.0f}s, jobs {out.jobs}: "
            f"{status}\n"
        )
        if out.violations:
            wipe = (
                " NETDP_CAMPAIGN_WIPE=1" if any(f.kind == "wipe" for f in schedule.faults) else ""
            )
            sys.stderr.write(
                f"  replay: NETDP_CAMPAIGN_SEEDS={seed}{wipe} pytest "
                f"tests/integration/test_fault_campaign.py\n"
                f"  schedule: {schedule.describe()}\n"
                f"  applied (seconds after the jobs were submitted): "
                f"{'; '.join(out.applied)}\n"
            )
            for v in out.violations:
                sys.stderr.write(f"  VIOLATION {v}\n")
    bad = sum(len(o.violations) for o in outcomes)
    line = (
        f"fault campaign: {len(outcomes)} schedules, {sum(o.faults_done for o in outcomes)} "
        f"faults, {bad} violations"
    )
    print(line)
    sys.stderr.write(line + "\n")
    assert nd.reap(str(root)) == []  # no process left behind
    assert bad == 0, line + " (details above, with each schedule's seed and replay command)"
