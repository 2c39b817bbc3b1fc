"""A clone that smudged nothing (`GIT_LFS_SKIP_SMUDGE=1`, as a blobless
clone leaves a work tree too) holds Git LFS pointers where a snapshot's
parts would be. Read from the work tree, `load_file` and
`restore_checkpoint` fetch the objects they read through the real `git lfs`
client from a real LFS server on 127.0.0.1 (giftless,
`scripts/lfs-server.sh`), and verify them; told not to fetch, they say
which pointer is missing, not that the data is damaged."""

import os
import pathlib
import socket
import subprocess
import time

import numpy as np
import pytest
import torch
from safetensors.torch import load_file as load_safetensors, save_file as save_safetensors

import wtxt
from wtxt.checkpoint import checkpoint_state, restore_checkpoint
from stacks import git

ROOT = pathlib.Path(__file__).resolve().parents[2]
CLI = os.environ.get("WTXT_BIN") or str(ROOT / "target" / "debug" / "wtxt")


@pytest.fixture
def lfs_server(tmp_path):
    """The LFS URL of repository `models` on a real LFS server, and where it keeps its objects."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    store = tmp_path / "lfs-store"
    store.mkdir()
    server = subprocess.Popen([str(ROOT / "scripts" / "lfs-server.sh"), "serve", str(store), str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline and server.poll() is None, "the LFS server did not start"
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/wtxt/models.git/info/lfs", store / "wtxt" / "models"
    finally:
        server.terminate()
        server.wait()


def lfs_objects(repo):
    return sorted(p for p in (repo / ".git" / "lfs" / "objects").rglob("*") if p.is_file())


def lfs_work_tree(tmp_path, url):
    """A Git work tree `w` whose parts go to the LFS server at `url`."""
    w = tmp_path / "w"
    git(tmp_path, "init", "-q", "-b", "main", str(w))
    git(w, "config", "lfs.url", url)
    subprocess.run([CLI, "git", "install", "--lfs"], cwd=w, check=True, capture_output=True)
    return w


def pushed(tmp_path, w):
    """`w`'s main pushed to a new bare repository `models.git`."""
    bare = tmp_path / "models.git"
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(bare))
    git(w, "push", "-q", str(bare), "main")
    return bare


def unsmudged_clone(tmp_path, url, source, name, *how):
    """A clone of `source` (`git clone` options `how`) whose LFS smudge did not run."""
    subprocess.run(["git", "clone", "-q", "-c", f"lfs.url={url}", *how, str(source), str(tmp_path / name)],
                   env=dict(os.environ, GIT_LFS_SKIP_SMUDGE="1"), check=True, capture_output=True)
    return tmp_path / name


def test_a_clones_lfs_pointers_are_fetched_by_load_file_and_restore_checkpoint(tmp_path, lfs_server):
    url, objects = lfs_server
    w = lfs_work_tree(tmp_path, url)
    # A checkpoint folder: weights and a file kept byte for byte.
    ck = tmp_path / "checkpoint-1"
    ck.mkdir()
    rng = np.random.default_rng(7)
    weights = {f"layer{i}.weight": torch.from_numpy(rng.standard_normal((128, 256)).astype(np.float32))
               for i in range(6)}
    save_safetensors(weights, str(ck / "model.safetensors"))
    (ck / "trainer_state.json").write_text('{"global_step": 1}\n')
    wtxt.save_file(checkpoint_state(ck), w / "run.wtxt", digest="tree", part_size="256K")
    assert len(list((w / "run.wtxt.parts").iterdir())) >= 4
    git(w, "add", "-A")
    git(w, "commit", "-q", "-m", "step 1")
    bare = pushed(tmp_path, w)
    assert len(list(objects.iterdir())) >= 4, "the parts went to the LFS server"

    c = unsmudged_clone(tmp_path, url, bare, "c")
    part = (c / "run.wtxt.parts" / "000001.wtxtpart").read_text()
    assert part.startswith("version https://git-lfs.github.com/spec/v1\n")
    name = "model.safetensors/layer3.weight"
    one = wtxt.load_file(c / "run.wtxt", names=[name])
    assert torch.equal(torch.from_numpy(one[name]), weights["layer3.weight"])
    some = len(lfs_objects(c))
    assert 0 < some < len(list((c / "run.wtxt.parts").iterdir())), "one tensor fetched only its parts"
    out = restore_checkpoint(c / "run.wtxt", tmp_path / "resume")
    back = load_safetensors(os.path.join(out, "model.safetensors"))
    assert all(torch.equal(back[k], v) for k, v in weights.items())
    assert (pathlib.Path(out) / "trainer_state.json").read_text() == '{"global_step": 1}\n'
    # By revision, refused (unsigned where a key is named): named REV:PATH, not a temporary copy.
    trusted = ROOT / "fixtures" / "wtxt" / "keys" / "trusted_keys"
    with pytest.raises(wtxt.VerifyError) as e:
        restore_checkpoint(c / "run.wtxt", tmp_path / "resume-rev", rev="HEAD", trusted_keys=trusted)
    assert f"HEAD:{c / 'run.wtxt'}" in str(e.value) and "wtxt-rev-" not in str(e.value), str(e.value)

    # Told not to fetch: the pointer and why, as unusable input.
    unsmudged_clone(tmp_path, url, bare, "offline")
    git(tmp_path / "offline", "config", "wtxt.fetch", "false")
    with pytest.raises(wtxt.Error, match=r"000001\.wtxtpart: a Git LFS pointer to sha256:.*wtxt\.fetch is false") as e:
        restore_checkpoint(tmp_path / "offline" / "run.wtxt", tmp_path / "resume2")
    assert not isinstance(e.value, wtxt.VerifyError)
    assert not (tmp_path / "resume2").exists()


def fetches(trace):
    """How many `git lfs fetch` the traced command ran (its trace then reset)."""
    n = trace.read_text().count("run_command: git-lfs fetch") if trace.exists() else 0
    trace.unlink(missing_ok=True)
    return n


def test_a_clones_lfs_pointers_are_fetched_by_the_lightning_accelerate_and_dcp_loaders(tmp_path, lfs_server,
                                                                                       monkeypatch):
    pytest.importorskip("lightning")
    pytest.importorskip("accelerate")
    import torch.distributed.checkpoint as dcp
    from accelerate import Accelerator
    from wtxt.accelerate import WtxtStateSaver, load_state
    from wtxt.lightning import WtxtCheckpointIO
    from wtxt.torch.dcp import WtxtStorageReader, WtxtStorageWriter

    url, _ = lfs_server
    w = lfs_work_tree(tmp_path, url)
    torch.manual_seed(0)
    weights = {f"layer{i}.weight": torch.randn(128, 256) for i in range(6)}
    # Lightning: a checkpoint as the plugin saves it, committed at teardown.
    io = WtxtCheckpointIO(w, part_size="256K")
    io.save_checkpoint({"state_dict": weights, "epoch": 1, "global_step": 3}, tmp_path / "ck" / "last.ckpt")
    io.teardown()
    # Accelerate: a prepared model and optimizer, their state folder a generation.
    acc = Accelerator(cpu=True)
    net = torch.nn.Linear(1024, 768)
    model, _ = acc.prepare(net, torch.optim.AdamW(net.parameters()))
    saver = WtxtStateSaver(w, part_size="1M")
    saver.save_state(acc, tmp_path / "state")
    saver.finish()
    # DCP: one process writes the snapshot, committed by hand.
    dcp.save({"model": dict(weights)}, storage_writer=WtxtStorageWriter(w / "dcp.wtxt", part_size="256K"))
    git(w, "add", "-A")
    git(w, "commit", "-q", "-m", "dcp")
    for name in ("lightning", "state", "dcp"):
        assert len(list((w / f"{name}.wtxt.parts").iterdir())) >= 3, name
    bare = pushed(tmp_path, w)

    def clone(name, *how):
        c = unsmudged_clone(tmp_path, url, f"file://{bare}", name, *how)
        assert (c / "dcp.wtxt.parts" / "000001.wtxtpart").read_text().startswith("version https://git-lfs")
        return c

    def zeros():
        return {"model": {k: torch.zeros_like(v) for k, v in weights.items()}}

    trace = tmp_path / "trace"
    for name, how in (("skipped", ()), ("blobless", ("--filter=blob:none",))):
        c = clone(name, *how)
        monkeypatch.setenv("GIT_TRACE", str(trace))
        got = WtxtCheckpointIO(c).load_checkpoint(c / "lightning.wtxt")
        assert fetches(trace) == 1 and got["global_step"] == 3
        assert all(torch.equal(got["state_dict"][k], v) for k, v in weights.items())
        acc2 = Accelerator(cpu=True)
        model2 = acc2.prepare(torch.nn.Linear(1024, 768))
        load_state(acc2, c / "state.wtxt", tmp_path / f"resume-{name}")
        assert fetches(trace) == 1
        assert torch.equal(model2.weight, model.weight) and torch.equal(model2.bias, model.bias)
        back = zeros()
        dcp.load(back, storage_reader=WtxtStorageReader(c / "dcp.wtxt"))
        # Two steps, each fetching what it reads: planning the parts of the
        # metadata arrays, reading the parts of the rows planned.
        assert fetches(trace) == 2
        assert all(torch.equal(back["model"][k], v) for k, v in weights.items())
        monkeypatch.delenv("GIT_TRACE")
        assert len(lfs_objects(c)) == sum(len(list((c / f"{n}.wtxt.parts").iterdir()))
                                          for n in ("lightning", "state", "dcp"))

    # Told not to fetch: each loader names the pointer, as unusable input.
    c = clone("offline")
    git(c, "config", "wtxt.fetch", "false")
    refused = r"000001\.wtxtpart: a Git LFS pointer to sha256:.*wtxt\.fetch is false.*`git config wtxt\.fetch true`"
    for load in (lambda: WtxtCheckpointIO(c).load_checkpoint(c / "lightning.wtxt"),
                 lambda: load_state(Accelerator(cpu=True), c / "state.wtxt", tmp_path / "resume-offline")):
        with pytest.raises(wtxt.Error, match=refused) as e:
            load()
        assert not isinstance(e.value, wtxt.VerifyError)
    # DCP wraps what a reader raises in its own CheckpointException.
    from torch.distributed.checkpoint.api import CheckpointException
    with pytest.raises(CheckpointException, match=refused):
        dcp.load(zeros(), storage_reader=WtxtStorageReader(c / "dcp.wtxt"))
    assert not (tmp_path / "resume-offline").exists()
