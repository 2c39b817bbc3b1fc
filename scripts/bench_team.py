"""The README's team path at a user's size, against git-lfs and plain Git of
the same checkpoint folders, in one run. A Llama of about PARAMS_M million
f32 parameters (model + AdamW state: ~12 bytes a parameter) trained on the
CPU, a checkpoint every step, GENS of them:

- wtxt, parts in LFS, as "A team's path" in README.md sets it up: a bare
  host with the guard (`--server --lfs-objects --trusted-keys`), the real
  LFS server (giftless, scripts/lfs-server.sh) on 127.0.0.1, the trainer's
  clone with `install --lfs --trusted-keys`, `WtxtCallback(remote=...)`.
  Printed: the loop's wait per save, each generation's push (the guard
  verifying it included), the LFS store, a reviewer's blobless clone, the
  latest checkpoint restored (verified), one tensor of the first generation
  by revision (time and bytes fetched).
- wtxt on a plain `--server` host: the same folders as generations by hand
  (`wtxt.save_file(prev=)`, the hook), `git push`, then a clone.
- git-lfs: the Trainer's own folders committed with `git lfs track` (the
  same LFS server), pushed, cloned.
- plain Git: the same folders committed and pushed, cloned.

    python3 scripts/bench_team.py [PARAMS_M [GENS]]     (defaults 90, 3: ~1.1 GB a checkpoint)

Needs `wtxt` on PATH (the wheel's or cargo's release build), torch,
transformers, accelerate, git-lfs and scripts/lfs-server.sh install. Work in
$BENCH_DIR (default a temporary folder).
"""
import glob
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

import torch
import transformers

import wtxt
from wtxt.checkpoint import checkpoint_state
from wtxt.trainer import WtxtCallback, restore_checkpoint

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KEYS = os.path.join(ROOT, "fixtures", "wtxt", "keys")
params_m = int(sys.argv[1]) if len(sys.argv) > 1 else 90
gens = int(sys.argv[2]) if len(sys.argv) > 2 else 3
hidden = 1024
layers = max(1, round((params_m * 1e6 - 2 * 8192 * hidden) / (12 * hidden * hidden)))
work = os.environ.get("BENCH_DIR") or tempfile.mkdtemp(prefix="wtxt-team-")
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
env = dict(os.environ, GIT_AUTHOR_NAME="b", GIT_AUTHOR_EMAIL="b@e", GIT_COMMITTER_NAME="b", GIT_COMMITTER_EMAIL="b@e")
os.environ.update(env)


def sh(*cmd, cwd=work, quiet=True):
    r = subprocess.run(list(cmd), cwd=cwd, env=env, capture_output=quiet, text=True)
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)} in {cwd}: exit {r.returncode}\n{r.stdout if quiet else ''}{r.stderr if quiet else ''}")
    return r.stdout if quiet else ""


def timed(*cmd, cwd=work):
    t = time.perf_counter()
    sh(*cmd, cwd=cwd)
    return time.perf_counter() - t


def url(bare):
    """A host's URL: file:// so that Git transfers as over a network (a
    local path would hard-link the objects and ignore --filter)."""
    return "file://" + os.path.join(work, bare)


def size(path):
    return sum(os.path.getsize(f) for f in glob.glob(os.path.join(path, "**"), recursive=True) if os.path.isfile(f))


def gone(*names):
    """Removes what a flow left once it is measured (the run holds a few
    copies of every checkpoint at once otherwise)."""
    for n in names:
        shutil.rmtree(os.path.join(work, n), ignore_errors=True)


def mb(n):
    return f"{n / 1e6:,.0f} MB"


with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
store = os.path.join(work, "lfs")
for org_repo in ("team/models", "team/baseline"):
    os.makedirs(os.path.join(store, org_repo))
server = subprocess.Popen([os.path.join(ROOT, "scripts", "lfs-server.sh"), "serve", store, str(port)],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
try:
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if time.monotonic() > deadline or server.poll() is not None:
                sys.exit("the LFS server did not start (scripts/lfs-server.sh install)")
            time.sleep(0.1)
    lfs_url = f"http://127.0.0.1:{port}/team/%s.git/info/lfs"
    trusted = os.path.join(KEYS, "trusted_keys")

    # The host and the trainer's clone, as README.md's team path has them.
    sh("git", "init", "-q", "--bare", "-b", "main", "models.git")
    sh("wtxt", "git", "install", "--server", "--lfs-objects", os.path.join(store, "team/models"),
       "--trusted-keys", trusted, cwd=os.path.join(work, "models.git"))
    sh("git", "clone", "-q", url("models.git"), "runs")
    runs = os.path.join(work, "runs")
    sh("git", "config", "-f", ".lfsconfig", "lfs.url", lfs_url % "models", cwd=runs)
    sh("wtxt", "git", "install", "--lfs", "--trusted-keys", trusted, cwd=runs)
    sh("git", "add", ".gitattributes", ".lfsconfig", cwd=runs)
    sh("git", "commit", "-qm", "parts in Git LFS", cwd=runs)
    sh("git", "push", "-q", "-u", "origin", "main", cwd=runs)

    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=8192, hidden_size=hidden, intermediate_size=4 * hidden,
                                   num_hidden_layers=layers, num_attention_heads=16, num_key_value_heads=16,
                                   max_position_embeddings=64)
    data = [{"input_ids": torch.randint(0, 8192, (16,)), "labels": torch.randint(0, 8192, (16,))} for _ in range(8)]
    args = transformers.TrainingArguments(output_dir=os.path.join(work, "out"), max_steps=gens, save_steps=1,
                                          per_device_train_batch_size=1, report_to=[], use_cpu=True,
                                          disable_tqdm=True, logging_steps=1000)
    cb = WtxtCallback(runs, "llama.wtxt", remote="origin", sign_key=os.path.join(KEYS, "sign.pem"),
                      on_push_error="raise")
    model = transformers.LlamaForCausalLM(cfg)
    n_params = sum(p.numel() for p in model.parameters())
    t = time.perf_counter()
    transformers.Trainer(model=model, args=args, train_dataset=data, callbacks=[cb]).train()
    trained = time.perf_counter() - t
    folders = [os.path.join(work, "out", f"checkpoint-{i}") for i in range(1, gens + 1)]
    state_bytes = size(folders[-1])
    print(f"== {n_params / 1e6:.0f} M parameters, {layers} layers; a checkpoint folder of {mb(state_bytes)}; "
          f"{gens} generations; {os.cpu_count()} cores")
    pushes = [i.stages["push"] for i in cb.infos]
    print(f"wtxt/LFS  loop wait per save: max {max(cb.held):.3f} s (median {sorted(cb.held)[len(cb.held) // 2]:.3f} s); "
          f"train + every generation pushed: {trained:.1f} s")
    print(f"wtxt/LFS  push per generation (guard included): {', '.join(f'{p:.1f}' for p in pushes)} s; "
          f"LFS store {mb(size(os.path.join(store, 'team/models')))}, host .git {mb(size(os.path.join(work, 'models.git')))}, "
          f"trainer .git {mb(size(os.path.join(runs, '.git')))}")
    review = os.path.join(work, "review")
    clone = timed("git", "clone", "-q", "--filter=blob:none", url("models.git"), review)
    t = time.perf_counter()
    restore_checkpoint(os.path.join(review, "llama.wtxt"), os.path.join(work, "resume"), rev="HEAD",
                       trusted_keys=trusted, require_signature=True)
    restored = time.perf_counter() - t
    print(f"wtxt/LFS  blobless clone {clone:.2f} s; latest checkpoint restored, verified: {restored:.2f} s "
          f"(together {clone + restored:.2f} s, {mb(size(os.path.join(review, '.git')))} fetched)")
    one = os.path.join(work, "one")
    sh("git", "clone", "-q", "--filter=blob:none", url("models.git"), one)
    t = time.perf_counter()
    got = wtxt.load_file(os.path.join(one, "llama.wtxt"), names=["model.safetensors/lm_head.weight"],
                         rev=f"HEAD~{gens - 1}", trusted_keys=trusted)
    print(f"wtxt/LFS  one tensor ({mb(next(iter(got.values())).nbytes)}) of generation 0 by revision: "
          f"{time.perf_counter() - t:.2f} s, {mb(size(os.path.join(one, '.git', 'lfs')))} of LFS objects fetched")

    gone("review", "one", "resume", "runs", "models.git", "lfs/team/models")

    # wtxt on a plain --server host: the same folders as generations by hand.
    sh("git", "init", "-q", "--bare", "-b", "main", "plain.git")
    sh("wtxt", "git", "install", "--server", "--trusted-keys", trusted, cwd=os.path.join(work, "plain.git"))
    hand = os.path.join(work, "hand")
    sh("git", "init", "-q", "-b", "main", hand)
    sh("wtxt", "git", "install", "--trusted-keys", trusted, cwd=hand)
    sh("git", "remote", "add", "origin", url("plain.git"), cwd=hand)
    path, hand_pushes = os.path.join(hand, "llama.wtxt"), []
    for i, folder in enumerate(folders):
        wtxt.save_file(checkpoint_state(folder), path, prev=path if i else None, digest="tree",
                       sign_key=os.path.join(KEYS, "sign.pem"))
        sh("git", "add", "-A", cwd=hand)
        sh("git", "commit", "-qm", f"gen {i}", cwd=hand)
        hand_pushes.append(timed("git", "push", "-q", "origin", "main", cwd=hand))
    plain_clone = timed("git", "clone", "-q", url("plain.git"), "plain-clone")
    print(f"wtxt/Git  push per generation (guard included): {', '.join(f'{p:.1f}' for p in hand_pushes)} s; "
          f"clone {plain_clone:.2f} s; host .git {mb(size(os.path.join(work, 'plain.git')))}")
    gone("hand", "plain.git", "plain-clone")

    # The baselines: the Trainer's folders, with git-lfs and in plain Git.
    def baseline(name, lfs):
        sh("git", "init", "-q", "--bare", "-b", "main", f"{name}.git")
        w = os.path.join(work, name)
        sh("git", "init", "-q", "-b", "main", w)
        sh("git", "remote", "add", "origin", url(f"{name}.git"), cwd=w)
        if lfs:
            sh("git", "lfs", "install", "--local", cwd=w)
            sh("git", "config", "-f", ".lfsconfig", "lfs.url", lfs_url % "baseline", cwd=w)
            sh("git", "lfs", "track", "*.safetensors", "*.pt", "*.pth", "*.bin", cwd=w)
        times = []
        for folder in folders:
            shutil.rmtree(os.path.join(w, "ckpt"), ignore_errors=True)
            shutil.copytree(folder, os.path.join(w, "ckpt"))
            sh("git", "add", "-A", cwd=w)
            sh("git", "commit", "-qm", os.path.basename(folder), cwd=w)
            times.append(timed("git", "push", "-q", "origin", "main", cwd=w))
        smudge = ["-c", "filter.lfs.process=git-lfs filter-process", "-c", "filter.lfs.required=true"] if lfs else []
        c = timed("git", "clone", "-q", *smudge, url(f"{name}.git"), f"{name}-clone")
        kept = mb(size(os.path.join(store, "team/baseline"))) if lfs else mb(size(os.path.join(work, f"{name}.git")))
        print(f"{name:9} push per generation: {', '.join(f'{p:.1f}' for p in times)} s; clone {c:.2f} s; kept {kept}")
        gone(name, f"{name}.git", f"{name}-clone", "lfs/team/baseline")
        return times, c

    lfs_pushes, lfs_clone = baseline("git-lfs", True)
    git_pushes, git_clone = baseline("plain-git", False)
    print("== ratios (goals: --server clone <= 0.5x plain Git's; with LFS clone <= 1.5x git-lfs's, push <= 2x; "
          "wait per save <= 0.2 s)")
    print(f"--server clone / plain Git clone: {plain_clone / git_clone:.2f}x")
    print(f"LFS: clone + latest verified / git-lfs clone: {(clone + restored) / lfs_clone:.2f}x; "
          f"push / git-lfs push (median): {sorted(pushes)[len(pushes) // 2] / sorted(lfs_pushes)[len(lfs_pushes) // 2]:.2f}x")
finally:
    server.terminate()
    server.wait()
