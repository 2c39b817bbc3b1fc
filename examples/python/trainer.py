"""A transformers Trainer whose checkpoints are WTXT generations in Git.

    python3 examples/python/trainer.py WORKDIR

Trains a small Llama on the CPU for 6 steps, a checkpoint every 2: each
becomes the next generation of WORKDIR/runs/llama.wtxt, committed (add
`remote=` to push, `sign_key=` to sign). Then the generation of step 4 is
restored from its commit and training resumes from it.
"""
import os
import subprocess
import sys

import torch
import transformers

from wtxt.trainer import WtxtCallback, restore_checkpoint

work = sys.argv[1] if len(sys.argv) > 1 else "trainer-example"
runs = os.path.join(work, "runs")
os.makedirs(runs, exist_ok=True)
subprocess.run(["git", "init", "-q", runs], check=True)


def trainer(out, callbacks=()):
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    data = [{"input_ids": torch.randint(0, 256, (16,)), "labels": torch.randint(0, 256, (16,))} for _ in range(64)]
    args = transformers.TrainingArguments(output_dir=out, max_steps=6, save_steps=2, per_device_train_batch_size=8,
                                          report_to=[], use_cpu=True, disable_tqdm=True, logging_steps=1000)
    return transformers.Trainer(model=transformers.LlamaForCausalLM(cfg), args=args, train_dataset=data,
                                callbacks=list(callbacks))


cb = WtxtCallback(runs, "llama.wtxt")
trainer(os.path.join(work, "out"), [cb]).train()
for info in cb.infos:
    print(f"generation {info.gen}: commit {info.commit[:10]}")
print(f"the Trainer waited {max(cb.held):.3f} s at most per checkpoint")

# The generation of step 4 (the second commit), from Git, verified, as a folder.
log = subprocess.run(["git", "-C", runs, "log", "--format=%H", "--reverse"], capture_output=True, text=True,
                     check=True).stdout.split()
old = os.path.join(work, "step4.wtxt")
with open(old, "wb") as f:
    subprocess.run(["git", "-C", runs, "show", f"{log[1]}:llama.wtxt"], stdout=f, check=True)
folder = restore_checkpoint(old, os.path.join(work, "resume-step4"))
trainer(os.path.join(work, "again")).train(resume_from_checkpoint=folder)
print(f"resumed from {folder} and trained to step 6")
