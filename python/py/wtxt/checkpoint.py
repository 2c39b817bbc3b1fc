"""Checkpoint folders (a Trainer's `checkpoint-N/`, `accelerator.save_state`'s
folder) as the arrays of one WTXT generation, and back.

How a folder is kept: tensors of safetensors files as arrays named
`FILE/TENSOR`; the objects of torch files (`.pt`, `.pth`, `.bin`, `.pkl`,
loaded with `torch.load(weights_only=True)`, NumPy arrays allowed as
transformers and Accelerate allow them for their RNG state) as arrays named
by their path in the object (`optimizer.pt/state/0/exp_avg`) and a
structure of plain values (`wtxt._objects`); every other file, and a torch
file that does not load that way, as its bytes (a `uint8` array named by
its path). Nothing is unpickled that `torch.load` with `weights_only=True`
would refuse. A manifest array (`wtxt.checkpoint.json`, JSON; a
checkpoint may not hold a file of that name) lists the files and rebuilds
them.
"""

import json
import os
import shutil
import stat
import tempfile
from typing import Any, Dict, List, Optional

import numpy as np
import torch

from ._common import Error, PathLike, at_revision
from ._objects import Encoder, decode, numpy_globals

MANIFEST = "wtxt.checkpoint.json"
_FORMAT = "wtxt-checkpoint-folder/1"
# Files torch.save writes (the Trainer's .pt and .pth, Accelerate's .bin and .pkl).
_TORCH_FILES = (".pt", ".pth", ".bin", ".pkl")

__all__ = ["checkpoint_state", "restore_checkpoint", "MANIFEST"]


def _checked(rel: str, where: str) -> str:
    """`rel` if it is a plain relative path inside a folder: no empty, `.`
    or `..` component, no backslash, and no `.git` in any case (a restored
    `.git/config` would run its `core.fsmonitor` at the next `git status`)."""
    parts = rel.split("/")
    if any(p in ("", ".", "..") or "\\" in p or p.lower() == ".git" for p in parts):
        raise Error(f"{where}: path {rel!r} is not a plain path inside the folder (no `..`, no `.git`)")
    return rel


def _files(folder: str) -> List[str]:
    """Every regular file under `folder`, relative, in sorted order; a link
    or a special file is refused, never followed (`folder` itself included)."""
    if not stat.S_ISDIR(os.lstat(folder).st_mode):
        raise Error(f"{folder}: not a folder (a link to one is not followed)")
    out = []
    for root, dirs, names in os.walk(folder, followlinks=False):
        dirs.sort()
        for n in sorted(names + [d for d in dirs if os.path.islink(os.path.join(root, d))]):
            p = os.path.join(root, n)
            if not stat.S_ISREG(os.lstat(p).st_mode):
                raise Error(f"{p}: not a regular file (a checkpoint folder holds files only)")
            out.append(_checked(os.path.relpath(p, folder).replace(os.sep, "/"), folder))
    return sorted(out)


def checkpoint_state(folder: PathLike) -> Dict[str, Any]:
    """Every file of the checkpoint folder `folder` as arrays (torch tensors
    and NumPy arrays) plus the manifest array: what `wtxt.trainer.WtxtCallback` and
    `wtxt.accelerate.WtxtStateSaver` publish."""
    folder = os.fspath(folder)
    arrays: Dict[str, Any] = {}
    enc = Encoder(arrays)
    files = []
    for rel in _files(folder):
        if rel == MANIFEST:
            raise Error(f"{folder}: holds a file named {MANIFEST}, the name of wtxt's own manifest")
        path = os.path.join(folder, rel)
        if rel.endswith(".safetensors"):
            from safetensors import safe_open
            with safe_open(path, framework="pt") as f:
                names = list(f.keys())
                for k in names:
                    arrays[f"{rel}/{k}"] = f.get_tensor(k)
                files.append({"path": rel, "kind": "safetensors", "tensors": names, "metadata": f.metadata()})
            continue
        if rel.endswith(_TORCH_FILES):
            try:
                with numpy_globals():
                    obj = torch.load(path, weights_only=True, map_location="cpu")
                mark = len(arrays)
                files.append({"path": rel, "kind": "torch", "tree": enc.encode(obj, rel)})
                continue
            except Error:
                for k in list(arrays)[mark:]:
                    del arrays[k]
            except Exception:  # noqa: BLE001 - not a weights-only file: kept as bytes
                pass
        with open(path, "rb") as f:
            arrays[rel] = np.frombuffer(f.read(), dtype=np.uint8)
        files.append({"path": rel, "kind": "bytes"})
    manifest = json.dumps({"format": _FORMAT, "files": files}, sort_keys=True).encode()
    arrays[MANIFEST] = np.frombuffer(manifest, dtype=np.uint8)
    return arrays


def restore_checkpoint(filename: PathLike, out: PathLike, hmac_key: Optional[PathLike] = None,
                       pubkey: Optional[PathLike] = None, trusted_keys: Optional[PathLike] = None,
                       require_signature: Optional[bool] = None, rev: Optional[str] = None) -> str:
    """Writes the checkpoint folder a generation holds to
    `out` (which must not exist), verified first as `wtxt.verify` would
    (the keys as `wtxt.load_file` takes them); returns `out`. The folder
    appears whole or not at all. Safetensors and torch files are written
    again by their libraries (the same tensors and objects); every other
    file comes back byte for byte. With `rev` (a Git revision: `HEAD~3`, a
    commit, a tag), the generation that revision holds at `filename`'s
    path in its work tree, read from history (head and parts)."""
    from safetensors.torch import save_file
    from .torch import load_state_dict

    out = os.fspath(out)
    if os.path.lexists(out):
        raise Error(f"{out}: exists already")
    with at_revision(filename, rev) as snapshot:
        sd = load_state_dict(snapshot, hmac_key=hmac_key, pubkey=pubkey, trusted_keys=trusted_keys,
                             require_signature=require_signature)
    if MANIFEST not in sd:
        raise Error(f"{os.fspath(filename)}: not a checkpoint folder's snapshot (no {MANIFEST} array)")
    manifest = json.loads(sd.pop(MANIFEST).numpy().tobytes())
    if manifest.get("format") != _FORMAT:
        raise Error(f"{os.fspath(filename)}: checkpoint format {manifest.get('format')!r}, expected {_FORMAT!r}")
    parent = os.path.dirname(os.path.abspath(out))
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".wtxt-checkpoint-", dir=parent)
    try:
        for f in manifest["files"]:
            rel = _checked(f["path"], MANIFEST)
            path = os.path.join(tmp, *rel.split("/"))
            os.makedirs(os.path.dirname(path), exist_ok=True)
            if f["kind"] == "safetensors":
                save_file({k: sd[f"{rel}/{k}"] for k in f["tensors"]}, path, metadata=f["metadata"])
            elif f["kind"] == "torch":
                torch.save(decode(f["tree"], sd), path)
            elif f["kind"] == "bytes":
                with open(path, "wb") as w:
                    w.write(sd[rel].numpy().tobytes())
            else:
                raise Error(f"{MANIFEST}: unknown file kind {f['kind']!r}")
        os.rename(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out
