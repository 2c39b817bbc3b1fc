"""Hugging Face folders at a real model's size: a Llama-style model built by
`transformers` (about 300M parameters: 1.2 GB in f32, 0.6 GB in bf16),
`save_pretrained(max_shard_size="500MB")`; then, in one run, `wtxt
snapshot DIR` and `wtxt extract --hf` against `cp -r` of the folder and
against `from_pretrained` + `save_pretrained` of the same model. Prints
wall, CPU-seconds and peak RSS of each (the commands run as child
processes, measured by /usr/bin/time); docs/PERFORMANCE.md keeps the
figures.

    python3 scripts/bench_hf.py [--dtype f32|bf16] [--dir /tmp/wtxt-bench-hf] [--wtxt target/release/wtxt]
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def timed(argv):
    """Runs `argv` under /usr/bin/time; (wall s, CPU s, peak RSS MiB) of it."""
    r = subprocess.run(["/usr/bin/time", "-f", "%e %U %S %M", *map(str, argv)], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{' '.join(map(str, argv))} failed: {r.stderr}")
    wall, user, system, rss = r.stderr.strip().splitlines()[-1].split()
    return float(wall), float(user) + float(system), int(rss) / 1024


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dtype", choices=["f32", "bf16"], default="f32")
    ap.add_argument("--dir", default="/tmp/wtxt-bench-hf")
    ap.add_argument("--wtxt", default=os.path.join(HERE, "..", "target", "release", "wtxt"))
    args = ap.parse_args()
    shutil.rmtree(args.dir, ignore_errors=True)
    os.makedirs(args.dir)
    src, out, again, copy = (os.path.join(args.dir, d) for d in ("model", "out", "again", "copy"))
    snap = os.path.join(args.dir, "model.wtxt")
    build = f"""
import torch, transformers
cfg = transformers.LlamaConfig(vocab_size=32000, hidden_size=1024, intermediate_size=2816, num_hidden_layers=20,
                               num_attention_heads=16, num_key_value_heads=16, tie_word_embeddings=False)
torch.manual_seed(0)
m = transformers.LlamaForCausalLM(cfg).to(torch.{'float32' if args.dtype == 'f32' else 'bfloat16'})
m.save_pretrained({src!r}, max_shard_size="500MB")
print(sum(p.numel() for p in m.parameters()))
"""
    params = subprocess.run([sys.executable, "-c", build], capture_output=True, text=True, check=True).stdout.split()[-1]
    size = sum(os.path.getsize(os.path.join(src, f)) for f in os.listdir(src))
    shards = len([f for f in os.listdir(src) if f.endswith(".safetensors")])
    print(f"model: {int(params) / 1e6:.0f}M parameters, {args.dtype}, {size / 1e9:.2f} GB in {shards} shards")
    roundtrip = f"""
import torch, transformers
m = transformers.AutoModelForCausalLM.from_pretrained({src!r}, torch_dtype="auto")
m.save_pretrained({again!r}, max_shard_size="500MB")
"""
    rows = [
        ("cp -r", timed(["cp", "-r", src, copy])),
        ("wtxt snapshot DIR", timed([args.wtxt, "snapshot", src, "-o", snap])),
        ("wtxt verify", timed([args.wtxt, "verify", snap])),
        ("wtxt extract --hf", timed([args.wtxt, "extract", snap, "--hf", out])),
        ("from_pretrained + save_pretrained", timed([sys.executable, "-c", roundtrip])),
    ]
    same = subprocess.run(["diff", "-r", src, out]).returncode == 0
    print(f"extract --hf gave the folder back byte for byte: {same}")
    base = rows[0][1]
    for name, (wall, cpu, rss) in rows:
        print(f"{name:34} wall {wall:6.2f} s ({wall / base[0]:5.1f}x cp)  CPU {cpu:6.2f} s  peak RSS {rss:7.0f} MiB")


if __name__ == "__main__":
    main()
