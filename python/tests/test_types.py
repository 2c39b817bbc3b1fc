"""The typed seam between the package and its compiled core: `_rust.pyi` is
what python/stubgen.py writes from the binding's Rust source, it matches the
compiled module (mypy's stubtest, against the wheel scripts/test.sh
installed), and the package type-checks under `mypy --strict`, its
implementation included (no hand-kept stub stands in for it)."""
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
# CI installs mypy (.ci/run); elsewhere these checks need it installed.
mypy = pytest.importorskip("mypy") if not os.environ.get("CI") else __import__("mypy")


def _run(*args, cache):
    env = dict(os.environ, MYPY_CACHE_DIR=str(cache))
    return subprocess.run([sys.executable, *map(str, args)], cwd=ROOT, env=env, capture_output=True, text=True)


def test_the_stub_is_the_one_the_binding_generates():
    r = subprocess.run([sys.executable, ROOT / "python" / "stubgen.py", "--check"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_the_stub_matches_the_compiled_module_and_the_package_checks_strictly(tmp_path_factory):
    cache = tmp_path_factory.mktemp("mypy")
    r = _run("-m", "mypy.stubtest", "--mypy-config-file", os.devnull, "wtxt._rust", cache=cache)
    assert r.returncode == 0, r.stdout + r.stderr
    r = _run("-m", "mypy", "--config-file", ROOT / "python" / "pyproject.toml", ROOT / "python" / "py" / "wtxt",
             cache=cache)
    assert r.returncode == 0, r.stdout + r.stderr
