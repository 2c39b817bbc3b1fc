#!/usr/bin/env python3
"""A NumPy training loop that snapshots its state into Git, in process.

    python3 -m pip install ./python            # once, from the repository root
    git init -q /tmp/run && git init -q --bare /tmp/run-remote.git
    python3 examples/python/train_loop.py --repo /tmp/run --remote /tmp/run-remote.git

Every step "trains" (nudges the weights); every --every steps it publishes
the state and requests a snapshot. `publish` stages one copy of the arrays
and returns; hashing, writing the WTXT (split into parts past 45 MiB), the
commit and the push run on background threads, so the loop only pays for
the copy. Futures report each snapshot (gen, commit, pushed) as it lands.
"""

import argparse
import time

import numpy as np

import wtxt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repo", required=True, help="Git work tree the snapshots are committed to")
    ap.add_argument("--remote", help="remote (name, path or URL) to push to")
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--every", type=int, default=10, help="snapshot every N steps")
    ap.add_argument("--mib", type=int, default=16, help="size of the state in MiB of float32")
    ap.add_argument("--sign-key", help="Ed25519 key (PEM or OpenSSH) to sign every snapshot")
    args = ap.parse_args()

    rng = np.random.default_rng(0)
    rows = args.mib * 256
    state = {
        "model.embed_tokens.weight": rng.standard_normal((rows, 1024), dtype=np.float32),
        "model.norm.weight": np.ones(1024, np.float32),
        "optimizer.step": np.array(0, np.int64),
    }
    pending = []
    blocked = []
    with wtxt.Snapshotter(args.repo, path_in_repo="model.wtxt", remote=args.remote, sign_key=args.sign_key) as snap:
        for step in range(1, args.steps + 1):
            # "Training": a small update of a few rows.
            rows_hit = rng.integers(0, rows, 8)
            state["model.embed_tokens.weight"][rows_hit] *= np.float32(0.999)
            state["optimizer.step"][...] = step
            if step % args.every == 0:
                t = time.perf_counter()
                snap.publish(state)
                pending.append(snap.request_snapshot())
                blocked.append(time.perf_counter() - t)
            for f in [f for f in pending if f.done()]:
                pending.remove(f)
                try:
                    info = f.result()
                    print(f"step {step}: gen {info.gen} committed {info.commit[:12]}, pushed={info.pushed}")
                except wtxt.Error as e:
                    print(f"step {step}: snapshot failed: {e}")
        snap.flush()
        for f in pending:
            try:
                info = f.result()
                print(f"gen {info.gen} committed {info.commit[:12]}, pushed={info.pushed}")
            except wtxt.Error as e:
                print(f"snapshot failed: {e}")
        print("status:", snap.status())
    if blocked:
        print(f"the loop was blocked {1000 * np.median(blocked):.1f} ms per snapshot (median of {len(blocked)})")
    back = wtxt.load_file(f"{args.repo}/model.wtxt")
    assert int(back["optimizer.step"]) == args.steps - args.steps % args.every
    print("the last snapshot verifies and loads under the original names:", sorted(back)[:2], "...")


if __name__ == "__main__":
    main()
