"""Meta's torch_checkpointing saving through WTXT: each checkpoint a
generation in Git.

    python3 examples/python/torch_checkpointing_save.py WORKDIR

Trains a small model on the CPU and saves it with torch_checkpointing's
CheckpointManager every 2 steps, through `wtxt.torch_checkpointing`'s
storage: every checkpoint committed under WORKDIR/ckpt also becomes the
next generation of WORKDIR/runs/checkpoint.wtxt (the asynchronous saver's
writer process makes it, off the loop). Then the last generation comes
back as a folder, verified first, and a fresh model loads it.
"""
import os
import subprocess
import sys

import torch
from torch_checkpointing.checkpoint_manager import CheckpointManager

from wtxt.torch_checkpointing import WtxtStorageConfig, restore


def model_and_optimizer():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    return model, torch.optim.AdamW(model.parameters(), lr=0.01)


def step(model, opt):
    x = torch.randn(32, 16)
    torch.nn.functional.mse_loss(model(x), x.sum(1, keepdim=True)).backward()
    opt.step()
    opt.zero_grad()


def main() -> None:
    work = sys.argv[1] if len(sys.argv) > 1 else "torch-checkpointing-example"
    runs = os.path.join(work, "runs")
    os.makedirs(runs, exist_ok=True)
    subprocess.run(["git", "init", "-q", runs], check=True)
    # Direct I/O (torch_checkpointing's default) is off: not every folder supports it.
    storage = WtxtStorageConfig(repo=runs, use_direct_io=False)
    manager = CheckpointManager(CheckpointManager.Config(storage_config=storage))

    model, opt = model_and_optimizer()
    for n in range(1, 5):
        step(model, opt)
        if n % 2 == 0:
            manager.save(os.path.join(work, "ckpt", f"step_{n}"),
                         {"model": model.state_dict(), "optim": opt.state_dict(), "step": n})
    manager.close()  # waits for the last save, its generation included
    log = subprocess.run(["git", "log", "--format=%s"], cwd=runs, check=True, capture_output=True, text=True)
    print(log.stdout, end="")

    resume = restore(os.path.join(runs, "checkpoint.wtxt"), os.path.join(work, "resume"))
    fresh, fresh_opt = model_and_optimizer()
    step(fresh, fresh_opt)  # the optimizer's state exists to load into
    loader = CheckpointManager(CheckpointManager.Config.with_sync_save())
    loaded = loader.load(resume, into={"model": fresh.state_dict(), "optim": fresh_opt.state_dict(), "step": 0})
    loader.close()
    same = all(torch.equal(loaded["model"][k], v) for k, v in model.state_dict().items())
    print(f"loaded step {loaded['step']} back from the last generation: weights equal: {same}")


if __name__ == "__main__":  # torch_checkpointing's writer process is spawned
    main()
