"""A PyTorch Lightning run whose checkpoints are WTXT generations in Git.

    python3 examples/python/lightning_fit.py WORKDIR

Fits a small regression model on the CPU for 6 steps, a checkpoint every 2
(`ModelCheckpoint`): each becomes the next generation of
WORKDIR/runs/lightning.wtxt, committed behind the loop (add `sign_key=` to
sign, `remote=` to push). Then a second fit resumes from the snapshot,
verified first, to step 8.
"""
import os
import subprocess
import sys

import lightning as L
import torch

from wtxt.lightning import WtxtCheckpointIO

work = sys.argv[1] if len(sys.argv) > 1 else "lightning-example"
runs = os.path.join(work, "runs")
os.makedirs(runs, exist_ok=True)
subprocess.run(["git", "init", "-q", runs], check=True)


class Model(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))

    def training_step(self, batch, _):
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=0.01)


x = torch.randn(256, 8)
data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, x.sum(1, keepdim=True)), batch_size=16)


def fit(steps, ckpt_path=None):
    io = WtxtCheckpointIO(runs)
    every = L.pytorch.callbacks.ModelCheckpoint(dirpath=os.path.join(work, "ckpt"), every_n_train_steps=2,
                                                save_top_k=-1)
    trainer = L.Trainer(max_steps=steps, accelerator="cpu", logger=False, enable_progress_bar=False,
                        callbacks=[every], plugins=[io], default_root_dir=work)
    trainer.fit(Model(), data, ckpt_path=ckpt_path)
    return io


io = fit(6)
print(f"generations {[i.gen for i in io.infos]}; the loop waited {max(io.held):.3f} s at most per checkpoint")
io = fit(8, ckpt_path=os.path.join(runs, "lightning.wtxt"))
print(f"resumed from runs/lightning.wtxt to step 8: generation {io.infos[-1].gen}")
