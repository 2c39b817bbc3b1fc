"""What the Lightning and Accelerate adapters cost a generation, against the
same bytes by hand, in one run (the Trainer's figure is
scripts/bench_trainer.py's, torch_checkpointing's
scripts/bench_torch_checkpointing.py's).

A model of about PARAMS_M million f32 parameters (an MLP of 1024-wide
layers) with AdamW (a checkpoint of ~12 bytes a parameter), trained on the
CPU and checkpointed GENS times:

- Lightning: `Trainer.fit` with `ModelCheckpoint(every epoch)`, with
  Lightning's own `TorchCheckpointIO` and with `WtxtCheckpointIO` (a
  generation of each checkpoint, committed behind the loop);
- Accelerate: `accelerator.save_state` alone, and through
  `WtxtStateSaver` (its folder as a generation behind the loop).

Each adapter's CPU a generation is the process's CPU with it less without
it, plus the framework's own save that it replaces (Lightning: the
`torch.save` the plugin stands in for; Accelerate keeps its save). The
baseline is the same arrays by hand: `wtxt.save_file(..., prev=)`,
`git add` and `git commit` through the pre-commit hook `wtxt git install`
sets (it verifies and packs). The ratio is the goal's (<= 1.5x).

    python3 scripts/bench_adapters.py [PARAMS_M [GENS]]      (defaults 17, 3)
"""
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import warnings

import numpy as np
import torch

from by_hand import by_hand

params_m = int(sys.argv[1]) if len(sys.argv) > 1 else 17
gens = int(sys.argv[2]) if len(sys.argv) > 2 else 3
HIDDEN = 1024
layers = max(1, round(params_m * 1e6 / (HIDDEN * HIDDEN)))
warnings.filterwarnings("ignore")


def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def model():
    torch.manual_seed(0)
    return torch.nn.Sequential(*[torch.nn.Linear(HIDDEN, HIDDEN) for _ in range(layers)])


def batches():
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(8, HIDDEN, generator=g), torch.randn(8, HIDDEN, generator=g)) for _ in range(2)]


def lightning(work):
    import lightning as L
    from lightning.pytorch.callbacks import ModelCheckpoint
    from lightning.pytorch.plugins.io import TorchCheckpointIO
    from wtxt._objects import Encoder
    from wtxt.lightning import _FORMAT, STRUCTURE, WtxtCheckpointIO

    class Net(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = model()

        def training_step(self, batch, _):
            x, y = batch
            return torch.nn.functional.mse_loss(self.net(x), y)

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=1e-3)

    own_saves, checkpoints = [], []
    orig = TorchCheckpointIO.save_checkpoint

    def timed(self, checkpoint, path, storage_options=None):
        c = cpu()
        orig(self, checkpoint, path, storage_options)
        own_saves.append(cpu() - c)
        checkpoints.append(path)

    TorchCheckpointIO.save_checkpoint = timed

    def fit(where, plugins):
        trainer = L.Trainer(max_epochs=gens, accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
                            enable_model_summary=False, default_root_dir=where, plugins=plugins,
                            callbacks=[ModelCheckpoint(dirpath=os.path.join(where, "ck"), save_top_k=-1)])
        c = cpu()
        trainer.fit(Net(), torch.utils.data.DataLoader(batches(), batch_size=None))
        return cpu() - c

    plain = fit(os.path.join(work, "plain"), [])
    repo = os.path.join(work, "lightning-runs")
    subprocess.run(["git", "init", "-q", repo], check=True)
    io = WtxtCheckpointIO(repo)
    with_io = fit(os.path.join(work, "with"), [io])
    n = len(io.infos)
    per_gen = (with_io - plain) / max(1, n) + sum(own_saves) / max(1, len(own_saves))
    # The same arrays the plugin writes, from the checkpoints Lightning wrote.
    states = []
    for p in checkpoints:
        ck = torch.load(p, weights_only=False)
        arrays = {}
        tree = Encoder(arrays).encode(ck, "checkpoint")
        arrays[STRUCTURE] = np.frombuffer(json.dumps({"format": _FORMAT, "checkpoint": tree}, sort_keys=True).encode(), dtype=np.uint8)
        states.append(arrays)
    size = os.path.getsize(checkpoints[-1])
    return "Lightning", n, size, per_gen, own_saves, io.held, by_hand(os.path.join(work, "hand-l"), states)


def accelerate(work):
    from accelerate import Accelerator
    from wtxt.accelerate import WtxtStateSaver
    from wtxt.checkpoint import checkpoint_state

    def loop(where, saver):
        acc = Accelerator(cpu=True)
        net = model()
        opt = torch.optim.AdamW(net.parameters(), lr=1e-3)
        net, opt = acc.prepare(net, opt)
        saves, folders = [], []
        c = cpu()
        for g in range(gens):
            for x, y in batches():
                loss = torch.nn.functional.mse_loss(net(x), y)
                acc.backward(loss)
                opt.step()
                opt.zero_grad()
            d = os.path.join(where, f"state-{g}")
            s = cpu()
            if saver is None:
                acc.save_state(d)
                saves.append(cpu() - s)
            else:
                saver.save_state(acc, d)
            folders.append(d)
        if saver is not None:
            saver.finish()
        return cpu() - c, saves, folders

    plain, own_saves, folders = loop(os.path.join(work, "acc-plain"), None)
    repo = os.path.join(work, "acc-runs")
    subprocess.run(["git", "init", "-q", repo], check=True)
    saver = WtxtStateSaver(repo)
    with_saver, _, _ = loop(os.path.join(work, "acc-with"), saver)
    n = len(saver.infos)
    per_gen = (with_saver - plain) / max(1, n)
    size = sum(os.path.getsize(os.path.join(dp, f)) for dp, _, fs in os.walk(folders[-1]) for f in fs)
    states = [checkpoint_state(f) for f in folders]
    return "Accelerate", n, size, per_gen, own_saves, saver.held, by_hand(os.path.join(work, "hand-a"), states)


with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as work:
    print(f"{os.cpu_count()} cores; an MLP of {layers} layers of {HIDDEN} x {HIDDEN} f32 "
          f"({layers * HIDDEN * (HIDDEN + 1) / 1e6:.0f}M parameters) with AdamW, {gens} checkpoints", flush=True)
    for bench in (lightning, accelerate):
        t = time.perf_counter()
        name, n, size, per_gen, own, held, hand = bench(work)
        mean_hand = sum(hand) / len(hand)
        print(f"{name}: {n} generations of a {size / 2**20:.0f} MiB checkpoint ({time.perf_counter() - t:.0f} s)")
        print(f"  the framework's own save:          {', '.join(f'{s:.2f}' for s in own)} CPU-s")
        print(f"  the adapter held the loop:         {', '.join(f'{s:.2f}' for s in held)} s")
        print(f"  CPU a generation, the adapter:     {per_gen:.2f} CPU-s")
        print(f"  the same arrays by hand:           {', '.join(f'{h:.2f}' for h in hand)} CPU-s "
              f"(save_file --prev, git add, hooked commit)")
        print(f"  ratio:                             {per_gen / mean_hand:.2f}x (goal <= 1.5x)", flush=True)
