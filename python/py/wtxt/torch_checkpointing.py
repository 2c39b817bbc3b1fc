"""Meta's `torch_checkpointing` saving through WTXT: every checkpoint its
`CheckpointManager` commits becomes the next generation of one snapshot in
a Git repository.

`WtxtStorageConfig` is a `torch_checkpointing` storage. Files are written
as its local file system storage writes them; when the writer commits a
checkpoint (rank 0 renames the folder every rank wrote onto the final
path), the committed folder becomes the next generation of `path_in_repo`
in the Git work tree `repo`: chained to the one before, signed with
`sign_key` (and an OMS `model.sig` with `oms_key`), committed and, with
`remote`, pushed (`wtxt.Snapshotter`; how a folder is kept:
`wtxt.checkpoint`). The rename returns once the generation is committed,
so a checkpoint whose generation failed fails its save: from `save` with
the synchronous saver, from the save's future with the asynchronous one,
whose writer process (torch_checkpointing's own, off the training loop)
makes the generation. A writer that writes in place
(`write_to_temp_dir=False`) never commits by rename, so the storage
refuses its first write rather than leave checkpoints unrecorded.

`restore(snapshot, out)` writes a generation back as a checkpoint folder,
verified first, that `CheckpointManager.load(out, into=...)` takes.

    manager = CheckpointManager(CheckpointManager.Config(
        storage_config=WtxtStorageConfig(repo="runs", sign_key="signer.pem")))
    manager.save("ckpt/step_100", {"model": model.state_dict(), "optim": opt.state_dict()})
    ...
    restore("runs/checkpoint.wtxt", "resume/", trusted_keys="trusted_keys")
    manager.load("resume/", into={"model": model.state_dict(), "optim": opt.state_dict()})
"""

import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, List, Optional, Union

from torch_checkpointing.checkpoint_writer import DEFAULT_TEMP_DIR_PREFIX
from torch_checkpointing.storage.filesystem import LocalFileSystemStorage, LocalFileSystemStorageConfig

from . import SnapshotInfo
from ._behind import Behind
from ._common import Error
from .checkpoint import checkpoint_state, restore_checkpoint

__all__ = ["WtxtStorageConfig", "WtxtStorage", "restore"]

#: `restore_checkpoint` under the name this module's users look for.
restore = restore_checkpoint


@dataclass(kw_only=True)
class WtxtStorageConfig(LocalFileSystemStorageConfig):
    """The storage's settings; `torch_checkpointing` pickles it into its
    writer process, where `create_storage` makes the storage. `repo` and
    the keys are `wtxt.Snapshotter`'s; `temp_dir_prefix` must be the
    writer's (`CheckpointWriterConfig.temp_dir_prefix`). With
    `keep_folders=False` each committed checkpoint folder is removed once
    its generation is committed (a generation that failed keeps its
    folder): the repository holds the one copy, `restore` writes it back.
    A generation that failed or was not pushed is heard at the next save,
    in the writer process: a warning on the `wtxt` logger, or, with
    `on_push_error="raise"`, that save fails."""

    repo: str
    path_in_repo: str = "checkpoint.wtxt"
    remote: Optional[str] = None
    sign_key: Optional[str] = None
    hmac_key: Optional[str] = None
    oms_key: Optional[str] = None
    part_size: Optional[Union[int, str]] = None
    digest: str = "tree"
    temp_dir_prefix: str = DEFAULT_TEMP_DIR_PREFIX
    keep_folders: bool = True
    on_push_error: str = "warn"

    def create_storage(self) -> "WtxtStorage":
        return WtxtStorage(self)


class WtxtStorage(LocalFileSystemStorage):
    """The local file system storage whose commit rename also makes the
    committed folder the next generation (see the module's text)."""

    def __init__(self, config: WtxtStorageConfig) -> None:
        super().__init__(config=config)
        self._wtxt = config
        self._lock = threading.Lock()
        self._behind = Behind(dict(repo=config.repo, path_in_repo=config.path_in_repo, remote=config.remote,
                                   sign_key=config.sign_key, hmac_key=config.hmac_key, oms_key=config.oms_key,
                                   part_size=config.part_size, digest=config.digest, max_pending=1),
                              config.keep_folders, config.on_push_error)

    def _staged(self, path: Path) -> None:
        """Refuses a file written outside a folder the writer will commit by
        rename: such a checkpoint would never become a generation."""
        prefix = self._wtxt.temp_dir_prefix
        if not any(part.startswith(prefix) for part in Path(path).parent.parts):
            raise Error(f"{path}: written in place, outside a {prefix}* folder; wtxt records a checkpoint when "
                        "the writer renames its folder into place (CheckpointWriterConfig(write_to_temp_dir=True), "
                        "with a barrier, as torch_checkpointing's defaults have it)")

    def stream_write(self, path: Path) -> Any:
        self._staged(path)
        return super().stream_write(path)

    def get_write_stream(self, path: Path, data: object) -> Any:
        self._staged(path)
        return super().get_write_stream(path, data)

    def write(self, path: Path, data: Any) -> None:
        self._staged(path)
        super().write(path, data)

    def rename(self, src_path: Path, dst_path: Path, is_directory: bool = False,
               background_cleanup: bool = False) -> None:
        super().rename(src_path, dst_path, is_directory, background_cleanup)
        if not is_directory:
            return
        with self._lock:
            started = time.perf_counter()
            folder = os.fspath(dst_path)
            self._behind.save(folder, checkpoint_state(folder), {"checkpoint": Path(folder).name}, started, folder)
            self._behind.finish()

    @property
    def infos(self) -> List[SnapshotInfo]:
        """What each generation this storage made came to, in order."""
        return self._behind.infos
