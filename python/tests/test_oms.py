"""OpenSSF Model Signing against the reference tool: what wtxt signs,
`model_signing verify key` accepts, and refuses once a part is altered,
added or removed; what `model_signing sign key` signs, `wtxt oms verify`
accepts, and refuses what the reference refuses.

Run by scripts/test.sh; needs the `model-signing` package (.ci/run installs it)."""
import os
import pathlib
import shutil
import subprocess

import numpy as np
import pytest

import wtxt

CLI = os.environ.get("WTXT_BIN") or shutil.which("wtxt") or str(
    pathlib.Path(__file__).resolve().parents[2] / "target" / "debug" / "wtxt")
MODEL_SIGNING = shutil.which("model_signing")
pytestmark = pytest.mark.skipif(MODEL_SIGNING is None and not os.environ.get("CI"),
                                reason="model_signing is not installed")


def run(*args):
    return subprocess.run([str(a) for a in args], capture_output=True, text=True)


def reference_verify(folder, sig, public):
    """`model_signing verify key`: True when it accepts."""
    r = run(MODEL_SIGNING, "verify", "key", "--signature", sig, "--public_key", public, folder)
    assert r.returncode in (0, 1), r.stderr
    return r.returncode == 0


def wtxt_verify(folder, sig, public):
    r = run(CLI, "oms", "verify", folder, "--signature", sig, "--public-key", public)
    assert r.returncode in (0, 1), r.stderr
    return r.returncode == 0


@pytest.fixture(params=["sec1", "pkcs8", "keygen"])
def ec_key(request, tmp_path):
    """A P-256 key as openssl writes it (SEC1 with its EC PARAMETERS block,
    or PKCS#8), or as `wtxt keygen --type p256` does; and its public key."""
    d = tmp_path / "keys"
    d.mkdir()
    key, public = d / "ec.pem", d / "ec.pub"
    if request.param == "keygen":
        subprocess.run([CLI, "keygen", "-o", key, "--type", "p256"], check=True, capture_output=True)
        os.rename(f"{key}.pub", public)
        return key, public
    sec1 = d / "sec1.pem"
    subprocess.run(["openssl", "ecparam", "-name", "prime256v1", "-genkey", "-out", sec1], check=True)
    if request.param == "pkcs8":
        subprocess.run(["openssl", "pkcs8", "-topk8", "-nocrypt", "-in", sec1, "-out", key], check=True)
    else:
        shutil.copy(sec1, key)
    subprocess.run(["openssl", "ec", "-in", sec1, "-pubout", "-out", public], check=True, capture_output=True)
    return key, public


def tensors(seed):
    rng = np.random.default_rng(seed)
    return {"model.embed_tokens.weight": rng.standard_normal((3000, 96)).astype(np.float32),
            "model.norm.weight": np.ones(96, np.float32)}


@pytest.mark.parametrize("part_size", ["128K", "none"])
def test_the_reference_accepts_what_wtxt_signs_and_refuses_any_changed_part(tmp_path, ec_key, part_size):
    key, public = ec_key
    folder = tmp_path / "model"
    folder.mkdir()
    head = folder / "model.wtxt"
    wtxt.save_file(tensors(1), head, part_size=part_size, ts="2026-01-01T00:00:00Z", oms_key=key)
    sig = folder / "model.sig"
    assert reference_verify(folder, sig, public)
    assert wtxt_verify(folder, sig, public)
    assert run(CLI, "verify", head, "--oms-pubkey", public).returncode == 0
    if part_size == "none":
        data = head.read_bytes()
        head.write_bytes(data.replace(b"\nch ", b"\nch  ", 1))
        assert not reference_verify(folder, sig, public) and not wtxt_verify(folder, sig, public)
        return
    part = folder / "model.wtxt.parts" / "000002.wtxtpart"
    kept = part.read_bytes()
    part.write_bytes(kept[:-2] + (b"B\n" if kept[-2:-1] != b"B" else b"C\n"))
    assert not reference_verify(folder, sig, public) and not wtxt_verify(folder, sig, public)
    part.unlink()
    assert not reference_verify(folder, sig, public) and not wtxt_verify(folder, sig, public)
    part.write_bytes(kept)
    extra = folder / "model.wtxt.parts" / "000099.wtxtpart"
    extra.write_bytes(kept)
    assert not reference_verify(folder, sig, public) and not wtxt_verify(folder, sig, public)
    extra.unlink()
    assert reference_verify(folder, sig, public) and wtxt_verify(folder, sig, public)


def test_wtxt_agrees_with_what_the_reference_signs(tmp_path, ec_key):
    key, public = ec_key
    folder = tmp_path / "hf"
    (folder / "sub").mkdir(parents=True)
    (folder / "config.json").write_text('{"model_type": "llama"}\n')
    (folder / "sub" / "weights.bin").write_bytes(bytes(range(256)) * 100)
    (folder / ".gitattributes").write_text("* -text\n")
    sig = tmp_path / "model.sig"
    r = run(MODEL_SIGNING, "sign", "key", "--private_key", key, "--signature", sig, folder)
    assert r.returncode == 0, r.stderr
    assert wtxt_verify(folder, sig, public) and reference_verify(folder, sig, public)
    cases = [
        lambda: (folder / "config.json").write_text('{"model_type": "llama", "auto_map": {}}\n'),
        lambda: (folder / "added.txt").write_text("x"),
        lambda: (folder / "sub" / "weights.bin").unlink(),
    ]
    for change in cases:
        snapshot = {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()}
        change()
        assert not reference_verify(folder, sig, public)
        assert not wtxt_verify(folder, sig, public)
        for p in list(folder.rglob("*")):
            if p.is_file() and p not in snapshot:
                p.unlink()
        for p, b in snapshot.items():
            p.write_bytes(b)
        assert wtxt_verify(folder, sig, public)
    # A signature from another key: both refuse.
    other = tmp_path / "other.pem"
    subprocess.run([CLI, "keygen", "-o", other, "--type", "p256"], check=True, capture_output=True)
    assert not reference_verify(folder, sig, f"{other}.pub")
    assert not wtxt_verify(folder, sig, f"{other}.pub")


def test_a_new_generation_is_signed_as_written_and_committed_by_the_snapshotter(tmp_path, ec_key):
    key, public = ec_key
    folder = tmp_path / "ckpt"
    folder.mkdir()
    wtxt.save_file(tensors(1), folder / "gen0.wtxt", part_size="128K", ts="2026-01-01T00:00:00Z")
    out = tmp_path / "next"
    out.mkdir()
    r = run(CLI, "snapshot", folder / "gen0.wtxt", "-o", out / "model.wtxt", "--prev", folder / "gen0.wtxt",
            "--part-size", "128K", "--oms-key", key)
    assert r.returncode == 0, r.stderr
    assert reference_verify(out, out / "model.sig", public)

    repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", "-b", "main", repo], check=True)
    with wtxt.Snapshotter(repo, path_in_repo="model.wtxt", part_size="128K", oms_key=key) as snap:
        snap.publish(tensors(2))
        info = snap.request_snapshot().result(timeout=60)
    assert info.commit
    files = subprocess.run(["git", "ls-files"], cwd=repo, capture_output=True, text=True, check=True).stdout.split()
    assert "model.sig" in files and "model.wtxt" in files
    assert run(CLI, "verify", repo / "model.wtxt", "--oms-pubkey", public).returncode == 0
    assert reference_verify(repo, repo / "model.sig", public)


def test_files_beside_a_signed_snapshot_are_signed_too(tmp_path, ec_key):
    """Issue 50.1: `model.sig` covers the whole folder, so a `config.json`
    beside the snapshot whose `auto_map` now names other code fails the
    reference and both of wtxt's checks."""
    key, public = ec_key
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "llama"}\n')
    (folder / "tokenizer").mkdir()
    (folder / "tokenizer" / "vocab.txt").write_text("a\nb\n")
    head = folder / "model.wtxt"
    wtxt.save_file(tensors(1), head, part_size="128K", ts="2026-01-01T00:00:00Z", oms_key=key)
    sig = folder / "model.sig"
    assert reference_verify(folder, sig, public) and wtxt_verify(folder, sig, public)
    assert run(CLI, "verify", head, "--oms-pubkey", public).returncode == 0
    (folder / "config.json").write_text('{"model_type": "llama", "auto_map": {"AutoModel": "evil.Model"}}\n')
    assert not reference_verify(folder, sig, public)
    assert not wtxt_verify(folder, sig, public)
    r = run(CLI, "verify", head, "--oms-pubkey", public)
    assert r.returncode == 1 and "config.json" in r.stderr, r.stderr


def test_wtxt_signs_any_model_folder_as_the_reference_does(tmp_path, ec_key):
    """Issue 54.4: `wtxt oms sign DIR` signs a folder the reference then
    accepts; any WTXT snapshot in it is verified first."""
    key, public = ec_key
    folder = tmp_path / "hf"
    (folder / "sub").mkdir(parents=True)
    (folder / "config.json").write_text('{"model_type": "llama"}\n')
    (folder / "sub" / "weights.bin").write_bytes(bytes(range(256)) * 100)
    wtxt.save_file(tensors(1), folder / "m.wtxt", part_size="128K", ts="2026-01-01T00:00:00Z")
    r = run(CLI, "oms", "sign", folder, "--key", key)
    assert r.returncode == 0, r.stderr
    sig = folder / "model.sig"
    assert reference_verify(folder, sig, public) and wtxt_verify(folder, sig, public)
    (folder / "sub" / "weights.bin").write_bytes(b"x")
    assert not reference_verify(folder, sig, public) and not wtxt_verify(folder, sig, public)
    # A snapshot in the folder that does not verify: nothing is signed.
    part = folder / "m.wtxt.parts" / "000001.wtxtpart"
    part.write_bytes(part.read_bytes()[:-2] + b"Z\n")
    elsewhere = tmp_path / "elsewhere.sig"
    r = run(CLI, "oms", "sign", folder, "--key", key, "--signature", elsewhere)
    assert r.returncode == 1, r.stderr
    assert not elsewhere.exists()
