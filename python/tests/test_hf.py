"""Hugging Face folders written by the real `transformers` `save_pretrained`
go into one snapshot and come back byte for byte, and `from_pretrained`
loads what comes back (tied weights as they were)."""
import os
import pathlib
import subprocess

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import wtxt  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]
KEYS = ROOT / "fixtures" / "wtxt" / "keys"
CLI = os.environ.get("WTXT_BIN") or str(ROOT / "target" / "debug" / "wtxt")


def tiny_llama(tied: bool, dtype):
    cfg = transformers.LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=tied)
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(cfg).to(dtype)


def files(d: pathlib.Path):
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("tied,dtype", [(True, torch.float32), (False, torch.bfloat16)])
def test_a_save_pretrained_folder_round_trips_and_loads(tmp_path, tied, dtype):
    model = tiny_llama(tied, dtype)
    src = tmp_path / "model"
    model.save_pretrained(src, max_shard_size="20KB")
    (src / "chat_template.jinja").write_text("{% for m in messages %}{{ m.content }}{% endfor %}")
    assert len(list(src.glob("model-*.safetensors"))) > 1 and (src / "model.safetensors.index.json").exists()

    snap = tmp_path / "m.wtxt"
    r = subprocess.run([CLI, "snapshot", src, "-o", snap, "--part-size", "64K", "--sign-key", KEYS / "sign.pem"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([CLI, "verify", snap, "--pubkey", KEYS / "sign.pem.pub", "--require-signature"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    out = tmp_path / "out"
    r = subprocess.run([CLI, "extract", snap, "--hf", out], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert files(out) == files(src)

    back = transformers.AutoModelForCausalLM.from_pretrained(out, torch_dtype=dtype)
    want, got = model.state_dict(), back.state_dict()
    assert want.keys() == got.keys()
    for k in want:
        assert got[k].dtype == want[k].dtype and torch.equal(got[k], want[k]), k
    same = back.lm_head.weight.data_ptr() == back.model.embed_tokens.weight.data_ptr()
    assert same == tied


def test_the_python_api_for_folders(tmp_path):
    model = tiny_llama(True, torch.float32)
    src = tmp_path / "model"
    model.save_pretrained(src)  # one model.safetensors, no index
    snap = tmp_path / "m.wtxt"
    sha = wtxt.save_folder(src, snap, sign_key=KEYS / "sign.pem", ts="2026-01-01T00:00:00Z")
    assert wtxt.verify(snap, pubkey=KEYS / "sign.pem.pub").signature == "valid"
    assert wtxt.verify(snap).sha256_all == sha
    assert wtxt.extract_folder(snap, tmp_path / "out", pubkey=KEYS / "sign.pem.pub", require_signature=True) == 1
    assert files(tmp_path / "out") == files(src)
    # Damage anywhere fails the extract before a file is written.
    text = bytearray(snap.read_bytes())
    at = text.index(b"endch") - 20
    text[at] = ord("A") if text[at] != ord("A") else ord("B")
    snap.write_bytes(bytes(text))
    with pytest.raises(wtxt.VerifyError):
        wtxt.extract_folder(snap, tmp_path / "again")
    assert not (tmp_path / "again").exists()
    with pytest.raises(wtxt.Error, match="not a Hugging Face folder"):
        wtxt.save_folder(tmp_path / "out" / "config.json", tmp_path / "x.wtxt")


def test_float8_tensors_round_trip_bit_for_bit(tmp_path):
    import wtxt.torch as wt

    g = torch.Generator().manual_seed(0)
    sd = {"q.weight": torch.randn(8, 4, generator=g).to(torch.float8_e4m3fn),
          "q.scale": torch.randn(4, generator=g).to(torch.float8_e5m2)}
    f = tmp_path / "f8.wtxt"
    wt.save_state_dict(sd, f)
    back = wt.load_state_dict(f)
    for k, v in sd.items():
        assert back[k].dtype == v.dtype and torch.equal(back[k].view(torch.uint8), v.view(torch.uint8)), k
    r = subprocess.run([CLI, "inspect", f], capture_output=True, text=True)
    assert "f8e4m3" in r.stdout and "f8e5m2" in r.stdout, r.stdout


def git(cwd, *args):
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@example.com", GIT_COMMITTER_NAME="t",
               GIT_COMMITTER_EMAIL="t@example.com", WTXT=CLI)
    r = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, env=env)
    assert r.returncode == 0, (args, r.stdout, r.stderr)
    return r.stdout + r.stderr


def test_a_save_pretrained_folder_in_git_signed_cloned_and_checked_out(tmp_path):
    """The issue's whole path: a folder `save_pretrained` wrote goes into Git
    as one signed split snapshot; a training step later, the next generation;
    a clone gets the folder back byte for byte, `from_pretrained` loads it,
    and checking out the first commit gives the first folder."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    model = tiny_llama(False, torch.bfloat16)
    model.save_pretrained(repo / "llama", max_shard_size="20KB")
    r = subprocess.run([CLI, "git", "install", "--folder", "llama"], cwd=repo, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    for k, v in [("wtxt.signKey", KEYS / "sign.pem"), ("wtxt.trustedKeys", KEYS / "trusted_keys"),
                 ("wtxt.requireSignature", "true"), ("wtxt.partSize", "64K")]:
        git(repo, "config", k, str(v))
    r = subprocess.run([CLI, "git", "folder", "llama", "--stage"], cwd=repo, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    git(repo, "add", ".gitattributes")
    git(repo, "commit", "-q", "-m", "gen0")
    first = files(repo / "llama")

    # One optimizer step, saved over the folder; the commit snapshots it.
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.tensor([[1, 2, 3]]), labels=torch.tensor([[1, 2, 3]])).loss.backward()
    opt.step()
    model.save_pretrained(repo / "llama", max_shard_size="20KB")
    (repo / "notes.md").write_text("step 1\n")
    git(repo, "add", "notes.md")
    assert "(gen 1" in git(repo, "commit", "-m", "gen1")
    second = files(repo / "llama")
    assert second != first
    diff = git(repo, "diff", "HEAD~1", "HEAD", "--", "llama.wtxt", "llama.wtxt.parts")
    assert "model.layers.0.mlp.up_proj.weight" in diff

    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(repo), str(clone))
    git(clone, "config", "wtxt.trustedKeys", str(KEYS / "trusted_keys"))
    git(clone, "config", "wtxt.requireSignature", "true")
    r = subprocess.run([CLI, "git", "install", "--folder", "llama"], cwd=clone, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert files(clone / "llama") == second
    back = transformers.AutoModelForCausalLM.from_pretrained(clone / "llama", torch_dtype=torch.bfloat16)
    for k, v in model.state_dict().items():
        assert torch.equal(back.state_dict()[k], v), k
    git(clone, "checkout", "-q", "HEAD~1")
    assert files(clone / "llama") == first
