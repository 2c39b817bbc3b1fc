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


def test_a_clones_lfs_pointers_are_fetched_by_load_file_and_restore_checkpoint(tmp_path, lfs_server):
    url, objects = lfs_server
    w = tmp_path / "w"
    git(tmp_path, "init", "-q", "-b", "main", str(w))
    git(w, "config", "lfs.url", url)
    subprocess.run([CLI, "git", "install", "--lfs"], cwd=w, check=True, capture_output=True)
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
    bare = tmp_path / "models.git"
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(bare))
    git(w, "push", "-q", str(bare), "main")
    assert len(list(objects.iterdir())) >= 4, "the parts went to the LFS server"

    env = dict(os.environ, GIT_LFS_SKIP_SMUDGE="1")
    subprocess.run(["git", "clone", "-q", "-c", f"lfs.url={url}", str(bare), str(tmp_path / "c")],
                   env=env, check=True, capture_output=True)
    c = tmp_path / "c"
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
    subprocess.run(["git", "clone", "-q", "-c", f"lfs.url={url}", str(bare), str(tmp_path / "offline")],
                   env=env, check=True, capture_output=True)
    git(tmp_path / "offline", "config", "wtxt.fetch", "false")
    with pytest.raises(wtxt.Error, match=r"000001\.wtxtpart: a Git LFS pointer to sha256:.*wtxt\.fetch is false") as e:
        restore_checkpoint(tmp_path / "offline" / "run.wtxt", tmp_path / "resume2")
    assert not isinstance(e.value, wtxt.VerifyError)
    assert not (tmp_path / "resume2").exists()
