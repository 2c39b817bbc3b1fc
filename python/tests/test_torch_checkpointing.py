"""wtxt.torch_checkpointing with Meta's real `torch_checkpointing` (CPU):
each checkpoint its CheckpointManager commits, from the synchronous saver
and from the asynchronous saver's own writer process, becomes a signed,
chained generation in Git; a restored generation loads back the same
state, verified first; a tampered one is refused; a writer that writes in
place is refused before it writes."""

import pathlib
import subprocess

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch_checkpointing")

from torch_checkpointing.checkpoint_manager import CheckpointManager  # noqa: E402
from torch_checkpointing.checkpoint_writer import CheckpointWriterConfig  # noqa: E402
from torch_checkpointing.config import AsyncCheckpointSaverConfig, SyncCheckpointSaverConfig  # noqa: E402

import wtxt  # noqa: E402
from wtxt.torch_checkpointing import WtxtStorageConfig, restore  # noqa: E402
from stacks import git, same  # noqa: E402

FIXTURES = pathlib.Path(__file__).resolve().parents[2] / "fixtures" / "wtxt"
KEY, TRUSTED = FIXTURES / "keys" / "sign.pem", FIXTURES / "keys" / "trusted_keys"




def train(model, opt, steps):
    g = torch.Generator().manual_seed(steps)
    for _ in range(steps):
        x = torch.randn(8, 6, generator=g)
        torch.nn.functional.mse_loss(model(x), x.sum(1, keepdim=True)).backward()
        opt.step()
        opt.zero_grad()


def fresh():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 12), torch.nn.ReLU(), torch.nn.Linear(12, 1))
    return model, torch.optim.AdamW(model.parameters(), lr=0.01)


def manager(repo, save):
    # Direct I/O is off: the test's temporary folder may not support it.
    storage = WtxtStorageConfig(repo=str(repo), sign_key=str(KEY), use_direct_io=False)
    return CheckpointManager(CheckpointManager.Config(save=save, storage_config=storage))




def save_sync_then_async(tmp_path):
    repo = tmp_path / "runs"
    git(tmp_path, "init", "-q", str(repo))
    model, opt = fresh()
    train(model, opt, 3)
    sync = manager(repo, SyncCheckpointSaverConfig())
    sync.save(str(tmp_path / "ckpt" / "step_3"), {"model": model.state_dict(), "optim": opt.state_dict(), "step": 3})
    sync.close()
    assert len(git(repo, "log", "--format=%H").split()) == 1
    train(model, opt, 2)
    state = {"model": model.state_dict(), "optim": opt.state_dict(), "step": 5}
    expected = {"model": {k: v.clone() for k, v in model.state_dict().items()}, "optim": opt.state_dict(), "step": 5}
    later = manager(repo, AsyncCheckpointSaverConfig())
    later.save(str(tmp_path / "ckpt" / "step_5"), state).result()
    later.close()
    return repo, expected


def test_every_committed_checkpoint_is_a_signed_chained_generation_that_loads_back(tmp_path):
    repo, expected = save_sync_then_async(tmp_path)
    # One commit per checkpoint; the second written by the async saver's writer process.
    assert len(git(repo, "log", "--format=%H").split()) == 2
    snap = repo / "checkpoint.wtxt"
    report = wtxt.verify(snap, trusted_keys=TRUSTED, require_signature=True)
    assert report.ok
    log = subprocess.run(["wtxt", "log", "--verify", "checkpoint.wtxt"], cwd=repo, capture_output=True, text=True)
    assert log.returncode == 0, log.stdout + log.stderr

    out = restore(snap, tmp_path / "resume", trusted_keys=TRUSTED, require_signature=True)
    loader = manager(repo, SyncCheckpointSaverConfig())

    def load(folder):
        model, opt = fresh()
        train(model, opt, 1)  # the optimizer's state exists to load into
        return loader.load(str(folder), into={"model": model.state_dict(), "optim": opt.state_dict(), "step": 0})

    ours, theirs = load(out), load(tmp_path / "ckpt" / "step_5")
    assert ours["step"] == 5
    assert same(ours["model"], expected["model"])
    assert same(ours["optim"]["state"], expected["optim"]["state"])
    assert same(ours, theirs)
    loader.close()

    # A flipped character in the committed snapshot: refused, nothing written.
    lines = snap.read_text().split("\n")
    at = next(i for i, line in enumerate(lines) if line.startswith("ch ")) + 1
    lines[at] = ("B" if lines[at][3] == "A" else "A").join([lines[at][:3], lines[at][4:]])
    snap.write_text("\n".join(lines))
    with pytest.raises(wtxt.VerifyError):
        restore(snap, tmp_path / "bad", trusted_keys=TRUSTED)
    assert not (tmp_path / "bad").exists()


def test_keep_folders_false_leaves_the_repository_the_one_copy(tmp_path):
    repo = tmp_path / "runs"
    git(tmp_path, "init", "-q", str(repo))
    model, opt = fresh()
    train(model, opt, 2)
    storage = WtxtStorageConfig(repo=str(repo), sign_key=str(KEY), use_direct_io=False, keep_folders=False)
    m = CheckpointManager(CheckpointManager.Config(save=SyncCheckpointSaverConfig(), storage_config=storage))
    state = {"model": model.state_dict(), "step": 2}
    m.save(str(tmp_path / "ckpt" / "step_2"), state)
    m.close()
    assert not (tmp_path / "ckpt" / "step_2").exists(), "the committed folder is removed"
    assert len(git(repo, "log", "--format=%H").split()) == 1
    out = restore(repo / "checkpoint.wtxt", tmp_path / "resume", trusted_keys=TRUSTED, require_signature=True)
    loader = manager(repo, SyncCheckpointSaverConfig())
    fresh_model, _ = fresh()
    got = loader.load(str(out), into={"model": fresh_model.state_dict(), "step": 0})
    loader.close()
    assert got["step"] == 2 and same(got["model"], model.state_dict())


def test_a_writer_that_writes_in_place_is_refused(tmp_path):
    repo = tmp_path / "runs"
    git(tmp_path, "init", "-q", str(repo))
    model, opt = fresh()
    save = SyncCheckpointSaverConfig(writer_config=CheckpointWriterConfig(write_to_temp_dir=False))
    with pytest.raises(Exception, match="written in place"):
        manager(repo, save).save(str(tmp_path / "ckpt" / "step_0"), {"model": model.state_dict()})
    assert git(repo, "rev-list", "--all") == ""


def test_the_storage_takes_on_push_error_as_the_trainer_callbacks_do(tmp_path):
    """The setting reaches the storage's saves (the hearing itself is
    tested through the Trainer callback, which shares it)."""
    with pytest.raises(wtxt.Error, match="on_push_error must be one of"):
        WtxtStorageConfig(repo=str(tmp_path), on_push_error="ignore").create_storage()
    assert WtxtStorageConfig(repo=str(tmp_path), on_push_error="raise").create_storage()._behind._on_push_error == "raise"
