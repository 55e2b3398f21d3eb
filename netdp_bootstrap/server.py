"""Run the bootstrap service: mTLS gRPC server + durable store, clean shutdown on SIGTERM."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from dataclasses import dataclass
from pathlib import Path

from netdp_bootstrap.service import BootstrapService, generic_handler
from netdp_bootstrap.store import Store
from netdp_node.security.mtls import start_server
from netdp_node.security.pki import check_role, check_server_names, load_identity

log = logging.getLogger("netdp.bootstrap")


@dataclass(frozen=True)
class BootstrapConfig:
    certs: Path
    state: Path
    listen: str = "127.0.0.1:7600"
    crl: Path | None = None
    grace: float = 2.0


async def run_bootstrap(
    cfg: BootstrapConfig,
    ready: asyncio.Future[int] | None = None,
    stop: asyncio.Event | None = None,
) -> int:
    identity = load_identity(cfg.certs)
    check_role(identity, cfg.certs, "bootstrap", "netdp bootstrap")
    check_server_names(identity, cfg.certs)  # nodes and operators verify the bootstrap by them
    store = Store(cfg.state)
    service = BootstrapService(store, identity.ca_pem, cfg.crl)
    server, port = await start_server(
        identity, cfg.listen, lambda srv: srv.add_generic_rpc_handlers((generic_handler(service),))
    )
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    log.info(
        "bootstrap %s serving mTLS on %s:%d, state in %s",
        identity.node_id,
        cfg.listen.rsplit(":", 1)[0],
        port,
        cfg.state,
    )
    if ready is not None:
        ready.set_result(port)
    watcher = asyncio.ensure_future(service.watch_crl()) if cfg.crl is not None else None
    try:
        await stop.wait()
    finally:
        log.info("bootstrap shutting down")
        service.stop()  # held long polls are answered now: only other calls get the grace
        if watcher is not None:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
        await server.stop(cfg.grace)
        store.close()
    return 0
