#!/usr/bin/env python3
"""Generations of a model for the Git benchmarks: MATS f32 matrices of COLS
columns, MIB MiB in all, saved as OUT/gen0.npz ... gen{GENS-1}.npz; each
generation after the first changes 1% of the rows of 3 matrices by 0.01
(CHANGE `random`: rows anywhere, so nearly every chunk of those matrices
changes; `block`: one contiguous run). OUT/changed_bytes gets the bytes
changed over all generations. Seeded: the same arguments give the same
files.

Usage: make_generations.py OUT MIB GENS MATS COLS [random|block]
"""
import random
import sys

import numpy as np

out, mib, gens, mats, cols = sys.argv[1], *map(int, sys.argv[2:6])
change = sys.argv[6] if len(sys.argv) > 6 else "random"
rows = (mib << 20) // (mats * cols * 4)
rng = np.random.default_rng(7)
state = {f"transformer_h_{i}_mlp_c_fc_weight": rng.standard_normal((rows, cols), dtype=np.float32)
         for i in range(mats)}
pick = random.Random(7)
changed = 0
for g in range(gens):
    if g:
        for name in pick.sample(sorted(state), 3):
            if change == "block":
                start = pick.randrange(rows - rows // 100)
                rs = list(range(start, start + rows // 100))
            else:
                rs = pick.sample(range(rows), max(1, rows // 100))
            state[name][rs] += np.float32(0.01)
            changed += len(rs) * cols * 4
    np.savez(f"{out}/gen{g}.npz", **state)
open(f"{out}/changed_bytes", "w").write(str(changed))
