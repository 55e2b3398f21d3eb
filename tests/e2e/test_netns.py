"""The ring sum across network namespaces, with faults applied from outside the processes.

Topology (built and always removed by the `netns_cluster` fixture, see conftest.py and
e2e_netns.py): a bridge alone in its namespace `ndp-br-<t>`, the bootstrap in `ndp-<t>-b` at
10.77.x.1:7600, node-i in `ndp-<t>-i` at 10.77.x.(10+i):7601; each host namespace is joined to the
bridge by one veth pair and has no default route; `<t>` and the /24 are random per test. Every
certificate is issued for its holder's bridge address. The operator CLI (`netdp job submit|result`)
runs inside the bootstrap's namespace; ledgers are read from disk.

What each test proves:

* `test_ring_sum_across_namespaces`: five daemons in five namespaces complete a private ring sum
  over mTLS: the job spec lists five distinct 10.77.x.y addresses, every node releases the same
  output, the estimate is within 4 std of the truth, each node's privacy report counts K
  contributions, and each node holds an established TCP connection from its bridge address to its
  successor's (the only path between two namespaces is the bridge, whose port counters grew).
* `test_link_down_briefly_then_up_the_job_completes`: `ip link set v-3 down` in node-3's
  namespace for 2.5 s (less than --peer-timeout) mid-job: the ring stalls (node-3 receives nothing
  while down), TCP retransmits after `up`, and the job completes with every contribution.
* `test_link_down_for_good_fails_the_predecessor_naming_the_node`: the token is held at node-2
  (SIGSTOP until the ledgers show node-1 passed it a token node-3 has not received), node-3's link
  goes down, node-2 resumes: node-2's job fails no earlier than --peer-timeout after it got the
  token and long before the job deadline, with an error naming node-3 and its address, and the
  operator sees that failure.
* `test_sigterm_while_partitioned_stops_the_node` a node whose link to the bootstrap is
  down still acts on SIGTERM (it races its bootstrap calls against the stop event).
* `test_sigkill_and_restart_keeps_the_ledger_and_fails_the_job`: with the token held before
  node-3 (so node-3 is idle and the outcome is determined), node-3 is SIGKILLed mid-job and
  restarted in the same namespace on the same address, port and ledger directory: its ledger keeps
  every entry it had and gains no message, it fails the job itself ("restarted": a node does not
  resume a job), and the token node-2 then hands it is refused, so node-2 fails at once with
  FAILED_PRECONDITION naming node-3, long before the job deadline. The ring cannot resume. Held at
  node-1 or at node-2 (node-2 resumes with the token while its stream to the old node-3 is
  already dead: the write fails and the link must reconnect and re-send, not lose the token).
* `test_slow_lossy_proxy_between_node_and_predecessor`: node-3 advertises the address of
  tcp_proxy.py, which listens in node-3's namespace and forwards to node-3's real port, so all of
  node-2's traffic to node-3 crosses it (TLS name checks pass: same IP). Through a pass-through
  proxy the job gives the baseline; through 80±20 ms per chunk and aborted connections (the only
  loss a TCP proxy can cause; seeded, at least one certain) the job still completes, node-2 re-sends
  over a new connection, node-3 applies each token exactly once, and the job takes longer than the
  baseline and at least (messages into node-3) x 60 ms.

Loss and delay come from the proxy because this kernel has no netem; the nodes' own
--fault-drop/--fault-delay-ms flags are covered by tests/integration/test_faults.py.
"""

from __future__ import annotations

import ipaddress
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from e2e_netns import HERE, NODE_PORT, NetnsCluster, Proc, ip, wait_until

from netdp_node.algorithms.ring.accountant import ring_sum_utility
from netdp_node.errors import LedgerError
from netdp_node.ledger import JobRow, Ledger

pytestmark = pytest.mark.slow

N = 5
VALUES = [0.9, -0.3, 0.55, 0.1, 1.7]  # the last is clipped to 1.0
CLIP = 1.0
PEER_TIMEOUT = 8.0
JOB_DEADLINE = 60.0


# -- helpers --------------------------------------------------------------------------------------
def job_row(c: NetnsCluster, nid: str, job: str) -> JobRow | None:
    """The job's row in `nid`'s ledger (state, detail, result), read from disk."""
    try:
        led = Ledger.open_readonly(c.ledger(nid))
    except LedgerError:  # not created yet
        return None
    try:
        return led.job(job)
    finally:
        led.close()


def received_tokens(c: NetnsCluster, nid: str, pred: str, job: str) -> list[int]:
    return c.tokens(nid, job, "received", pred)


def hold_token_at(c: NetnsCluster, job: str, holder: str, before: str, after: str) -> int:
    """SIGSTOP `holder` and wait until the token is provably with it: `before` (its predecessor)
    committed a token that `after` (its successor) has not received, and nothing moves for 0.3 s.
    Returns the round of the token `holder` holds. `holder` stays stopped (the caller SIGCONTs
    it). (The first node of the ring passes round r + 1 on after receiving round r.)"""
    c.signal(holder, signal.SIGSTOP)
    shift = 1 if holder == c.ids[0] else 0

    def held() -> int:
        sent = c.tokens(before, job, "sent", holder)
        got = c.tokens(after, job, "received", holder)
        if not sent or max(sent) + shift <= max(got, default=0):
            return 0
        time.sleep(0.3)  # anything `holder` wrote before stopping has arrived by now
        if (
            c.tokens(after, job, "received", holder) != got
            or c.tokens(before, job, "sent", holder) != sent
        ):
            return 0
        return max(sent)

    return int(wait_until(held, 20, f"the token of {job} to stop at {holder}", interval=0.1))


def tcp_established(ns: str) -> set[tuple[str, int, str, int]]:
    """(local ip, port, remote ip, port) of the ESTABLISHED TCP connections in namespace ns, from
    /proc/net/tcp and tcp6 as seen from inside it (gRPC uses dual-stack sockets: IPv4 peers
    appear as v4-mapped IPv6 addresses, reported here as plain IPv4)."""
    r = subprocess.run(
        ["ip", "netns", "exec", ns, "cat", "/proc/net/tcp", "/proc/net/tcp6"],
        capture_output=True,
        text=True,
        timeout=20,
        check=True,
    )

    def addr(s: str) -> tuple[str, int]:
        h, p = s.split(":")
        raw = b"".join(bytes.fromhex(h[i : i + 8])[::-1] for i in range(0, len(h), 8))
        a = ipaddress.ip_address(raw)
        if isinstance(a, ipaddress.IPv6Address) and a.ipv4_mapped is not None:
            a = a.ipv4_mapped
        return str(a), int(p, 16)

    out = set()
    for line in r.stdout.splitlines():
        f = line.split()
        if len(f) > 3 and f[0].rstrip(":").isdigit() and f[3] == "01":
            out.add((*addr(f[1]), *addr(f[2])))
    return out


def start_proxy(c: NetnsCluster, nid: str, name: str, *, listen_port: int, **opts: object) -> Proc:
    """tcp_proxy.py in `nid`'s namespace, from its address:listen_port to its node port; `opts`
    become flags (config=FILE: impairment switchable at run time, see `set_proxy`)."""
    host = c.host(nid)
    ready = c.root / f"{name}.ready"
    stats = c.root / f"{name}.json"
    ready.unlink(missing_ok=True)
    argv = [
        sys.executable,
        str(HERE / "tcp_proxy.py"),
        "--listen",
        f"{host.ip}:{listen_port}",
        "--target",
        f"{host.ip}:{NODE_PORT}",
        "--stats",
        str(stats),
        "--ready",
        str(ready),
    ]
    for k, v in opts.items():
        argv += [f"--{k.replace('_', '-')}", str(v)]
    p = c.spawn(name, host, argv, port_file=ready)
    assert c.wait_ready(p, timeout=30) == listen_port
    return p


def proxy_stats(c: NetnsCluster, name: str) -> dict:
    return dict(json.loads((c.root / f"{name}.json").read_text()))


def set_proxy(config: Path, **knobs: float) -> None:
    """Switch a running proxy's impairment (atomically: it re-reads the file when it changes)."""
    tmp = config.with_name(config.name + ".tmp")
    tmp.write_text(json.dumps(knobs))
    os.replace(tmp, config)


def stop_proc(p: Proc) -> int:
    p.popen.send_signal(signal.SIGTERM)
    return p.popen.wait(timeout=15)


def job_duration(c: NetnsCluster, job: str) -> float:
    """From node-1's first token to the last node's released output, by the ledgers' clocks
    (the same host clock): excludes the operator's and the bootstrap's polling."""
    start = min(e.ts for e in c.entries("node-1", job) if e.direction == "sent")
    end = max(e.ts for nid in c.ids for e in c.entries(nid, job) if e.event == "output")
    return end - start


def check_completed(c: NetnsCluster, s: dict, rounds: int) -> None:
    assert s["state"] == "done" and s["complete"] and s["outputs_agree"], s
    assert s["contributions"] == {nid: rounds for nid in c.ids}, s["contributions"]
    for nid in c.ids:
        row = job_row(c, nid, s["job_id"])
        assert row is not None and row.state == "done", (nid, row)
        assert row.result is not None and row.result["value"] == s["value"], (nid, row.result)


# -- 1. the ring sum ------------------------------------------------------------------------------
@pytest.mark.timeout(90)
def test_ring_sum_across_namespaces(netns_cluster, nd):
    k = 5
    c = netns_cluster(N, values=VALUES, peer_timeout=PEER_TIMEOUT, job_deadline=JOB_DEADLINE)
    topo = c.topo
    # Each daemon runs in its own namespace, on its own address in one /24.
    for name, p in c.procs.items():
        assert ip("netns", "identify", str(p.pid)).stdout.strip() == p.host.ns, name
    net = ipaddress.ip_network(f"10.77.{topo.subnet}.0/24")
    assert len({h.ip for h in topo.hosts.values()}) == N + 1
    assert all(ipaddress.ip_address(h.ip) in net for h in topo.hosts.values())
    # Nothing was added to the root namespace; each host's only route is the bridge's /24.
    root_links = {x["ifname"] for x in json.loads(ip("-j", "link", "show").stdout)}
    assert not root_links & {
        "br0",
        *(h.dev for h in topo.hosts.values()),
        *(h.bridge_port for h in topo.hosts.values()),
    }, root_links
    for h in topo.hosts.values():
        v4 = [r["dst"] for r in json.loads(ip("-n", h.ns, "-4", "-j", "route", "show").stdout)]
        assert v4 == [str(net)], (h.ns, v4)
        assert not json.loads(
            ip("-n", h.ns, "-6", "-j", "route", "show", "default").stdout or "[]"
        ), h.ns
    bridged = {nid: topo.bridge_port_bytes(c.host(nid)) for nid in c.ids}

    job = c.submit("ring-e2e", rounds=k, epsilon=0.9, delta=1e-5, delta_prime=1e-5, clip=CLIP)
    code, s = c.result(job, wait=60)
    assert code == 0, s
    check_completed(c, s, k)

    # The bootstrap's job spec names every node at its own bridge address.
    spec = c.job_spec(job)
    addresses = {p["node_id"]: p["address"] for p in spec["participants"]}
    assert list(addresses) == c.ids
    assert addresses == {nid: f"{c.host(nid).ip}:{NODE_PORT}" for nid in c.ids}, addresses

    # The estimate is within 4 std (the accountant's netdp_std) of the truth.
    std = ring_sum_utility({"participants": c.ids, "params": spec["params"]})["netdp_std"]
    truth = float(np.clip(VALUES, -CLIP, CLIP).sum())
    (estimate,) = s["value"]
    assert 0 < std < math.inf and abs(estimate - truth) <= 4 * std, (estimate, truth, std)

    # Every node's own ledger: K contributions, a finite epsilon towards each of the others.
    for nid in c.ids:
        rep = nd.privacy_report(c.ledger(nid), job)
        (j,) = rep["jobs"]
        assert rep["node"] == nid and j["state"] == "done" and j["contributions"] == k, (nid, j)
        assert {p["peer"] for p in j["peers"]} == set(c.ids) - {nid}
        assert all(math.isfinite(p["epsilon"]) and p["epsilon"] > 0 for p in j["peers"]), j

    # The tokens really crossed the bridge: node-i holds a TCP connection from its bridge address
    # to its ring successor's (the link stays open after the job), and every bridge port carried
    # traffic during the job.
    for i, nid in enumerate(c.ids):
        succ = c.ids[(i + 1) % N]
        conns = tcp_established(c.host(nid).ns)
        assert any(
            lip == c.host(nid).ip and rip == c.host(succ).ip and rport == NODE_PORT
            for lip, _, rip, rport in conns
        ), (nid, succ, conns)
        assert topo.bridge_port_bytes(c.host(nid)) > bridged[nid], nid

    codes = c.stop(grace=15)  # SIGTERM: every process exits 0 (15 s: slow CI machines)
    assert set(codes) == {"bootstrap", *c.ids}
    assert not {name: rc for name, rc in codes.items() if rc != 0}, codes


# -- 2. partitions from outside ---------------------------------------------------------------------
@pytest.mark.timeout(90)
def test_link_down_briefly_then_up_the_job_completes(netns_cluster):
    rounds, down_for = 400, 2.5
    assert down_for < PEER_TIMEOUT
    c = netns_cluster(N, values=VALUES, peer_timeout=PEER_TIMEOUT, job_deadline=JOB_DEADLINE)
    victim = c.host("node-3")
    job = c.submit("heal", rounds=rounds, epsilon=0.9)
    wait_until(
        lambda: len(received_tokens(c, "node-3", "node-2", job)) >= 3,
        30,
        "node-3 to receive 3 tokens",
        progress=c.progress(),
    )

    c.topo.link(victim, "down")
    t_down = time.monotonic()
    try:
        time.sleep(0.5)  # let whatever node-3 was processing at the cut settle
        seen = received_tokens(c, "node-3", "node-2", job)
        assert len(seen) < rounds, "the job finished before the partition: make it longer"
        time.sleep(max(0.0, down_for - (time.monotonic() - t_down)))
        # Cut off: node-3 received nothing more while its link was down.
        assert received_tokens(c, "node-3", "node-2", job) == seen
    finally:
        c.topo.link(victim, "up")
    code, s = c.result(job, wait=60)
    assert code == 0, s
    check_completed(c, s, rounds)
    assert received_tokens(c, "node-3", "node-2", job) == list(range(1, rounds + 1))
    assert job_duration(c, job) > down_for


@pytest.mark.timeout(120)
def test_link_down_for_good_fails_the_predecessor_naming_the_node(netns_cluster):
    c = netns_cluster(N, values=VALUES, peer_timeout=PEER_TIMEOUT, job_deadline=JOB_DEADLINE)
    victim = c.host("node-3")
    job = c.submit("cut", rounds=5000, epsilon=0.9)
    wait_until(
        lambda: len(received_tokens(c, "node-3", "node-2", job)) >= 3,
        30,
        "node-3 to receive 3 tokens",
        progress=c.progress(),
    )
    t_stop = time.monotonic()
    held = hold_token_at(c, job, "node-2", before="node-1", after="node-3")
    got = received_tokens(c, "node-3", "node-2", job)
    assert max(got) == held - 1, (held, got)

    c.topo.link(victim, "down")
    t_cut = time.monotonic()
    c.signal("node-2", signal.SIGCONT)

    def failed() -> object:
        row = job_row(c, "node-2", job)
        return row if row is not None and row.state == "failed" else None

    row = wait_until(failed, JOB_DEADLINE, "node-2's job to fail", interval=0.1)
    elapsed = time.monotonic() - t_cut
    # node-2 kept trying for at least --peer-timeout (counted from when it had the token, which is
    # no earlier than the SIGSTOP), and gave up long before the job deadline would have.
    assert time.monotonic() - t_stop >= PEER_TIMEOUT, elapsed
    assert elapsed < JOB_DEADLINE / 2, elapsed
    assert "node-3" in row.detail and c.address("node-3") in row.detail, row.detail
    assert "UNAVAILABLE" in row.detail, row.detail
    assert received_tokens(c, "node-3", "node-2", job) == got  # never got through

    # The operator (in the bootstrap's namespace) sees the failure, named.
    code, s = c.result(job, wait=20)
    # Exit 1 (failed) or, while some participants have not reported, 5 (`job result` says
    # "timeout" for a failed but incomplete job).
    assert code in (1, 5) and s["state"] == "failed" and not s["complete"], (code, s)
    assert "node-3" in s["failed"]["node-2"], s
    assert "node-3" not in s["contributors"] and "node-3" in s["missing"], s
    assert f"link to node-3 ({c.address('node-3')}) broke" in c.procs["node-2"].log_text()
    # A node cut off from the bootstrap does not act on SIGTERM (see the next test): SIGKILL it
    # rather than wait for the teardown's grace period.
    c.kill("node-3")


@pytest.mark.timeout(60)
def test_sigterm_while_partitioned_stops_the_node(netns_cluster):
    c = netns_cluster(3, values=VALUES[:3], peer_timeout=PEER_TIMEOUT, job_deadline=JOB_DEADLINE)
    victim = c.host("node-3")
    p = c.procs["node-3"]
    c.topo.link(victim, "down")
    try:
        time.sleep(1.0)  # a few --poll-interval periods: its bootstrap poll is now stuck
        p.popen.send_signal(signal.SIGTERM)
        try:
            code = p.popen.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pytest.fail("node-3 did not exit within 10 s of SIGTERM while its link was down")
    finally:
        if p.alive():
            c.kill("node-3")  # do not wait for the teardown's grace period
    assert code == 0


# -- 3. SIGKILL and restart -------------------------------------------------------------------------


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "holder",
    [
        "node-1",  # the token waits two hops before node-3: node-2 sees the dead stream while idle
        "node-2",
    ],
)
def test_sigkill_and_restart_keeps_the_ledger_and_fails_the_job(netns_cluster, nd, holder):
    c = netns_cluster(N, values=VALUES, peer_timeout=PEER_TIMEOUT, job_deadline=JOB_DEADLINE)
    victim = "node-3"
    job = c.submit("crash", rounds=5000, epsilon=0.9)
    wait_until(
        lambda: len(received_tokens(c, victim, "node-2", job)) >= 3,
        30,
        f"{victim} to receive 3 tokens",
        progress=c.progress(),
    )
    # Stop the token before node-3, so that node-3 is idle (nothing half-done) when it is killed
    # and the outcome is determined: its predecessor will try to hand it the next token.
    pred_of = {nid: c.ids[i - 1] for i, nid in enumerate(c.ids)}
    succ_of = {nid: c.ids[(i + 1) % N] for i, nid in enumerate(c.ids)}
    held = hold_token_at(c, job, holder, before=pred_of[holder], after=succ_of[holder])
    rounds_at_victim = held if holder == "node-1" else held - 1

    before = c.entries(victim, job)
    old = c.procs[victim]
    assert c.kill(victim) == -signal.SIGKILL
    t_kill = time.monotonic()
    after_kill = c.entries(victim, job)
    assert after_kill[: len(before)] == before and len(after_kill) >= len(before)
    assert received_tokens(c, victim, "node-2", job) == list(range(1, rounds_at_victim + 1))
    contributed = sum(1 for e in after_kill if e.event == "contribute")
    assert contributed == rounds_at_victim

    # Same namespace, address, port and ledger directory.
    new = c.start_node(victim, ["--seed", "99"])
    assert new is not old and new.host == old.host
    assert c.wait_ready(new, timeout=60) == NODE_PORT
    assert ip("netns", "identify", str(new.pid)).stdout.strip() == old.host.ns
    c.signal(holder, signal.SIGCONT)  # the token goes on towards node-3

    def failed(nid: str):
        row = job_row(c, nid, job)
        return row if row is not None and row.state == "failed" else None

    # The restarted node finds the job running in its ledger: it does not resume it, it fails it.
    mine = wait_until(lambda: failed(victim), 30, f"restarted {victim} to fail the job")
    assert "restarted" in mine.detail, mine.detail

    # Nothing node-3 had committed was lost, and the restart added no message to it.
    after_restart = c.entries(victim, job)
    assert after_restart[: len(after_kill)] == after_kill
    assert not [e for e in after_restart[len(after_kill) :] if e.direction != "local"]
    # Whatever it passed on, it had committed first.
    passed_on = set(received_tokens(c, "node-4", victim, job))
    sent = set(c.tokens(victim, job, "sent", "node-4"))
    assert passed_on and passed_on <= sent, (passed_on, sent)
    rep = nd.privacy_report(c.ledger(victim), job)
    (j,) = rep["jobs"]
    assert j["contributions"] == contributed and j["state"] == "failed", j
    assert "restarted" in j["detail"], j

    # node-2 handed the token to the restarted node-3, which refused it, so node-2 failed at once
    # with a clear error naming node-3 (not after --peer-timeout, not at the deadline). The ring
    # cannot resume.
    pred = wait_until(lambda: failed("node-2"), 15, "node-2 to fail the job", interval=0.1)
    assert "node-3" in pred.detail and "FAILED_PRECONDITION" in pred.detail, pred.detail
    assert "restarted" in pred.detail, pred.detail
    assert time.monotonic() - t_kill < JOB_DEADLINE / 2
    assert received_tokens(c, victim, "node-2", job) == list(range(1, rounds_at_victim + 1))

    code, s = c.result(job, wait=20)
    assert code in (1, 5) and s["state"] == "failed", (code, s)  # 5: see the partition test
    assert "restarted" in s["failed"][victim], s
    assert "node-3" in s["failed"]["node-2"], s


# -- 4. a slow, lossy link through a userspace proxy ------------------------------------------------
@pytest.mark.timeout(120)
def test_slow_lossy_proxy_between_node_and_predecessor(netns_cluster):
    k, proxy_port, delay_ms, jitter_ms = 10, NODE_PORT + 1, 80.0, 20.0
    victim = "node-3"
    c = netns_cluster(
        N,
        values=VALUES,
        peer_timeout=PEER_TIMEOUT,
        job_deadline=JOB_DEADLINE,
        extra={victim: ["--advertise", f"{{ip}}:{proxy_port}"]},
    )
    proxied = f"{c.host(victim).ip}:{proxy_port}"
    config = c.root / "proxy.conf"
    set_proxy(config)  # pass-through
    proxy = start_proxy(c, victim, "proxy", listen_port=proxy_port, config=config, seed=3)

    # Baseline: through the pass-through proxy.
    code, s = c.result(c.submit("base", rounds=k, epsilon=0.9), wait=60)
    assert code == 0, s
    check_completed(c, s, k)
    base = job_duration(c, "base")
    spec = c.job_spec("base")
    assert {p["node_id"]: p["address"] for p in spec["participants"]}[victim] == proxied, spec

    def counted() -> dict | None:
        st = proxy_stats(c, "proxy")
        return st if st["chunks_c2s"] else None

    st = wait_until(counted, 10, "the proxy to count node-2's traffic")
    assert st["connections"] >= 1 and st["drops"] == 0 and st["max_delay_ms"] == 0, st

    # Slow and lossy, switched on in the running proxy (node-2's connection stays up): 80±20 ms
    # per chunk both ways, and drops from the seeded generator (seed 3: the first eligible chunk
    # is dropped, so at least one drop is certain).
    set_proxy(
        config, delay_ms=delay_ms, jitter_ms=jitter_ms, drop_prob=0.25, drop_after=4, max_drops=3
    )
    wait_until(
        lambda: proxy_stats(c, "proxy")["config_changes"] == 2,
        10,
        "the proxy to switch on the impairment",
    )
    code, s = c.result(c.submit("slow", rounds=k, epsilon=0.9), wait=90)
    assert code == 0, s
    check_completed(c, s, k)
    slow = job_duration(c, "slow")
    assert stop_proc(proxy) == 0
    st = proxy_stats(c, "proxy")
    assert st["drops"] >= 1 and st["connections"] >= 1 + st["drops"], st
    assert st["min_delay_ms"] >= delay_ms - jitter_ms, st
    # node-2 saw its stream to node-3 break with a message outstanding, and re-sent it.
    assert f"link to {victim} ({proxied}) broke" in c.procs["node-2"].log_text()

    # Loss did not make node-3 apply anything twice: each round once, then the release once.
    ents = c.entries(victim, "slow")
    assert received_tokens(c, victim, "node-2", "slow") == list(range(1, k + 1))
    assert [e.seq for e in ents if e.direction == "received" and e.kind == "release"] == [1]
    # Each of the k + 1 messages into node-3 waited at least delay - jitter in the proxy, one
    # after the other (the next can only come once the token has been round the ring).
    floor = (k + 1) * (delay_ms - jitter_ms) / 1000.0
    assert slow >= floor, (slow, floor)
    assert slow > base + floor / 2, (slow, base, floor)


# -- 5. a peer restarted between two jobs -------------------------------------------------------------
@pytest.mark.timeout(90)
def test_predecessor_retries_a_peer_restarting_between_jobs(netns_cluster):
    c = netns_cluster(3, values=VALUES[:3], peer_timeout=PEER_TIMEOUT, job_deadline=JOB_DEADLINE)
    code, s = c.result(c.submit("first", rounds=2, epsilon=0.9), wait=60)
    assert code == 0, s

    # node-2 stops (its idle stream from node-1 breaks) and stays down longer than --peer-timeout.
    assert stop_proc(c.procs["node-2"]) == 0
    time.sleep(PEER_TIMEOUT + 1)
    job = c.submit("second", rounds=2, epsilon=0.9)
    wait_until(
        lambda: c.tokens("node-1", job, "sent", "node-2"),
        30,
        "node-1 to send a token",
        progress=c.progress(),
    )
    time.sleep(0.5)  # node-1's first attempt is refused: nothing listens at node-2's address
    c.wait_ready(c.start_node("node-2", ["--seed", "2"]), timeout=60)
    # node-2 is back within --peer-timeout of that first attempt: node-1 should still be retrying.
    code, s = c.result(job, wait=60)
    assert code == 0 and s["state"] == "done", s
