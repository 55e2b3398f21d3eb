"""What every benchmark shares: the check that netdp is installed, where results go, the facts about
the machine a result was measured on, how a result is written, and a fresh child process per
measurement.

The benchmarks import netdp like any other program does: install the checkout first
(`python3 -m pip install -e .` or `python3 -m pip install .`). A benchmark started as
`python benchmarks/<name>.py` finds this module next to it (Python puts the script's folder first
on sys.path); importing it fails with that install command when netdp is not installed, rather
than measuring whatever tree happens to be on the path.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import importlib.metadata
import json
import math
import multiprocessing as mp
import os
import platform
import queue
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
INSTALL = "python3 -m pip install -e .  (or: python3 -m pip install .)"

try:
    import netdp_node
except ImportError as e:  # pragma: no cover - what a user without the package sees
    raise SystemExit(
        f"the benchmarks need netdp installed in this Python, {sys.executable} ({e}); from "
        f"{HERE.parent} run:\n"
        f"    {INSTALL}"
    ) from None


def load_average() -> list[float]:
    """The 1, 5 and 15 minute load averages, rounded (the machine may be shared)."""
    return [round(x, 2) for x in os.getloadavg()]


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _mem_total_mb() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return None


def git(folder: Path, *args: str) -> str:
    """`git ARGS` in `folder`, its output stripped ("" when git fails)."""
    try:
        return subprocess.run(
            ["git", *args], cwd=folder, capture_output=True, text=True, timeout=10, check=False
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def machine(packages: Iterable[str] = ()) -> dict[str, Any]:
    """Facts about the machine and the code measured, taken now: CPUs (all, and those this process
    may run on), CPU model, memory, the load average (`loadavg_at_start`; `write_results` adds
    `loadavg_at_end`), the date (UTC), Python, platform, the netdp that was imported (its folder
    and, for a git checkout, the commit and whether it had uncommitted changes) and the versions
    of the distributions named in `packages` (e.g. "grpcio", "numpy")."""
    tree = Path(netdp_node.__file__).resolve().parent.parent
    commit = git(tree, "rev-parse", "HEAD")
    affinity = getattr(os, "sched_getaffinity", None)
    return {
        "cpus": os.cpu_count(),
        "cpus_usable": len(affinity(0)) if affinity else os.cpu_count(),
        "cpu_model": cpu_model(),
        "mem_total_mb": _mem_total_mb(),
        "loadavg_at_start": load_average(),
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "python_impl": platform.python_implementation(),
        "platform": platform.platform(),
        "netdp_version": netdp_node.__version__,
        "netdp_node_imported_from": str(tree / "netdp_node"),
        "git_commit": commit,
        "git_dirty": bool(commit)
        and bool(git(tree, "status", "--porcelain", "--untracked-files=no")),
        "versions": {p: _version(p) for p in packages},
    }


def finite(v: Any) -> Any:
    """JSON has no NaN/inf: null instead (recursively through dicts, lists and tuples)."""
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return {k: finite(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [finite(x) for x in v]
    return v


def result_path(name: str, quick: bool = False, suffix: str = ".json") -> Path:
    """benchmarks/results/<name>.json, or <name>-quick.json for a --quick run (so that a smoke
    test never overwrites a full result)."""
    return RESULTS / f"{name}{'-quick' if quick else ''}{suffix}"


def write_results(
    name: str,
    data: dict[str, Any],
    quick: bool = False,
    *,
    text: str | Callable[[dict[str, Any]], str] | None = None,
    out: Path | None = None,
) -> Path:
    """Write `data` as JSON to `out` or `result_path(name, quick)` (atomically: a temporary file,
    then a rename; NaN and infinities as null), and `text`, if given, beside it as .txt (`text`
    may be a function of `data`, the benchmark's rendering of it: it then sees `loadavg_at_end`).
    When `data` has a "machine" entry (from `machine()`), its `loadavg_at_end` is set to the load
    average now. Returns the JSON file's path."""
    path = Path(out) if out is not None else result_path(name, quick)
    if isinstance(data.get("machine"), dict):
        data["machine"]["loadavg_at_end"] = load_average()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(finite(data), indent=2, allow_nan=False) + "\n")
    tmp.replace(path)
    if text is not None:
        path.with_suffix(".txt").write_text((text if isinstance(text, str) else text(data)) + "\n")
    return path


def in_child(target: Callable[..., None], *args: Any, timeout: float = 3600.0) -> Any:
    """Run `target(*args, queue)` in a fresh spawned process and return what it put on the queue:
    the measurement's peak memory (ru_maxrss) is then its own, not the accumulation of earlier
    ones. `target` must be a module-level function of the benchmark."""
    ctx = mp.get_context("spawn")
    q: mp.Queue[Any] = ctx.Queue()
    p = ctx.Process(target=target, args=(*args, q))
    p.start()
    deadline = time.monotonic() + timeout
    try:
        while True:
            try:
                return q.get(timeout=1.0)
            except queue.Empty:
                if not p.is_alive() and q.empty():
                    raise RuntimeError(
                        f"{target.__name__} exited {p.exitcode} with no result"
                    ) from None
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{target.__name__} gave no result in {timeout} s") from None
    finally:
        p.join(timeout=60)
        if p.is_alive():
            p.terminate()
            p.join(10)


def parser(doc: str) -> argparse.ArgumentParser:
    """The command line of a benchmark that repeats one measurement: its docstring as help,
    --quick (small sizes, one repetition, written to <name>-quick.json) and --reps."""
    ap = argparse.ArgumentParser(
        description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--quick", action="store_true", help="small sizes, one repetition")
    ap.add_argument("--reps", type=int, default=0, help="repetitions (default 3; --quick: 1)")
    return ap


def repetitions(a: argparse.Namespace) -> int:
    """--reps, or 1 with --quick, else 3."""
    return int(a.reps or (1 if a.quick else 3))


async def wait_job(client: Any, job_id: str, timeout: float, poll: float) -> dict[str, Any]:
    """Poll the bootstrap (a `BootstrapClient`) every `poll` seconds until job `job_id` is complete
    or failed; its `result_summary`. TimeoutError after `timeout` seconds."""
    from netdp_node.jobs import result_summary  # only the network benchmarks need it (~1 s)

    deadline = time.monotonic() + timeout
    while True:
        s = result_summary(await client.result(job_id))
        if s["complete"] or s["failed"]:
            return s
        if time.monotonic() > deadline:
            raise TimeoutError(f"job {job_id} did not finish in {timeout} s")
        await asyncio.sleep(poll)


@contextlib.contextmanager
def workdir(prefix: str, keep: bool = False) -> Iterator[Path]:
    """A fresh temporary folder for a run (ledgers, certificates, logs), removed at the end unless
    `keep` (then its path is printed). SIGTERM becomes SystemExit(143) from here on, so that the
    caller's finally blocks still stop every process it started."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield folder
    finally:
        if keep:
            print(f"work directory kept: {folder}", file=sys.stderr)
        else:
            shutil.rmtree(folder, ignore_errors=True)


@dataclass
class Capped:
    """What `run_capped` saw of a command: its output, exit code (SIGKILL's when it timed out),
    CPU seconds and peak resident set (os.wait4: the process itself), wall time."""

    stdout: bytes
    stderr: bytes
    code: int
    timed_out: bool
    cpu_s: float
    peak_rss_mb: float
    wall_s: float


def run_capped(
    cmd: list[str], *, cwd: Path | str, env: dict[str, str] | None = None, gb: float, timeout: float
) -> Capped:
    """Run `cmd` in a process group of its own under an address-space cap of `gb` GiB (0: none; a
    case that outgrows it fails with MemoryError instead of exhausting a shared machine) and kill
    the group after `timeout` seconds. `cwd`: `python -m` puts it first on the path, so it must not
    be a checkout other than the one meant to run."""

    def cap() -> None:
        limit = int(gb * 2**30)
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    t0 = time.perf_counter()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        p = subprocess.Popen(
            cmd,
            stdout=out,
            stderr=err,
            env=env,
            cwd=cwd,
            start_new_session=True,
            preexec_fn=cap if gb > 0 else None,
        )
        timed_out = False
        while True:  # bounded by the timeout
            pid, status, usage = os.wait4(p.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() - t0 > timeout:
                os.killpg(p.pid, signal.SIGKILL)  # the case's own process group
                _, status, usage = os.wait4(p.pid, 0)
                timed_out = True
                break
            time.sleep(0.5)
        wall = time.perf_counter() - t0
        out.seek(0)
        err.seek(0)
        return Capped(
            stdout=out.read(),
            stderr=err.read(),
            code=os.waitstatus_to_exitcode(status),
            timed_out=timed_out,
            cpu_s=round(usage.ru_utime + usage.ru_stime, 1),
            peak_rss_mb=round(usage.ru_maxrss / 1024, 1),
            wall_s=round(wall, 1),
        )


def ring_values(cluster: Any) -> dict[str, Path]:
    """0.1·i for the i-th node, for ring-sum jobs (`LocalCluster.write_data`)."""
    return cluster.write_data({nid: repr(0.1 * (i + 1)) for i, nid in enumerate(cluster.ids)})


def uniform_values(cluster: Any, seed: int = 0) -> dict[str, Path]:
    """Uniform [0, 1) values from a seeded generator (6 decimals), one per node."""
    import numpy as np  # lazy: not every benchmark needs it

    rng = np.random.default_rng(seed)
    return cluster.write_data({nid: f"{rng.uniform():.6f}" for nid in cluster.ids})


def before_after(ap: argparse.ArgumentParser) -> None:
    """--before DIR and --only for a benchmark comparing two versions (`versions` reads them)."""
    ap.add_argument("--before", default="", help="source tree of the code before the change")
    ap.add_argument("--only", choices=("before", "after"), default=None)


def versions(ap: argparse.ArgumentParser, a: argparse.Namespace) -> list[str]:
    """The versions to run, from `before_after`'s flags; a parser error without the tree needed."""
    out = [a.only] if a.only else ["before", "after"]
    if "before" in out and not a.before:
        ap.error("--before DIR is needed to run the code before the change")
    return out
