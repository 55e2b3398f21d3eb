"""The `netdp` command line.

    netdp demo                      bootstrap + nodes on loopback, a private ring sum, a privacy report
    netdp pki init|issue|revoke     a throwaway or real CA, one certificate per node
    netdp bootstrap ...             run the bootstrap service
    netdp node ...                  run a node daemon
    netdp job submit|result|list    operators: submit a job, read its released result
    netdp watch JOB                 operators: follow a running job live (per-node progress)
    netdp privacy report            what a node's ledger says it has spent, towards every node
    netdp compose                   generate a docker-compose.yml (certificates, bootstrap, nodes)
    netdp probe HOST:PORT           health check: is the port served (TCP connect)
    netdp audit                     invariants over several nodes' ledgers (global knowledge)
    netdp simulate                  the same engines for thousands of nodes in one process
    netdp reproduce NAME            the papers' experiments (JSON + PNG; `netdp reproduce list`)
    netdp plan --nodes N --epsilon E --delta D
                                    which algorithm and noise for a per-peer target (vs local/central DP)

Exit codes: 0 success; 1 runtime failure (a job failed, a peer refused); 2 usage or configuration
error; 3 certificate / security error; 4 ledger error; 5 timeout; 70 crash injected by
--fault-crash-*; 130 interrupted (Ctrl-C).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from netdp_node import __version__
from netdp_node.errors import ConfigError, LedgerError, NetdpError, SecurityError

LOG_LEVELS = ("debug", "info", "warning", "error")
GRACE_HELP = (
    "on SIGTERM/SIGINT, calls in progress get up to S seconds to finish before they are "
    "cut off (default 2); idle links and held long polls end at once"
)
EXIT_OK, EXIT_FAIL, EXIT_USAGE, EXIT_SECURITY, EXIT_LEDGER, EXIT_TIMEOUT, EXIT_INTERRUPTED = (
    0,
    1,
    2,
    3,
    4,
    5,
    130,
)


class _Parser(argparse.ArgumentParser):
    """No prefix matching of long options (`--node 4` is not `--nodes 4`): every subparser is made
    from this class too, so the rule holds for every command."""

    #: fills in text that needs the algorithm registry when the help is shown (not at start-up)
    fill_help: Callable[[_Parser], None] | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def format_help(self) -> str:
        if self.fill_help is not None:
            self.fill_help(self)
        return super().format_help()


REPRODUCE_DESCRIPTION = (
    "Reproduce an experiment of the papers; writes NAME.json and NAME.png under --out and prints "
    "a summary."
)
DEMO_DESCRIPTION = (
    "Create a throwaway CA, start a bootstrap and N node daemons as separate processes on "
    "127.0.0.1, run a private job (--algorithm, below), print the result beside the truth or the "
    "baselines and every node's privacy report, then stop them all."
)


def _demo_help(d: _Parser) -> None:
    """`netdp demo --help`: every algorithm of the registry, with its demo (its record's hooks),
    read from the catalog (no engine, no numpy imported)."""
    from netdp_node.algorithms.catalog import DEMOS  # lazy: start-up cost

    demos = {k: what for k, what in DEMOS.items() if what}
    width = max(map(len, demos))
    lines = [textwrap.fill(DEMO_DESCRIPTION, 78), "", "algorithms (--algorithm):"]
    lines += [
        textwrap.fill(f"  {k:<{width}}  {what}", 78, subsequent_indent=" " * (width + 4))
        for k, what in demos.items()
    ]
    others = [k for k, what in DEMOS.items() if not what]
    if others:
        lines.append(
            textwrap.fill(
                f"no demo (run them with `netdp simulate` or `netdp job submit`): "
                f"{', '.join(others)}",
                78,
                initial_indent="  ",
                subsequent_indent="  ",
            )
        )
    d.description = "\n".join(lines)
    for action in d._actions:
        if "--algorithm" in action.option_strings:
            action.help = f"{', '.join(demos)} (default %(default)s)"


def _run_daemon(main: Any) -> int:
    """asyncio.run(main()) for a daemon, then a quick exit: everything durable (ledger, store) was
    closed by the daemon itself, so the interpreter's final garbage collection of every module
    (grpc, numpy, cryptography: about 0.3 s of CPU per process, seconds for a dozen processes on a
    loaded machine) is skipped by freezing the heap first."""
    import asyncio  # lazy: start-up cost
    import gc  # lazy: start-up cost

    code = asyncio.run(main())
    gc.freeze()
    return int(code)


def _setup_logging(level: str, who: str) -> None:
    import logging  # lazy: start-up cost

    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO),
        format=f"%(asctime)s %(levelname)s {who} %(name)s: %(message)s",
        stream=sys.stderr,
    )


def _addr(s: str) -> str:
    host, sep, port = s.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) < 65536:
        raise argparse.ArgumentTypeError(f"{s!r} is not HOST:PORT")
    return s


def _job_id(s: str) -> str:
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}", s):
        raise argparse.ArgumentTypeError(
            f"{s!r}: a job id is 1-64 letters, digits, '.', '_' or "
            f"'-', starting with a letter or digit"
        )
    return s


def _positive(s: str) -> float:
    v = float(s)
    if not v > 0:
        raise argparse.ArgumentTypeError(f"{s} must be positive")
    return v


def _nonneg(s: str) -> float:
    v = float(s)
    if not v >= 0:
        raise argparse.ArgumentTypeError(f"{s} must be >= 0")
    return v


def _long_poll(s: str) -> float:
    v = _positive(s)
    if v > 30:
        raise argparse.ArgumentTypeError(f"{s} must be at most 30 (the bootstrap holds no longer)")
    return v


def _count(s: str) -> int:
    try:
        v = int(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{s!r} is not a whole number") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"{s} must be >= 0")
    return v


def _param(s: str) -> tuple[str, Any]:
    k, sep, v = s.partition("=")
    if not sep or not k:
        raise argparse.ArgumentTypeError(f"--param takes KEY=VALUE, got {s!r}")
    try:
        return k, json.loads(v)
    except json.JSONDecodeError:
        return k, v
    except RecursionError:
        raise argparse.ArgumentTypeError(f"--param {k}: the value is nested too deeply") from None


def _check_job_params(algorithm: str, params: dict[str, Any], n: int | None) -> None:
    """`--algorithm` and `--param` checked as the bootstrap will check them (`Algorithm.validate`,
    or without the number of participants `Algorithm.check_values`): a ConfigError (exit 2) naming
    the parameter, before anything is sent."""
    from netdp_node.algorithms import ALGORITHMS, get_algorithm  # lazy: start-up cost

    if algorithm not in ALGORITHMS:
        raise ConfigError(f"--algorithm {algorithm!r} is not one of {', '.join(ALGORITHMS)}")
    algo = get_algorithm(algorithm)
    try:
        if n is None:
            algo.check_values(params)
        else:
            algo.validate(params, n)
    except ValueError as e:
        given = ", ".join(f"{k}={v!r}" for k, v in params.items()) or "none"
        raise ConfigError(f"--param {e} (parameters given: {given})") from None


# -- pki ----------------------------------------------------------------------------------------
def cmd_pki(a: argparse.Namespace) -> int:
    from netdp_node.security import pki  # lazy: start-up cost

    if a.pki_cmd == "init":
        pki.init_ca(a.dir, force=a.force)
        op = pki.issue(a.dir, a.operator, role="operator", hosts=())
        print(f"CA created in {a.dir}; operator certificate in {op}", file=sys.stderr)
        return EXIT_OK
    if a.pki_cmd == "issue":
        hosts = tuple(a.host) or (() if a.role == "operator" else ("127.0.0.1", "localhost"))
        out = pki.issue(a.dir, a.node_id, hosts=hosts, role=a.role, days=a.days, force=a.force)
        print(
            f"{a.role} certificate for {a.node_id} ({', '.join(hosts) or 'no hosts'}) in {out}",
            file=sys.stderr,
        )
        print(out)
        return EXIT_OK
    if a.pki_cmd == "setup":
        if a.per_host < 0:
            raise ConfigError(f"--per-host must be 0 or more, not {a.per_host}")
        if a.check:
            per = f", {-(-a.nodes // a.per_host)} host folders" if a.per_host else ""
            print(f"ok: would set up {a.nodes} node certificates{per} in {a.dir}", file=sys.stderr)
            return EXIT_OK
        made = pki.setup(
            a.dir,
            nodes=[f"{a.node_prefix}{i}" for i in range(1, a.nodes + 1)],
            bootstrap_hosts=a.bootstrap_host,
            operator="operator",
            node_host_suffix=a.node_host_suffix,
            per_host=a.per_host,
        )
        print(
            f"pki in {a.dir}: {len(made)} new certificate(s) "
            f"({', '.join(made) or 'everything existed already'})",
            file=sys.stderr,
        )
        return EXIT_OK
    if a.pki_cmd == "k8s-secrets":
        from netdp_node.k8s import host_secrets, write_private  # lazy: start-up cost

        text, issued = host_secrets(
            a.dir,
            hosts=a.hosts,
            per_host=a.per_host,
            prefix=a.prefix,
            namespace=a.namespace,
            cluster_domain=a.cluster_domain,
            data=a.data,
        )
        print(
            f"{a.hosts} host(s) of {a.per_host} node(s): {len(issued)} new certificate(s) in "
            f"{a.dir}",
            file=sys.stderr,
        )
        if a.output == "-":
            sys.stdout.write(text)
        else:
            write_private(a.output, text)
            print(
                f"wrote {a.output} (private keys, mode 0600): kubectl apply -f {a.output}",
                file=sys.stderr,
            )
        return EXIT_OK
    if a.pki_cmd == "revoke":
        if a.bootstrap and not a.certs:
            raise ConfigError("--bootstrap needs --certs (an operator identity folder) to publish")
        crl = pki.revoke(a.dir, a.node_id)
        print(
            f"revoked {a.node_id}; revocation list written to {Path(a.dir) / 'crl.pem'}",
            file=sys.stderr,
        )
        if a.bootstrap:
            import asyncio  # lazy: start-up cost

            from netdp_node.bootstrap_client import BootstrapClient  # lazy: start-up cost

            async def publish() -> None:
                c = BootstrapClient(a.bootstrap, pki.load_identity(a.certs))
                try:
                    await c.publish_revocations(crl)
                finally:
                    await c.close()

            asyncio.run(publish())
            print(f"published to the bootstrap at {a.bootstrap}", file=sys.stderr)
        return EXIT_OK
    raise ConfigError("unknown pki command")


# -- daemons ------------------------------------------------------------------------------------
def _check_certs(folder: Path, *, serve: bool = False, role: str = "", command: str = "") -> str:
    """--check: validate an identity folder if it is there; it may legitimately not exist yet (the
    one-shot certificate service of docker compose creates it). `serve`: the holder serves (node,
    bootstrap), so its certificate must carry the identity names callers verify. `role`: the
    certificate must be of this role (`command` runs as it)."""
    from netdp_node.security.pki import (  # lazy: start-up cost
        check_role,
        check_server_names,
        load_identity,
    )

    if not folder.exists():
        return f"certificates {folder} not present yet (not checked)"
    ident = load_identity(folder)
    if role:
        check_role(ident, folder, role, command)
    if serve:
        check_server_names(ident, folder)
    return f"{ident.role} certificate of {ident.node_id} valid until {ident.not_after:%Y-%m-%d}"


def cmd_bootstrap(a: argparse.Namespace) -> int:
    from netdp_node.lazy import long_lived_imports  # lazy: start-up cost

    with long_lived_imports():
        import asyncio  # lazy: start-up cost

        from netdp_bootstrap.server import BootstrapConfig, run_bootstrap  # lazy: start-up cost

    cfg = BootstrapConfig(
        certs=Path(a.certs),
        state=Path(a.state),
        listen=a.listen,
        crl=Path(a.crl) if a.crl else None,
        grace=a.shutdown_grace,
    )
    if a.check:
        print(
            f"ok: bootstrap would listen on {cfg.listen}, state {cfg.state}; "
            f"{_check_certs(cfg.certs, serve=True, role='bootstrap', command='netdp bootstrap')}",
            file=sys.stderr,
        )
        return EXIT_OK
    _setup_logging(a.log_level, "bootstrap")

    async def main() -> int:
        ready: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        task = asyncio.ensure_future(run_bootstrap(cfg, ready))
        port = await asyncio.wait({ready, task}, return_when=asyncio.FIRST_COMPLETED)
        del port
        if ready.done() and a.port_file:
            Path(a.port_file).write_text(str(ready.result()))
        return await task

    return _run_daemon(main)


def _node_config(a: argparse.Namespace) -> Any:
    from netdp_node.daemon import NodeConfig  # lazy: start-up cost

    if a.budget_epsilon is not None and not 0 < a.budget_delta < 1:
        raise ConfigError(f"--budget-delta must be in (0, 1), not {a.budget_delta:g}")
    from netdp_node.faults import parse_offline, plan_from  # lazy: start-up cost

    faults = plan_from(
        {
            "crash_at_step": a.fault_crash_at_step,
            "crash_after_s": a.fault_crash_after,
            "offline": [parse_offline(x) for x in a.fault_offline] if a.fault_offline else None,
            "leave_at_step": a.fault_leave_at_step,
            "drop_prob": a.fault_drop,
            "delay_ms": a.fault_delay_ms,
            "jitter_ms": a.fault_jitter_ms,
            "partition": a.fault_partition,
            "seed": a.fault_seed,
        }
    )
    return NodeConfig(
        certs=Path(a.certs[0] if a.certs else "."),
        bootstrap=a.bootstrap,
        ledger=Path(a.ledger),
        listen=a.listen,
        advertise=a.advertise,
        data=Path(a.data) if a.data else None,
        budget_epsilon=a.budget_epsilon,
        budget_delta=a.budget_delta,
        poll_interval=a.poll_interval,
        long_poll=a.long_poll,
        crl=Path(a.crl) if a.crl else None,
        seed=a.seed,
        faults=faults,
        peer_timeout=a.peer_timeout,
        job_deadline=a.job_deadline,
        bootstrap_timeout=a.bootstrap_timeout,
        grace=a.shutdown_grace,
        ledger_threads=a.ledger_threads,
    )


def _hosted_configs(a: argparse.Namespace) -> list[Any]:
    """One NodeConfig per identity this process hosts (--certs, repeated, and --identities)."""
    from netdp_node.host import identity_folders, node_configs  # lazy: start-up cost

    if not a.certs and not a.identities:
        raise ConfigError("give --certs DIR (repeat to host several nodes) or --identities DIR")
    return node_configs(_node_config(a), identity_folders(a.certs or [], a.identities or []))


def cmd_node(a: argparse.Namespace) -> int:
    from netdp_node.lazy import long_lived_imports  # lazy: start-up cost

    with long_lived_imports():
        from netdp_node.host import run_host, write_port_file  # lazy: start-up cost

    cfgs = _hosted_configs(a)
    if a.check:
        from netdp_node.data import load_values  # lazy: start-up cost

        for cfg in cfgs:
            n = len(load_values(cfg.data)) if cfg.data else 0
            print(
                f"ok: node with bootstrap {cfg.bootstrap}, ledger {cfg.ledger}, {n} value(s), "
                f"faults {cfg.faults.describe() or 'none'}; "
                f"{_check_certs(cfg.certs, serve=True, role='node', command='netdp node')}",
                file=sys.stderr,
            )
        if len(cfgs) > 1:
            print(f"ok: {len(cfgs)} nodes in one process", file=sys.stderr)
        return EXIT_OK
    _setup_logging(a.log_level, "node" if len(cfgs) == 1 else "node-host")

    def ready(ports: dict[str, int]) -> None:
        if a.port_file:
            write_port_file(a.port_file, ports)

    return _run_daemon(lambda: run_host(cfgs, ready))


# -- jobs ---------------------------------------------------------------------------------------
def cmd_job(a: argparse.Namespace) -> int:
    import asyncio  # lazy: start-up cost

    from netdp_node.bootstrap_client import (  # lazy: start-up cost
        TRANSIENT,
        BootstrapClient,
        new_job_id,
    )
    from netdp_node.jobs import (  # lazy: start-up cost
        render_result,
        result_summary,
        wait_nodes,
        wait_result,
    )
    from netdp_node.security.pki import load_identity  # lazy: start-up cost

    async def main() -> int:
        if a.job_cmd == "submit":
            parts = a.participants.split(",") if a.participants else None
            if a.target_epsilon is not None:
                n = len(parts) if parts else a.wait_nodes
                if not n:
                    raise ConfigError(
                        "--target-epsilon needs the number of participants: give "
                        "--participants or --wait-nodes N"
                    )
                a.param = list(
                    _target(a.algorithm, dict(a.param or []), n, a.target_epsilon).items()
                )
            _check_job_params(a.algorithm, dict(a.param or []), len(parts) if parts else None)
        if a.job_cmd == "submit" and a.check:
            print(
                f"ok: would submit {a.algorithm} with {dict(a.param or [])} to "
                f"{a.bootstrap}; {_check_certs(Path(a.certs))}",
                file=sys.stderr,
            )
            return EXIT_OK
        c = BootstrapClient(a.bootstrap, load_identity(a.certs))
        try:
            if a.job_cmd == "submit":
                if a.wait_nodes:
                    await wait_nodes(c, a.wait_nodes, a.wait or 300.0)
                import grpc  # lazy: start-up cost

                # chosen once, before the first attempt: every retry of the submission names the
                # same job, so one whose reply was lost is not started twice (`new_job_id`)
                job_id = a.job_id or new_job_id()
                # named before the call: a submission interrupted or given up can be polled
                print(f"submitting job {job_id} to {a.bootstrap}", file=sys.stderr)
                try:
                    job = await c.submit(
                        a.algorithm,
                        dict(a.param or []),
                        participants=a.participants.split(",") if a.participants else None,
                        topology=a.topology or "",
                        seed=a.seed,
                        job_id=job_id,
                    )
                except grpc.aio.AioRpcError as e:
                    if e.code() in TRANSIENT:  # the bootstrap may have stored it all the same
                        raise NetdpError(
                            f"{e.code().name}: {e.details()}; job {job_id} may have been "
                            f"submitted: see `netdp job result --bootstrap {a.bootstrap} --certs "
                            f"{a.certs} {job_id}`, or submit again with --job-id {job_id} (the "
                            f"same spec under the same id is that job, never a second one)"
                        ) from None
                    if e.code() != grpc.StatusCode.INVALID_ARGUMENT:
                        raise
                    # a bad --param: a usage error (exit 2)
                    raise ConfigError(f"the bootstrap refused the job: {e.details()}") from None
                print(job.job_id)
                print(
                    f"submitted {job.job_id} ({job.algorithm}) to {len(job.participants)} "
                    f"participants: {', '.join(p.node_id for p in job.participants)}",
                    file=sys.stderr,
                )
                if not a.wait:
                    return EXIT_OK
                summary = result_summary(await wait_result(c, job.job_id, a.wait))
                print(render_result(summary), file=sys.stderr)
                if a.out:
                    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
                    Path(a.out).write_text(json.dumps(summary, indent=2))
                if summary["complete"] or summary["failed"]:
                    return EXIT_OK if summary["state"] == "done" else EXIT_FAIL
                return EXIT_TIMEOUT
            if a.job_cmd == "list":
                for _, job in await c.list_jobs():
                    print(f"{job.job_id}\t{job.algorithm}\t{len(job.participants)} participants")
                return EXIT_OK
            if a.job_cmd == "result":
                import grpc  # lazy: start-up cost

                try:
                    reply = await wait_result(c, a.job_id, a.wait)
                except grpc.aio.AioRpcError as e:  # a job id the bootstrap does not know: exit 2
                    if e.code() != grpc.StatusCode.NOT_FOUND:
                        raise
                    raise ConfigError(
                        f"no job {a.job_id!r} at the bootstrap {a.bootstrap} "
                        f"({e.details()}; `netdp job list` lists them)"
                    ) from None
                summary = result_summary(reply)
                if a.json:
                    print(json.dumps(summary, indent=2))
                else:
                    print(render_result(summary))
                if summary["failed"] or summary["complete"]:
                    return EXIT_OK if summary["state"] == "done" else EXIT_FAIL
                return EXIT_TIMEOUT if a.wait else EXIT_FAIL
            raise ConfigError("unknown job command")
        finally:
            await c.close()

    from netdp_node.waiting import interruptible  # lazy: start-up cost

    return asyncio.run(interruptible(main()))


def cmd_watch(a: argparse.Namespace) -> int:
    import asyncio  # lazy: start-up cost

    from netdp_node.bootstrap_client import BootstrapClient  # lazy: start-up cost
    from netdp_node.security.pki import load_identity  # lazy: start-up cost
    from netdp_node.watch import watch  # lazy: start-up cost

    ident = load_identity(a.certs)

    async def main() -> int:
        c = BootstrapClient(a.bootstrap, ident)
        try:
            import grpc  # lazy: start-up cost

            try:
                await c.get_job(a.job_id)
            except grpc.aio.AioRpcError as e:
                if e.code() == grpc.StatusCode.NOT_FOUND:
                    raise ConfigError(f"job {a.job_id}: the bootstrap does not know it") from None
                raise
            return await watch(c, ident, a.job_id, interval=a.interval, timeout=a.timeout)
        finally:
            await c.close()

    from netdp_node.waiting import interruptible  # lazy: start-up cost

    return asyncio.run(interruptible(main()))


def cmd_privacy(a: argparse.Namespace) -> int:
    from netdp_node.report import ledger_dirs, ledger_report, render_text  # lazy: start-up cost

    if a.delta is not None and not 0 < a.delta < 1:
        raise ConfigError(f"--delta must be in (0, 1), not {a.delta:g}")
    if a.budget_epsilon is None and a.budget_delta is not None:
        raise ConfigError("--budget-delta must be given with --budget-epsilon (the budget's ε)")
    budget = None
    if a.budget_epsilon is not None:
        bd = 1e-5 if a.budget_delta is None else a.budget_delta
        if not 0 < bd < 1:
            raise ConfigError(f"--budget-delta must be in (0, 1), not {bd:g}")
        budget = (a.budget_epsilon, bd)
    if a.plot:
        try:
            import matplotlib  # noqa: F401  # lazy: start-up cost
        except ImportError:
            print("install netdp[experiments] (matplotlib) for --plot", file=sys.stderr)
            return EXIT_USAGE
    dirs = ledger_dirs(a.ledger)
    reps = [ledger_report(d, delta_target=a.delta, job_id=a.job, budget=budget) for d in dirs]
    if a.job is not None and not any(r["jobs"] for r in reps):
        from netdp_node.ledger import Ledger  # lazy: start-up cost

        have: list[str] = []
        for d in dirs:
            led = Ledger.open_readonly(d)
            try:
                have += [j.job_id for j in led.jobs()]
            finally:
                led.close()
        shown = ", ".join(have[-10:]) + (f" and {len(have) - 10} more" if len(have) > 10 else "")
        where = (
            f"the ledger {dirs[0]} of {reps[0]['node']}"
            if len(reps) == 1
            else f"the {len(reps)} ledgers given"
        )
        raise ConfigError(
            f"--job {a.job}: no such job in {where} "
            f"({f'their jobs: {shown}' if have else 'no job at all'})"
        )
    if a.plot:
        if len({r["delta_target"] for r in reps}) > 1:
            # one δ for the whole picture: the nodes' budgets differ in δ, so take the smallest
            d = min(r["delta_target"] for r in reps)
            reps = [ledger_report(x, delta_target=d, job_id=a.job, budget=budget) for x in dirs]
        from netdp_node.report import plot_heatmap  # lazy: start-up cost

        out = plot_heatmap(reps, a.plot)
        print(
            f"wrote {a.plot}: ε of {len(out['nodes'])} nodes towards each other at "
            f"δ = {out['delta']:g}"
            + (f", {out['over_budget']} pair(s) over budget" if out["budgets"] else ""),
            file=sys.stderr,
        )
    if a.json:
        print(json.dumps(reps[0] if len(reps) == 1 else {"reports": reps}, indent=2))
    else:
        print("\n\n".join(render_text(r) for r in reps))
    return EXIT_OK


def cmd_compose(a: argparse.Namespace) -> int:
    from netdp_node.compose import ensure_data, generate  # lazy: start-up cost

    text = generate(
        nodes=a.nodes,
        topology=a.topology,
        rounds=a.rounds,
        faults=a.fault or [],
        image=a.image,
        data_dir=a.data_dir,
        algorithm=a.algorithm,
        per_host=a.per_host,
        build_context=a.build_context,
        file=None if a.output == "-" else a.output,
    )
    # Compose resolves a relative bind-mount path against the compose file's folder.
    base = Path.cwd() if a.output == "-" else Path(a.output).resolve().parent
    data = base / a.data_dir
    made = ensure_data(data, a.nodes)
    if made:
        print(
            f"wrote {len(made)} missing value file(s) in {data}: {', '.join(f.name for f in made)}",
            file=sys.stderr,
        )
    if a.output == "-":
        sys.stdout.write(text)
    else:
        Path(a.output).write_text(text)
        print(
            f"wrote {a.output}: docker compose -f {a.output} up -d --build && "
            f"docker compose -f {a.output} wait submit",
            file=sys.stderr,
        )
    return EXIT_OK


def cmd_probe(a: argparse.Namespace) -> int:
    """Health check: exit 0 if HOST:PORT accepts a TCP connection within --timeout, else 1. No
    TLS handshake (a daemon would log a refused one): what it says is that the port is served.
    With --count N: the N ports PORT..PORT+N-1 (a process hosting N nodes), all of them."""
    import socket  # lazy: start-up cost

    host, _, port = a.address.rpartition(":")
    first = int(port)
    if a.count < 1 or first + a.count - 1 > 65535:
        raise ConfigError(f"--count {a.count}: ports {first}..{first + a.count - 1} are not valid")
    down = []
    for p in range(first, first + a.count):
        try:
            with socket.create_connection((host.strip("[]"), p), timeout=a.timeout):
                pass
        except OSError as e:
            down.append(f"{host}:{p}: {e}")
    for line in down:
        print(f"netdp probe: {line}", file=sys.stderr)
    return EXIT_FAIL if down else EXIT_OK


def cmd_audit(a: argparse.Namespace) -> int:
    from netdp_node.audit import audit, audit_trace  # lazy: start-up cost

    if not a.ledger and not a.trace:
        raise ConfigError("give --ledger DIR (repeat) and/or --trace FILE")
    if a.trace:
        trep = audit_trace(a.trace, paper_compatible=a.paper_compatible)
        if a.json and not a.ledger:
            print(json.dumps(trep, indent=2))
            return EXIT_OK
        print(render_walk_audit(trep))
        if not a.ledger:
            return EXIT_OK
    rep = audit(a.ledger, delta=a.delta)
    if a.json:
        print(json.dumps(rep, indent=2))
    else:
        print(f"audit of {len(rep['nodes'])} ledgers ({rep['note']})")
        for c in rep["checks"]:
            if c.get("not_applicable"):
                print(f"  n/a  {c['name']} ({c['not_applicable']})")
                continue
            print(f"  {'ok  ' if c['ok'] else 'FAIL'} {c['name']}")
            for d in c["details"]:
                print(f"         {d}")
        for w in rep["walk_audits"]:
            if "skipped" in w:
                print(f"  walk audit of job {w['job_id']}: skipped ({w['skipped']})")
            else:
                print(f"  job {w['job_id']}: " + render_walk_audit(w).replace("\n", "\n  "))
    return EXIT_OK if rep["ok"] else EXIT_FAIL


def render_walk_audit(r: dict[str, Any]) -> str:
    return "\n".join(
        [
            f"walk-conditional audit of a {r['algorithm']} walk: n={r['n']}, T={r['T']} "
            f"({'paper-compatible' if r['paper_compatible'] else 'default: quirk (ii) fixed'}; "
            f"{r['note']})",
            f"  ε0={r['epsilon0']:.4g} per contribution, δ={r['delta']:g}",
            f"  network DP over all ordered pairs: mean ε={r['ndp_mean']:.4g}, min {r['ndp_min']:.4g}, "
            f"max {r['ndp_max']:.4g}",
            f"  local DP of the same contributions: mean ε={r['ldp_mean']:.4g}, min "
            f"{r['ldp_min']:.4g}, max {r['ldp_max']:.4g}",
        ]
    )


#: `netdp reproduce` runs the papers' experiments, a distribution of their own (netdp-experiments,
#: the folder experiments/ of a checkout) that a node does not install
EXPERIMENTS_MISSING = (
    "netdp reproduce: the papers' experiments are not installed; from a netdp checkout: "
    "pip install ./experiments"
)


def experiments_package() -> ModuleType | None:
    """The package of the papers' experiments (`netdp_experiments`), or None when it is not
    installed. An import error from inside the package (a module it needs) is not hidden."""
    try:
        import netdp_experiments  # lazy: start-up cost; optional, its own distribution
    except ModuleNotFoundError as e:
        if e.name != "netdp_experiments":
            raise
        return None
    return netdp_experiments


def cmd_reproduce(a: argparse.Namespace) -> int:
    pkg = experiments_package()
    if pkg is None:
        print(EXPERIMENTS_MISSING, file=sys.stderr)
        return EXIT_USAGE
    return int(pkg.cmd_reproduce(a))


def _reproduce_help(r: _Parser) -> None:
    """`netdp reproduce --help`: the experiments, when their package is installed."""
    pkg = experiments_package()
    if pkg is None:
        listing = f"  (not installed; {EXPERIMENTS_MISSING.partition('; ')[2]})"
    else:
        listing = "\n".join(f"  {k:<20} {d}" for k, (_, d) in pkg.EXPERIMENTS.items())
    r.description = f"{REPRODUCE_DESCRIPTION} Experiments:\n{listing}"


def cmd_plan(a: argparse.Namespace) -> int:
    from netdp_node.plan import Target, plan, plot, render  # lazy: start-up cost

    if a.plot:
        try:
            import matplotlib  # noqa: F401  # lazy: start-up cost
        except ImportError:
            print("install netdp[experiments] (matplotlib) for --plot", file=sys.stderr)
            return EXIT_USAGE
    res = plan(
        Target(
            n=a.nodes,
            epsilon=a.epsilon,
            delta=a.delta,
            topology=a.topology,
            threat=a.threat,
            clip=a.clip,
            dim=a.dim,
            rounds=a.rounds,
            steps=a.steps,
        )
    )
    if a.plot:
        out = plot(res, a.plot)
        print(f"wrote {a.plot}: predicted std of {len(out['bars'])} algorithm(s)", file=sys.stderr)
    print(json.dumps(res, indent=2) if a.json else render(res))
    return EXIT_OK


def _target(algorithm: str, params: dict[str, Any], n: int, target: float) -> dict[str, Any]:
    """`--target-epsilon`: the planner sets the job's noise parameters (netdp_node.plan); the
    choice is printed on stderr before anything starts."""
    from netdp_node.plan import apply_target  # lazy: start-up cost

    try:
        out, line = apply_target(algorithm, params, n, target)
    except ConfigError as e:  # it names the field first: say which flag gave it
        text = str(e)
        field = text.split(" ", 1)[0]
        flag = "--param " if field in params else "--target-epsilon: " if field == "target" else ""
        raise ConfigError(flag + text) from None
    print(line, file=sys.stderr)
    return out


def cmd_simulate(a: argparse.Namespace) -> int:
    from netdp_node.simulate import run_simulation  # lazy: start-up cost

    return run_simulation(a, exits_after=_COMMAND_LINE)


def cmd_demo(a: argparse.Namespace) -> int:
    from netdp_node.demo import run_demo  # lazy: start-up cost

    return run_demo(a)


# -- parser -------------------------------------------------------------------------------------
#: `netdp demo --timeout` default: seconds a job may go without progress before the demo gives up
#: (`netdp_node.demo.JobWatch`).
DEMO_STALL_TIMEOUT = 120.0


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="netdp", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--version", action="version", version=f"netdp {__version__}")
    sub = p.add_subparsers(dest="cmd", required=True, metavar="COMMAND")

    d = sub.add_parser(
        "demo",
        help="run a private job on loopback processes and report",
        description=DEMO_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    d.fill_help = _demo_help  # the algorithms, from the registry
    d.add_argument("--algorithm", default="ring-sum", help="the algorithms below")
    d.add_argument("--k", type=int, default=3, help="inca: out-neighbours per iteration (3)")
    d.add_argument(
        "--scheme",
        default="inc",
        choices=("inc", "early"),
        help="inca: incremental (default) or early injection",
    )
    d.add_argument(
        "--threat",
        default="collude:0.3",
        help="inca: threat model of the calibration and the reports, eavesdrop:P or "
        "collude:RHO (default collude:0.3)",
    )
    d.add_argument(
        "--round-s",
        type=_positive,
        default=2.0,
        help="inca: deadline of one iteration in seconds (default 2)",
    )
    d.add_argument(
        "--leave",
        type=float,
        default=0.0,
        metavar="FRAC",
        help="inca: this fraction of the nodes leaves for good at a random iteration "
        "(--fault-leave-at-step)",
    )
    d.add_argument(
        "--miss",
        type=float,
        default=0.0,
        metavar="FRAC",
        help="inca: this fraction of the nodes drops out for short periods "
        "(--fault-offline windows) and misses some iterations",
    )
    d.add_argument(
        "--nodes",
        type=int,
        default=None,
        help="number of node daemons (default 8, walk-sum 128: a size where its gain over local "
        "DP shows; 3..2000, or 3..64 with --workers 0)",
    )
    d.add_argument(
        "--workers",
        type=int,
        default=None,
        metavar="W",
        help="pack the nodes into W host processes, each running its share of the "
        "node daemons (own certificate, port, ledger, RNG each) on one event loop "
        "(default: one per core); 0: one process per node. Nodes given fault flags "
        "(inca --leave/--miss) get a process each. A crash of a host process takes "
        "down the nodes it hosts",
    )
    d.add_argument(
        "--rounds", type=int, default=10, help="ring-sum: rounds K of the token (default 10)"
    )
    d.add_argument(
        "--steps",
        type=int,
        default=0,
        help="walks: steps T of the token (default 10 "
        "per node, 25 for walk-sgd); inca: iterations T (default 10); muffliato: "
        "gossip rounds T (default from the public spectral gap); muffliato-gd: gradient "
        "steps (default 10)",
    )
    d.add_argument(
        "--epsilon",
        type=float,
        default=None,
        help="ring-sum: per-window ε of the Gaussian noise, > 0 (default 0.5); "
        "walks: the ε each node may lose towards any other (default 1, 10 for walk-sgd); "
        "muffliato: the mean loss ε of eq. (7) (default 1, 10 for muffliato-gd)",
    )
    d.add_argument(
        "--target-epsilon",
        type=float,
        default=None,
        metavar="E",
        help="instead of --epsilon: the planner of `netdp plan` sets the job's noise so that "
        "each node loses at most E towards every peer (at the job's δ); printed before the "
        "job starts",
    )
    d.add_argument("--bins", type=int, default=4, help="walk-histogram: number of categories")
    d.add_argument(
        "--topology",
        default="",
        help="rw-sgd: the job's graph (a kind the bootstrap "
        "serves: exponential (default), hypercube, grid, erdos-renyi, ring, complete, "
        "...); the other algorithms use their own",
    )
    d.add_argument(
        "--points", type=int, default=8, help="walk-sgd, rw-sgd, muffliato-gd: data points per node"
    )
    d.add_argument(
        "--data-dir",
        help="walk-sgd: a folder holding cal_housing.data, the California housing file "
        "(default $NETDP_DATA_DIR); synthetic data if absent",
    )
    d.add_argument("--delta", type=float, default=1e-6, help="per-window δ (default 1e-6)")
    d.add_argument(
        "--clip",
        type=_positive,
        default=1.0,
        help="values are clipped to this absolute bound (default 1)",
    )
    d.add_argument(
        "--data", help="a file with one value per node (text or .npy), instead of synthetic values"
    )
    d.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object on stdout: the result and, per node, its privacy "
        "towards its worst peer and a summary over its peers (worst_peer, peers_summary; "
        "about 1 MB at 1,000 nodes); every pair only with --json-peers or --peers-out",
    )
    d.add_argument(
        "--json-peers",
        action="store_true",
        help="with --json: also list, in each node's row, its loss towards every peer "
        "(peers; incoming for gossip): n(n-1) entries, about 180 MB at 1,000 nodes (for "
        "that, prefer --peers-out FILE.npz)",
    )
    d.add_argument(
        "--peers-out",
        metavar="FILE",
        help="write every node's loss towards every peer to FILE: .npz (compact: n x n "
        "matrices epsilon, delta, method (an index into methods), rows nodes, for "
        "np.load) or .csv (one line per pair: node, peer, direction, epsilon, delta, "
        "method)",
    )
    d.add_argument(
        "--workdir",
        help="keep certificates, ledgers and logs here (default: a "
        "temporary directory, removed at the end)",
    )
    d.add_argument(
        "--timeout",
        type=_positive,
        default=DEMO_STALL_TIMEOUT,
        help="give up (exit 5) when the job made no progress for this many seconds: no "
        "protocol step at any node and no node reporting (default "
        f"{DEMO_STALL_TIMEOUT:g}). It bounds a stall, not the job's length: a large job runs "
        "as long as it keeps moving. Start-up is bounded the same way (the processes "
        "stop making progress for this long)",
    )
    d.add_argument(
        "--seed",
        type=int,
        default=None,
        help="seed the synthetic data and the nodes' "
        "private RNGs (reproducible tests only: NOT PRIVATE, and the output says so)",
    )
    d.set_defaults(fn=cmd_demo)

    c = sub.add_parser(
        "compose",
        help="generate a docker-compose.yml for N nodes",
        description="Write a docker compose file: a one-shot certificate service, "
        "the bootstrap, N nodes (each with its own certificate and ledger volume, "
        "fault flags as NETDP_FAULT_* variables), and a one-shot job submitter "
        "writing the result to the `results` volume.",
    )
    c.add_argument("--nodes", type=int, default=8, help="number of nodes (default 8)")
    c.add_argument(
        "--per-host",
        type=int,
        default=0,
        metavar="M",
        help="run the nodes M to a service: host-1, host-2, ... each one `netdp node "
        "--identities` process with only its own nodes' keys, ports 7601..7601+M-1 and each "
        "node's own ledger volume (default 0: one service per node, at most 256)",
    )
    c.add_argument("--topology", default="ring", help="topology of the job (default ring)")
    c.add_argument(
        "--rounds",
        type=int,
        default=10,
        help="rounds of the ring sum (default 10; "
        "a walk-sum takes rounds × nodes steps; muffliato: gossip rounds T; inca: "
        "iterations T)",
    )
    c.add_argument(
        "--algorithm",
        default="ring-sum",
        help="ring-sum (default), ring-sum-r, walk-sum (use --topology complete), "
        "muffliato (on --topology) or inca (k random out-neighbours per iteration)",
    )
    c.add_argument(
        "--fault",
        action="append",
        metavar="NODE:KEY=VALUE[,KEY=VALUE]",
        help="fault flags of one node, e.g. node-3:drop=0.2,delay_ms=50 or "
        "node-5:crash_at_step=4 (keys: crash_at_step, crash_after, offline, "
        "leave_at_step, drop, delay_ms, jitter_ms, partition, seed)",
    )
    c.add_argument("--image", default="netdp:latest")
    c.add_argument(
        "--data-dir",
        default="./deploy/compose/data",
        help="host folder with NODE.txt value files, mounted at /data",
    )
    c.add_argument(
        "--build-context",
        default=".",
        metavar="DIR",
        help="folder with the Dockerfile, relative to the compose file's folder (default .; "
        "../.. for a file in deploy/compose/)",
    )
    c.add_argument("-o", "--output", default="-", help="file to write (default: stdout)")
    c.set_defaults(fn=cmd_compose)

    pb = sub.add_parser(
        "probe",
        help="health check: is HOST:PORT served (TCP connect)",
        description="Exit 0 if HOST:PORT accepts a TCP connection within "
        "--timeout seconds, 1 otherwise (no TLS handshake). The health check of "
        "the docker compose file's bootstrap and nodes.",
    )
    pb.add_argument("address", type=_addr, help="HOST:PORT")
    pb.add_argument("--timeout", type=_positive, default=3.0, help="seconds (default 3)")
    pb.add_argument(
        "--count",
        type=int,
        default=1,
        metavar="N",
        help="probe the N ports PORT..PORT+N-1, all served or exit 1 (a `netdp node` "
        "hosting N nodes serves them; default 1)",
    )
    pb.set_defaults(fn=cmd_probe)

    k = sub.add_parser("pki", help="certificates: init a CA, issue, revoke")
    ksub = k.add_subparsers(dest="pki_cmd", required=True, metavar="PKI_COMMAND")
    ki = ksub.add_parser("init", help="create a CA (and an operator certificate) in DIR")
    ki.add_argument("dir")
    ki.add_argument("--operator", default="operator", help="id of the operator certificate")
    ki.add_argument("--force", action="store_true", help="overwrite an existing CA")
    kis = ksub.add_parser("issue", help="issue a certificate; writes DIR/ID/{ca,cert,key}.pem")
    kis.add_argument("dir")
    kis.add_argument("node_id")
    kis.add_argument(
        "--host",
        action="append",
        default=[],
        help="a DNS name or IP the holder is reached at (repeat), for TLS clients "
        "other than netdp (netdp callers verify the identity name "
        "ID.ROLE.netdp.invalid every certificate carries, not the address); default "
        "127.0.0.1 and localhost (none for an operator)",
    )
    kis.add_argument("--role", default="node", choices=["node", "bootstrap", "operator"])
    kis.add_argument("--days", type=int, default=365)
    kis.add_argument("--force", action="store_true", help="re-issue an existing id")
    kss = ksub.add_parser(
        "setup",
        help="idempotent one-shot: CA, operator, bootstrap and node "
        "certificates (for docker compose)",
    )
    kss.add_argument("dir")
    kss.add_argument("--nodes", type=int, required=True, help="issue NODE_PREFIX1..NODE_PREFIXN")
    kss.add_argument("--node-prefix", default="node-")
    kss.add_argument(
        "--node-host-suffix",
        default="",
        help="each node's certificate names host ID+SUFFIX (default: its id)",
    )
    kss.add_argument(
        "--bootstrap-host",
        action="append",
        default=[],
        help="name/IP of the bootstrap (repeat); default: bootstrap",
    )
    kss.add_argument(
        "--per-host",
        type=int,
        default=0,
        metavar="M",
        help="also lay the nodes out M per host process: DIR/hosts/host-K/NODE_ID/ holds a "
        "copy of the identity folders of host-K's nodes and nothing else (what `netdp node "
        "--identities` of that host mounts); default 0: no host folders",
    )
    kss.add_argument("--check", action="store_true", help="validate the flags and exit")
    k8 = ksub.add_parser(
        "k8s-secrets",
        help="the per-host Secrets of deploy/k8s/hosts.yaml (issues missing node certificates)",
        description="For pods PREFIX-0 .. PREFIX-(HOSTS-1) of the StatefulSet in "
        "deploy/k8s/hosts.yaml, each running M nodes PREFIX-I-0 .. PREFIX-I-(M-1): issue the "
        "node certificates missing from the CA folder DIR (existing ones are kept), and write "
        "one Secret PREFIX-I-identities per pod (keys NODE_ID.ca.pem, NODE_ID.cert.pem, "
        "NODE_ID.key.pem) as YAML for `kubectl apply -f`. Run again with more --hosts to scale.",
    )
    k8.add_argument("dir", help="CA folder (`netdp pki init DIR`)")
    k8.add_argument("--hosts", type=int, required=True, help="number of pods (replicas)")
    k8.add_argument(
        "--per-host", type=int, required=True, metavar="M", help="nodes per pod (M in hosts.yaml)"
    )
    k8.add_argument("--prefix", default="netdp-host", help="StatefulSet name (default netdp-host)")
    k8.add_argument("--namespace", default="netdp")
    k8.add_argument("--cluster-domain", default="cluster.local")
    k8.add_argument(
        "--data",
        metavar="DIR",
        help="also write Secrets PREFIX-I-data from DIR/NODE_ID.txt (or .npy), one per node",
    )
    k8.add_argument(
        "-o", "--output", default="-", help="file to write, mode 0600 (default: stdout)"
    )
    kr = ksub.add_parser("revoke", help="revoke every certificate of an id and write crl.pem")
    kr.add_argument("dir")
    kr.add_argument("node_id")
    kr.add_argument("--bootstrap", type=_addr, help="also publish the new list to this bootstrap")
    kr.add_argument("--certs", help="operator identity folder used to publish")
    k.set_defaults(fn=cmd_pki)

    b = sub.add_parser("bootstrap", help="run the bootstrap service")
    b.add_argument(
        "--certs", required=True, help="identity folder of a --role bootstrap certificate"
    )
    b.add_argument("--state", required=True, help="directory of its durable store")
    b.add_argument("--listen", type=_addr, default="127.0.0.1:7600", help="HOST:PORT (port 0: any)")
    b.add_argument(
        "--crl", help="revocation list file to load and watch (netdp pki revoke writes it)"
    )
    b.add_argument("--port-file", help="write the bound port here once listening")
    b.add_argument("--check", action="store_true", help="validate the configuration and exit")
    b.add_argument("--shutdown-grace", type=_nonneg, default=2.0, metavar="S", help=GRACE_HELP)
    b.add_argument("--log-level", default="info", choices=LOG_LEVELS)
    b.set_defaults(fn=cmd_bootstrap)

    n = sub.add_parser(
        "node",
        help="run a node daemon (or several in one process)",
        description="Run a node daemon: serve peers over mTLS, register with the bootstrap, run "
        "its jobs. One process can host several nodes (--certs given several times, or "
        "--identities): each is a full node to its peers and to the bootstrap, with its own "
        "certificate, mTLS server and port, durable ledger, private RNG, budget and fault "
        "injector; they share the process, its event loop and one signal handler (SIGTERM stops "
        "them all cleanly). A crash of the process takes down every node it hosts; each keeps "
        "its own durable ledger, so when the process restarts none has forgotten what it "
        "acknowledged or spent (a token walk resumes from the ledger; a job that cannot ends "
        "failed at that node, with the reason). With several "
        "nodes, per-node values come from the flags: --ledger DIR gives DIR/NODE_ID, --data DIR "
        "gives DIR/NODE_ID.txt (or .npy), --listen/--advertise HOST:P give port P+i to the i-th "
        "node (i from 0; port 0: any), --seed S and --fault-seed F give S+i and F+i; the other "
        "flags (budget, faults, timeouts) apply to every hosted node. --port-file then receives "
        "a JSON object {node id: port} once all of them registered.",
    )
    n.add_argument(
        "--certs",
        action="append",
        metavar="DIR",
        help="identity folder (ca.pem, cert.pem, key.pem); repeat to host several "
        "nodes in this process",
    )
    n.add_argument(
        "--identities",
        action="append",
        metavar="DIR",
        help="host every node identity folder under DIR (a CA folder as `netdp pki` "
        "writes it: DIR/NODE_ID/{ca,cert,key}.pem; operator and bootstrap folders are "
        "skipped); repeatable",
    )
    n.add_argument("--bootstrap", required=True, type=_addr, help="bootstrap HOST:PORT")
    n.add_argument(
        "--ledger",
        required=True,
        help="ledger directory (created if missing); with several nodes, the folder "
        "of their ledgers (DIR/NODE_ID)",
    )
    n.add_argument(
        "--listen",
        type=_addr,
        default="127.0.0.1:0",
        help="HOST:PORT to serve peers on (several nodes: ports PORT, PORT+1, ...)",
    )
    n.add_argument("--advertise", type=_addr, help="HOST:PORT peers should dial (default: listen)")
    n.add_argument(
        "--data",
        help="this node's private values (text or .npy); with several "
        "nodes, a folder of NODE_ID.txt or NODE_ID.npy files",
    )
    n.add_argument(
        "--budget-epsilon",
        type=_positive,
        help="privacy budget ε across all jobs, towards every other node",
    )
    n.add_argument("--budget-delta", type=float, default=1e-5, help="budget δ (default 1e-5)")
    n.add_argument(
        "--poll-interval",
        type=_positive,
        default=0.5,
        help="jobs come by long poll (the bootstrap holds the call until one is "
        "submitted); this is the pause before asking again when it answered at "
        "once with nothing new, and the first retry delay (default 0.5)",
    )
    n.add_argument(
        "--long-poll",
        type=_long_poll,
        default=25.0,
        metavar="S",
        help="how long the bootstrap may hold this process's one watch for news (jobs, "
        "revocations) when there is none, at most 30 (25); every hosted node asks for its jobs "
        "only when there is news, so an idle process costs the bootstrap one call per S seconds. "
        "Tests and benchmarks shorten it",
    )
    n.add_argument("--crl", help="a revocation list file to enforce from the start")
    n.add_argument(
        "--seed",
        type=int,
        help="seed the private RNG (tests only: NOT PRIVATE; the "
        "ledger, privacy reports and job results say so)",
    )
    n.add_argument(
        "--peer-timeout",
        type=_positive,
        default=60.0,
        help="give up on a peer that does not acknowledge for this many seconds (60)",
    )
    n.add_argument(
        "--job-deadline",
        type=_nonneg,
        default=600.0,
        help="fail a job not finished this many seconds after joining (600; 0: never)",
    )
    n.add_argument(
        "--bootstrap-timeout",
        type=_nonneg,
        default=120.0,
        metavar="S",
        help="at start, give up (exit 5) when the bootstrap could not be reached to "
        "register for S seconds; every retry is logged (120; 0: never). Once "
        "registered, the node outlives a bootstrap outage: jobs already fetched keep "
        "running and every retry is logged",
    )
    n.add_argument(
        "--port-file",
        help="write the bound port here once registered (several "
        "nodes: a JSON object {node id: port} once all registered)",
    )
    n.add_argument("--shutdown-grace", type=_nonneg, default=2.0, metavar="S", help=GRACE_HELP)
    n.add_argument(
        "--ledger-threads",
        type=_count,
        default=0,
        metavar="N",
        help="write the ledgers' group commits (their fsyncs) in a pool of N threads shared "
        "by the nodes of this process (default 0: on the event loop, which measured faster "
        "for one node and for hosts of hundreds); a step is acknowledged only after its "
        "commit either way",
    )
    n.add_argument("--check", action="store_true", help="validate the configuration and exit")
    f = n.add_argument_group(
        "fault injection",
        "Make this node misbehave as a real machine would, reproducibly. Each "
        "fault is recorded in the ledger (event 'fault') and the log; mTLS, the ledger and the "
        "accountant are never bypassed. Every flag also reads an environment variable "
        "(NETDP_FAULT_CRASH_AT_STEP, _CRASH_AFTER, _OFFLINE, _LEAVE_AT_STEP, _DROP, _DELAY_MS, "
        "_JITTER_MS, _PARTITION, _SEED), for docker compose. In a process hosting several nodes "
        "the flags apply to each of them (--fault-seed F gives the i-th F+i), and a crash fault "
        "ends the whole process: every node it hosts.",
    )
    f.add_argument(
        "--fault-crash-at-step",
        type=int,
        metavar="N",
        help="exit with code 70 when about to take protocol step N of a job",
    )
    f.add_argument(
        "--fault-crash-after",
        type=float,
        metavar="S",
        help="exit with code 70 S seconds after start",
    )
    f.add_argument(
        "--fault-offline",
        action="append",
        metavar="START:DURATION",
        help="refuse all traffic from START to START+DURATION seconds after start, then "
        "come back (temporary dropout; repeatable)",
    )
    f.add_argument(
        "--fault-leave-at-step",
        type=int,
        metavar="N",
        help="from protocol step N of a job on, refuse all traffic for good (permanent dropout)",
    )
    f.add_argument(
        "--fault-drop",
        type=float,
        metavar="P",
        help="drop each outgoing message with probability P (it is retransmitted after "
        "a timeout, as over a lossy link)",
    )
    f.add_argument(
        "--fault-delay-ms",
        type=float,
        metavar="D",
        help="delay each outgoing message by D milliseconds",
    )
    f.add_argument("--fault-jitter-ms", type=float, metavar="J", help="... plus or minus J ms")
    f.add_argument(
        "--fault-partition",
        metavar="PEERS",
        help="comma-separated peer ids: refuse traffic to and from them",
    )
    f.add_argument("--fault-seed", type=int, metavar="S", help="seed of the random faults (0)")
    n.add_argument("--log-level", default="info", choices=LOG_LEVELS)
    n.set_defaults(fn=cmd_node)

    j = sub.add_parser("job", help="submit jobs and read results (operator certificate)")
    jsub = j.add_subparsers(dest="job_cmd", required=True, metavar="JOB_COMMAND")
    for name, hlp in (
        ("submit", "submit a job"),
        ("result", "show a job's released result"),
        ("list", "list jobs"),
    ):
        jp = jsub.add_parser(name, help=hlp)
        jp.add_argument("--bootstrap", required=True, type=_addr)
        jp.add_argument("--certs", required=True, help="operator identity folder")
        if name == "submit":
            jp.add_argument(
                "--algorithm",
                default="ring-sum",
                help="ring-sum (default), ring-sum-r, ring-histogram, walk-sum, "
                "walk-histogram, walk-sgd or rw-sgd",
            )
            jp.add_argument(
                "--param",
                action="append",
                type=_param,
                metavar="KEY=VALUE",
                help="algorithm parameter (repeat), e.g. rounds=10 epsilon=0.5",
            )
            jp.add_argument("--participants", help="comma-separated ids (default: all registered)")
            jp.add_argument(
                "--target-epsilon",
                type=_positive,
                metavar="E",
                help="set the job's noise so that each node loses at most E towards every "
                "peer (at the job's δ), with the planner of `netdp plan`; needs "
                "--participants or --wait-nodes N (the number of participants)",
            )
            jp.add_argument("--topology", help="topology kind (default: the algorithm's)")
            jp.add_argument("--seed", type=int, default=0, help="public seed (default: random)")
            jp.add_argument(
                "--job-id",
                type=_job_id,
                help="choose the job id (default: a fresh random one, job- and 16 hex "
                "digits, chosen before the first attempt; it is printed on stdout). It is "
                "an idempotency key: every retry of this submission (a lost reply) and "
                "submitting the same spec again under the same id re-attach to that job "
                "(nothing is run or spent twice); another spec under an existing id is "
                "refused (ALREADY_EXISTS)",
            )
            jp.add_argument(
                "--wait-nodes",
                type=int,
                default=0,
                metavar="N",
                help="first wait until N nodes are registered",
            )
            jp.add_argument(
                "--wait",
                type=float,
                default=0.0,
                metavar="S",
                help="then wait up to S seconds for the result and print it",
            )
            jp.add_argument("--out", help="with --wait: also write the result as JSON to this file")
            jp.add_argument(
                "--check",
                action="store_true",
                help="validate the flags and exit without contacting the bootstrap",
            )
        if name == "result":
            jp.add_argument("job_id")
            jp.add_argument(
                "--wait",
                type=float,
                default=0.0,
                help="wait up to this many seconds for every participant",
            )
            jp.add_argument("--json", action="store_true")
    j.set_defaults(fn=cmd_job)

    w = sub.add_parser(
        "watch",
        help="follow a running job live (operator certificate)",
        description="A live view of a job: per node its state, protocol steps done "
        "of expected, whether it contributes, failures and dropouts, from the "
        "bootstrap (GetResult) and the nodes' Status RPC. Refreshes in place on a "
        "terminal, prints a line per change otherwise. Exits 0 when the job is "
        "done, 1 when it failed, 5 after --timeout, 130 on Ctrl-C.",
    )
    w.add_argument("job_id")
    w.add_argument("--bootstrap", required=True, type=_addr)
    w.add_argument("--certs", required=True, help="operator identity folder")
    w.add_argument(
        "--interval", type=_positive, default=1.0, help="seconds between two looks (default 1)"
    )
    w.add_argument(
        "--timeout",
        type=_positive,
        default=3600.0,
        help="give up after this many seconds (default 3600)",
    )
    w.set_defaults(fn=cmd_watch)

    au = sub.add_parser(
        "audit", help="invariants over the merged ledgers of several nodes (uses global knowledge)"
    )
    au.add_argument("--ledger", action="append", default=[], help="a ledger directory (repeat)")
    au.add_argument(
        "--trace",
        help="a walk trace written by `netdp simulate --trace`: run the "
        "walk-conditional audit of Cyffers & Bellet, AISTATS 2022, §5.1 / Fig. 1(b) "
        "over every ordered pair",
    )
    au.add_argument(
        "--paper-compatible",
        action="store_true",
        help="with --trace: reproduce the authors' Fig. 1(b) code exactly, quirks included "
        "(see netdp_node.privacy.walk_audit)",
    )
    au.add_argument("--delta", type=float, default=1e-5)
    au.add_argument("--json", action="store_true")
    au.set_defaults(fn=cmd_audit)

    si = sub.add_parser(
        "simulate",
        help="run a job's engines for many nodes in one process (virtual time)",
        description="Run a job over up to 100,000 simulated nodes in one process, each the "
        "daemon's own runtime (receipt checks, ledger staging, effects after durability, "
        "refusals, fault flags) with its own ledger (in memory, or SQLite with --ledgers), over "
        "in-memory delivery on a virtual clock, one seeded generator per node. Prints the "
        "result, the privacy every node's accountant reports from its simulated ledger (or, "
        "with --audit, the walk-conditional audit of every ordered pair).",
    )
    si.add_argument(
        "--algorithm",
        default="walk-sum",
        help="any algorithm of the registry: walk-sum, walk-histogram, walk-sgd, "
        "rw-sgd, ring-sum, ring-sum-r, ring-histogram, inca, muffliato, "
        "muffliato-random or muffliato-gd (default walk-sum)",
    )
    si.add_argument("--nodes", type=int, default=256, help="number of nodes (default 256)")
    si.add_argument(
        "--param",
        action="append",
        type=_param,
        metavar="KEY=VALUE",
        help="algorithm parameter (repeat), e.g. T=20000 epsilon=1",
    )
    si.add_argument("--seed", type=int, default=0, help="seed of data, noise and walk (default 0)")
    si.add_argument("--points", type=int, default=8, help="data points per node (walk-sgd)")
    si.add_argument(
        "--data-dir",
        help="walk-sgd: a folder holding cal_housing.data, the California housing file "
        "(default $NETDP_DATA_DIR); synthetic data if absent",
    )
    si.add_argument(
        "--record",
        choices=("full", "walk"),
        default=None,
        help="keep every node's view (full, default for n <= 512) or only the walk",
    )
    si.add_argument("--trace", help="write the walk (JSON lines) for `netdp audit --trace`")
    si.add_argument(
        "--ledgers",
        help="run every node on a real SQLite ledger under this "
        "directory (default: ledgers in memory)",
    )
    si.add_argument(
        "--topology", help="rw-sgd: the graph (a bootstrap topology kind; default exponential)"
    )
    si.add_argument(
        "--fault",
        action="append",
        metavar="NODE:FLAGS",
        help="the daemon's --fault-* flags for one simulated node (repeat), e.g. "
        "'node-3:--fault-offline 0.5:2 --fault-drop 0.1' (times in virtual seconds)",
    )
    si.add_argument(
        "--audit",
        action="store_true",
        help="run the walk-conditional audit of every ordered pair (global knowledge)",
    )
    si.add_argument(
        "--leave",
        type=float,
        default=0.0,
        metavar="FRAC",
        help="this fraction of the nodes leaves for good (--fault-leave-at-step; "
        "inca: at a random step of the mixing phase)",
    )
    si.add_argument(
        "--miss",
        type=float,
        default=0.0,
        metavar="FRAC",
        help="inca: this fraction of the nodes goes offline for two iterations "
        "every six (--fault-offline windows)",
    )
    si.add_argument("--json", action="store_true", help="one JSON object on stdout")
    si.add_argument("--quiet", action="store_true", help="no progress bar")
    si.set_defaults(fn=cmd_simulate)

    re_ = sub.add_parser(
        "reproduce",
        help="run one of the papers' experiments (JSON + PNG)",
        description=REPRODUCE_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    re_.fill_help = _reproduce_help  # the experiments, from their package
    re_.add_argument("name", help="experiment name, or `list`")
    re_.add_argument(
        "--out",
        default="experiments/results",
        help="output directory (default experiments/results)",
    )
    re_.add_argument(
        "--runs",
        type=int,
        default=0,
        help="runs per point (default: the experiment's; the papers used more)",
    )
    re_.add_argument("--quick", action="store_true", help="a small version, for a smoke test")
    impl = re_.add_mutually_exclusive_group()
    impl.add_argument(
        "--engine",
        dest="implementation",
        action="store_const",
        const="engine",
        help="muffliato-fig1a, muffliato-fig6, random-walks-fig2, random-walks-table1: run on "
        "netdp's engines through `netdp simulate` (a smaller configuration than the paper's, "
        "stated in the JSON and the figure), with the vectorised computation on the same "
        "schedule or walks as a cross-check; writes NAME-engine.json and NAME-engine.png",
    )
    impl.add_argument(
        "--vectorised",
        dest="implementation",
        action="store_const",
        const="vectorised",
        help="the same experiments on the vectorised NumPy re-implementation (their default: "
        "55-1000x faster than the engines, so at the paper's size)",
    )
    re_.add_argument(
        "--data-dir",
        help="a folder holding cal_housing.data, the California housing file "
        "(default $NETDP_DATA_DIR)",
    )
    re_.set_defaults(fn=cmd_reproduce)

    pl = sub.add_parser(
        "plan",
        help="which algorithm and noise for a per-peer (ε, δ) target",
        description="For N participants, a topology, a threat model and a per-peer target "
        "(ε, δ), evaluate every algorithm that applies (calibrated σ, steps, caps, predicted "
        "std of the released estimate, messages and time per node) beside local DP and central "
        "DP at the same guarantee, with the calibration the bootstrap runs. Algorithms that do "
        "not apply are listed with the reason.",
    )
    pl.add_argument("--nodes", type=int, required=True, help="number of participants (3..100000)")
    pl.add_argument(
        "--topology",
        default=None,
        help="the graph the nodes can use (ring, complete, hypercube, exponential, ...; "
        "default: each algorithm its own)",
    )
    pl.add_argument(
        "--threat",
        default="single",
        help="who the guarantee must hold against: single (each single node, default), "
        "collude:C (up to C colluding nodes) or any (anyone, colluders included)",
    )
    pl.add_argument("--epsilon", type=float, required=True, help="per-peer target ε")
    pl.add_argument("--delta", type=float, required=True, help="per-peer target δ")
    pl.add_argument("--clip", type=float, default=1.0, help="values clipped to this L2 norm (1)")
    pl.add_argument("--dim", type=int, default=1, help="values per node (1)")
    pl.add_argument("--rounds", type=int, default=10, help="ring: rounds K (10)")
    pl.add_argument("--steps", type=int, default=0, help="walks: steps T (default 10·n)")
    pl.add_argument("--json", action="store_true", help="print one JSON object")
    pl.add_argument(
        "--plot",
        metavar="FILE",
        help="also draw the predicted std per algorithm vs the baselines as a PNG "
        "(needs matplotlib: netdp[experiments])",
    )
    pl.set_defaults(fn=cmd_plan)

    pr = sub.add_parser("privacy", help="privacy reports")
    prs = pr.add_subparsers(dest="privacy_cmd", required=True, metavar="PRIVACY_COMMAND")
    rp = prs.add_parser("report", help="the loss a node has incurred towards every other node")
    rp.add_argument(
        "--ledger",
        required=True,
        action="append",
        help="a node's ledger directory, or a folder of them (e.g. `netdp simulate "
        "--ledgers DIR`); repeat for several nodes",
    )
    rp.add_argument("--job", help="only this job")
    rp.add_argument(
        "--delta",
        type=float,
        default=None,
        help="the one δ at which every ε is stated, per job, baselines and total "
        "(default: the δ of the node's budget, else 1e-5)",
    )
    rp.add_argument(
        "--budget-epsilon",
        type=_positive,
        help="compare with this budget ε (default: the one the node recorded in its "
        "ledger at its last start, netdp node --budget-epsilon)",
    )
    rp.add_argument("--budget-delta", type=float, help="... at this δ (default 1e-5)")
    rp.add_argument(
        "--plot",
        metavar="FILE",
        help="also draw the node × peer heatmap of ε as a PNG (needs matplotlib)",
    )
    rp.add_argument("--json", action="store_true")
    pr.set_defaults(fn=cmd_privacy)
    return p


#: `main` runs the process's own command line (no `argv` given): the process exits once the
#: command returns, so a command may leave what it built to the process's end
#: (`cmd_simulate`). False for a caller that passes `argv` (tests, other programs).
_COMMAND_LINE = False


def main(argv: list[str] | None = None) -> int:
    global _COMMAND_LINE
    _COMMAND_LINE = argv is None
    parser = build_parser()
    a = parser.parse_args(argv)
    try:
        return int(a.fn(a))
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except TimeoutError as e:
        print(f"netdp: timeout: {e}", file=sys.stderr)
        return EXIT_TIMEOUT
    except ConfigError as e:
        print(f"netdp: configuration error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except SecurityError as e:
        print(f"netdp: security error: {e}", file=sys.stderr)
        return EXIT_SECURITY
    except LedgerError as e:
        print(f"netdp: ledger error: {e}", file=sys.stderr)
        return EXIT_LEDGER
    except NetdpError as e:
        print(f"netdp: {e}", file=sys.stderr)
        return EXIT_FAIL
    except Exception as e:
        import grpc  # lazy: start-up cost

        if isinstance(e, grpc.aio.AioRpcError):
            print(f"netdp: {e.code().name}: {e.details()}", file=sys.stderr)
            return EXIT_FAIL
        raise


if __name__ == "__main__":
    sys.exit(main())
