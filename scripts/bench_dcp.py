"""Distributed checkpoints: `dcp.save` of a >= 1 GiB sharded state over 2
ranks (gloo, CPU) with `WtxtStorageWriter`, against DCP's own
`FileSystemWriter` on the same state in the same run; the tree form (no
hash state handed from rank to rank); `async_save` (how
long the loop is blocked, how long until the snapshot is there); peak RSS
and CPU-seconds per rank; bytes the writer sends between ranks; and, for
reference, `wtxt.torch.save_state_dict` of the full state in one process.
Then the loads, each rank a fresh process: `dcp.load` with DCP's
`FileSystemReader` and with `WtxtStorageReader` of the 1.1-form and the
tree-form save (each rank keeps only its rows; in the tree form it
decodes only their chunks; and with `in_place=True`, straight into the
state dict's tensors), wall, CPU-seconds and how much the load adds
to each rank's peak RSS (the rank's zeroed shards are there before it).
Last, each snapshot loaded in one process keeping all rows, half, and
none: decoding against reading past.

    python3 scripts/bench_dcp.py [--gib 1] [--ranks 2] [--one-process-runs 3] [--dir /tmp/wtxt-bench-dcp]

Prints one line per measurement (best of --runs); docs/PERFORMANCE.md keeps
the figures. Needs the wtxt package installed (pip install ./python).
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def state(world: int, gib: float):
    """Square f32 matrices of 4096 columns, `gib` GiB in all, sharded by rows
    (FSDP's Shard(0)) over the ranks, plus a step."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor

    mesh = init_device_mesh("cpu", (world,))
    rows = 4096
    n = max(1, int(gib * (1 << 30) / (rows * 4096 * 4)))
    g = torch.Generator().manual_seed(0)
    out = {}
    for i in range(n):
        full = torch.randn(rows, 4096, generator=g)
        out[f"layers.{i}.weight"] = distribute_tensor(full, mesh, [Shard(0)])
        del full
    return {"model": out, "step": 1000}


def rank_main(rank: int, world: int, port: int, args, results) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    import torch.distributed.checkpoint as dcp

    from wtxt.torch.dcp import WtxtStorageWriter

    sd = state(world, args.gib)
    out = {}

    def timed(name, fn):
        best = None
        for k in range(args.runs):
            dist.barrier()
            c0, t0 = cpu(), time.perf_counter()
            fn(k)
            # CPU before the barrier: a rank that waits there for the other spins.
            c1 = cpu()
            dist.barrier()
            got = (time.perf_counter() - t0, c1 - c0)
            best = got if best is None or got[0] < best[0] else best
        out[name] = best

    timed("FileSystemWriter", lambda k: dcp.save(
        sd, storage_writer=dcp.FileSystemWriter(os.path.join(args.dir, f"fs{k}"), thread_count=1)))
    writer = {}

    def wtxt_save(k):
        w = WtxtStorageWriter(os.path.join(args.dir, f"w{k}", "model.wtxt"), ts="2026-01-01T00:00:00Z")
        dcp.save(sd, storage_writer=w)
        writer["w"] = w

    timed("WtxtStorageWriter", wtxt_save)
    out["sent"] = writer["w"].bytes_sent

    def tree_save(k):
        w = WtxtStorageWriter(os.path.join(args.dir, f"t{k}", "model.wtxt"), ts="2026-01-01T00:00:00Z", digest="tree")
        dcp.save(sd, storage_writer=w)

    # The tree form hands no hash state from rank to rank: the difference
    # to the line above is what the hand-off costs.
    timed("WtxtStorageWriter tree", tree_save)

    def async_save(k):
        w = WtxtStorageWriter(os.path.join(args.dir, f"a{k}", "model.wtxt"), ts="2026-01-01T00:00:00Z")
        t0 = time.perf_counter()
        fut = dcp.async_save(sd, storage_writer=w)
        out.setdefault("async_blocked", []).append(time.perf_counter() - t0)
        fut.result()

    timed("async_save", async_save)
    out["async_blocked"] = min(out["async_blocked"])
    out["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    results.put((rank, out))
    dist.barrier()
    dist.destroy_process_group()
    sys.stdout.flush()
    os._exit(0)


def hwm_mib() -> float:
    """This process's peak RSS (`VmHWM`: unlike `ru_maxrss`, not carried
    over from the process that forked it before `exec`)."""
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:")) / 1024


def load_main(rank: int, world: int, port: int, args, reader: str, results) -> None:
    """One rank's `dcp.load` of the saves above into a state of its shards;
    a fresh process, so that its peak RSS is the load's."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    import torch.distributed.checkpoint as dcp

    from wtxt.torch.dcp import WtxtStorageReader

    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Shard

    # The rank's zeroed shards alone (`state` builds each full tensor first,
    # which would set the peak before the load starts).
    mesh = init_device_mesh("cpu", (world,))
    n = max(1, int(args.gib * (1 << 30) / (4096 * 4096 * 4)))
    local = 4096 // world
    sd = {"model": {f"layers.{i}.weight": DTensor.from_local(
        torch.zeros(local, 4096), mesh, [Shard(0)], run_check=False, shape=torch.Size([4096, 4096]),
        stride=(4096, 1)) for i in range(n)}, "step": 0}
    dist.barrier()
    before = hwm_mib()
    c0, t0 = cpu(), time.perf_counter()
    if reader == "FileSystemReader":
        dcp.load(sd, storage_reader=dcp.FileSystemReader(os.path.join(args.dir, "fs0")))
    else:
        # The tree form's snapshot: a rank decodes only the chunks it keeps.
        snap = "w0" if reader == "WtxtStorageReader" else "t0"
        dcp.load(sd, storage_reader=WtxtStorageReader(os.path.join(args.dir, snap, "model.wtxt"),
                                                       in_place=reader.endswith("in place")))
    c1 = cpu()  # before the barrier, as in rank_main
    dist.barrier()
    got = (time.perf_counter() - t0, c1 - c0, hwm_mib() - before, before)
    results.put((rank, got))
    dist.barrier()
    dist.destroy_process_group()
    sys.stdout.flush()
    os._exit(0)


def one_process(args) -> dict:
    """The full state saved by one process (what the ranks' snapshot equals)."""
    import wtxt.torch

    g = torch.Generator().manual_seed(0)
    n = max(1, int(args.gib * (1 << 30) / (4096 * 4096 * 4)))
    full = {"model": {f"layers.{i}.weight": torch.randn(4096, 4096, generator=g) for i in range(n)}, "step": 1000}
    c0, t0 = cpu(), time.perf_counter()
    wtxt.torch.save_state_dict(full, os.path.join(args.dir, "one", "model.wtxt"), ts="2026-01-01T00:00:00Z")
    return {"save_state_dict": (time.perf_counter() - t0, cpu() - c0)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gib", type=float, default=1.0)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--dir", default="/tmp/wtxt-bench-dcp")
    ap.add_argument("--one-process-runs", type=int, default=3,
                    help="runs of each one-process load (best taken; 0: none)")
    args = ap.parse_args()
    shutil.rmtree(args.dir, ignore_errors=True)
    os.makedirs(os.path.join(args.dir, "one"))
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    results = ctx.SimpleQueue()
    mp.start_processes(rank_main, args=(args.ranks, port, args, results), nprocs=args.ranks, start_method="spawn")
    per_rank = dict(results.get() for _ in range(args.ranks))
    one = one_process(args)
    size = sum(os.path.getsize(os.path.join(args.dir, "fs0", f)) for f in os.listdir(os.path.join(args.dir, "fs0")))
    same = all(open(os.path.join(args.dir, d, "model.wtxt"), "rb").read() ==
               open(os.path.join(args.dir, "one", "model.wtxt"), "rb").read() for d in ("w0", "a0"))
    print(f"state: {args.gib} GiB f32 over {args.ranks} ranks (FileSystemWriter wrote {size / 2**30:.2f} GiB); "
          f"snapshots identical to save_state_dict's: {same}")
    for name in ("FileSystemWriter", "WtxtStorageWriter", "WtxtStorageWriter tree", "async_save"):
        wall = max(r[name][0] for r in per_rank.values())
        cpus = " ".join(f"{r[name][1]:.2f}" for _, r in sorted(per_rank.items()))
        print(f"{name:22} wall {wall:6.2f} s   CPU-s per rank {cpus}")
    fs = max(r["FileSystemWriter"][0] for r in per_rank.values())
    wt = max(r["WtxtStorageWriter"][0] for r in per_rank.values())
    print(f"{'ratio':18} {wt / fs:.2f}x FileSystemWriter's wall")
    print(f"{'async blocked':18} " + " ".join(f"{r['async_blocked']:.2f}" for _, r in sorted(per_rank.items())) + " s")
    print(f"{'peak RSS':18} " + " ".join(f"{r['peak_rss_mib']:.0f}" for _, r in sorted(per_rank.items())) + " MiB")
    print(f"{'sent between ranks':18} " + " ".join(f"{r['sent']}" for _, r in sorted(per_rank.items())) + " bytes")
    t, c = one["save_state_dict"]
    print(f"{'save_state_dict':18} wall {t:6.2f} s   CPU-s {c:.2f} (one process, the full state)")
    share = args.gib * 1024 / args.ranks
    for reader in ("FileSystemReader", "WtxtStorageReader", "WtxtStorageReader tree", "WtxtStorageReader tree, in place"):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        mp.start_processes(load_main, args=(args.ranks, port, args, reader, results), nprocs=args.ranks,
                           start_method="spawn")
        loads = dict(results.get() for _ in range(args.ranks))
        wall = max(r[0] for r in loads.values())
        rss = " ".join(f"{r[2]:.0f} (of {r[3] + r[2]:.0f})" for _, r in sorted(loads.items()))
        cpus = " ".join(f"{r[1]:.2f}" for _, r in sorted(loads.items()))
        print(f"load, {reader:32} wall {wall:6.2f} s   CPU-s per rank {cpus}   peak RSS added by the load, "
              f"per rank {rss} MiB (a rank's share: {share:.0f} MiB)")
    if args.one_process_runs > 0:
        rows_in_one_process(args)
    json.dump({"ranks": per_rank, "one": one}, open(os.path.join(args.dir, "results.json"), "w"))


def rows_in_one_process(args) -> None:
    """Each snapshot loaded in this process keeping all rows, half of each
    tensor's, and none (best of --one-process-runs): what a rank's decoding
    costs against reading past what it does not keep."""
    import wtxt._rust as rust
    from wtxt.torch import _load

    def rchar() -> int:
        """Bytes this process has read from files (and pipes) so far."""
        with open("/proc/self/io") as f:
            return int(next(l for l in f if l.startswith("rchar:")).split()[1])

    for snap, form in (("w0", "1.1 form"), ("t0", "tree form")):
        path = os.path.join(args.dir, snap, "model.wtxt")
        shapes = {t.name: t.shape for t in rust.outline(path).tensors if t.shape}
        cases = {"all": None, "half": {n: (0, s[0] // 2) for n, s in shapes.items()},
                 "none": {n: (0, 0) for n in shapes}}
        line = []
        for what, rows in cases.items():
            best = None
            for _ in range(args.one_process_runs):
                c0, t0, r0 = cpu(), time.perf_counter(), rchar()
                _load(path, None, None, None, None, rows=rows)
                got = (time.perf_counter() - t0, cpu() - c0, rchar() - r0)
                best = got if best is None or got[0] < best[0] else best
            line.append(f"{what} {best[0]:.2f} s ({best[1]:.2f} CPU-s, {best[2] / 1e6:.0f} MB read)")
        print(f"one process, rows kept, {form:9}: " + ", ".join(line))


if __name__ == "__main__":
    main()
