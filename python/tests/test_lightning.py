"""wtxt.lightning with real PyTorch Lightning (CPU): every checkpoint the
Trainer saves becomes a signed, chained generation committed behind the
loop; `fit(ckpt_path=...)` from it, verified first, trains on exactly as
from Lightning's own checkpoint; a tampered or unsigned one is refused."""

import os
import pathlib

import pytest

torch = pytest.importorskip("torch")
L = pytest.importorskip("lightning")

import wtxt  # noqa: E402
from wtxt.lightning import WtxtCheckpointIO  # noqa: E402
from stacks import git, same  # noqa: E402

FIXTURES = pathlib.Path(__file__).resolve().parents[2] / "fixtures" / "wtxt"
KEY, TRUSTED = FIXTURES / "keys" / "sign.pem", FIXTURES / "keys" / "trusted_keys"


class Model(L.LightningModule):
    def __init__(self, lr: float = 0.01):
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))

    def training_step(self, batch, _):
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self):
        opt = torch.optim.AdamW(self.parameters(), lr=self.hparams.lr)
        return [opt], [torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.9)]


def data():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(64, 8, generator=g)
    return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, x.sum(1, keepdim=True)), batch_size=8)


def fit(root, max_steps, plugins=(), ckpt_path=None):
    """Trains from seed 0 (or resumes); the final weights and the trainer."""
    L.seed_everything(0, verbose=False)
    model = Model()
    every = L.pytorch.callbacks.ModelCheckpoint(dirpath=str(root / "ckpt"), every_n_train_steps=2, save_top_k=-1)
    trainer = L.Trainer(max_steps=max_steps, accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
                        enable_model_summary=False, callbacks=[every], plugins=list(plugins),
                        default_root_dir=str(root))
    trainer.fit(model, data(), ckpt_path=None if ckpt_path is None else str(ckpt_path))
    return {k: v.detach().clone() for k, v in model.state_dict().items()}, trainer






def test_every_lightning_checkpoint_is_a_generation_that_resumes_exactly(tmp_path):
    repo = tmp_path / "runs"
    git(tmp_path, "init", "-q", str(repo))
    io = WtxtCheckpointIO(repo, sign_key=KEY, trusted_keys=TRUSTED)
    fit(tmp_path / "w", 4, plugins=[io])
    # Steps 2 and 4, written and committed before fit returned (teardown).
    assert [i.gen for i in io.infos] == [0, 1], io.infos
    assert len(git(repo, "log", "--format=%H").split()) == 2
    # Each commit names its step and epoch.
    subjects = git(repo, "log", "--format=%s").splitlines()
    assert " step=4 epoch=" in subjects[0] and " step=2 epoch=" in subjects[1], subjects
    snap = repo / "lightning.wtxt"
    assert wtxt.verify(snap, trusted_keys=TRUSTED, require_signature=True).ok
    # At Lightning's own paths only the lines that name each generation:
    # the history holds the generations.
    from wtxt.lightning import NAME_LINE
    for name in os.listdir(tmp_path / "w" / "ckpt"):
        assert (tmp_path / "w" / "ckpt" / name).read_text().startswith(NAME_LINE + "\n"), name

    # The same run with Lightning's own checkpoints.
    fit(tmp_path / "own", 4)
    own = sorted((tmp_path / "own" / "ckpt").iterdir())[-1]
    theirs = torch.load(own, weights_only=False)
    ours = WtxtCheckpointIO(repo, trusted_keys=TRUSTED).load_checkpoint(snap)
    for k in ("state_dict", "optimizer_states", "lr_schedulers", "epoch", "global_step", "hyper_parameters"):
        assert same(theirs[k], ours[k]), k
    assert same(theirs["loops"], ours["loops"])

    # Resumed from each, training goes on exactly alike.
    a, _ = fit(tmp_path / "a", 6, ckpt_path=own)
    io2 = WtxtCheckpointIO(repo, path_in_repo="resumed.wtxt", trusted_keys=TRUSTED)
    b, _ = fit(tmp_path / "b", 6, plugins=[io2], ckpt_path=snap)
    assert same(a, b)


def test_a_tampered_or_unsigned_checkpoint_is_never_loaded(tmp_path):
    repo = tmp_path / "runs"
    git(tmp_path, "init", "-q", str(repo))
    io = WtxtCheckpointIO(repo)
    fit(tmp_path / "w", 2, plugins=[io])
    snap = repo / "lightning.wtxt"
    with pytest.raises(wtxt.VerifyError, match="signature"):
        WtxtCheckpointIO(repo, trusted_keys=TRUSTED).load_checkpoint(snap)
    # T5-7: made with only `sign_key` (the README's form), the plugin loads
    # only what that key signed: not an unsigned checkpoint, not another key's.
    with pytest.raises(wtxt.VerifyError, match="signature"):
        WtxtCheckpointIO(repo, sign_key=KEY).load_checkpoint(snap)
    other = tmp_path / "other.wtxt"
    wtxt.save_file({"w": torch.zeros(2).numpy()}, other, sign_key=FIXTURES / "keys" / "other.pem")
    with pytest.raises(wtxt.VerifyError, match="signature|trusted"):
        WtxtCheckpointIO(repo, sign_key=KEY).load_checkpoint(other)
    mine = tmp_path / "mine.wtxt"
    wtxt.save_file({"w": torch.zeros(2).numpy()}, mine, sign_key=KEY)
    with pytest.raises(wtxt.Error, match="not a Lightning checkpoint"):
        WtxtCheckpointIO(repo, sign_key=KEY).load_checkpoint(mine)
    lines = snap.read_text().split("\n")
    at = next(i for i, line in enumerate(lines) if line.startswith("ch ")) + 1
    lines[at] = ("B" if lines[at][3] == "A" else "A").join([lines[at][:3], lines[at][4:]])
    snap.write_text("\n".join(lines))
    with pytest.raises(wtxt.VerifyError):
        WtxtCheckpointIO(repo).load_checkpoint(snap)


class Monitored(Model):
    def validation_step(self, batch, _):
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.net(x), y))


def test_best_last_and_top_k_resolve_to_generations(tmp_path):
    """Issue 69.1: `ModelCheckpoint(monitor=..., save_top_k=2, save_last=True)`:
    one generation per state saved (the `last` save names the same one),
    `best_model_path` and `ckpt_path="best"`/`"last"` load their
    generations verified, and top-k pruning drops names, never history."""
    from wtxt.lightning import REFS

    repo = tmp_path / "runs"
    git(tmp_path, "init", "-q", str(repo))
    io = WtxtCheckpointIO(repo, sign_key=KEY)
    L.seed_everything(0, verbose=False)
    model = Monitored()
    ckpt = L.pytorch.callbacks.ModelCheckpoint(dirpath=str(tmp_path / "ck"), monitor="val_loss", save_top_k=2,
                                               save_last=True)
    trainer = L.Trainer(max_epochs=4, accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
                        enable_model_summary=False, callbacks=[ckpt], plugins=[io], default_root_dir=str(tmp_path))
    trainer.fit(model, data(), data())
    final = float(trainer.callback_metrics["val_loss"])
    # One state saved an epoch (top-k's save and `last` name one
    # generation): four generations, not eight.
    assert len(io.infos) == 4, io.infos
    assert len(git(repo, "log", "--format=%H").split()) == 4
    # Two best and the last keep their names; the pruned ones lost theirs only.
    names = git(repo, "for-each-ref", "--format=%(refname)", REFS).split()
    assert len(names) == 3, names
    kept = sorted(os.listdir(tmp_path / "ck"))
    assert len(kept) == 3 and "last.ckpt" in kept, kept
    assert os.path.basename(ckpt.best_model_path) in kept
    # "best" loads the best generation, verified: its score is the best score.
    best = trainer.validate(model, data(), ckpt_path="best", verbose=False)[0]["val_loss"]
    assert abs(best - float(ckpt.best_model_score)) < 1e-6, (best, ckpt.best_model_score)
    last = trainer.validate(model, data(), ckpt_path="last", verbose=False)[0]["val_loss"]
    assert abs(last - final) < 1e-6, (last, final)
    # A path no save made names no generation.
    with pytest.raises(wtxt.Error, match="no such checkpoint"):
        io.load_checkpoint(tmp_path / "ck" / "never-saved.ckpt")


def test_a_long_checkpoint_name_gets_a_ref_git_can_store(tmp_path):
    """A valid 205-byte file name of bytes a ref spells `%XX` (spaces,
    accents) is named by a ref Git stores: saved, named at teardown (which
    raised before), loaded verified, and removed (name file and ref)."""
    from wtxt.lightning import REFS

    repo = tmp_path / "runs"
    git(tmp_path, "init", "-q", str(repo))
    io = WtxtCheckpointIO(repo, sign_key=KEY)
    name = ("é " * 50) + "x.ckpt"
    assert len(name.encode()) == 156
    name = "a" * (205 - len(name.encode())) + name
    assert len(name.encode()) == 205
    path = tmp_path / "ck" / name
    state = {"state_dict": {"w": torch.arange(6.0).reshape(2, 3)}, "epoch": 0, "global_step": 1}
    io.save_checkpoint(state, path)
    io.teardown()
    refs = git(repo, "for-each-ref", "--format=%(refname)", REFS).split()
    assert len(refs) == 1 and len(refs[0]) == len(REFS) + 64, refs
    got = WtxtCheckpointIO(repo, sign_key=KEY).load_checkpoint(path)
    assert torch.equal(got["state_dict"]["w"], state["state_dict"]["w"]) and got["global_step"] == 1
    io.remove_checkpoint(path)
    assert not path.exists()
    assert git(repo, "for-each-ref", "--format=%(refname)", REFS).split() == []
