"""PyTorch Lightning checkpoints as WTXT generations in Git.

`WtxtCheckpointIO` is a Lightning `CheckpointIO` plugin: every checkpoint
`Trainer.save_checkpoint` makes (a `ModelCheckpoint`, or a call by hand)
becomes the next generation of `path_in_repo` in the Git work tree `repo`,
chained to the one before and signed with `sign_key`, written, committed
and (with `remote`) pushed by a `wtxt.Snapshotter` behind the training
loop, which waits only for the copy. `Trainer.fit(ckpt_path=...)` and
`load_checkpoint` take a WTXT snapshot (the one in the repository, or any
generation exported from its history) and verify it before a byte is used.

The checkpoint dict is kept whole: its tensors as arrays named by their
path in it (`checkpoint/state_dict/layer.weight`,
`checkpoint/optimizer_states/0/state/0/exp_avg`),
everything else (epoch, loops, callbacks' state, hyperparameters) as a
plain structure in one more array (`wtxt.lightning.json`); a value that has
no plain form (an arbitrary object among the hyperparameters) is refused
at save, naming it.

The repository's history holds every generation; at each `.ckpt` path
Lightning passes, a few lines name the generation (so Lightning's own
look at its folder, `ckpt_path="last"`, finds it), and a ref,
`refs/wtxt/lightning/<SHA-256 of the absolute path>`, names its commit
(made when the Trainer's strategy ends, once every generation is
committed). So
`best_model_path`, `last_model_path`, the top-k paths and
`ckpt_path="best"` / `"last"` load that generation from history,
verified; what the path's file says is never trusted, only the ref this
repository holds for the path. `remove_checkpoint` (top-k pruning) removes
the file and the ref, not the generation. A second save at the same step and epoch (`save_last=True`
saves the state it just saved again) makes no new generation: its path
names the one the first save made.

    trainer = L.Trainer(plugins=[WtxtCheckpointIO("runs", sign_key="signer.pem")], ...)
    trainer.fit(model)                                  # every checkpoint a commit of runs/lightning.wtxt
    trainer.fit(model, ckpt_path="runs/lightning.wtxt")  # resumed, verified first
"""

import hashlib
import json
import os
import subprocess
import time
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple, Union

import numpy as np

from . import SnapshotInfo
from ._common import Error, PathLike, at_revision
from ._behind import BehindLoop
from ._objects import Encoder, decode

if TYPE_CHECKING:
    from lightning.pytorch.plugins.io import CheckpointIO as _Base
else:
    try:
        from lightning.pytorch.plugins.io import CheckpointIO as _Base
    except ImportError:  # pragma: no cover - the standalone package name
        try:
            from pytorch_lightning.plugins.io import CheckpointIO as _Base
        except ImportError:
            _Base = object

STRUCTURE = "wtxt.lightning.json"
_FORMAT = "wtxt-lightning-checkpoint/1"
#: Where the ref naming each saved path's generation lives.
REFS = "refs/wtxt/lightning/"
#: The first line of the file left at a saved path.
NAME_LINE = "wtxt-lightning-checkpoint-name/1"


def _ref(path: PathLike) -> str:
    """The ref that names `path`'s generation: the SHA-256 of its absolute
    form, so any path, however long, gives a ref Git can store (a name
    component of 64 characters) and two paths never share one."""
    return REFS + hashlib.sha256(os.fsencode(os.path.abspath(os.fspath(path)))).hexdigest()


def _legacy_ref(path: PathLike) -> Optional[str]:
    """The ref an earlier version named `path` by (its absolute form, every
    byte but letters, digits, `_=+,-` and `/` written `%XX`), read and
    removed so its checkpoints still load; none where that name could not
    have been stored (a component past 255 bytes)."""
    out = []
    for b in os.fsencode(os.path.abspath(os.fspath(path))).lstrip(b"/"):
        c = chr(b)
        out.append(c if c.isascii() and (c.isalnum() or c in "_=+,-/") else f"%{b:02X}")
    name = "".join(out)
    return None if any(len(part) > 255 for part in name.split("/")) else REFS + name


def _refs(path: PathLike) -> List[str]:
    """The refs that may name `path`'s generation, the current form first."""
    legacy = _legacy_ref(path)
    return [_ref(path)] + ([legacy] if legacy is not None else [])


__all__ = ["WtxtCheckpointIO", "STRUCTURE"]


class WtxtCheckpointIO(BehindLoop, _Base):
    """A Lightning `CheckpointIO` storing checkpoints as generations of one
    WTXT snapshot in Git (see the module). The arguments after `repo` and
    `path_in_repo` are `wtxt.Snapshotter`'s; `pubkey`, `trusted_keys`,
    `require_signature` and `hmac_key` are what a loaded checkpoint must
    prove (a named key requires its signature); with `sign_key` and
    neither `pubkey` nor `trusted_keys`, a loaded checkpoint must be signed
    by `sign_key` itself (`require_signature=False` lifts that). A
    generation that failed or was not pushed is heard at the next save (a
    warning on the `wtxt` logger; `on_push_error="raise"` raises
    `wtxt.Error` from that save instead). `infos` lists what each
    saved generation came to once written; `held` the seconds each save
    held the loop."""

    def __init__(self, repo: PathLike, path_in_repo: PathLike = "lightning.wtxt", remote: Optional[str] = None,
                 sign_key: Optional[PathLike] = None, hmac_key: Optional[PathLike] = None,
                 oms_key: Optional[PathLike] = None, part_size: Optional[Union[int, str]] = None,
                 digest: str = "tree", max_pending: int = 1, pubkey: Optional[PathLike] = None,
                 trusted_keys: Optional[PathLike] = None, require_signature: Optional[bool] = None,
                 on_push_error: str = "warn"):
        if _Base is object:
            raise Error("WtxtCheckpointIO needs Lightning (pip install lightning)")
        super().__init__()
        self._start_behind(on_push_error=on_push_error, repo=repo, path_in_repo=path_in_repo, remote=remote, sign_key=sign_key,
                           hmac_key=hmac_key, oms_key=oms_key, part_size=part_size, digest=digest,
                           max_pending=max_pending)
        self._trust: Dict[str, Any] = dict(hmac_key=hmac_key, pubkey=pubkey, trusted_keys=trusted_keys,
                                           require_signature=require_signature, signer=sign_key)
        self._repo, self._path_in_repo = os.fspath(repo), os.fspath(path_in_repo)
        #: Paths saved whose ref is not made yet, and the generation of each.
        self._pending: Dict[str, "Future[SnapshotInfo]"] = {}
        #: (global_step, epoch) of the last save, its generation's future and number.
        self._last: Optional[Tuple[Any, Any, "Future[SnapshotInfo]", int]] = None


    def save_checkpoint(self, checkpoint: Dict[str, Any], path: PathLike, storage_options: Optional[Any] = None) -> None:
        if storage_options is not None:
            raise Error("WtxtCheckpointIO takes no storage_options")
        t = time.perf_counter()
        arrays: Dict[str, Any] = {}
        tree = Encoder(arrays).encode(checkpoint, "checkpoint")
        if STRUCTURE in arrays:
            raise Error(f"the checkpoint holds an entry named {STRUCTURE}, the name of wtxt's own structure")
        doc = json.dumps({"format": _FORMAT, "checkpoint": tree}, sort_keys=True).encode()
        arrays[STRUCTURE] = np.frombuffer(doc, dtype=np.uint8)
        step, epoch = checkpoint.get("global_step"), checkpoint.get("epoch")
        if self._last is not None and self._last[:2] == (step, epoch):
            # The state just saved, saved again (`save_last`): the same generation.
            fut, gen = self._last[2], self._last[3]
        else:
            meta = {"global_step": "" if step is None else str(step), "epoch": "" if epoch is None else str(epoch),
                    "lightning_path": os.fspath(path)}
            fut = self._behind.save(os.fspath(path), arrays, meta, t)
            gen = self._behind.last_gen
            self._last = (step, epoch, fut, gen)
        self._pending[os.fspath(path)] = fut
        self._name_file(path, gen)

    def load_checkpoint(self, path: PathLike, map_location: Optional[Any] = None,
                        weights_only: Optional[bool] = None) -> Dict[str, Any]:
        """The checkpoint a WTXT snapshot at `path` holds, or the generation a
        path this plugin saved names (`best_model_path`, a top-k path, the
        last), verified first (nothing is unpickled, so `weights_only` has
        nothing to allow)."""
        from .torch import load_state_dict

        named = self._names_a_generation(path) or not os.path.lexists(path)
        rev = self._generation_of(path) if named else None
        snapshot = os.path.join(self._repo, self._path_in_repo) if rev else path
        with at_revision(snapshot, rev) as snap:
            sd = load_state_dict(snap, device=map_location if isinstance(map_location, str) else "cpu", **self._trust)
        if STRUCTURE not in sd:
            raise Error(f"{os.fspath(path)}: not a Lightning checkpoint (no {STRUCTURE} array)")
        doc = json.loads(sd.pop(STRUCTURE).numpy().tobytes())
        if doc.get("format") != _FORMAT:
            raise Error(f"{os.fspath(path)}: checkpoint format {doc.get('format')!r}, expected {_FORMAT!r}")
        out: Dict[str, Any] = decode(doc["checkpoint"], sd)
        return out

    def remove_checkpoint(self, path: PathLike) -> None:
        """Drops the name `path` (its file and ref): the generation stays in
        the repository's history."""
        if self._names_a_generation(path):
            os.remove(path)
        if self._pending.pop(os.fspath(path), None) is None:
            for ref in _refs(path):
                self._git("update-ref", "-d", ref, check=False)

    def _name_file(self, path: PathLike, gen: int) -> None:
        """The few lines left at `path`, written whole (a link there is
        replaced, never followed)."""
        path = os.fspath(path)
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        text = (f"{NAME_LINE}\ngeneration {gen} of {self._path_in_repo} in {os.path.abspath(self._repo)}; "
                f"its commit is {_ref(path)} there\n")
        tmp = f"{path}.wtxt-{os.getpid()}.tmp"
        with open(tmp, "x") as f:
            f.write(text)
        os.replace(tmp, path)

    @staticmethod
    def _names_a_generation(path: PathLike) -> bool:
        """Whether `path` is a file this plugin left at a saved path."""
        try:
            with open(path, "rb") as f:
                return f.read(len(NAME_LINE) + 1) == (NAME_LINE + "\n").encode()
        except OSError:
            return False

    def teardown(self) -> None:
        """Lightning calls this when the Trainer's strategy ends: every
        generation is written, committed and pushed, and every saved path
        kept names its generation, before it returns."""
        self.finish()
        self._name_generations()

    def _name_generations(self) -> None:
        """A ref for each saved path whose generation is committed."""
        for path, fut in list(self._pending.items()):
            commit = fut.result().commit if fut.done() and fut.exception() is None else None
            if commit:
                self._git("update-ref", _ref(path), commit)
                del self._pending[path]

    def _generation_of(self, path: PathLike) -> str:
        """The commit holding the generation `path` names."""
        fut = self._pending.get(os.fspath(path))
        if fut is not None:
            commit = fut.result().commit  # saved in this run: wait for it
            if commit:
                return commit
        found = ""
        for ref in _refs(path):
            found = self._git("rev-parse", "--verify", "--quiet", "--end-of-options", ref + "^{commit}", check=False)
            if found:
                break
        if not found:
            raise Error(f"{os.fspath(path)}: no such checkpoint (neither a WTXT snapshot nor a path this plugin "
                        f"saved in {self._repo})")
        return found

    def _git(self, *args: str, check: bool = True) -> str:
        r = subprocess.run(["git", "-C", self._repo, *args], capture_output=True, text=True)
        if check and r.returncode != 0:
            raise Error(f"git {' '.join(args)}: {r.stderr.strip()}")
        return r.stdout.strip() if r.returncode == 0 else ""
