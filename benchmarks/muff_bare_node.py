"""One process of the bare grpc.aio baseline of `bench_muffliato_net.py`: Muffliato's message
pattern with no engine and no ledger.

    python benchmarks/muff_bare_node.py --config CONFIG.json --index I

CONFIG (written by the benchmark) names the participants, the undirected edges of the public graph
(participant indices), the number of rounds T, the payload dimension, the PKI folder of the
LocalCluster (each process uses its node's certificate: mTLS, client certificate required) and a
work folder. Process I listens on 127.0.0.1 (ephemeral port, written to `ports/<id>`, as a netdp
node does), opens one long-lived bidirectional stream to each neighbour (as netdp's `Link` does)
and runs T rounds: it sends one Envelope of the same size as a Muffliato round value (the same
`message_to_envelope` of a `value` message of `dim` floats) to each neighbour, answers every value
it receives with an `Ack`, and enters round r + 1 once it has every neighbour's round-r value AND
every neighbour's Ack of its own round-r value (the same completion rule as `MuffliatoSync`, with
no timer, no durable commit, no engine). It writes the wall time (`time.time()`) at which each
round completed to `results/<id>.json`, then keeps serving until every participant has written its
result (so no neighbour loses an Ack), bounded by `--linger`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import common  # noqa: F401  (fails with the install command when netdp is not installed)
import grpc
import grpc.aio
import numpy as np

from netdp.v1 import peer_pb2
from netdp_node.algorithms.muffliato.engine import VALUE
from netdp_node.protocols.base import Message
from netdp_node.security.mtls import CHANNEL_OPTIONS, SERVER_OPTIONS
from netdp_node.wire import message_to_envelope

SERVICE = "bench.BareGossip"  # the node's own channel/server options: links alike netdp's


def _ident(folder: Path) -> tuple[bytes, bytes, bytes]:
    return (
        (folder / "ca.pem").read_bytes(),
        (folder / "cert.pem").read_bytes(),
        (folder / "key.pem").read_bytes(),
    )


class Node:
    def __init__(self, cfg: dict[str, Any], index: int) -> None:
        self.cfg = cfg
        self.ids: list[str] = list(cfg["ids"])
        self.me = index
        self.nid = self.ids[index]
        self.T = int(cfg["T"])
        self.nb = sorted({b if a == index else a for a, b in cfg["edges"] if index in (a, b)})
        self.work = Path(cfg["workdir"])
        self.certs = Path(cfg["pki"]) / self.nid
        self.got: dict[int, set[int]] = {}  # round -> neighbours whose value arrived
        self.acked: dict[int, set[int]] = {}  # round -> neighbours that acknowledged ours
        self.changed = asyncio.Event()
        self.index_of = {v: i for i, v in enumerate(self.ids)}
        payload = np.zeros(int(cfg["dim"]))
        self.envelopes = [
            message_to_envelope(cfg["job_id"], Message(VALUE, payload=payload, round=r))
            for r in range(self.T)
        ]

    # -- server: take values, acknowledge each one ------------------------------------------------
    async def link(
        self, requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[bytes]:
        cn = context.auth_context().get("x509_common_name") or [b""]
        sender = self.index_of[cn[0].decode()]
        async for raw in requests:
            env = peer_pb2.Envelope.FromString(raw)
            self.got.setdefault(int(env.round), set()).add(sender)
            self.changed.set()
            yield peer_pb2.Ack(msg_id=env.msg_id).SerializeToString()

    # -- rounds -----------------------------------------------------------------------------------
    async def run(self) -> dict[str, Any]:
        ca, cert, key = _ident(self.certs)
        server = grpc.aio.server(options=SERVER_OPTIONS)
        server.add_generic_rpc_handlers(
            (
                grpc.method_handlers_generic_handler(
                    SERVICE, {"Link": grpc.stream_stream_rpc_method_handler(self.link)}
                ),
            )
        )
        port = server.add_secure_port(
            "127.0.0.1:0",
            grpc.ssl_server_credentials(
                [(key, cert)], root_certificates=ca, require_client_auth=True
            ),
        )
        await server.start()
        ports = self.work / "ports"
        ports.mkdir(parents=True, exist_ok=True)
        tmp = ports / f".{self.nid}"
        tmp.write_text(str(port))
        tmp.replace(ports / self.nid)
        deadline = time.monotonic() + float(self.cfg["timeout"])
        # start barrier: every process listens before anybody's round 0 (netdp nodes are all
        # registered before the job is submitted)
        while len(list(ports.glob("node-*"))) < len(self.ids):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.nid}: not every process started")
            await asyncio.sleep(0.05)
        addr = {w: f"127.0.0.1:{(ports / self.ids[w]).read_text()}" for w in self.nb}
        creds = grpc.ssl_channel_credentials(
            root_certificates=ca, private_key=key, certificate_chain=cert
        )
        channels = {
            w: grpc.aio.secure_channel(addr[w], creds, options=CHANNEL_OPTIONS) for w in self.nb
        }
        calls = {
            w: channels[w].stream_stream(f"/{SERVICE}/Link")(wait_for_ready=True) for w in self.nb
        }

        async def reader(w: int) -> None:
            call = calls[w]
            while True:
                raw = await call.read()
                if raw is grpc.aio.EOF:
                    return
                ack = peer_pb2.Ack.FromString(raw)
                self.acked.setdefault(int(ack.msg_id) - 1, set()).add(w)
                self.changed.set()

        readers = [asyncio.ensure_future(reader(w)) for w in self.nb]
        done_at: list[float] = []
        cpu_at: list[float] = []
        want = set(self.nb)
        try:
            for r in range(self.T):
                env = self.envelopes[r]
                env.msg_id = r + 1
                data = env.SerializeToString()
                await asyncio.gather(*(calls[w].write(data) for w in self.nb))
                while not (want <= self.got.get(r, set()) and want <= self.acked.get(r, set())):
                    self.changed.clear()
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        raise TimeoutError(f"{self.nid}: round {r} incomplete")
                    await asyncio.wait_for(self.changed.wait(), remaining)
                self.got.pop(r, None)
                self.acked.pop(r, None)
                done_at.append(time.time())
                cpu_at.append(time.process_time())
            out = {
                "node": self.nid,
                "degree": len(self.nb),
                "T": self.T,
                "round_done": done_at,
                "cpu_s_rounds": cpu_at[-1] - cpu_at[0],
                "envelope_bytes": len(data),
            }
            res = self.work / "results"
            res.mkdir(parents=True, exist_ok=True)
            (res / f".{self.nid}").write_text(json.dumps(out))
            (res / f".{self.nid}").replace(res / f"{self.nid}.json")
            # keep serving (acks still in flight) until everybody has finished, bounded
            linger = time.monotonic() + float(self.cfg["linger"])
            while len(list(res.glob("*.json"))) < len(self.ids) and time.monotonic() < min(
                linger, deadline
            ):
                await asyncio.sleep(0.05)
            return out
        finally:
            for w in self.nb:
                with contextlib.suppress(Exception):
                    await calls[w].done_writing()
            for t in readers:
                t.cancel()
            await asyncio.gather(*readers, return_exceptions=True)
            for ch in channels.values():
                await ch.close()
            await server.stop(1.0)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", type=Path, required=True)
    ap.add_argument("--index", type=int, required=True)
    a = ap.parse_args(argv)
    cfg = json.loads(a.config.read_text())
    cfg.setdefault("linger", 10.0)
    asyncio.run(Node(cfg, a.index).run())
    return 0


if __name__ == "__main__":
    sys.exit(main())
