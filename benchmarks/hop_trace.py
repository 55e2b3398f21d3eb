"""A netdp node process that timestamps the steps of every message it handles, for
critical_path.py (where does the critical path of a token hop go?).

    python benchmarks/hop_trace.py --trace FILE [--variant NAME ...] -- node --certs DIR ...

Everything after `--` is the `netdp` command line the process runs (`netdp_node.cli.main`). The
probes wrap the product's functions at process start (the product code is not changed) and append
(monotonic ns, thread, event, key) to a list; SIGUSR1 writes the list to `--trace` (JSON lines)
and empties it. The clock is CLOCK_MONOTONIC (`time.perf_counter_ns`), the same in every process
of the machine, so the sender's write and the receiver's receipt can be put on one time line.

Events, in the order of one hop at the receiver B (key: job/kind/seq of the token):

  rx        the Link handler has the envelope's bytes (`PeerService._handle_one` called)
  decoded   the envelope is decoded (key known)
  stage     the step is staged in the ledger's group commit (`Ledger.stage`)
  write0    the staged batch is being written (`Ledger._start_write`, or `_flush_now` on the loop)
  commit0/1 the COMMIT (fsync) begins / ends (worker thread with --ledger-threads > 0)
  written   back on the loop, the batch settles (`Ledger._written`; on the loop: `flush1`)
  send      the forward is handed to the transport (`JobRunner._send`, key of the sent token)
  w0 / w1   the Link writer's `call.write` begins / returns (grpc completion)
  ack       the acknowledgement of the received token is ready to be written (`_handle_one` returns)
  ackrx     an acknowledgement arrived at the sender (`Link._on_ack`)

`--variant`: prototypes of changes, applied by patching at process start (measurement only), see
VARIANTS.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import common  # noqa: F401  (fails with the install command when netdp is not installed)

EVENTS: list[tuple[int, int, str, str, int]] = []
_now = time.perf_counter_ns
_cpu = time.thread_time_ns
_tid = threading.get_ident


def rec(name: str, key: str = "") -> None:
    EVENTS.append((_now(), _tid(), name, key, _cpu()))


def _key(job_id: str, kind: str, seq: int) -> str:
    return f"{job_id[:8]}/{kind}/{seq}"


def install_probes() -> None:
    from netdp_node import ledger as L
    from netdp_node import runtime as R
    from netdp_node.transport import grpc as G

    svc = G.PeerService
    handle_one = svc._handle_one

    async def _handle_one(self: Any, who: Any, raw: bytes, context: Any) -> Any:
        rec("rx")
        ack = await handle_one(self, who, raw, context)
        rec("ack")
        return ack

    svc._handle_one = _handle_one  # type: ignore[method-assign]

    decode = G.envelope_to_message

    def envelope_to_message(env: Any) -> Any:
        msg = decode(env)
        rec("decoded", _key(env.job_id, env.kind, env.seq))
        return msg

    G.envelope_to_message = envelope_to_message

    ledger = L.Ledger
    stage = ledger.stage

    def _stage(self: Any, *a: Any, **k: Any) -> Any:
        rec("stage")
        return stage(self, *a, **k)

    ledger.stage = _stage  # type: ignore[method-assign]

    start_write = ledger._start_write

    def _start_write(self: Any) -> None:
        rec("write0")
        start_write(self)
        rec("submitted")

    ledger._start_write = _start_write  # type: ignore[method-assign]

    flush_now = ledger._flush_now

    def _flush_now(self: Any) -> None:
        if self.executor is None:
            rec("write0")
            flush_now(self)
            rec("flush1")
        else:
            flush_now(self)

    ledger._flush_now = _flush_now  # type: ignore[method-assign]

    commit_open = ledger._commit_open

    def _commit_open(self: Any, errors: Any, open_: bool) -> Any:
        rec("commit0")
        try:
            return commit_open(self, errors, open_)
        finally:
            rec("commit1")

    ledger._commit_open = _commit_open  # type: ignore[method-assign]

    tx_exit = ledger._Tx.__exit__

    def _tx_exit(self: Any, *a: Any) -> None:
        rec("commit0")
        try:
            tx_exit(self, *a)
        finally:
            rec("commit1")

    ledger._Tx.__exit__ = _tx_exit  # type: ignore[method-assign]

    written = ledger._written

    def _written(self: Any, inflight: Any) -> None:
        rec("written")
        written(self, inflight)

    ledger._written = _written  # type: ignore[method-assign]

    runner = R.JobRunner
    send = runner._send

    def _send(self: Any, s: Any) -> None:
        rec("send", f"{_key(self.ctx.job_id, s.msg.kind, s.msg.seq)}>{s.to}")
        send(self, s)

    runner._send = _send  # type: ignore[method-assign]

    on_ack = G.Link._on_ack

    def _on_ack(self: Any, ack: Any, loop: Any) -> None:
        rec("ackrx")
        on_ack(self, ack, loop)

    G.Link._on_ack = _on_ack  # type: ignore[method-assign]

    from netdp_node.algorithms.ring import engine as RE

    def wrap(cls: Any, name: str, label: str) -> None:
        fn = getattr(cls, name)

        def probe(*a: Any, **k: Any) -> Any:
            rec(label + "0")
            try:
                return fn(*a, **k)
            finally:
                rec(label + "1")

        setattr(cls, name, probe)

    for cls, name, label in [
        (RE.RingSum, "on_message", "engine"),
        (runner, "_apply", "apply"),
        (ledger, "received_digest", "lookup"),
        (G.peer_pb2.Envelope, "ParseFromString", "parse"),
        (G, "message_to_envelope", "encode"),
        (L, "_entry_row", "row"),
    ]:
        wrap(cls, name, label)

    deliver = runner.deliver

    async def _deliver(self: Any, sender: str, msg: Any) -> bool:
        rec("deliver")
        return await deliver(self, sender, msg)

    runner.deliver = _deliver  # type: ignore[method-assign]

    import grpc.aio._call as C

    write = C._StreamRequestMixin._write

    async def _write(self: Any, request: Any) -> None:
        k = _key(request.job_id, request.kind, request.seq) if hasattr(request, "kind") else ""
        rec("w0", k)
        await write(self, request)
        rec("w1", k)

    C._StreamRequestMixin._write = _write  # type: ignore[method-assign]


# ------------------------------------------------------------------------------------------------
# variants: prototypes of changes, measured before they are made in the product


def _variant_grpc_options(extra: list[tuple[str, Any]]) -> None:
    from netdp_node.security import mtls

    mtls.CHANNEL_OPTIONS[:] = [*mtls.CHANNEL_OPTIONS, *extra]
    mtls.SERVER_OPTIONS[:] = [*mtls.SERVER_OPTIONS, *extra]


def _variant_eager_write() -> None:
    """Prototype: a message submitted to a link whose stream is open and idle (nothing queued,
    no write in flight, no fault injection) is written at once, from `submit`, instead of waking
    the Link's writer task: `call.write`'s coroutine is run up to its first suspension (grpc has
    started the send batch by then) and handed to a task only to finish. The writer task waits
    for such a write before its next one (one write at a time per call, in submission order). A
    write that fails at once fails the stream (its pending messages are re-sent on the next)."""
    import asyncio

    from netdp_node.transport import grpc as G

    link = G.Link
    submit = link.submit
    stream_once = link._stream_once

    def _submit(self: Any, env: Any, on_done: Any = None) -> Any:
        call = getattr(self, "_eager_call", None)
        busy = getattr(self, "_eager_busy", None)
        if (
            call is None
            or self.closed
            or self.queue.qsize()
            or getattr(self, "_writing", False)
            or (busy is not None and not busy.done())
        ):
            return submit(self, env, on_done)
        queue = self.queue
        self.queue = _NoPut()  # the original's bookkeeping, without queueing the message
        try:
            fut = submit(self, env, on_done)
        finally:
            self.queue = queue
        coro = self._eager_write(env)
        loop = asyncio.get_running_loop()
        try:
            waiting = coro.send(None)
        except StopIteration:
            return fut
        except Exception as e:  # noqa: BLE001 - the stream is broken: reconnect and re-send
            expiry = self._expiry
            if expiry is not None and not expiry.done():
                expiry.set_exception(e)
            return fut
        done: asyncio.Future[None] = loop.create_future()
        self._eager_busy = done

        def resume(_: Any) -> None:
            task = asyncio.ensure_future(coro)

            def finished(t: Any) -> None:
                if t.cancelled():
                    done.cancel()
                elif t.exception() is not None:
                    done.set_exception(t.exception())
                    expiry = self._expiry
                    if expiry is not None and not expiry.done():
                        expiry.set_exception(t.exception())
                else:
                    done.set_result(None)

            task.add_done_callback(finished)

        waiting.add_done_callback(resume)
        return fut

    class _Call:
        def __init__(self, call: Any, write: Any) -> None:
            self._call = call
            self.write = write

        def __getattr__(self, name: str) -> Any:
            return getattr(self._call, name)

    class _NoPut:
        def put_nowait(self, item: Any) -> None:
            pass

    async def _stream_once(self: Any) -> None:
        call_holder: list[Any] = []
        channel = self.connect()
        orig_stream_stream = channel.stream_stream

        def stream_stream(*a: Any, **k: Any) -> Any:
            make = orig_stream_stream(*a, **k)

            def opened() -> Any:
                c = make()
                call_holder.append(c)
                write = c.write
                if self.t.faults is None:
                    self._eager_call = c
                    self._eager_write = write

                async def write_one(env: Any) -> None:  # the writer task's writes
                    busy = getattr(self, "_eager_busy", None)
                    if busy is not None and not busy.done():
                        await asyncio.wait([busy])
                    self._writing = True
                    try:
                        await write(env)
                    finally:
                        self._writing = False

                return _Call(c, write_one)  # (the writer task's writes: write_one)

            return opened

        channel.stream_stream = stream_stream
        try:
            await stream_once(self)
        finally:
            channel.stream_stream = orig_stream_stream
            self._eager_call = None
            self._eager_busy = None

    link.submit = _submit  # type: ignore[method-assign]
    link._stream_once = _stream_once  # type: ignore[method-assign]


VARIANTS: dict[str, Any] = {
    "eager": _variant_eager_write,
    "latency": lambda: _variant_grpc_options([("grpc.optimization_target", "latency")]),
    "nocompress": lambda: _variant_grpc_options(
        [("grpc.default_compression_algorithm", 0), ("grpc.enable_retries", 0)]
    ),
    "nobdp": lambda: _variant_grpc_options([("grpc.http2.bdp_probe", 0)]),
}


def dump(path: Path) -> None:
    global EVENTS
    events, EVENTS = EVENTS, []
    with open(path, "a") as fh:
        for e in events:
            fh.write(json.dumps(e) + "\n")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    cut = argv.index("--") if "--" in argv else len(argv)
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace", type=Path, required=True)
    ap.add_argument("--variant", action="append", default=[], choices=sorted(VARIANTS))
    a = ap.parse_args(argv[:cut])
    if cut == len(argv):
        ap.error("give the netdp command line after --")
    for v in a.variant:
        VARIANTS[v]()
    install_probes()
    signal.signal(signal.SIGUSR1, lambda *_: dump(a.trace))
    from netdp_node.cli import main as netdp

    return netdp(argv[cut + 1 :])


if __name__ == "__main__":
    sys.exit(main())
