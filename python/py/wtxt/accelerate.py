"""Hugging Face Accelerate's `save_state` folders as WTXT generations in Git.

`WtxtStateSaver.save_state(accelerator, output_dir)` runs
`accelerator.save_state(output_dir)` and makes the folder it wrote (the
model's safetensors, `optimizer.bin`, `scheduler.bin`, the RNG states) the
next generation of one snapshot in a Git repository, chained and signed,
written, committed and pushed behind the loop (`wtxt.Snapshotter`, on the
main process). `load_state(accelerator, snapshot, output_dir)` writes a
generation back as that folder, verified first, and loads it with
`accelerator.load_state`. How a folder is kept: `wtxt.checkpoint`.

    saver = WtxtStateSaver("runs", sign_key="signer.pem")
    saver.save_state(accelerator, "state/")          # every process calls it, as save_state
    ...
    saver.finish()                                   # every generation written and committed
    load_state(accelerator, "runs/state.wtxt", "resume/", trusted_keys="trusted_keys")
"""

import time
from typing import Any, Optional, Union

from ._common import PathLike
from ._behind import BehindLoop
from .checkpoint import checkpoint_state, restore_checkpoint

__all__ = ["WtxtStateSaver", "load_state"]


class WtxtStateSaver(BehindLoop):
    """Each `save_state` a generation of `path_in_repo` in the Git work tree
    `repo`; with `keep_folders=False` the folder Accelerate wrote is removed
    once its generation is committed; a generation that failed or was not
    pushed is heard at the next save (a warning on the `wtxt` logger, or
    `wtxt.Error` with `on_push_error="raise"`); the other arguments are
    `wtxt.Snapshotter`'s."""

    def __init__(self, repo: PathLike, path_in_repo: PathLike = "state.wtxt", remote: Optional[str] = None,
                 sign_key: Optional[PathLike] = None, hmac_key: Optional[PathLike] = None,
                 oms_key: Optional[PathLike] = None, part_size: Optional[Union[int, str]] = None,
                 digest: str = "tree", max_pending: int = 1, keep_folders: bool = True,
                 on_push_error: str = "warn"):
        self._start_behind(keep_folders, on_push_error, repo=repo, path_in_repo=path_in_repo, remote=remote, sign_key=sign_key,
                           hmac_key=hmac_key, oms_key=oms_key, part_size=part_size, digest=digest,
                           max_pending=max_pending)


    def save_state(self, accelerator: Any, output_dir: PathLike, **kwargs: Any) -> str:
        """`accelerator.save_state(output_dir, **kwargs)`, then (main process)
        the folder as the next generation, requested behind the loop.
        Returns the folder Accelerate wrote."""
        out = str(accelerator.save_state(output_dir, **kwargs))
        accelerator.wait_for_everyone()
        if accelerator.is_main_process:
            t = time.perf_counter()
            self._behind.save(str(out), checkpoint_state(out), {"accelerate_dir": str(out)}, t, out)
        return out



def load_state(accelerator: Any, filename: PathLike, output_dir: PathLike, hmac_key: Optional[PathLike] = None,
               pubkey: Optional[PathLike] = None, trusted_keys: Optional[PathLike] = None,
               require_signature: Optional[bool] = None, **kwargs: Any) -> str:
    """Writes the generation at `filename` to `output_dir` (main process,
    verified first; `output_dir` must not exist) and loads it into
    `accelerator` (`accelerator.load_state(output_dir, **kwargs)`)."""
    if accelerator.is_main_process:
        restore_checkpoint(filename, output_dir, hmac_key=hmac_key, pubkey=pubkey, trusted_keys=trusted_keys,
                           require_signature=require_signature)
    accelerator.wait_for_everyone()
    accelerator.load_state(str(output_dir), **kwargs)
    return str(output_dir)
