"""Issue 54.1: `pip install` brings the `wtxt` command. The wheel
scripts/test.sh builds (`pip wheel ./python`), installed with no index into
a new virtual environment, gives a working `wtxt` on a PATH without cargo:
`git install`, a commit through the pre-commit hook (which refuses a
damaged snapshot), `verify`, and exit codes, all from the library's own
command line."""
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

WHEEL = os.environ.get("WTXT_WHEEL")
pytestmark = pytest.mark.skipif(not WHEEL and not os.environ.get("CI"),
                                reason="WTXT_WHEEL (scripts/test.sh builds it) is not set")
ROOT = pathlib.Path(__file__).resolve().parents[2]
KEYS = ROOT / "fixtures" / "wtxt" / "keys"


def test_the_wheel_puts_the_command_on_path(tmp_path):
    assert WHEEL and os.path.exists(WHEEL), f"no wheel at {WHEEL!r}"
    venv = tmp_path / "venv"
    # NumPy from the system (the wheel's one dependency), the wheel itself
    # from the file alone: nothing is fetched, nothing built.
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", venv], check=True)
    pip = [venv / "bin" / "python", "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--ignore-installed"]
    subprocess.run([*pip, WHEEL], check=True)
    cmd = venv / "bin" / "wtxt"
    assert cmd.exists()
    git = shutil.which("git")
    path = os.pathsep.join([str(venv / "bin"), os.path.dirname(git), "/usr/bin", "/bin"])
    env = {"PATH": path, "HOME": str(tmp_path), "GIT_CONFIG_NOSYSTEM": "1",
           "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@e", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@e"}
    assert shutil.which("cargo", path=path) is None, "cargo must not be reachable"

    def run(*args, cwd=tmp_path):
        return subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True)

    r = run("wtxt", "--version")
    assert r.returncode == 0 and r.stdout.startswith("wtxt "), r.stdout + r.stderr
    assert run("wtxt", "verify", tmp_path / "missing.wtxt").returncode == 2
    repo = tmp_path / "repo"
    assert run("git", "init", "-q", "-b", "main", repo).returncode == 0
    r = run("wtxt", "git", "install", cwd=repo)
    assert r.returncode == 0, r.stderr
    hook = (repo / ".git" / "hooks" / "pre-commit").read_text()
    assert "wtxt" in hook
    model = ROOT / "fixtures" / "wtxt" / "inputs" / "model.npz"
    r = run("wtxt", "snapshot", model, "-o", repo / "m.wtxt", "--sign-key", KEYS / "sign.pem")
    assert r.returncode == 0, r.stderr
    assert run("git", "add", "-A", cwd=repo).returncode == 0
    r = run("git", "commit", "-q", "-m", "g0", cwd=repo)
    assert r.returncode == 0, r.stdout + r.stderr
    # The hook, run by Git through the installed command, refuses damage.
    text = (repo / "m.wtxt").read_bytes()
    at = text.index(b"\nendch\n") - 8
    (repo / "m.wtxt").write_bytes(text[:at] + (b"B" if text[at:at + 1] == b"A" else b"A") + text[at + 1:])
    assert run("git", "add", "-A", cwd=repo).returncode == 0
    r = run("git", "commit", "-q", "-m", "damaged", cwd=repo)
    assert r.returncode != 0 and "m.wtxt" in r.stderr, r.stdout + r.stderr
    r = run("wtxt", "verify", repo / "m.wtxt")
    assert r.returncode == 1, r.stderr
