"""Accelerate's save_state folders as WTXT generations in Git.

    python3 examples/python/accelerate_state.py WORKDIR

Trains a small model for 4 steps with `accelerate` on the CPU, saving the
state after each: every folder becomes the next generation of
WORKDIR/runs/state.wtxt, committed behind the loop. Then a fresh
Accelerator loads the last generation back, verified first.
"""
import os
import subprocess
import sys

import torch
from accelerate import Accelerator
from accelerate.utils import set_seed

from wtxt.accelerate import WtxtStateSaver, load_state

work = sys.argv[1] if len(sys.argv) > 1 else "accelerate-example"
runs = os.path.join(work, "runs")
os.makedirs(runs, exist_ok=True)
subprocess.run(["git", "init", "-q", runs], check=True)


def setup():
    set_seed(0)
    acc = Accelerator(cpu=True)
    model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    opt = torch.optim.AdamW(model.parameters(), lr=0.01)
    return (acc, *acc.prepare(model, opt))


acc, model, opt = setup()
saver = WtxtStateSaver(runs)
for step in range(4):
    x = torch.randn(32, 16)
    acc.backward(torch.nn.functional.mse_loss(model(x), x.sum(1, keepdim=True)))
    opt.step()
    opt.zero_grad()
    saver.save_state(acc, os.path.join(work, f"state-{step}"))
print(f"generations {[i.gen for i in saver.finish()]}")

acc, model, opt = setup()
load_state(acc, os.path.join(runs, "state.wtxt"), os.path.join(work, "resume"))
print("loaded the last generation back into a fresh Accelerator")
