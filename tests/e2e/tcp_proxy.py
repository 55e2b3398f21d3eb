"""A small userspace TCP forwarding proxy that makes a link slow and lossy, for the e2e tests.

This kernel has no netem, so the namespace tests put this between two nodes instead: it accepts
connections on --listen and forwards each to --target, and

  * delays every chunk it forwards, in both directions, by D ± J milliseconds (delay_ms,
    jitter_ms). Order is kept: a chunk is never sent before the one read before it.
  * "loses" traffic the only way a TCP proxy can (TCP itself cannot lose bytes): once a connection
    has carried `drop_after` client-to-server chunks (so a TLS handshake can complete), each further
    client-to-server chunk makes it abort both sides of the connection (RST) with probability
    `drop_prob`, instead of forwarding it; at most `max_drops` times in all. The sender sees its
    stream break, reconnects and re-sends what was not acknowledged.

The impairment is given by flags, or by --config FILE: a JSON object with any of the keys above,
re-read whenever the file changes, so a test can switch a running proxy from pass-through to
impaired without breaking the connections it carries. Random choices come from --seed (drops and
delays from separate generators that only draw while their impairment is on, so the sequence of drop
decisions over eligible chunks is fixed by the seed).

It writes its listening port to --ready once it accepts, and counters as JSON to --stats
(connections, drops, chunks and bytes per direction, the smallest and largest delay applied since
the last configuration change, `config_changes`), rewritten within 0.1 s of a change and on exit.
SIGTERM/SIGINT: close everything, exit 0.

    python tcp_proxy.py --listen 10.77.3.13:7602 --target 10.77.3.13:7601 --delay-ms 80 \\
        --jitter-ms 20 --drop-prob 0.1 --drop-after 4 --max-drops 3 --seed 1 \\
        --stats stats.json --ready ready
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import signal
from pathlib import Path
from typing import Any

CHUNK = 65536
KNOBS = {
    "delay_ms": float,
    "jitter_ms": float,
    "drop_prob": float,
    "drop_after": int,
    "max_drops": int,
}


def _hostport(s: str) -> tuple[str, int]:
    host, _, port = s.rpartition(":")
    return host, int(port)


class Dropped(Exception):
    """This connection is to be aborted (simulated loss)."""


class Proxy:
    def __init__(self, a: argparse.Namespace) -> None:
        self.a = a
        self.target = _hostport(a.target)
        self.cfg: dict[str, Any] = {k: getattr(a, k) for k in KNOBS}
        self.config_file = Path(a.config) if a.config else None
        self.config_mtime: int | None = None
        self.delay_rng = random.Random(a.seed)
        self.drop_rng = random.Random(a.seed)
        self.stats: dict[str, Any] = {
            "listen": a.listen,
            "target": a.target,
            "config_changes": 0,
            "connections": 0,
            "open": 0,
            "drops": 0,
            "chunks_c2s": 0,
            "chunks_s2c": 0,
            "bytes_c2s": 0,
            "bytes_s2c": 0,
            "min_delay_ms": None,
            "max_delay_ms": None,
            "upstream_errors": 0,
        }
        self.stats.update(self.cfg)
        self.reload()
        self.conns: set[tuple[asyncio.StreamWriter, asyncio.StreamWriter]] = set()
        self.saved = ""

    def reload(self) -> None:
        """Apply --config if it changed since it was last read."""
        if self.config_file is None:
            return
        try:
            mtime = self.config_file.stat().st_mtime_ns
        except FileNotFoundError:
            return
        if mtime == self.config_mtime:
            return
        self.config_mtime = mtime
        new = json.loads(self.config_file.read_text() or "{}")
        for k, conv in KNOBS.items():
            if k in new:
                self.cfg[k] = conv(new[k])
        if self.cfg["jitter_ms"] > self.cfg["delay_ms"]:
            raise SystemExit("jitter_ms must not exceed delay_ms")
        self.stats.update(self.cfg)
        self.stats["config_changes"] += 1
        self.stats["min_delay_ms"] = self.stats["max_delay_ms"] = None

    def save(self) -> None:
        text = json.dumps(self.stats)
        if text == self.saved:
            return
        path = Path(self.a.stats)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(text)
        os.replace(tmp, path)
        self.saved = text

    async def flush(self) -> None:
        while True:
            await asyncio.sleep(0.1)
            self.reload()
            self.save()

    def delay(self) -> float:
        d = self.cfg["delay_ms"]
        if self.cfg["jitter_ms"]:
            d += self.delay_rng.uniform(-self.cfg["jitter_ms"], self.cfg["jitter_ms"])
        d = max(0.0, d)
        for key, pick in (("min_delay_ms", min), ("max_delay_ms", max)):
            cur = self.stats[key]
            self.stats[key] = d if cur is None else pick(cur, d)
        return d / 1000.0

    def should_drop(self, c2s_chunks: int) -> bool:
        c = self.cfg
        return (
            c["drop_prob"] > 0
            and c2s_chunks > c["drop_after"]
            and self.stats["drops"] < c["max_drops"]
            and self.drop_rng.random() < c["drop_prob"]
        )

    async def pipe(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        direction: str,
        counter: list[int],
    ) -> None:
        """Forward reader -> writer, each chunk `delay()` later than it was read, in order."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[float, bytes | None]] = asyncio.Queue()

        async def receive() -> None:
            last_due = 0.0
            while True:
                data = await reader.read(CHUNK)
                if not data:
                    await queue.put((last_due, None))
                    return
                self.reload()
                if direction == "c2s":
                    counter[0] += 1
                    if self.should_drop(counter[0]):
                        self.stats["drops"] += 1
                        self.save()
                        raise Dropped()
                due = max(last_due, loop.time() + self.delay())
                last_due = due
                self.stats[f"chunks_{direction}"] += 1
                self.stats[f"bytes_{direction}"] += len(data)
                await queue.put((due, data))

        async def send() -> None:
            while True:
                due, data = await queue.get()
                wait = due - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
                if data is None:
                    if writer.can_write_eof():
                        writer.write_eof()
                    return
                writer.write(data)
                await writer.drain()

        rtask, stask = asyncio.ensure_future(receive()), asyncio.ensure_future(send())
        try:
            await asyncio.gather(rtask, stask)
        finally:
            for t in (rtask, stask):
                t.cancel()
            await asyncio.gather(rtask, stask, return_exceptions=True)

    async def handle(self, creader: asyncio.StreamReader, cwriter: asyncio.StreamWriter) -> None:
        self.stats["connections"] += 1
        try:
            sreader, swriter = await asyncio.open_connection(*self.target)
        except OSError:
            self.stats["upstream_errors"] += 1
            self.save()
            cwriter.transport.abort()
            return
        self.stats["open"] += 1
        self.save()
        pair = (cwriter, swriter)
        self.conns.add(pair)
        counter = [0]
        tasks = {
            asyncio.ensure_future(self.pipe(creader, swriter, "c2s", counter)),
            asyncio.ensure_future(self.pipe(sreader, cwriter, "s2c", counter)),
        }
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
            if any(not t.cancelled() and t.exception() is not None for t in done):
                for w in pair:  # abort: RST, as a broken path would look to both ends
                    w.transport.abort()
            else:
                for w in pair:
                    w.close()
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            for w in pair:
                if not w.is_closing():
                    w.transport.abort()
            self.conns.discard(pair)
            self.stats["open"] -= 1
            self.save()

    async def run(self) -> None:
        host, port = _hostport(self.a.listen)
        server = await asyncio.start_server(self.handle, host, port, reuse_address=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        self.save()
        bound = server.sockets[0].getsockname()[1]
        Path(self.a.ready).write_text(str(bound))
        flusher = asyncio.ensure_future(self.flush())
        try:
            await stop.wait()
        finally:
            flusher.cancel()
            server.close()
            for pair in list(self.conns):
                for w in pair:
                    w.transport.abort()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server.wait_closed(), 2)
            self.save()


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--listen", required=True, help="HOST:PORT to accept on")
    p.add_argument("--target", required=True, help="HOST:PORT to forward to")
    p.add_argument("--delay-ms", type=float, default=0.0)
    p.add_argument("--jitter-ms", type=float, default=0.0)
    p.add_argument("--drop-prob", type=float, default=0.0)
    p.add_argument(
        "--drop-after",
        type=int,
        default=4,
        help="never drop within a connection's first N client chunks",
    )
    p.add_argument("--max-drops", type=int, default=3)
    p.add_argument("--config", help="JSON file overriding the five knobs above, re-read on change")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--stats", required=True)
    p.add_argument("--ready", required=True)
    a = p.parse_args()
    if a.jitter_ms > a.delay_ms:
        p.error("--jitter-ms must not exceed --delay-ms")
    asyncio.run(Proxy(a).run())


if __name__ == "__main__":
    main()
