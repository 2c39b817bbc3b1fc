#!/usr/bin/env python3
"""A training loop that feeds `wtxt daemon` over its socket (standard library
+ numpy): the way for programs in other languages, or without the `wtxt`
package. From Python, `examples/python/train_loop.py` (in process) blocks
the loop far less.

Every step it "trains" (nudges the weights), publishes the state as an .npz
(written to a temporary name, then renamed, so the daemon never sees half a
file) and, every --every steps, asks the daemon for a snapshot of it:

    wtxt daemon --repo REPO --socket /tmp/wtxt.sock &
    python3 examples/python/socket_client.py --socket /tmp/wtxt.sock --steps 50 --every 10

The daemon writes the canonical WTXT into its ring, commits it with the
Merkle chain, pushes it, and answers at once: the loop never waits on it.
"""

import argparse
import json
import os
import socket
import sys

import numpy as np


def ask(sock_path, line):
    """One request, one reply line (the daemon's protocol)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.connect(sock_path)
        s.sendall((line + "\n").encode())
        s.shutdown(socket.SHUT_WR)
        reply = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            reply += chunk
    return reply.decode().strip()


def publish(state, path):
    """Writes the state atomically: temp file, fsync, rename."""
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        np.savez(f, **state)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--socket", required=True)
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--every", type=int, default=10)
    p.add_argument("--dir", default=".", help="where the published states go")
    args = p.parse_args()

    rng = np.random.default_rng(0)
    state = {
        "embed": rng.standard_normal((1000, 64), dtype=np.float32),
        "w1": rng.standard_normal((64, 64), dtype=np.float32),
        "b1": np.zeros(64, dtype=np.float32),
        "step": np.array(0, dtype=np.int64),
    }
    os.makedirs(args.dir, exist_ok=True)
    for step in range(1, args.steps + 1):
        # "Training": a few rows of the embedding and the dense layer move.
        rows = rng.integers(0, state["embed"].shape[0], size=8)
        state["embed"][rows] -= 0.01 * rng.standard_normal((8, 64), dtype=np.float32)
        state["w1"] -= 0.001 * rng.standard_normal((64, 64), dtype=np.float32)
        state["step"] = np.array(step, dtype=np.int64)
        path = os.path.join(os.path.abspath(args.dir), f"state-{step % 2}.npz")
        publish(state, path)
        if step % args.every == 0:
            reply = ask(args.socket, f"snapshot {path} gen={step}")
            if not reply.startswith("ok "):
                sys.exit(f"daemon refused step {step}: {reply}")
            print(f"step {step}: {reply}")
    print("flush:", ask(args.socket, "flush"))
    status = json.loads(ask(args.socket, "status"))
    print(json.dumps(status))
    if status["last_error"] or status["resend_queue"]:
        sys.exit(f"daemon reports a problem: {status}")


if __name__ == "__main__":
    main()
