"""The training stacks' examples in examples/python run as the README shows
them: each exits 0 and leaves a Git repository whose snapshot's every
generation verifies, chain included (`wtxt log --verify`)."""

import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
WTXT = os.environ.get("WTXT_BIN", "wtxt")

EXAMPLES = {
    # example: (the modules it needs, the snapshot it keeps in WORKDIR/runs, its generations)
    "trainer.py": (("torch", "transformers", "accelerate"), "llama.wtxt", 3),
    "lightning_fit.py": (("torch", "lightning"), "lightning.wtxt", 4),
    "accelerate_state.py": (("torch", "accelerate"), "state.wtxt", 4),
    "torch_checkpointing_save.py": (("torch", "torch_checkpointing"), "checkpoint.wtxt", 2),
}


@pytest.mark.parametrize("example", sorted(EXAMPLES))
def test_example_runs_and_its_history_verifies(example, tmp_path):
    needs, snapshot, generations = EXAMPLES[example]
    for module in needs:
        pytest.importorskip(module)
    run = subprocess.run([sys.executable, str(ROOT / "examples" / "python" / example), str(tmp_path)],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-4000:]
    log = subprocess.run([WTXT, "log", "--verify", snapshot], cwd=tmp_path / "runs", capture_output=True, text=True)
    assert log.returncode == 0, log.stdout + log.stderr
    assert f"{generations} generation(s), chain OK" in log.stdout, log.stdout
