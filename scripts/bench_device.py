#!/usr/bin/env python3
"""Every figure of wtxt on a training node against its same-run baselines:
a 16-core machine with a CUDA GPU (the device machine), prepared here and
run there within --budget seconds (330 by default). All sections take
about eleven minutes: run them as two calls (`--only tests,gpu,publish,threads
--budget 470`, then `--only ranks,trainer`).

  gpu       a 4 GiB bf16 CUDA state (128 tensors of 4096 x 4096) through
            `safetensors.torch.save_file`, `torch.save`, `dcp.save` and
            `dcp.async_save` with DCP's FileSystemWriter, then
            `wtxt.torch.save_state_dict` (first call pins, second reuses),
            its tree form, `dcp.save` / `dcp.async_save` with
            WtxtStorageWriter, `wtxt snapshot` of the safetensors file and
            `wtxt verify`, against `openssl dgst -sha256` of the raw bytes;
            snapshots compared byte for byte with a CPU save
  publish   `Snapshotter.publish` of the same CUDA state (the loop's
            stall), each generation's stages, and how much a GPU training
            step slows while the background write runs, against
            `dcp.async_save` with FileSystemWriter on the same state
  threads   scripts/bench_threads.sh: 2 GiB, one array and 128 tensors,
            `--threads` 1..16, both digest forms
  ranks     scripts/bench_dcp.py at 2, 4 and 8 gloo ranks on the CPU
  trainer   scripts/bench_snapshotter.py (a transformers model, defaults)

    export PATH=$PWD/.dev/bin:$PATH PYTHONPATH=$PWD/.dev/site
    python3 scripts/bench_device.py [--out DIR] [--budget 330] [--only gpu,publish]

Sections run in the order above while --budget seconds last; each prints
its lines as it goes and into DIR/results.txt. docs/PERFORMANCE.md
("On a training node") keeps the figures.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TS = "2026-01-01T00:00:00Z"


def device() -> str:
    """"cuda" where torch sees a GPU; elsewhere the CPU (to try the script)."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def sync() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


class Run:
    """The run's clock, scratch folder and report."""

    def __init__(self, out: str, work: str, budget: float):
        self.t0 = time.monotonic()
        self.budget = budget
        self.work = work
        os.makedirs(out, exist_ok=True)
        self.report = open(os.path.join(out, "results.txt"), "a")

    def left(self) -> float:
        return self.budget - (time.monotonic() - self.t0)

    def say(self, line: str) -> None:
        print(line, flush=True)
        self.report.write(line + "\n")
        self.report.flush()

    def sh(self, cmd, timeout: float, env=None) -> str:
        """`cmd`'s output (its lines said as they come); a failure is said."""
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=ROOT)
        killer = threading.Timer(max(1.0, timeout), p.kill)
        killer.start()
        lines = []
        try:
            for line in p.stdout:
                lines.append(line.rstrip("\n"))
                self.say("  " + lines[-1])
        finally:
            killer.cancel()
        if p.wait() != 0:
            self.say(f"  ({' '.join(map(str, cmd))} exited {p.returncode})")
        return "\n".join(lines)


def cpu_s() -> float:
    a, b = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return a.ru_utime + a.ru_stime + b.ru_utime + b.ru_stime


def wall_cpu(fn):
    """(wall, CPU-seconds of this process and its children) of `fn()`."""
    sync()
    c0, t0 = cpu_s(), time.perf_counter()
    fn()
    sync()
    return time.perf_counter() - t0, cpu_s() - c0


def timed_cli(cmd):
    c0, t0 = cpu_s(), time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd))}: {r.stderr.strip()}")
    return time.perf_counter() - t0, cpu_s() - c0


def files_digest(head: str) -> str:
    """One SHA-256 over a snapshot's head and parts (to compare snapshots)."""
    h = hashlib.sha256()
    parts = head + ".parts"
    for p in [head] + ([os.path.join(parts, n) for n in sorted(os.listdir(parts))] if os.path.isdir(parts) else []):
        with open(p, "rb") as f:
            while chunk := f.read(1 << 24):
                h.update(chunk)
    return h.hexdigest()


def rm(*paths):
    for p in paths:
        shutil.rmtree(p, ignore_errors=True) if os.path.isdir(p) else (os.path.exists(p) and os.unlink(p))
        if os.path.isdir(p + ".parts"):
            shutil.rmtree(p + ".parts")


def init_group():
    import torch.distributed as dist

    if not dist.is_initialized():
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)


def gpu_state(gib: float):
    """128 bf16 tensors of 4096 columns, `gib` GiB in all, on the GPU."""
    import torch

    rows = max(1, int(gib * 2**30 / (128 * 4096 * 2)))
    g = torch.Generator(device=device()).manual_seed(0)
    return {f"model.layers.{i}.weight": torch.randn(rows, 4096, generator=g, device=device(), dtype=torch.bfloat16)
            for i in range(128)}


def gpu(run: Run, state) -> None:
    import safetensors.torch
    import torch
    import torch.distributed.checkpoint as dcp

    import wtxt.torch
    from wtxt.torch.dcp import WtxtStorageWriter

    init_group()
    w = run.work
    raw = os.path.join(w, "state.safetensors")
    rows = []

    def row(name, wall, cpu, note=""):
        rows.append((name, wall, cpu, note))
        run.say(f"  {name:44} {wall:7.2f} s {cpu:7.2f} CPU-s {note}")

    size = sum(t.numel() * t.element_size() for t in state.values())
    where = torch.cuda.get_device_name() if device() == "cuda" else "the CPU"
    run.say(f"gpu: {size / 2**30:.2f} GiB bf16 on {where}, {len(state)} tensors; "
            f"{os.cpu_count()} cores")
    row("safetensors.torch.save_file", *wall_cpu(lambda: safetensors.torch.save_file(state, raw)))
    st = rows[-1][1]
    osl = timed_cli(["openssl", "dgst", "-sha256", raw])
    row("openssl dgst -sha256 (the raw bytes)", *osl)
    row("torch.save", *wall_cpu(lambda: torch.save(state, os.path.join(w, "state.pt"))))
    rm(os.path.join(w, "state.pt"))
    row("dcp.save FileSystemWriter", *wall_cpu(lambda: dcp.save(
        state, storage_writer=dcp.FileSystemWriter(os.path.join(w, "fs")))))
    rm(os.path.join(w, "fs"))

    def async_stall(writer):
        t0 = time.perf_counter()
        fut = dcp.async_save(state, storage_writer=writer)
        stall = time.perf_counter() - t0
        fut.result()
        return stall, time.perf_counter() - t0

    stall, done = async_stall(dcp.FileSystemWriter(os.path.join(w, "fsa")))
    run.say(f"  {'dcp.async_save FileSystemWriter':44} stall {stall:.2f} s, done at {done:.2f} s")
    rm(os.path.join(w, "fsa"))
    out = os.path.join(w, "s.wtxt")
    for k in ("first: pins", "again: reuses"):
        rm(out)
        row(f"wtxt.torch.save_state_dict ({k})", *wall_cpu(lambda: wtxt.torch.save_state_dict(state, out, ts=TS)))
    save = rows[-1][1]
    gpu_digest = files_digest(out)
    tree = os.path.join(w, "t.wtxt")
    row("wtxt.torch.save_state_dict digest=tree", *wall_cpu(
        lambda: wtxt.torch.save_state_dict(state, tree, ts=TS, digest="tree")))
    dw = os.path.join(w, "dcp", "model.wtxt")
    row("dcp.save WtxtStorageWriter", *wall_cpu(lambda: dcp.save(
        state, storage_writer=WtxtStorageWriter(dw, ts=TS))))
    dcp_w = rows[-1][1]
    same_dcp = files_digest(dw) == gpu_digest
    rm(os.path.join(w, "dcp"))
    stall, done = async_stall(WtxtStorageWriter(os.path.join(w, "dcpa", "model.wtxt"), ts=TS))
    run.say(f"  {'dcp.async_save WtxtStorageWriter':44} stall {stall:.2f} s, done at {done:.2f} s")
    rm(os.path.join(w, "dcpa"))
    cli = os.path.join(w, "cli.wtxt")
    row("wtxt snapshot (the safetensors, split)", *timed_cli(["wtxt", "snapshot", raw, "-o", cli, "--ts", TS]))
    snap = rows[-1][1]
    rm(cli)
    row("wtxt snapshot --part-size none", *timed_cli(
        ["wtxt", "snapshot", raw, "-o", cli, "--ts", TS, "--part-size", "none"]))
    rm(cli)
    row("wtxt verify (save_state_dict's)", *timed_cli(["wtxt", "verify", out]))
    ver = rows[-1][1]
    row("wtxt verify (the tree form)", *timed_cli(["wtxt", "verify", tree]))
    # The same values saved from the CPU: the bytes may not depend on the device.
    host = {k: v.cpu() for k, v in state.items()}
    cpu_out = os.path.join(w, "c.wtxt")
    wtxt.torch.save_state_dict(host, cpu_out, ts=TS)
    same_cpu = files_digest(cpu_out) == gpu_digest
    del host
    rm(out, tree, cpu_out, raw)
    o = osl[0]
    run.say(f"  same bytes: GPU save = CPU save {same_cpu}; dcp.save WtxtStorageWriter = save_state_dict {same_dcp}")
    run.say(f"  goals: save_state_dict {save / o:.2f}x openssl (<= 1.25), {save / st:.2f}x safetensors (<= 1.3); "
            f"wtxt snapshot {snap / o:.2f}x openssl, {snap / st:.2f}x safetensors; "
            f"dcp.save Wtxt {dcp_w / o:.2f}x openssl, {dcp_w / st:.2f}x safetensors; verify {ver / o:.2f}x openssl "
            "(<= 1.1)")


def step_times(stop, x, w, least=20):
    """Mean seconds of a bf16 GEMM training-like step (matmuls, synced),
    taken until `stop()` (at least `least` steps)."""
    import torch

    times = []
    while len(times) < least or not stop():
        t0 = time.perf_counter()
        for _ in range(4):
            x = torch.tanh(x @ w)
        sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), len(times)


def publish(run: Run, state) -> None:
    import torch
    import torch.distributed.checkpoint as dcp

    import wtxt

    init_group()
    w = run.work
    k = 8192 if device() == "cuda" else 256
    x = torch.randn(k, k, device=device(), dtype=torch.bfloat16)
    m = torch.randn(k, k, device=device(), dtype=torch.bfloat16) / (k ** 0.5)
    alone, n = step_times(lambda: True, x, m, least=40)
    run.say(f"publish: a step (4 bf16 {k}^3 GEMMs) alone {alone * 1e3:.1f} ms (median of {n})")
    t0 = time.perf_counter()
    fut = dcp.async_save(state, storage_writer=dcp.FileSystemWriter(os.path.join(w, "fsa")))
    stall = time.perf_counter() - t0
    beside, n = step_times(fut.done, x, m)
    fut.result()
    run.say(f"  dcp.async_save FileSystemWriter: stall {stall:.2f} s, done {time.perf_counter() - t0:.2f} s, "
            f"a step beside it {beside * 1e3:.1f} ms ({n} steps, {beside / alone:.2f}x alone)")
    rm(os.path.join(w, "fsa"))
    repo = os.path.join(w, "repo")
    subprocess.run(["git", "init", "-q", "-b", "main", repo], check=True)
    with wtxt.Snapshotter(repo) as snap:
        for gen in range(3):
            for t in list(state.values())[:: 16]:
                t.add_(1)  # the training changes a few tensors
            t0 = time.perf_counter()
            snap.publish(state)
            stall = time.perf_counter() - t0
            fut = snap.request_snapshot()
            beside, n = step_times(fut.done, x, m)
            info = fut.result()
            took = time.perf_counter() - t0
            stages = " ".join(f"{k} {v:.1f}" for k, v in (info.stages or {}).items())
            run.say(f"  Snapshotter gen {info.gen}: publish stall {stall:.2f} s, committed at {took:.1f} s "
                    f"({stages}); a step beside it {beside * 1e3:.1f} ms ({n} steps, {beside / alone:.2f}x alone)")
        pinned = snap._stager.held if snap._stager else 0
    run.say(f"  pinned host memory the Snapshotter held: {pinned / 2**30:.2f} GiB")
    ok = subprocess.run(["wtxt", "verify", os.path.join(repo, "model.wtxt")], capture_output=True, text=True)
    run.say(f"  wtxt verify of the committed generation: exit {ok.returncode}")
    rm(repo)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/bench-device-out"))
    ap.add_argument("--work", default="/tmp/bench-device")
    ap.add_argument("--budget", type=float, default=330)
    ap.add_argument("--gib", type=float, default=4.0, help="size of the GPU state")
    ap.add_argument("--only", default="tests,gpu,publish,threads,ranks,trainer")
    args = ap.parse_args()
    shutil.rmtree(args.work, ignore_errors=True)
    os.makedirs(args.work)
    run = Run(args.out, args.work, args.budget)
    only = args.only.split(",")
    wtxt_bin = shutil.which("wtxt")
    run.say(f"wtxt {wtxt_bin}; python {sys.version.split()[0]}; {os.cpu_count()} cores")
    if "tests" in only:
        run.say("tests: python/tests/test_cuda.py")
        run.sh([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "python/tests/test_cuda.py"],
               timeout=min(90, run.left()))
    state = None
    for name in ("gpu", "publish"):
        if name not in only or run.left() < 40:
            continue
        try:
            if state is None:
                state = gpu_state(args.gib)
            (gpu if name == "gpu" else publish)(run, state)
        except Exception as e:  # noqa: BLE001 - one section's failure is reported, the rest still run
            run.say(f"  {name} failed: {type(e).__name__}: {e}")
    state = None
    env = dict(os.environ, BIN=wtxt_bin or "wtxt", RUNS="1", BENCH_DIR=os.path.join(args.work, "threads"))
    if "threads" in only and run.left() > 60:
        run.say("threads: scripts/bench_threads.sh 2048 (sha256 at 1 2 4 8 16, tree at 1 16)")
        run.sh(["bash", "scripts/bench_threads.sh", "2048"], timeout=min(150, run.left() - 30),
               env=dict(env, THREADS="1 2 4 8 16", DIGESTS="sha256"))
        if run.left() > 50:
            run.sh(["bash", "scripts/bench_threads.sh", "2048"], timeout=min(60, run.left() - 20),
                   env=dict(env, THREADS="1 16", DIGESTS="tree"))
        rm(os.path.join(args.work, "threads"))
    if "ranks" in only:
        for ranks in (2, 4, 8):
            if run.left() < 45:
                break
            run.say(f"ranks: scripts/bench_dcp.py --ranks {ranks} --gib 2 --runs 1")
            # The one-process loads do not depend on the ranks: measured once.
            run.sh([sys.executable, "scripts/bench_dcp.py", "--ranks", str(ranks), "--gib", "2", "--runs", "1",
                    "--one-process-runs", "1" if ranks == 2 else "0", "--dir", os.path.join(args.work, "dcp")],
                   timeout=run.left() - 10)
    if "trainer" in only and run.left() > 60:
        run.say("trainer: scripts/bench_snapshotter.py --steps 36 --every 12")
        run.sh([sys.executable, "scripts/bench_snapshotter.py", "--steps", "36", "--every", "12",
                "--dir", os.path.join(args.work, "snap")], timeout=run.left() - 5)
    run.say(f"done in {time.monotonic() - run.t0:.0f} s")


if __name__ == "__main__":
    main()
