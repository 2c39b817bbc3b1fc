"""Hugging Face `transformers.Trainer` checkpoints as WTXT generations in Git.

`WtxtCallback` turns every checkpoint folder the Trainer saves
(`checkpoint-N/`: the model's safetensors, `optimizer.pt`, `scheduler.pt`,
`rng_state.pth`, `trainer_state.json`, the config files) into the next
generation of one snapshot in a Git repository, through a `wtxt.Snapshotter`:
the Trainer waits only while the folder is read and copied; hashing,
writing, signing, the commit and the push run on background threads.
`restore_checkpoint` (from `wtxt.checkpoint`, which says how a folder is
kept) writes such a generation back as a folder that
`trainer.train(resume_from_checkpoint=...)` takes, verified first.
"""

import os
import time
from typing import TYPE_CHECKING, Any, Optional, Union

from ._common import Error, PathLike
from ._behind import BehindLoop
from .checkpoint import checkpoint_state, restore_checkpoint

if TYPE_CHECKING:
    from transformers import TrainerCallback as _Base
else:
    try:  # transformers is needed for the callback only
        from transformers import TrainerCallback as _Base
    except ImportError:  # pragma: no cover - restore_checkpoint works without it
        _Base = object

__all__ = ["WtxtCallback", "checkpoint_state", "restore_checkpoint"]


class WtxtCallback(BehindLoop, _Base):
    """A `transformers.TrainerCallback`: each checkpoint the Trainer saves
    becomes the next generation of `path_in_repo` in the Git work tree
    `repo`, chained to the one before, signed with `sign_key` (and an OMS
    `model.sig` with `oms_key`), committed and, with `remote`, pushed, all
    off the training loop (`wtxt.Snapshotter`; the other arguments are its
    own). Only the main process (`state.is_world_process_zero`) snapshots.
    At the end of training it waits for every generation; a generation that
    failed raises `wtxt.Error` there. One that failed or was committed but
    not pushed (a guard refused it) is heard at the next save already: a
    warning on the `wtxt` logger, or, with `on_push_error="raise"`,
    `wtxt.Error` from `on_save`, which stops the run. A generation not
    pushed waits in the ring's resend queue (in the repository's `.git`),
    which the next Snapshotter on the same path pushes first. `infos` lists what each came to.
    With `keep_folders=False` each `checkpoint-N/` is removed once its
    generation is committed (one copy on disk, in Git; resume through
    `restore_checkpoint`); `load_best_model_at_end` needs the folders and
    is refused with it.

        trainer = Trainer(..., callbacks=[WtxtCallback("runs", sign_key="~/.config/wtxt/sign.pem")])
    """

    def __init__(self, repo: PathLike, path_in_repo: PathLike = "checkpoint.wtxt", remote: Optional[str] = None,
                 sign_key: Optional[PathLike] = None, hmac_key: Optional[PathLike] = None,
                 oms_key: Optional[PathLike] = None, part_size: Optional[Union[int, str]] = None,
                 digest: str = "tree", max_pending: int = 1, keep_folders: bool = True,
                 on_push_error: str = "warn") -> None:
        if _Base is object:
            raise Error("WtxtCallback needs transformers (pip install transformers)")
        self._start_behind(keep_folders, on_push_error, repo=repo, path_in_repo=path_in_repo, remote=remote, sign_key=sign_key,
                           hmac_key=hmac_key, oms_key=oms_key, part_size=part_size, digest=digest,
                           max_pending=max_pending)
        self._keep_folders = keep_folders

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        if not self._keep_folders and getattr(args, "load_best_model_at_end", False):
            raise Error("WtxtCallback(keep_folders=False) removes the checkpoint folders that "
                        "load_best_model_at_end loads: keep them, or restore the best generation "
                        "with wtxt.trainer.restore_checkpoint")
        return control


    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        if not state.is_world_process_zero:
            return control
        t = time.perf_counter()
        folder = os.path.join(args.output_dir, f"checkpoint-{state.global_step}")
        self._behind.save(f"step {state.global_step}", checkpoint_state(folder),
                          {"global_step": str(state.global_step)}, t, folder)
        return control

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        self.finish()
        return control

