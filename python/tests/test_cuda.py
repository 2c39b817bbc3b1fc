"""CUDA tensors through the copy engine into pinned host buffers: the
snapshot holds exactly what a CPU save of the same values holds, the
buffers are reused from one save or publish to the next, values changed on
the GPU after `publish` returns are not in the snapshot, and a budget too
small for a tensor sends it the pageable way with the same bytes. Runs only
where torch sees a GPU (the device benchmark runs it there)."""
import pathlib
import subprocess

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA device", allow_module_level=True)

import wtxt  # noqa: E402
import wtxt.torch as wt  # noqa: E402
from wtxt.torch import _pinned  # noqa: E402

OPTS = {"ts": "2026-01-01T00:00:00Z", "part_size": "64K"}


def state(device):
    g = torch.Generator().manual_seed(0)
    return {"w": torch.randn(300, 64, generator=g).to(torch.bfloat16).to(device),
            "t": torch.randn(64, 300, generator=g).to(device).t(),  # not contiguous
            "i": torch.arange(7, dtype=torch.int64).to(device),
            "e": torch.empty(0, 3).to(device),
            "step": 5}


def snapshot_bytes(head: pathlib.Path):
    parts = head.parent / (head.name + ".parts")
    return [head.read_bytes()] + [p.read_bytes() for p in sorted(parts.iterdir())] if parts.is_dir() else [
        head.read_bytes()]


def test_a_cuda_save_is_the_cpu_save_and_reuses_its_buffers(tmp_path):
    wt.set_pinned_budget(1 << 30)
    cpu, gpu = state("cpu"), state("cuda")
    wt.save_state_dict(cpu, tmp_path / "cpu.wtxt", **OPTS)
    wt.save_state_dict(gpu, tmp_path / "gpu.wtxt", **OPTS)
    assert snapshot_bytes(tmp_path / "cpu.wtxt") == snapshot_bytes(tmp_path / "gpu.wtxt")
    stager = _pinned.shared()
    held = dict(stager._buffers)
    assert set(held) == {"w", "t", "i", "e"}
    assert all(b.is_pinned() for k, b in held.items() if k != "e")  # no memory to pin in an empty one
    gpu["w"].add_(1)
    wt.save_state_dict(gpu, tmp_path / "gpu2.wtxt", **OPTS)
    assert all(stager._buffers[k] is b for k, b in held.items())  # the same pinned memory
    back = wt.load_state_dict(tmp_path / "gpu2.wtxt")
    assert torch.equal(back["w"], gpu["w"].cpu()) and back["step"] == 5


def test_past_the_budget_tensors_go_the_pageable_way_with_the_same_bytes(tmp_path):
    wt.set_pinned_budget(64 * 300 * 4)  # room for some of the tensors, not all
    wt.save_state_dict(state("cuda"), tmp_path / "gpu.wtxt", **OPTS)
    wt.save_state_dict(state("cpu"), tmp_path / "cpu.wtxt", **OPTS)
    assert snapshot_bytes(tmp_path / "cpu.wtxt") == snapshot_bytes(tmp_path / "gpu.wtxt")
    assert _pinned.shared().held <= 64 * 300 * 4
    wt.set_pinned_budget(0)
    wt.save_state_dict(state("cuda"), tmp_path / "none.wtxt", **OPTS)
    assert snapshot_bytes(tmp_path / "cpu.wtxt") == snapshot_bytes(tmp_path / "none.wtxt")
    assert _pinned.shared().held == 0


def test_the_dcp_writer_copies_cuda_shards_through_pinned_memory(tmp_path):
    import torch.distributed.checkpoint as dcp

    from wtxt.torch.dcp import WtxtStorageWriter

    wt.set_pinned_budget(1 << 30)
    gpu = {"model": {k: v for k, v in state("cuda").items() if k != "step"}, "step": 5}
    dcp.save(gpu, storage_writer=WtxtStorageWriter(tmp_path / "dcp" / "model.wtxt", **OPTS))
    wt.save_state_dict(gpu, tmp_path / "ref.wtxt", **OPTS)
    assert snapshot_bytes(tmp_path / "dcp" / "model.wtxt") == snapshot_bytes(tmp_path / "ref.wtxt")


def test_publish_takes_the_values_of_its_call_through_reused_pinned_buffers(tmp_path):
    repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    w = torch.zeros(1024, 1024, device="cuda")
    with wtxt.Snapshotter(repo, pinned_budget=1 << 30) as snap:
        futures = []
        for step in range(3):
            w.fill_(step)
            snap.publish({"w": w, "step": torch.tensor(step)})
            futures.append(snap.request_snapshot())
            w.fill_(-99)  # after publish returns: not in the snapshot
            if step == 0:
                first = snap._stager._buffers["w"]
        for f in futures:
            f.result(timeout=120)
        assert snap._stager._buffers["w"] is first and first.is_pinned()
    back = wtxt.load_file(repo / "model.wtxt")
    assert (back["w"] == 2).all() and back["step"] == 2
