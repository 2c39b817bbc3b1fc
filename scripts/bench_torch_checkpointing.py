"""Meta's torch_checkpointing through `wtxt.torch_checkpointing` at a real
size: a state of f32 tensors (--gib, 1 by default) saved by a
`CheckpointManager`, in one run:

- the synchronous saver with torch_checkpointing's own local storage, then
  with `WtxtStorageConfig` (the checkpoint, then its generation committed
  into a fresh Git repository: `save` returns after both);
- the asynchronous saver with each storage: how long `save` holds the
  loop, and when the save's future resolves;
- baselines of the same run: `cp -r` of the checkpoint folder,
  `wtxt.torch.save_state_dict` of the same state alone, and the same
  generations by hand (`save_state_dict(..., prev=)`, `git add`, `git
  commit` through the pre-commit hook `wtxt git install` sets); the
  storage's CPU a generation (its sync save less the local storage's)
  against them is the ratio the adapters' goal names (<= 1.5x).

Wall seconds and CPU-seconds (this process and its children; the async
saver's writer process is a child, counted once it has exited, so the
async rows give wall only). docs/PERFORMANCE.md keeps the figures.

    python3 scripts/bench_torch_checkpointing.py [--gib 1] [--dir /tmp/wtxt-bench-tc]
"""
import argparse
import os
import resource
import shutil
import subprocess
import time

import torch
from torch_checkpointing.checkpoint_manager import CheckpointManager
from torch_checkpointing.config import AsyncCheckpointSaverConfig, SyncCheckpointSaverConfig
from torch_checkpointing.storage.filesystem import LocalFileSystemStorageConfig

import wtxt.torch
from wtxt.torch_checkpointing import WtxtStorageConfig


def cpu() -> float:
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


def timed(label, f):
    subprocess.run(["sync"], check=True)
    t, c = time.perf_counter(), cpu()
    out = f()
    spent = cpu() - c
    print(f"{label:58} {time.perf_counter() - t:7.2f} s wall {spent:7.2f} CPU-s", flush=True)
    return out, spent


def fresh_repo(path: str) -> str:
    shutil.rmtree(path, ignore_errors=True)
    subprocess.run(["git", "init", "-q", path], check=True)
    return path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gib", type=float, default=1.0)
    ap.add_argument("--dir", default="/tmp/wtxt-bench-tc")
    args = ap.parse_args()
    shutil.rmtree(args.dir, ignore_errors=True)
    os.makedirs(args.dir)
    n = max(1, int(args.gib * 16))  # 64 MiB tensors
    g = torch.Generator().manual_seed(0)
    state = {"model": {f"layer{i}.weight": torch.randn(4096, 4096, generator=g) for i in range(n)}, "step": 1}
    print(f"state: {n} f32 tensors of 4096 x 4096 = {n * 64} MiB; {os.cpu_count()} cores"
          "", flush=True)
    d = lambda *p: os.path.join(args.dir, *p)  # noqa: E731
    local = LocalFileSystemStorageConfig(use_direct_io=False)

    def sync_save(storage, where):
        m = CheckpointManager(CheckpointManager.Config(save=SyncCheckpointSaverConfig(), storage_config=storage))
        m.save(where, state)
        m.close()

    _, local_cpu = timed("sync save, torch_checkpointing's local storage",
                         lambda: sync_save(local, d("plain", "step_1")))
    timed("cp -r of that checkpoint folder", lambda: subprocess.run(["cp", "-r", d("plain", "step_1"), d("copy")],
                                                                   check=True))
    timed("wtxt.torch.save_state_dict of the same state", lambda: wtxt.torch.save_state_dict(
        state["model"], d("alone.wtxt")))
    repo = fresh_repo(d("runs"))
    costs = [timed(f"sync save, WtxtStorageConfig (checkpoint + generation {g})",
                   lambda: sync_save(WtxtStorageConfig(repo=repo, use_direct_io=False), d("wtxt", f"step_{g}")))[1]
             for g in (0, 1)]  # generation 1 chains from 0 (verified whole first) in a repository that holds it
    hand_repo = fresh_repo(d("hand"))
    subprocess.run([shutil.which("wtxt"), "git", "install"], cwd=hand_repo, check=True, capture_output=True)
    env = {**os.environ, "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@e", "GIT_COMMITTER_NAME": "b",
           "GIT_COMMITTER_EMAIL": "b@e"}
    path = os.path.join(hand_repo, "checkpoint.wtxt")

    def by_hand(g):
        wtxt.torch.save_state_dict(state, path, prev=path if g else None)
        subprocess.run(["git", "add", "-A"], cwd=hand_repo, check=True)
        subprocess.run(["git", "commit", "-qm", f"g{g}"], cwd=hand_repo, check=True, env=env)

    hand = [timed(f"by hand, generation {g} (save_state_dict, git add, hooked commit)", lambda: by_hand(g))[1]
            for g in (0, 1)]
    for g in (0, 1):
        print(f"CPU a generation {g}: the storage {costs[g] - local_cpu:.2f} CPU-s, by hand {hand[g]:.2f}: "
              f"{(costs[g] - local_cpu) / hand[g]:.2f}x (goal <= 1.5x)", flush=True)

    for name, storage in (("local storage", local),
                          ("WtxtStorageConfig", WtxtStorageConfig(repo=fresh_repo(d("runs-async")),
                                                                  use_direct_io=False))):
        m = CheckpointManager(CheckpointManager.Config(save=AsyncCheckpointSaverConfig(), storage_config=storage))
        warm = m.save(d(f"async-{name[:5]}", "step_0"), state)  # starts the writer process
        warm.result()
        t = time.perf_counter()
        fut = m.save(d(f"async-{name[:5]}", "step_1"), state)
        held = time.perf_counter() - t
        fut.result()
        done = time.perf_counter() - t
        m.close()
        print(f"async save, {name:42} loop held {held:6.2f} s, done at {done:6.2f} s", flush=True)
    shutil.rmtree(args.dir, ignore_errors=True)


if __name__ == "__main__":  # torch_checkpointing's writer process is spawned
    main()
