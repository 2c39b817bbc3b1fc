#!/usr/bin/env python3
"""Peak memory of the in-process Snapshotter against the state it snapshots.

Publishes and requests N generations of a float32 state (default 10 of
about 191 MiB) into a new repository, flushes, and prints the process's
peak RSS above what it held before the Snapshotter started, as a multiple
of the state; once for each queue setting given (default: max_pending 1, 2
and 4, and coalesce). docs/DAEMON.md ("Memory") keeps the figures.

    python3 scripts/snapshotter_memory.py [--gens N] [--mib M] [SETTING ...]

SETTING: `max_pending=K` or `coalesce`. Each runs in a fresh process, so
one peak does not hide the next."""
import argparse
import os
import resource
import subprocess
import sys
import tempfile


def one(setting: str, gens: int, mib: int) -> None:
    import numpy as np

    import wtxt

    repo = tempfile.mkdtemp(prefix="wtxt-mem-")
    subprocess.run(["git", "init", "-q", repo], check=True)
    rows = mib * 2**20 // (10 * 5000 * 4)
    state = {f"layer{i}": np.random.default_rng(i).standard_normal((rows, 5000)).astype(np.float32) for i in range(10)}
    size = sum(a.nbytes for a in state.values()) / 2**20
    start = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    opts = {"coalesce": True} if setting == "coalesce" else {"max_pending": int(setting.split("=")[1])}
    with wtxt.Snapshotter(repo, path_in_repo="m.wtxt", **opts) as snap:
        for _ in range(gens):
            for a in state.values():
                a += 1
            snap.publish(state)
            snap.request_snapshot()
        snap.flush()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"{setting:14} state {size:6.0f} MiB  peak {peak:6.0f} MiB  above the start {peak - start:6.0f} MiB "
          f"= {(peak - start) / size:.2f}x the state", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gens", type=int, default=10)
    ap.add_argument("--mib", type=int, default=191)
    ap.add_argument("--one", help=argparse.SUPPRESS)
    ap.add_argument("settings", nargs="*", default=["max_pending=1", "max_pending=2", "max_pending=4", "coalesce"])
    a = ap.parse_args()
    if a.one:
        one(a.one, a.gens, a.mib)
        return
    for s in a.settings:
        subprocess.run([sys.executable, __file__, "--one", s, "--gens", str(a.gens), "--mib", str(a.mib)], check=True,
                       env=dict(os.environ))


if __name__ == "__main__":
    main()
