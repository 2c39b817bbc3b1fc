"""What WtxtCallback costs a transformers Trainer at a real size: a Llama of
about PARAMS_M million f32 parameters (AdamW: a checkpoint of ~12 bytes a
parameter) trained for 2 steps on the CPU, a checkpoint at each, with and
without the callback, in one run. Prints the Trainer's own save
(`_save_checkpoint`: model, optimizer, scheduler, RNG, state) against the
time the callback held the loop (reading the folder back and the copy), and
how long each generation took to be written and committed behind it. Then
the CPU a generation cost (the process's CPU with the callback less
without it, over the generations) against the same bytes by hand:
`wtxt.save_file(..., prev=)`, `git add`, and `git commit` with the
pre-commit hook `wtxt git install` sets (it verifies and packs), in a
repository of its own.

    python3 scripts/bench_trainer.py [PARAMS_M [HIDDEN]]      (defaults 250, 1024)
"""
import os
import resource
import subprocess
import sys
import tempfile
import time

import torch
import transformers

from wtxt.trainer import WtxtCallback
from by_hand import by_hand

params_m = int(sys.argv[1]) if len(sys.argv) > 1 else 250
hidden = int(sys.argv[2]) if len(sys.argv) > 2 else 1024
layers = max(1, round((params_m * 1e6 - 2 * 32000 * hidden) / (12 * hidden * hidden)))
saves = []
orig = transformers.Trainer._save_checkpoint


def timed(self, *a, **k):
    t = time.perf_counter()
    orig(self, *a, **k)
    saves.append(time.perf_counter() - t)


transformers.Trainer._save_checkpoint = timed


def cpu(who=resource.RUSAGE_SELF):
    r = resource.getrusage(who)
    return r.ru_utime + r.ru_stime


def run(work, callbacks):
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=32000, hidden_size=hidden, intermediate_size=4 * hidden,
                                   num_hidden_layers=layers, num_attention_heads=16, num_key_value_heads=16,
                                   max_position_embeddings=64)
    model = transformers.LlamaForCausalLM(cfg)
    n = sum(p.numel() for p in model.parameters())
    data = [{"input_ids": torch.randint(0, 32000, (16,)), "labels": torch.randint(0, 32000, (16,))} for _ in range(4)]
    args = transformers.TrainingArguments(output_dir=os.path.join(work, "out"), max_steps=2, save_steps=1,
                                          per_device_train_batch_size=2, report_to=[], use_cpu=True,
                                          disable_tqdm=True, logging_steps=1000)
    t, c = time.perf_counter(), cpu()
    transformers.Trainer(model=model, args=args, train_dataset=data, callbacks=callbacks).train()
    return n, time.perf_counter() - t, cpu() - c


with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as work:
    n, plain, plain_cpu = run(work, [])
    plain_saves = saves[:]
    saves.clear()
    repo = os.path.join(work, "runs")
    subprocess.run(["git", "init", "-q", repo], check=True)
    cb = WtxtCallback(repo, "llama.wtxt")
    _, with_cb, cb_cpu = run(os.path.join(work, "b"), [cb])
    size = sum(os.path.getsize(os.path.join(dp, f)) for dp, _, fs in os.walk(os.path.join(work, "b", "out",
               "checkpoint-2")) for f in fs)
    print(f"{os.cpu_count()} cores; Llama of {n / 1e6:.0f}M f32 parameters ({layers} layers); "
          f"a checkpoint folder of {size / 2**20:.0f} MiB")
    print(f"Trainer's own save, without the callback: {', '.join(f'{s:.2f}' for s in plain_saves)} s")
    print(f"Trainer's own save, with it:              {', '.join(f'{s:.2f}' for s in saves)} s")
    print(f"the callback held the loop:               {', '.join(f'{s:.2f}' for s in cb.held)} s")
    for i in cb.infos:
        st = i.stages or {}
        print(f"generation {i.gen}: write {st.get('write', 0):.2f} s, commit {st.get('commit', 0):.2f} s")
    print(f"train() wall: {plain:.1f} s without, {with_cb:.1f} s with (the last generation waited for at the end)")
    per_gen = (cb_cpu - plain_cpu) / max(1, len(cb.infos))
    folders = [os.path.join(work, "out", f"checkpoint-{k}") for k in (1, 2)]
    from wtxt.checkpoint import checkpoint_state
    hand = by_hand(os.path.join(work, "hand"), [checkpoint_state(f) for f in folders])
    print(f"CPU a generation: the callback {per_gen:.2f} s (train() {cb_cpu:.1f} CPU-s with, {plain_cpu:.1f} without); "
          f"save_file + git add + hooked commit of the same arrays: {', '.join(f'{h:.2f}' for h in hand)} s; "
          f"ratio {per_gen / (sum(hand) / len(hand)):.2f}x")
