"""wtxt.trainer with the real transformers Trainer (a small Llama, CPU):
every checkpoint becomes a signed, chained generation committed and pushed
in the background; a generation restored and resumed from trains on exactly
as the Trainer's own checkpoint does; a tampered one is refused."""

import os
import pathlib

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")

import wtxt  # noqa: E402
from wtxt.trainer import WtxtCallback, restore_checkpoint  # noqa: E402
from stacks import git, same  # noqa: E402

FIXTURES = pathlib.Path(__file__).resolve().parents[2] / "fixtures" / "wtxt"
KEY, TRUSTED = FIXTURES / "keys" / "sign.pem", FIXTURES / "keys" / "trusted_keys"




def train(out, max_steps, callbacks=(), resume=None):
    """A one-layer Llama trained on fixed random tokens; its final weights."""
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                   num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=32)
    model = transformers.LlamaForCausalLM(cfg)
    g = torch.Generator().manual_seed(1)
    data = [{"input_ids": torch.randint(0, 64, (8,), generator=g), "labels": torch.randint(0, 64, (8,), generator=g)}
            for _ in range(32)]
    args = transformers.TrainingArguments(output_dir=str(out), max_steps=max_steps, save_steps=2,
                                          per_device_train_batch_size=4, report_to=[], use_cpu=True,
                                          logging_steps=1000, seed=0, data_seed=0, disable_tqdm=True)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=data, callbacks=list(callbacks))
    trainer.train(resume_from_checkpoint=None if resume is None else str(resume))
    return {k: v.detach().clone() for k, v in model.state_dict().items()}




def test_every_trainer_checkpoint_is_a_generation_that_resumes_exactly(tmp_path):
    repo, remote = tmp_path / "runs", tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "-b", "main", str(repo))
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(remote))
    git(repo, "config", "user.name", "Ada Trainer")
    git(repo, "config", "user.email", "ada@example.com")
    cb = WtxtCallback(repo, "llama.wtxt", remote=str(remote), sign_key=KEY)
    train(tmp_path / "out", 4, callbacks=[cb])
    # Steps 2 and 4: two generations, chained, committed and pushed.
    assert [i.gen for i in cb.infos] == [0, 1] and all(i.pushed for i in cb.infos), cb.infos
    # Each commit names its step, under the author Git's config names.
    assert git(repo, "log", "-1", "--format=%s").split()[3] == "step=4"
    assert git(repo, "log", "-1", "--format=%an <%ae>").strip() == "Ada Trainer <ada@example.com>"
    assert git(remote, "rev-parse", "main").strip() == cb.infos[-1].commit
    report = wtxt.verify(repo / "llama.wtxt", trusted_keys=TRUSTED, require_signature=True)
    assert report.ok and report.gen == 1, report.errors

    # Restored, the checkpoint holds what the Trainer saved: the other files
    # byte for byte, the torch files' objects and the model's tensors equal.
    back = restore_checkpoint(repo / "llama.wtxt", tmp_path / "back", trusted_keys=TRUSTED, require_signature=True)
    orig = tmp_path / "out" / "checkpoint-4"
    assert sorted(os.listdir(back)) == sorted(os.listdir(orig))
    with wtxt._objects.numpy_globals():
        for name in sorted(os.listdir(orig)):
            a, b = orig / name, pathlib.Path(back) / name
            if name.endswith((".pt", ".pth")):
                assert same(torch.load(a, weights_only=True), torch.load(b, weights_only=True)), name
            else:
                assert a.read_bytes() == b.read_bytes(), name

    # Resumed from the generation, training goes on exactly as from the Trainer's own checkpoint.
    from_own = train(tmp_path / "own", 6, resume=orig)
    from_wtxt = train(tmp_path / "again", 6, resume=back)
    assert same(from_own, from_wtxt)


def test_checkpoint_folders_go_once_their_generation_is_committed(tmp_path):
    """keep_folders=False: one copy on disk, in Git; the last generation
    restores the checkpoint the Trainer wrote."""
    import types
    repo = tmp_path / "runs"
    git(tmp_path, "init", "-q", "-b", "main", str(repo))
    cb = WtxtCallback(repo, "llama.wtxt", sign_key=KEY, keep_folders=False)
    weights = train(tmp_path / "out", 4, callbacks=[cb])
    assert [i.gen for i in cb.infos] == [0, 1] and all(i.commit for i in cb.infos), cb.infos
    assert not [p for p in os.listdir(tmp_path / "out") if p.startswith("checkpoint-")]
    back = restore_checkpoint(repo / "llama.wtxt", tmp_path / "back", trusted_keys=TRUSTED, require_signature=True)
    from safetensors.torch import load_file
    saved = load_file(os.path.join(back, "model.safetensors"))
    assert same(dict(sorted(saved.items())), dict(sorted(weights.items())))
    # The best model at the end is loaded from its folder: the two do not go together.
    with pytest.raises(wtxt.Error, match="load_best_model_at_end"):
        cb.on_train_begin(types.SimpleNamespace(load_best_model_at_end=True), None, None)


def test_a_tampered_generation_is_never_restored(tmp_path):
    repo = tmp_path / "runs"
    git(tmp_path, "init", "-q", "-b", "main", str(repo))
    cb = WtxtCallback(repo, "ck.wtxt")
    train(tmp_path / "out", 2, callbacks=[cb])
    snap = repo / "ck.wtxt"
    lines = snap.read_text().split("\n")
    at = next(i for i, line in enumerate(lines) if line.startswith("ch ")) + 1
    lines[at] = ("B" if lines[at][3] == "A" else "A").join([lines[at][:3], lines[at][4:]])
    snap.write_text("\n".join(lines))
    with pytest.raises(wtxt.Error):
        restore_checkpoint(snap, tmp_path / "back")
    assert not (tmp_path / "back").exists()
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".wtxt-checkpoint-")]
    # A snapshot that is not a Trainer checkpoint is named as such.
    plain = tmp_path / "plain.wtxt"
    wtxt.save_file({"w": torch.zeros(2).numpy()}, plain)
    with pytest.raises(wtxt.Error, match="not a checkpoint folder"):
        restore_checkpoint(plain, tmp_path / "back")


def test_a_checkpoint_never_holds_or_restores_a_git_folder(tmp_path):
    """T5-6, T5-16: a manifest naming `.git/...` (in any case) or `..` is
    refused before anything is written; a folder holding `.git`, or given
    as a link, is never taken in."""
    import json

    import numpy as np
    from wtxt.checkpoint import MANIFEST, checkpoint_state

    for rel in [".git/config", "sub/.GIT/hooks/pre-commit", "a/../../b", "./x", "a\\b"]:
        files = [{"path": rel, "kind": "bytes"}]
        manifest = json.dumps({"format": "wtxt-checkpoint-folder/1", "files": files}).encode()
        snap = tmp_path / "hostile.wtxt"
        wtxt.save_file({MANIFEST: np.frombuffer(manifest, np.uint8), rel: np.frombuffer(b"x", np.uint8)}, snap)
        with pytest.raises(wtxt.Error, match="not a plain path"):
            restore_checkpoint(snap, tmp_path / "back")
        assert not (tmp_path / "back").exists(), rel
        assert not [p for p in os.listdir(tmp_path) if p.startswith(".wtxt-checkpoint-")]
    folder = tmp_path / "checkpoint-5"
    (folder / ".git").mkdir(parents=True)
    (folder / ".git" / "config").write_text("[core]\n")
    with pytest.raises(wtxt.Error, match="not a plain path"):
        checkpoint_state(folder)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "model.bin").write_bytes(b"secret")
    (tmp_path / "checkpoint-6").symlink_to(elsewhere)
    with pytest.raises(wtxt.Error, match="not a folder"):
        checkpoint_state(tmp_path / "checkpoint-6")


def test_accelerate_save_state_folders_are_generations_that_load_back(tmp_path):
    """accelerator.save_state through WtxtStateSaver: each folder a generation;
    load_state from it gives back the model, optimizer, scheduler and RNG
    state, and training goes on exactly as from Accelerate's own folder."""
    from accelerate import Accelerator
    from accelerate.utils import set_seed
    from wtxt.accelerate import WtxtStateSaver, load_state

    def setup():
        set_seed(0)
        acc = Accelerator(cpu=True)
        model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
        opt = torch.optim.AdamW(model.parameters(), lr=0.1)
        sch = torch.optim.lr_scheduler.StepLR(opt, 1, gamma=0.5)
        return (acc, *acc.prepare(model, opt, sch))

    def step(acc, model, opt, sch):
        loss = model(torch.randn(5, 4)).pow(2).mean()  # the RNG state decides the batch
        acc.backward(loss)
        opt.step()
        sch.step()
        opt.zero_grad()

    repo = tmp_path / "runs"
    git(tmp_path, "init", "-q", "-b", "main", str(repo))
    saver = WtxtStateSaver(repo, sign_key=KEY)
    acc, model, opt, sch = setup()
    for i in range(2):
        step(acc, model, opt, sch)
        saver.save_state(acc, tmp_path / f"state{i}")
    assert [i.gen for i in saver.finish()] == [0, 1]

    def go_on(folder, snapshot=None):
        acc, model, opt, sch = setup()
        if snapshot is None:
            acc.load_state(str(folder))
        else:
            load_state(acc, snapshot, folder, trusted_keys=TRUSTED, require_signature=True)
        step(acc, model, opt, sch)
        return {k: v.detach().clone() for k, v in model.state_dict().items()}, sch.get_last_lr()

    own = go_on(tmp_path / "state1")
    ours = go_on(tmp_path / "back", repo / "state.wtxt")
    assert same(own[0], ours[0]) and own[1] == ours[1]


def test_a_refused_push_is_heard_at_the_next_save_and_its_queue_outlives_the_run(tmp_path, caplog):
    """A host that refuses every push: the next save warns on the `wtxt`
    logger (with `on_push_error="raise"`, raises from `on_save`, which
    stops a Trainer); the generation waits in the ring's resend queue in
    `.git`, and the next run's Snapshotter pushes it once the host takes it."""
    from types import SimpleNamespace

    repo, bare = tmp_path / "runs", tmp_path / "host.git"
    git(tmp_path, "init", "-q", "-b", "main", str(repo))
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(bare))
    hook = bare / "hooks" / "pre-receive"
    hook.write_text("#!/bin/sh\necho refused by the host >&2\nexit 1\n")
    hook.chmod(0o755)
    git(repo, "remote", "add", "origin", str(bare))
    args = SimpleNamespace(output_dir=str(tmp_path / "out"))

    def checkpoint(step):
        folder = tmp_path / "out" / f"checkpoint-{step}"
        folder.mkdir(parents=True)
        (folder / "trainer_state.json").write_text(f'{{"global_step": {step}}}\n')
        return SimpleNamespace(global_step=step, is_world_process_zero=True)

    def saved(cb, step):
        cb.on_save(args, checkpoint(step), None)
        try:
            cb._behind._futures[-1][1].exception()  # this generation's push is over
        except Exception:  # noqa: BLE001
            pass

    cb = WtxtCallback(str(repo), "run.wtxt", remote="origin")
    saved(cb, 1)
    with caplog.at_level("WARNING", logger="wtxt"):
        saved(cb, 2)
    assert any("step 1" in r.message and "not pushed" in r.message for r in caplog.records), caplog.text
    with pytest.raises(wtxt.Error, match="not pushed"):
        cb.finish()
    strict = WtxtCallback(str(repo), "run.wtxt", remote="origin", on_push_error="raise")
    saved(strict, 3)
    with pytest.raises(wtxt.Error, match=r"step 3: .*not pushed.*on_push_error='raise' stops the run"):
        strict.on_save(args, checkpoint(4), None)
    with pytest.raises(wtxt.Error):
        strict.finish()
    with pytest.raises(wtxt.Error, match="on_push_error must be one of"):
        WtxtCallback(str(repo), "run.wtxt", on_push_error="ignore")
    # The Snapshotter on its own: the next publish hears it, whether or not the future was asked.
    state = {"w": np.zeros(4, "f4")}
    with wtxt.Snapshotter(str(repo), "run.wtxt", remote="origin", on_push_error="raise") as snap:
        snap.publish(state)
        with pytest.raises(wtxt.Error, match="not pushed"):
            snap.request_snapshot().result()
        assert "refused by the host" in str(snap.status()["last_error"])
        with pytest.raises(wtxt.Error, match=r"gen \d+ .*not pushed.*on_push_error='raise'"):
            snap.publish(state)
        snap.publish(state)  # heard once
    caplog.clear()
    with wtxt.Snapshotter(str(repo), "run.wtxt", remote="origin") as snap, caplog.at_level("WARNING", logger="wtxt"):
        snap.publish(state)
        snap.request_snapshot().exception()
        snap.publish(state)
    assert any("not pushed" in r.message for r in caplog.records), caplog.text
    with pytest.raises(wtxt.Error, match="on_push_error must be one of"):
        wtxt.Snapshotter(str(repo), on_push_error="ignore")
    # The host takes pushes again: the next run's first Snapshotter pushes what waited.
    hook.unlink()
    with wtxt.Snapshotter(str(repo), "run.wtxt", remote="origin") as snap:
        snap.flush()
        assert snap.status()["resend_queue"] == 0, snap.status()
    assert git(bare, "rev-parse", "main") == git(repo, "rev-parse", "HEAD")
