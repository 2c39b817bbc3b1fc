"""Hugging Face `transformers.Trainer` checkpoints as WTXT generations in Git.

`WtxtCallback` turns every checkpoint folder the Trainer saves
(`checkpoint-N/`: the model's safetensors, `optimizer.pt`, `scheduler.pt`,
`rng_state.pth`, `trainer_state.json`, the config files) into the next
generation of one snapshot in a Git repository, through a `wtxt.Snapshotter`:
the Trainer waits only while the folder is read and copied; hashing,
writing, signing, the commit and the push run on background threads.
`restore_checkpoint` writes such a generation back as a folder that
`trainer.train(resume_from_checkpoint=...)` takes, verified first.

How a folder is kept: tensors of safetensors files as arrays named
`FILE/TENSOR`; the objects of `.pt`/`.pth` files (loaded with
`torch.load(weights_only=True)`, NumPy arrays allowed as the Trainer itself
allows them for its RNG state) as arrays named by their path in the object
(`optimizer.pt/state/0/exp_avg`) and a structure of plain values; every
other file, and a torch file that does not load that way, as its bytes (a
`uint8` array named by its path). Nothing is unpickled that `torch.load`
with `weights_only=True` would refuse. A manifest array
(`wtxt.checkpoint.json`, JSON; a checkpoint may not hold a file of that name) lists the files and rebuilds them.
"""

import json
import os
import shutil
import stat
import tempfile
import time
from concurrent.futures import Future
from typing import Any, Dict, List, Optional, Tuple, Union

import numpy as np
import torch

from . import Error, PathLike, Snapshotter, SnapshotInfo

MANIFEST = "wtxt.checkpoint.json"
_FORMAT = "wtxt-trainer-checkpoint/1"

try:  # transformers is needed for the callback only
    from transformers import TrainerCallback as _Base
except ImportError:  # pragma: no cover - restore_checkpoint works without it
    _Base = object

__all__ = ["WtxtCallback", "checkpoint_state", "restore_checkpoint", "MANIFEST"]


def _numpy_globals():
    """What `torch.load(weights_only=True)` must allow for NumPy arrays (the
    Trainer's RNG state holds one), as transformers allows it."""
    core = getattr(np, "_core", None) or np.core
    return torch.serialization.safe_globals(
        [core.multiarray._reconstruct, np.ndarray, np.dtype, type(np.dtype(np.uint32))])


def _files(folder: str) -> List[str]:
    """Every regular file under `folder`, relative, in sorted order; a link
    or a special file is refused, never followed."""
    out = []
    for root, dirs, names in os.walk(folder, followlinks=False):
        dirs.sort()
        for n in sorted(names + [d for d in dirs if os.path.islink(os.path.join(root, d))]):
            p = os.path.join(root, n)
            if not stat.S_ISREG(os.lstat(p).st_mode):
                raise Error(f"{p}: not a regular file (a checkpoint folder holds files only)")
            out.append(os.path.relpath(p, folder).replace(os.sep, "/"))
    return sorted(out)


class _Encoder:
    """A torch file's object as plain JSON with its arrays set apart."""

    def __init__(self, arrays: Dict[str, Any]):
        self.arrays = arrays

    def put(self, name: str, a) -> str:
        if name in self.arrays:
            n = 2
            while f"{name}#{n}" in self.arrays:
                n += 1
            name = f"{name}#{n}"
        self.arrays[name] = a
        return name

    def encode(self, obj, name: str):
        if isinstance(obj, torch.Tensor):
            return {"tensor": self.put(name, obj.detach().cpu())}
        if isinstance(obj, np.ndarray):
            return {"ndarray": self.put(name, obj)}
        if obj is None or isinstance(obj, (bool, str)):
            return {"value": obj}
        if isinstance(obj, int):
            return {"int": str(obj)}
        if isinstance(obj, float):
            return {"float": repr(obj)}
        if isinstance(obj, dict):
            return {"dict": [[self.encode(k, f"{name}/key"), self.encode(v, f"{name}/{k}")]
                             for k, v in obj.items()]}
        if isinstance(obj, (list, tuple)):
            items = [self.encode(v, f"{name}/{i}") for i, v in enumerate(obj)]
            return {"tuple" if isinstance(obj, tuple) else "list": items}
        raise Error(f"{name}: a {type(obj).__name__} has no plain form")


def _decode(node, arrays: Dict[str, Any]):
    (kind, v), = node.items()
    if kind == "tensor":
        return arrays[v]
    if kind == "ndarray":
        return arrays[v].numpy()
    if kind == "value":
        return v
    if kind == "int":
        return int(v)
    if kind == "float":
        return float(v)
    if kind == "dict":
        return {_decode(k, arrays): _decode(x, arrays) for k, x in v}
    if kind == "list":
        return [_decode(x, arrays) for x in v]
    if kind == "tuple":
        return tuple(_decode(x, arrays) for x in v)
    raise Error(f"{MANIFEST}: unknown node {kind!r}")


def checkpoint_state(folder: PathLike) -> Dict[str, Any]:
    """Every file of the checkpoint folder `folder` as arrays (torch tensors
    and NumPy arrays) plus the manifest array: what `WtxtCallback` publishes."""
    folder = os.fspath(folder)
    arrays: Dict[str, Any] = {}
    enc = _Encoder(arrays)
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
        if rel.endswith((".pt", ".pth")):
            try:
                with _numpy_globals():
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
                       require_signature: Optional[bool] = None) -> str:
    """Writes the checkpoint folder a `WtxtCallback` generation holds to
    `out` (which must not exist), verified first as `wtxt.verify` would
    (the keys as `wtxt.load_file` takes them); returns `out`. The folder
    appears whole or not at all. Safetensors and torch files are written
    again by their libraries (the same tensors and objects); every other
    file comes back byte for byte."""
    from safetensors.torch import save_file
    from .torch import load_state_dict

    out = os.fspath(out)
    if os.path.lexists(out):
        raise Error(f"{out}: exists already")
    sd = load_state_dict(filename, hmac_key=hmac_key, pubkey=pubkey, trusted_keys=trusted_keys,
                         require_signature=require_signature)
    if MANIFEST not in sd:
        raise Error(f"{os.fspath(filename)}: not a Trainer checkpoint (no {MANIFEST} array)")
    manifest = json.loads(sd.pop(MANIFEST).numpy().tobytes())
    if manifest.get("format") != _FORMAT:
        raise Error(f"{os.fspath(filename)}: checkpoint format {manifest.get('format')!r}, expected {_FORMAT!r}")
    parent = os.path.dirname(os.path.abspath(out))
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".wtxt-checkpoint-", dir=parent)
    try:
        for f in manifest["files"]:
            rel = f["path"]
            if rel.startswith("/") or ".." in rel.split("/"):
                raise Error(f"{MANIFEST}: path {rel!r} leaves the folder")
            path = os.path.join(tmp, *rel.split("/"))
            os.makedirs(os.path.dirname(path), exist_ok=True)
            if f["kind"] == "safetensors":
                save_file({k: sd[f"{rel}/{k}"] for k in f["tensors"]}, path, metadata=f["metadata"])
            elif f["kind"] == "torch":
                torch.save(_decode(f["tree"], sd), path)
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


class WtxtCallback(_Base):
    """A `transformers.TrainerCallback`: each checkpoint the Trainer saves
    becomes the next generation of `path_in_repo` in the Git work tree
    `repo`, chained to the one before, signed with `sign_key` (and an OMS
    `model.sig` with `oms_key`), committed and, with `remote`, pushed, all
    off the training loop (`wtxt.Snapshotter`; the other arguments are its
    own). Only the main process (`state.is_world_process_zero`) snapshots.
    At the end of training it waits for every generation; a generation that
    failed raises `wtxt.Error` there. `infos` lists what each came to.

        trainer = Trainer(..., callbacks=[WtxtCallback("runs", sign_key="~/.config/wtxt/sign.pem")])
    """

    def __init__(self, repo: PathLike, path_in_repo: PathLike = "checkpoint.wtxt", remote: Optional[str] = None,
                 sign_key: Optional[PathLike] = None, hmac_key: Optional[PathLike] = None,
                 oms_key: Optional[PathLike] = None, part_size: Optional[Union[int, str]] = None,
                 digest: str = "sha256", max_pending: int = 1):
        if _Base is object:
            raise Error("WtxtCallback needs transformers (pip install transformers)")
        self._args = dict(repo=repo, path_in_repo=path_in_repo, remote=remote, sign_key=sign_key,
                          hmac_key=hmac_key, oms_key=oms_key, part_size=part_size, digest=digest,
                          max_pending=max_pending)
        self._snap: Optional[Snapshotter] = None
        self._futures: List[Tuple[int, "Future[SnapshotInfo]"]] = []
        self.infos: List[SnapshotInfo] = []
        #: Seconds each save held the training loop (reading the folder, the copy).
        self.held: List[float] = []

    def on_save(self, args, state, control, **kwargs):
        if not state.is_world_process_zero:
            return control
        t = time.perf_counter()
        folder = os.path.join(args.output_dir, f"checkpoint-{state.global_step}")
        arrays = checkpoint_state(folder)
        if self._snap is None:
            self._snap = Snapshotter(**self._args)
        self._snap.publish(arrays, metadata={"global_step": str(state.global_step)})
        del arrays  # copied: the snapshot holds these values
        self._futures.append((state.global_step, self._snap.request_snapshot()))
        self.held.append(time.perf_counter() - t)
        return control

    def on_train_end(self, args, state, control, **kwargs):
        self.finish()
        return control

    def finish(self) -> List[SnapshotInfo]:
        """Waits for every generation requested so far; raises `wtxt.Error`
        naming the step whose generation failed."""
        if self._snap is None:
            return self.infos
        self._snap.flush()
        failed = []
        for step, fut in self._futures:
            try:
                self.infos.append(fut.result())
            except Error as e:
                failed.append(f"step {step}: {e}")
        self._futures = []
        self._snap.close()
        self._snap = None
        if failed:
            raise Error("checkpoints not snapshotted: " + "; ".join(failed))
        return self.infos
