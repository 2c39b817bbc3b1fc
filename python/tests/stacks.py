"""What the training-stack adapters' tests share (the Trainer, Lightning
and torch_checkpointing): Git in a test repository, and equality of the
training states they compare."""

import os
import subprocess

_AUTHOR = dict(GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@example.com", GIT_COMMITTER_NAME="t",
               GIT_COMMITTER_EMAIL="t@example.com")


def git(cwd, *args):
    """`git ARGS` in `cwd`, which must succeed; its stdout."""
    r = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, env=dict(os.environ, **_AUTHOR))
    assert r.returncode == 0, (args, r.stdout, r.stderr)
    return r.stdout


def same(a, b):
    """Equal objects, tensors and arrays compared by value and dtype."""
    import torch

    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if hasattr(a, "dtype") and hasattr(a, "shape"):  # NumPy
        return a.dtype == b.dtype and (a == b).all()
    return a == b
