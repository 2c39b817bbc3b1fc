"""README.md, executed: every ```sh and ```python block runs as written, so
a step that is wrong or missing fails here. A block's info string names the
sandbox it runs in (```sh readme:files): a fresh Git work tree holding the
files the README's steps name, at a small size; for a Python block, a
prelude that makes what the block takes as given (a model, a Trainer's
arguments, a repository with a remote). A code block with no sandbox named
fails the test: a new block is run, or the test says why not."""

import os
import pathlib
import re
import shutil
import signal
import socket
import subprocess
import sys

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
KEYS = ROOT / "fixtures" / "wtxt" / "keys"
AUTHOR = dict(GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@example.com", GIT_COMMITTER_NAME="t",
              GIT_COMMITTER_EMAIL="t@example.com")


def blocks():
    """(language, sandbox, first line number, code) of every fenced block
    with a language; the layout listing (no language) is not code."""
    out, lines, i = [], (ROOT / "README.md").read_text().split("\n"), 0
    while i < len(lines):
        m = re.match(r"```(\S*)\s*(\S*)", lines[i])
        if not m:
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        if m.group(1):
            out.append((m.group(1), m.group(2), i + 1, "\n".join(lines[i + 1:end]) + "\n"))
        i = end + 1
    return out


BLOCKS = blocks()


def wtxt_bin():
    return os.environ.get("WTXT_BIN") or shutil.which("wtxt")


def environment(home):
    """PATH with the `wtxt` under test first; HOME inside the sandbox."""
    bin_dir = home / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    link = bin_dir / "wtxt"
    if not link.exists():
        link.symlink_to(wtxt_bin())
    return dict(os.environ, **AUTHOR, HOME=str(home), PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
                GIT_CONFIG_NOSYSTEM="1", PYTHONUNBUFFERED="1")


def strict(code):
    """A shell block where every command must succeed: `set -e` does not
    stop at the left side of `A && B`, so each `&&` of the README's steps
    becomes a line of its own (no block uses `&&` inside quotes)."""
    return code.replace(" && ", "\n")


def run(cmd, cwd, env, timeout=600):
    r = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, f"{cmd[:2]} in {cwd} exited {r.returncode}\n{r.stdout[-6000:]}\n{r.stderr[-6000:]}"
    return r.stdout


def model_arrays(seed):
    rng = np.random.default_rng(0)
    arrays = {f"model.layers.{i}.mlp.weight": rng.standard_normal((64, 64), dtype=np.float32) for i in range(6)}
    arrays["lm_head.weight"] = rng.standard_normal((64, 64), dtype=np.float32)
    arrays["model.layers.0.mlp.weight"] += np.float32(0.01 * seed)
    return arrays


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    """A small `save_pretrained` folder."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                   num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=32)
    out = tmp_path_factory.mktemp("llama") / "llama"
    transformers.LlamaForCausalLM(cfg).save_pretrained(out)
    return out


def files_sandbox(work, env, llama):
    """The work tree the tour's blocks start in."""
    from safetensors.numpy import save_file

    import wtxt

    run(["git", "init", "-q", "-b", "main", str(work)], work.parent, env)
    save_file(model_arrays(0), str(work / "model.safetensors"))
    save_file(model_arrays(1), str(work / "model1.safetensors"))
    np.save(work / "big.npy", np.arange(256 * 64, dtype=np.float32).reshape(256, 64))
    shutil.copy(ROOT / "fixtures" / "peers" / "aero_single_shard.aero", work / "model.aero")
    shutil.copy(KEYS / "other.pem.pub", work / "alice.pub")
    shutil.copytree(llama, work / "llama")
    shutil.copytree(ROOT / "examples" / "python", work / "examples" / "python")
    shutil.copytree(ROOT / "examples" / "ci", work / "examples" / "ci")
    wtxt.save_file({"w": np.ones((64, 64), "f4"), "b": np.zeros(64, "f4")}, str(work / "damaged.wtxt"))
    lines = (work / "damaged.wtxt").read_text().split("\n")
    at = next(i for i, line in enumerate(lines) if line.startswith("ch ")) + 1
    lines[at] = ("B" if lines[at][3] == "A" else "A").join([lines[at][:3], lines[at][4:]])
    (work / "damaged.wtxt").write_text("\n".join(lines))
    (work / ".git" / "info" / "exclude").write_text("examples\n")


def host(work, env):
    """A bare repository `origin` of the work tree at `work`."""
    run(["git", "init", "-q", "-b", "main", str(work)], work.parent, env)
    run(["git", "init", "-q", "--bare", "-b", "main", str(work.parent / f"{work.name}-host.git")], work.parent, env)
    run(["git", "remote", "add", "origin", str(work.parent / f"{work.name}-host.git")], work, env)


def signer(work):
    shutil.copy(KEYS / "sign.pem", work / "signer.pem")
    shutil.copy(KEYS / "sign.pem.pub", work / "signer.pem.pub")
    shutil.copy(KEYS / "trusted_keys", work / "trusted_keys")


#: What each Python block takes as given, made before it runs in the same process.
PRELUDES = {
    "quick": """
import numpy as np
rng = np.random.default_rng(0)
state = {"lm_head.weight": rng.standard_normal((64, 64), dtype=np.float32), "bias": np.zeros(64, "f4")}
""",
    "trainer": """
import torch, transformers
from transformers import Trainer
torch.manual_seed(0)
cfg = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                               num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=32)
model = transformers.LlamaForCausalLM(cfg)
data = [{"input_ids": torch.randint(0, 64, (8,)), "labels": torch.randint(0, 64, (8,))} for _ in range(16)]
args = transformers.TrainingArguments(output_dir="out", max_steps=4, save_steps=2, per_device_train_batch_size=4,
                                      report_to=[], use_cpu=True, disable_tqdm=True, logging_steps=1000)
""",
    "lightning": """
import torch, lightning as L
from accelerate import Accelerator
class Model(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Linear(8, 1)
    def training_step(self, batch, _):
        return torch.nn.functional.mse_loss(self.net(batch[0]), batch[1])
    def validation_step(self, batch, _):
        return self.training_step(batch, _)
    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=0.01)
torch.manual_seed(0)
x = torch.randn(64, 8)
data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, x.sum(1, keepdim=True)), batch_size=16)
model = Model()
quiet = dict(accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False,
             callbacks=[L.pytorch.callbacks.ModelCheckpoint(dirpath="ckpt", every_n_train_steps=2, save_top_k=-1)])
accelerator = Accelerator(cpu=True)
net, adam = accelerator.prepare(torch.nn.Linear(4, 1), torch.optim.AdamW(torch.nn.Linear(4, 1).parameters()))
""",
    "torch-checkpointing": """
import torch
from torch_checkpointing.checkpoint_manager import CheckpointManager
model = torch.nn.Linear(6, 2)
opt = torch.optim.AdamW(model.parameters(), lr=0.01)
model(torch.randn(3, 6)).sum().backward()
opt.step()
""",
    "dcp": """
import torch, wtxt.torch.dcp
model = torch.nn.Linear(6, 2)
opt = torch.optim.AdamW(model.parameters(), lr=0.01)
model(torch.randn(3, 6)).sum().backward()
opt.step()
model_sd, optim_sd = model.state_dict(), opt.state_dict()
state = {"model": {k: torch.zeros_like(v) for k, v in model_sd.items()}}
""",
}

#: The team's Python blocks: a Llama whose checkpoint (model and AdamW
#: state, 84 MB of text) splits at the default part size into parts kept in
#: LFS; the second run (the resume) writes its own folders.
PRELUDES["team"] = PRELUDES["trainer"].replace("hidden_size=32, intermediate_size=64, num_hidden_layers=1",
                                               "hidden_size=256, intermediate_size=688, num_hidden_layers=6")
PRELUDES["team"] = PRELUDES["team"].replace("vocab_size=64", "vocab_size=2048").replace(
    'output_dir="out"', 'output_dir="out-again" if __import__("os").path.exists("out") else "out"').replace(
    "torch.randint(0, 64,", "torch.randint(0, 2048,")

#: Checked after the team's resume: the resumed run ends where the first did, to the bit.
RESUMED = """
from safetensors.torch import load_file
first = load_file("out/checkpoint-4/model.safetensors")
again = load_file("out-again/checkpoint-4/model.safetensors")
assert first.keys() == again.keys() and all(torch.equal(first[k], again[k]) for k in first), "not bit-exact"
"""

#: The repositories each Python block's prelude expects beside it.
REPOS = {"quick": ["run"], "trainer": ["runs"], "lightning": ["runs"], "torch-checkpointing": ["runs"],
         "dcp": ["ckpt"], "team": []}

#: The modules a block's prelude needs (the block is skipped without them, as their own tests are).
NEEDS = {"trainer": ["torch", "transformers", "accelerate"], "team": ["torch", "transformers", "accelerate"], "lightning": ["torch", "lightning", "accelerate"],
         "torch-checkpointing": ["torch", "torch_checkpointing"], "dcp": ["torch"], "quick": ["transformers"]}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def team(tmp_path_factory):
    """The one sandbox the team's blocks share, in their order; the LFS
    server the first starts is stopped at the end."""
    work = tmp_path_factory.mktemp("team")
    env = dict(environment(work / "home"), LFS_PORT=str(free_port()),
               WTXT_LFS_SERVER=os.environ.get("WTXT_LFS_SERVER", str(ROOT / "target" / "lfs-server")))
    (work / "scripts").mkdir()
    for f in ("lfs-server.sh", "lfs_chunks.py"):
        shutil.copy(ROOT / "scripts" / f, work / "scripts" / f)
    shutil.copytree(ROOT / "examples" / "ci", work / "examples" / "ci")
    signer(work)
    ran = []
    yield work, env, ran
    pid = work / "lfs.pid"
    if pid.exists():
        os.kill(int(pid.read_text()), signal.SIGTERM)


TEAM = [n for _, s, n, _ in BLOCKS if s == "readme:team"]


@pytest.mark.parametrize("lang,sandbox,line,code", BLOCKS, ids=[f"{s or lang}-line{n}" for lang, s, n, _ in BLOCKS])
def test_the_readme_block_runs_as_written(tmp_path, request, lang, sandbox, line, code):
    assert sandbox.startswith("readme:"), f"README.md:{line}: a ```{lang} block names no sandbox (readme:NAME)"
    name = sandbox.removeprefix("readme:")
    if name == "team":
        work, env, ran = request.getfixturevalue("team")
        assert ran == TEAM[:TEAM.index(line)], "the team's blocks run in order, each after the one before"
        if lang == "sh":
            run(["bash", "-euo", "pipefail", "-c", strict(code)], work, env)
        else:
            check = RESUMED if "resume_from_checkpoint" in code else ""
            run([sys.executable, "-c", PRELUDES[name] + code + check], work, env)
        ran.append(line)
        return
    env = environment(tmp_path / "home")
    work = tmp_path / "work"
    if lang == "sh" and name == "test":
        # The command that runs every test is the one CI runs (it runs this file).
        assert code.strip() in (ROOT / ".ci" / "run").read_text().split("\n"), code
        return
    if lang == "sh" and name == "demo":
        shutil.copytree(ROOT / "scripts", work / "scripts")
        shutil.copytree(ROOT / "fixtures" / "wtxt", work / "fixtures" / "wtxt")
        out = run(["bash", "-euo", "pipefail", "-c", code], work, dict(env, WTXT_BIN=wtxt_bin()))
        assert "wtxt log --verify" in out and (work / "demo" / "gen1.npz").exists(), out
        return
    if lang == "sh" and name == "files":
        work.mkdir()
        files_sandbox(work, env, request.getfixturevalue("llama"))
        run(["bash", "-euo", "pipefail", "-c", strict(code)], work, env)
        return
    assert lang == "python" and name in PRELUDES, f"README.md:{line}: no sandbox {name!r} for ```{lang}"
    for module in NEEDS[name]:
        pytest.importorskip(module)
    work.mkdir()
    signer(work)
    for repo in REPOS[name]:
        host(work / repo, env)
    if name == "quick":
        shutil.copytree(request.getfixturevalue("llama"), work / "llama")
    run([sys.executable, "-c", PRELUDES[name] + code], work, env)


def test_the_team_host_refuses_a_tampered_generation(team):
    """After the team's blocks: one character of a part changed in the
    trainer's clone, committed past its hook (`--no-verify`) and pushed;
    the host's guard refuses it, naming the snapshot, and its main stays."""
    work, env, ran = team
    assert ran == TEAM, "the team's blocks ran first"
    runs = work / "runs"
    part = runs / "llama.wtxt.parts" / "000002.wtxtpart"
    text = bytearray(part.read_bytes())
    at = text.index(b"\n", text.index(b"\nch ") + 1) + 10
    text[at] = ord("A") if text[at] != ord("A") else ord("B")
    part.write_bytes(bytes(text))
    run(["git", "commit", "-q", "--no-verify", "-am", "tampered"], runs, env)
    before = run(["git", "rev-parse", "main"], work / "models.git", env)
    r = subprocess.run(["git", "push", "origin", "main"], cwd=runs, env=env, capture_output=True, text=True)
    assert r.returncode != 0 and "pre-receive hook declined" in r.stderr and "llama.wtxt" in r.stderr, r.stderr
    assert run(["git", "rev-parse", "main"], work / "models.git", env) == before
