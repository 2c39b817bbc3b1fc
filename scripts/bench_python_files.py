#!/usr/bin/env python3
"""`wtxt.save_file`, `load_file` and `load_metadata` at model size, against
NumPy's own `np.savez` / `np.load` of the same state, one run, one machine.

A float32 state of --mib MiB (8 matrices). Each step runs in a fresh Python
process so that its peak RSS is its own; `sync` before each. Prints seconds,
peak RSS and the ratio to the NumPy baseline measured in the same run.

    python3 -m pip install ./python
    python3 scripts/bench_python_files.py [--mib 1024] [--dir /tmp/bench-work]
"""
import argparse
import os
import subprocess
import sys
import tempfile

STEP = r"""
import resource, sys, time
import numpy as np
import wtxt
what, path, mib = sys.argv[1], sys.argv[2], int(sys.argv[3])
def state():
    rng = np.random.default_rng(0)
    rows = mib * 256 // 8
    return {f"model.layers.{i}.mlp.weight": rng.standard_normal((rows, 1024), dtype=np.float32) for i in range(8)}
s = state() if what.startswith("save") else None
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t = time.perf_counter()
if what == "save_np":
    np.savez(path, **{k.replace(".", "_"): v for k, v in s.items()})
elif what == "save_wtxt":
    wtxt.save_file(s, path)
elif what == "load_np":
    with np.load(path) as z:
        d = {k: z[k] for k in z.files}
elif what == "load_wtxt":
    d = wtxt.load_file(path)
elif what == "metadata_wtxt":
    wtxt.load_metadata(path)
dt = time.perf_counter() - t
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(f"{dt:.3f} {max(peak - base, 0) >> 10} {peak >> 10}")
"""


def step(what, path, mib):
    subprocess.run(["sync"], check=True)
    out = subprocess.run([sys.executable, "-c", STEP, what, path, str(mib)], check=True, capture_output=True, text=True)
    secs, grown, peak = out.stdout.split()
    return float(secs), int(grown), int(peak)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=int, default=1024)
    ap.add_argument("--dir", default=None)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(dir=a.dir) as d:
        npz, wt = os.path.join(d, "m.npz"), os.path.join(d, "m.wtxt")
        rows = [
            ("np.savez", "save_np", npz, None),
            ("wtxt.save_file", "save_wtxt", wt, "np.savez"),
            ("np.load (every array)", "load_np", npz, None),
            ("wtxt.load_file", "load_wtxt", wt, "np.load (every array)"),
            ("wtxt.load_metadata", "metadata_wtxt", wt, "np.load (every array)"),
        ]
        print(f"{a.mib} MiB float32 state, 8 matrices; peak RSS of the step's process")
        got = {}
        for label, what, path, against in rows:
            secs, grown, peak = step(what, path, a.mib)
            got[label] = secs
            ratio = f"  {secs / got[against]:.2f}x {against}" if against else ""
            print(f"{label:24} {secs:7.2f} s  peak {peak:6d} MiB (+{grown} MiB in the step){ratio}")


if __name__ == "__main__":
    main()
