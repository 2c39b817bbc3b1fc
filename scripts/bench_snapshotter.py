#!/usr/bin/env python3
"""Does wtxt.Snapshotter keep up with a real training loop? One run, one machine.

A Llama (transformers' LlamaForCausalLM, about 35M parameters, 141 MB f32)
trains with AdamW on both cores; every `--every` steps the loop publishes
`model.state_dict()` and requests a snapshot; the Snapshotter writes, deltas,
commits into a Git repository and pushes to a bare remote on this machine
(which keeps what it receives as a pack, as a server does).

Prints, all from this run:
  loop alone          the same steps without snapshots (wall)
  loop + flush        with snapshots, and the final flush() after it
  requested/written   every requested generation written unless coalescing
  publish             median time the loop is blocked per publish, against
                      `{k: v.detach().clone()}` of the same state
  stages              each generation's write / delta / commit / push seconds
  write alone         wtxt.save_state_dict of the same state, idle machine
  one generation      write + delta + commit of one generation, idle machine,
                      wall and CPU (this process's and the `git` it runs)
                      against the write alone; then with its push
  ring                bytes the ring holds at the end, against the state's size

    python3 -m pip install ./python && pip install torch transformers
    python3 scripts/bench_snapshotter.py [--steps 60] [--every 10] [--dir /tmp/bench-snap]
"""
import argparse
import os
import resource
import shutil
import statistics
import subprocess
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM

import wtxt


def cpu():
    """This process's CPU-seconds and its children's that were waited for
    (the `git` a commit runs when its pack may hold a delta: the
    multi-pack index)."""
    return sum(r.ru_utime + r.ru_stime for r in map(resource.getrusage, (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)))


def du(path):
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


def model():
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=32000, hidden_size=384, intermediate_size=1024, num_hidden_layers=6,
                      num_attention_heads=6, num_key_value_heads=6, max_position_embeddings=256,
                      tie_word_embeddings=False)
    return LlamaForCausalLM(cfg)


def loop(m, opt, steps, every, on_request, batch):
    g = torch.Generator().manual_seed(1)
    t0 = time.perf_counter()
    for step in range(1, steps + 1):
        ids = torch.randint(0, 32000, (batch, 128), generator=g)
        loss = m(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if step % every == 0:
            on_request(step)
    return time.perf_counter() - t0


def repos(d):
    repo, remote = os.path.join(d, "repo"), os.path.join(d, "remote.git")
    subprocess.run(["git", "init", "-q", "-b", "main", repo], check=True)
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", remote], check=True)
    subprocess.run(["git", "-C", remote, "config", "receive.unpackLimit", "1"], check=True)
    return repo, remote


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--every", type=int, default=10)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--dir", default="/tmp/bench-snap")
    ap.add_argument("--idle-only", action="store_true", help="only the idle machine's measures")
    a = ap.parse_args()
    torch.set_num_threads(os.cpu_count() or 2)
    shutil.rmtree(a.dir, ignore_errors=True)
    os.makedirs(a.dir)
    m = model()
    opt = torch.optim.AdamW(m.parameters(), lr=1e-4)
    n = sum(p.numel() for p in m.parameters())
    size = sum(t.numel() * t.element_size() for t in m.state_dict().values())
    print(f"model: {n / 1e6:.1f}M parameters, {size / 1e6:.0f} MB; {a.steps} steps, a request every {a.every}; "
          f"{torch.get_num_threads()} torch threads")
    if a.idle_only:
        idle(m, a.dir)
        return

    clones = []

    def clone(_step):
        t = time.perf_counter()
        s = {k: v.detach().clone() for k, v in m.state_dict().items()}
        clones.append(time.perf_counter() - t)
        del s

    alone = loop(m, opt, a.steps, a.every, clone, a.batch)
    print(f"loop alone: {alone:.1f} s ({alone / a.steps:.2f} s a step); clone of the state: "
          f"median {statistics.median(clones) * 1e3:.1f} ms")

    repo, remote = repos(a.dir)
    ring = os.path.join(a.dir, "ring")
    publishes, futures = [], []
    with wtxt.Snapshotter(repo, path_in_repo="model.wtxt", remote=remote, ring=ring) as snap:

        start = time.perf_counter()
        asked, resolved = [], {}

        def request(_step):
            t = time.perf_counter()
            snap.publish(m.state_dict())
            publishes.append(time.perf_counter() - t)
            f = snap.request_snapshot()
            asked.append(time.perf_counter() - start)
            f.add_done_callback(lambda f, i=len(futures): resolved.__setitem__(i, time.perf_counter() - start))
            futures.append(f)

        with_snap = loop(m, opt, a.steps, a.every, request, a.batch)
        t = time.perf_counter()
        snap.flush()
        flush = time.perf_counter() - t
        print("timeline (s from the loop's start): " + ", ".join(
            f"gen {i} asked {asked[i]:.1f} done {resolved.get(i, float('nan')):.1f}" for i in range(len(asked)))
            + f"; loop ended {t - start:.1f}, flush returned {t - start + flush:.1f}")
        infos = [f.result() for f in futures]
        st = snap.status()
    print(f"loop with snapshots: {with_snap:.1f} s, then flush() {flush:.1f} s: "
          f"{(with_snap + flush) / alone:.2f}x the loop alone")
    print(f"requested {st['requested']}, written {st['snapshots_written']}, coalesced {st['coalesced']}, "
          f"pushed {sum(i.pushed for i in infos)}, resend queue {st['resend_queue']}")
    pub = statistics.median(publishes)
    print(f"publish blocks: median {pub * 1e3:.1f} ms = {pub / statistics.median(clones):.2f}x a clone")
    for i in infos:
        print(f"  gen {i.gen}: " + ", ".join(f"{k} {v:.2f} s" for k, v in i.stages.items() if k != "armor"))
    print(f"ring: {du(ring) / 1e6:.0f} MB for a {size / 1e6:.0f} MB state ({du(ring) / size:.2f}x)")

    gen = idle(m, a.dir)
    print(f"flush() / one generation pushed: {flush:.1f} / {gen:.2f} s = {flush / gen:.2f}x")


def idle(m, d):
    """The same state on an idle machine: the WTXT alone and a generation of
    a Snapshotter without a remote (write + delta + commit, in wall and in
    this process's CPU) taken in turn, five rounds, the best of each; then
    one generation with the remote (its push)."""
    state = {k: v.detach().clone() for k, v in m.state_dict().items()}

    def step():
        with torch.no_grad():
            for v in state.values():
                v.add_(1e-3)

    repo, _ = repos(os.path.join(d, "local"))
    write, gens = [], []
    with wtxt.Snapshotter(repo, path_in_repo="model.wtxt") as snap:
        step()
        snap.publish(state)
        snap.request_snapshot().result()  # the first commit: no parent, no pack before it
        for _ in range(5):
            alone = os.path.join(d, "alone.wtxt")
            c, t = cpu(), time.perf_counter()
            wtxt.torch.save_state_dict(state, alone)
            write.append((time.perf_counter() - t, cpu() - c))
            step()
            snap.publish(state)
            c = cpu()
            s = snap.request_snapshot().result().stages
            gens.append((s["write"] + s["delta"] + s["commit"], cpu() - c, s))
            # Removed after the generation, not before: its pages, freed,
            # would spare the commit the cost of new ones (see PERFORMANCE.md).
            os.remove(alone)
    write = (min(w[0] for w in write), min(w[1] for w in write))
    print(f"write alone (save_state_dict): {write[0]:.2f} s wall, {write[1]:.2f} CPU-s")
    wdc, _, s = min(gens, key=lambda g: g[0])
    wdc_cpu = min(g[1] for g in gens)
    print(f"one generation (idle, full change, no remote): write {s['write']:.2f} + delta {s['delta']:.2f} + "
          f"commit {s['commit']:.2f} = {wdc:.2f} s = {wdc / write[0]:.2f}x the write alone; "
          f"{wdc_cpu:.2f} CPU-s = {wdc_cpu / write[1]:.2f}x")
    repo, remote = repos(os.path.join(d, "idle"))
    with wtxt.Snapshotter(repo, path_in_repo="model.wtxt", remote=remote) as snap:
        for _ in range(2):
            step()
            snap.publish(state)
            t = time.perf_counter()
            s = snap.request_snapshot().result().stages
            gen = time.perf_counter() - t
    print(f"one generation (idle, full change, pushed): {gen:.2f} s, of which push {s['push']:.2f} s")
    return gen


if __name__ == "__main__":
    main()
