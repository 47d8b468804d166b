"""Helpers every benchmark script shares."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# The photos (vifusion.samples.PHOTOS) the bed benchmarks' videos are made of, in the order
# that pairs them (video i shows photo i and photo i + 3): their workloads stay as measured.
BED_PHOTOS = [
    "coffee",
    "chelsea",
    "rocket",
    "astronaut",
    "hubble",
    "motorcycle",
    "camera",
    "coins",
    "ihc",
    "retina",
]


def machine() -> str:
    """The CPU model and count, for the report's JSON line."""
    model = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return f"{model}, {os.cpu_count()} cpus, {platform.system()}"


def descendants() -> list[int]:
    """The pids of every process below this one (a local Ray cluster started here: its GCS,
    raylet and workers), whatever else the host runs."""
    parent: dict[int, int] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as f:
                parent[int(entry.name)] = int(f.read().rsplit(")", 1)[1].split()[1])
        except OSError:
            continue
    me, out = os.getpid(), []
    for pid in parent:
        p, hops = pid, 0
        while p not in (me, 0, 1) and hops < 64:
            p, hops = parent.get(p, 0), hops + 1
        if p == me and pid != me:
            out.append(pid)
    return out


def cpu_seconds(pid: int | str) -> float:
    """User + system CPU seconds a process has used so far (``/proc/<pid>/stat``); raises
    OSError once it is gone."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Cgroups:
    """One CPU cgroup per host, ``cores`` each (v2 ``cpu.max``, or v1 ``cpu.cfs_quota_us``
    where only v1 has the cpu controller); processes moved in after they start (their
    children, Ray's workers, are born inside). ``loose`` raises a quota below a core to one
    core while models load, which is not what a benchmark measures; ``tight`` puts the quotas
    back. A core, not more: a process that sizes its threads by the quota (``_cores.py``)
    floors it, so it gets one thread either way."""

    def __init__(self, name: str, cores: tuple[float, ...]) -> None:
        v2 = Path("/sys/fs/cgroup")
        self.v2 = (
            "cpu" in (v2 / "cgroup.controllers").read_text().split()
            if (v2 / "cgroup.controllers").exists()
            else False
        )
        base = v2 if self.v2 else v2 / "cpu"
        if not self.v2 and not (base / "cpu.cfs_quota_us").exists():
            raise RuntimeError("no cpu cgroup controller (v2 cpu.max or v1 cpu.cfs_quota_us) here")
        self.cores = cores
        self.dirs = [base / f"{name}-h{i}" for i in range(len(cores))]
        for d in self.dirs:
            d.mkdir(exist_ok=True)
        self.tight()

    def tight(self) -> None:
        for d, c in zip(self.dirs, self.cores, strict=True):
            limit(d, c)

    def loose(self) -> None:
        for d, c in zip(self.dirs, self.cores, strict=True):
            limit(d, max(c, 1.0))

    def move(self, host: int, pids: set[int]) -> None:
        for pid in pids:
            try:
                (self.dirs[host] / "cgroup.procs").write_text(str(pid))
            except OSError:
                pass  # gone already

    def probe(self, seconds: float = 4.0) -> list[float]:
        """Cores each host gets now, all hosts busy at once: its quota, less where the
        machine's other work takes the rest. Two spinning processes a host; what the host's
        other processes (Ray's) take meanwhile counts too (read in clock ticks, so a read
        can pass the quota by a tick a process: held to it)."""
        spin = (
            "import sys, time\nsys.stdin.readline()\nt, w = time.process_time(), time.time()\n"
            f"while time.time() - w < {seconds}: pass\nprint(time.process_time() - t)"
        )
        procs = []
        for i in range(len(self.dirs)):
            for _ in range(2):
                p = subprocess.Popen(
                    [sys.executable, "-c", spin],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    text=True,
                )
                self.move(i, {p.pid})
                procs.append((i, p))
        spinners = {p.pid for _, p in procs}
        before = [self._cpu(d, spinners) for d in self.dirs]
        for _, p in procs:
            p.stdin.write("\n")
            p.stdin.flush()
        got = [0.0] * len(self.dirs)
        for i, p in procs:
            got[i] += float(p.communicate()[0]) / seconds
        for i, d in enumerate(self.dirs):
            after = self._cpu(d, spinners)
            got[i] += (
                sum(after[pid] - cpu for pid, cpu in before[i].items() if pid in after) / seconds
            )
        return [round(min(g, c), 3) for g, c in zip(got, self.cores, strict=True)]

    @staticmethod
    def _cpu(group: Path, leave_out: set[int]) -> dict[int, float]:
        """CPU seconds so far of each process in ``group`` but those left out."""
        out = {}
        for pid in (group / "cgroup.procs").read_text().split():
            if int(pid) not in leave_out:
                with contextlib.suppress(OSError):  # gone already
                    out[int(pid)] = cpu_seconds(pid)
        return out

    def embed_cs(self, cfg, seconds: float = 10.0) -> list[float]:
        """Core-seconds a frame costs to embed on each host, all hosts embedding at once (one
        process each, in its cgroup, with ``cfg``'s torch threads): what the hosts' extractors
        pay while they share this machine's cores, over the same ``seconds``. The models load
        ``loose``; the embedding starts ``tight`` (this process is the barrier's last party)."""
        code = (
            "import sys, json\nfrom pathlib import Path\nfrom vifusion.config import Config\n"
            "from vifusion.plan.calibrate import embed_cs\n"
            "cfg = Config.model_validate_json(sys.argv[1])\n"
            "print(embed_cs(cfg, Path(sys.argv[2]), int(sys.argv[3]), seconds=float(sys.argv[4])))"
        )
        hosts = len(self.dirs)
        with tempfile.TemporaryDirectory(prefix="vf-embed-") as tmp:
            barrier = Path(tmp) / "barrier"
            barrier.mkdir()
            procs = []
            self.loose()
            for i in range(hosts):
                p = subprocess.Popen(
                    [sys.executable, "-c", code, cfg.model_dump_json(), str(barrier),
                     str(hosts + 1), str(seconds)],
                    stdout=subprocess.PIPE,
                    text=True,
                    cwd=str(Path(__file__).resolve().parents[1]),
                )  # fmt: skip
                self.move(i, {p.pid})
                procs.append(p)
            deadline = time.monotonic() + 600
            while len(list(barrier.iterdir())) < hosts and time.monotonic() < deadline:
                if any(p.poll() is not None for p in procs):
                    break  # one failed: its error comes out below
                time.sleep(0.1)
            self.tight()
            (barrier / "ready-caller").touch()
            return [round(float(p.communicate(timeout=600)[0].split()[-1]), 5) for p in procs]

    def remove(self) -> None:
        for d in self.dirs:
            try:
                d.rmdir()
            except OSError:
                pass


def limit(group: Path | str, cores: float | None) -> None:
    """Set CPU cgroup ``group``'s share to ``cores`` (None: no limit), v2 or v1."""
    group = Path(group)
    if (group / "cpu.max").exists():
        (group / "cpu.max").write_text(f"{int(cores * 100000)} 100000" if cores else "max 100000")
    else:
        (group / "cpu.cfs_period_us").write_text("100000")
        (group / "cpu.cfs_quota_us").write_text(str(int(cores * 100000)) if cores else "-1")


def ns_pids(ns: str) -> set[int]:
    """The pids of every process in network namespace ``ns``."""
    out = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout
    return {int(p) for p in out.split()}


def arguments(
    doc: str, quick: str | None = None, *, drive: bool = False
) -> argparse.ArgumentParser:
    """A benchmark's parser: the first line of its docstring (``doc``) as the description;
    ``--quick`` where ``quick`` says what it cuts; with ``drive``, the hidden ``--drive SPEC``
    by which the benchmark runs itself inside the test bed (``drive_in_bed``)."""
    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    if quick is not None:
        ap.add_argument("--quick", action="store_true", help=quick)
    if drive:
        ap.add_argument("--drive", help=argparse.SUPPRESS)
    return ap


def report_head(name: str, quick: bool) -> dict:
    """The keys a report's JSON line starts with: which benchmark, quick or not, on what
    machine, when."""
    return {
        "benchmark": name,
        "quick": quick,
        "machine": machine(),
        "date": time.strftime("%Y-%m-%d"),
    }


def index_figures(results: list, wall: float) -> dict:
    """What a driver that indexed videos reports first: the videos ready, their frames, the
    wall seconds it took, frames per second."""
    frames = sum(r.frames for r in results if r.status == "ready")
    return {
        "videos_ready": sum(r.status == "ready" for r in results),
        "frames": frames,
        "seconds": wall,
        "frames_per_s": frames / wall,
    }


def emit_result(figures: dict) -> None:
    """A driver's figures, as the one ``RESULT <json>`` line of its stdout that the caller
    outside the bed reads (``drive_in_bed``)."""
    print("RESULT " + json.dumps(figures), flush=True)


def drive_in_bed(bed, spec: dict, *, timeout: float, failed: str, echo: bool = False) -> dict:
    """Run the benchmark being run again, in test-bed host 0, as its driver (``--drive`` and
    ``spec`` as JSON) and wait for it: the figures of its RESULT line (``emit_result``);
    ``echo``: its other lines of stdout printed here. No RESULT line: a RuntimeError,
    ``failed`` and the tail of the driver's stderr."""
    proc = bed.exec(
        0,
        [sys.executable, sys.modules["__main__"].__file__, "--drive", json.dumps(spec)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=str(ROOT),
    )
    stdout, stderr = proc.communicate(timeout=timeout)
    lines = stdout.splitlines()
    result = next((line[7:] for line in lines if line.startswith("RESULT ")), None)
    if result is None:
        raise RuntimeError(f"{failed}:\n{stderr[-3000:]}")
    if echo:
        print("\n".join(line for line in lines if not line.startswith("RESULT ")), flush=True)
    return json.loads(result)


def talks_missing(talks: int, available: int) -> str | None:
    """Why a corpus of ``talks`` spoken talks (of the ``available`` ones) cannot be made, or
    None: the count out of range, or no espeak-ng to speak them."""
    from vifusion.samples import talks as _talks

    if not 1 <= talks <= available:
        return f"--talks must be between 1 and {available}"
    if not _talks.have_espeak():
        return "espeak-ng is not installed (Debian: apt-get install espeak-ng)"
    return None


def run_benchmark(main: Callable[[], int], name: str) -> None:
    """Exit with ``main()``'s status. A kill (SIGTERM: ``timeout``, a CI cancel) unwinds like
    Ctrl-C (the test bed does the same inside its ``with`` block, where Ray may have put in
    a handler of its own), so temp dirs and beds are removed, and the run ends with one
    line saying it was interrupted, status 130."""
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        code = main()
    except KeyboardInterrupt:
        print(f"{name}: interrupted; what it had set up is torn down", file=sys.stderr)
        code = 130
    raise SystemExit(code)


def rank_of(found, video_id: int, start_s: float, end_s: float) -> int | None:
    """The rank (from 1) of the first moment in ``found`` of ``video_id`` that overlaps
    [start_s, end_s) (None: none is)."""
    return next(
        (
            i
            for i, m in enumerate(found, start=1)
            if m.video_id == video_id and m.start_s < end_s and start_s < m.end_s
        ),
        None,
    )


def index_timed(rt, paths: list[Path]) -> tuple[list, float]:
    """Index ``paths`` through ``rt``'s indexer (real ingest): the results and the wall
    seconds; raises if any video failed."""
    t0 = time.perf_counter()
    results = rt.indexer.index_files(paths)
    seconds = time.perf_counter() - t0
    bad = [r for r in results if r.status != "ready"]
    if bad:
        raise RuntimeError(f"ingest failed: {[(r.path, r.error) for r in bad]}")
    return results, seconds
