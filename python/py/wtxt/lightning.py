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

Lightning writes nothing at the `.ckpt` paths it passes: the repository's
history holds every generation, so `remove_checkpoint` (top-k pruning)
removes nothing from it.

    trainer = L.Trainer(plugins=[WtxtCheckpointIO("runs", sign_key="signer.pem")], ...)
    trainer.fit(model)                                  # every checkpoint a commit of runs/lightning.wtxt
    trainer.fit(model, ckpt_path="runs/lightning.wtxt")  # resumed, verified first
"""

import json
import os
import time
from typing import TYPE_CHECKING, Any, Dict, Optional, Union

import numpy as np

from ._common import Error, PathLike
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

__all__ = ["WtxtCheckpointIO", "STRUCTURE"]


class WtxtCheckpointIO(BehindLoop, _Base):
    """A Lightning `CheckpointIO` storing checkpoints as generations of one
    WTXT snapshot in Git (see the module). The arguments after `repo` and
    `path_in_repo` are `wtxt.Snapshotter`'s; `pubkey`, `trusted_keys`,
    `require_signature` and `hmac_key` are what a loaded checkpoint must
    prove (a named key requires its signature); with `sign_key` and
    neither `pubkey` nor `trusted_keys`, a loaded checkpoint must be signed
    by `sign_key` itself (`require_signature=False` lifts that). `infos` lists what each
    saved generation came to once written; `held` the seconds each save
    held the loop."""

    def __init__(self, repo: PathLike, path_in_repo: PathLike = "lightning.wtxt", remote: Optional[str] = None,
                 sign_key: Optional[PathLike] = None, hmac_key: Optional[PathLike] = None,
                 oms_key: Optional[PathLike] = None, part_size: Optional[Union[int, str]] = None,
                 digest: str = "sha256", max_pending: int = 1, pubkey: Optional[PathLike] = None,
                 trusted_keys: Optional[PathLike] = None, require_signature: Optional[bool] = None):
        if _Base is object:
            raise Error("WtxtCheckpointIO needs Lightning (pip install lightning)")
        super().__init__()
        self._start_behind(repo=repo, path_in_repo=path_in_repo, remote=remote, sign_key=sign_key,
                           hmac_key=hmac_key, oms_key=oms_key, part_size=part_size, digest=digest,
                           max_pending=max_pending)
        self._trust: Dict[str, Any] = dict(hmac_key=hmac_key, pubkey=pubkey, trusted_keys=trusted_keys,
                                           require_signature=require_signature, signer=sign_key)


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
        meta = {"global_step": str(checkpoint.get("global_step", "")), "epoch": str(checkpoint.get("epoch", "")),
                "lightning_path": os.fspath(path)}
        self._behind.save(os.fspath(path), arrays, meta, t)

    def load_checkpoint(self, path: PathLike, map_location: Optional[Any] = None,
                        weights_only: Optional[bool] = None) -> Dict[str, Any]:
        """The checkpoint a WTXT snapshot at `path` holds, verified first
        (nothing is unpickled, so `weights_only` has nothing to allow)."""
        from .torch import load_state_dict

        sd = load_state_dict(path, device=map_location if isinstance(map_location, str) else "cpu", **self._trust)
        if STRUCTURE not in sd:
            raise Error(f"{os.fspath(path)}: not a Lightning checkpoint (no {STRUCTURE} array)")
        doc = json.loads(sd.pop(STRUCTURE).numpy().tobytes())
        if doc.get("format") != _FORMAT:
            raise Error(f"{os.fspath(path)}: checkpoint format {doc.get('format')!r}, expected {_FORMAT!r}")
        out: Dict[str, Any] = decode(doc["checkpoint"], sd)
        return out

    def remove_checkpoint(self, path: PathLike) -> None:
        """Nothing to remove: every generation stays in the repository's history."""


    def teardown(self) -> None:
        """Lightning calls this when the Trainer's strategy ends: every
        generation is written, committed and pushed before it returns."""
        self.finish()
