"""Generations requested behind a training loop: what the Trainer callback
and the Lightning plugin share. One `wtxt.Snapshotter`, made on the first
save; each save publishes (the copy, the only wait) and requests; `finish`
waits for all of them and names the saves whose generation failed. A
generation that failed or was committed but not pushed (a host's guard
refused it, the remote is down) is heard at the next save: a warning on
the `wtxt` logger, or, with `on_push_error="raise"`, `wtxt.Error` raised
from that save, which stops the framework's run."""

import logging
import os
import shutil
import time
import warnings
from concurrent.futures import Future
from typing import Any, Dict, List, Mapping, Optional, Tuple

from . import Error, Snapshotter, SnapshotInfo
from ._common import on_push_error_of


class Behind:
    def __init__(self, snapshotter_args: Mapping[str, Any], keep_folders: bool = True, on_push_error: str = "warn"):
        self._args = dict(snapshotter_args)
        self._keep_folders = keep_folders
        self._on_push_error = on_push_error_of(on_push_error)
        #: How many of `_futures`, oldest first, were heard of by a save.
        self._heard = 0
        #: Folders whose generation was committed but that could not be removed.
        self._not_removed: List[str] = []
        self._snap: Optional[Snapshotter] = None
        self._futures: List[Tuple[str, "Future[SnapshotInfo]"]] = []
        #: What each generation came to, once `finish` waited for it.
        self.infos: List[SnapshotInfo] = []
        #: Seconds each save held the loop (building `arrays` included).
        self.held: List[float] = []
        #: The generation the last save published.
        self.last_gen = -1

    def save(self, label: str, arrays: Dict[str, Any], metadata: Dict[str, str],
             started: float, folder: Optional[str] = None) -> "Future[SnapshotInfo]":
        """Publishes `arrays` and requests their generation, whose future it
        returns; `started` is when the save began (`time.perf_counter()`).
        `folder`, the framework's checkpoint the arrays were read from, is
        removed once its generation is committed, unless folders are kept:
        a generation that failed leaves its folder, the only copy. An
        earlier generation that failed is heard of first (see the module)."""
        self._hear()
        if self._snap is None:
            # The Snapshotter's own hearing is left quiet: a save names its checkpoint.
            self._snap = Snapshotter(**self._args, on_push_error="quiet")
        self.last_gen = self._snap.publish(arrays, metadata=metadata)
        fut = self._snap.request_snapshot()
        if folder is not None and not self._keep_folders:
            fut.add_done_callback(lambda f: self._remove_if_committed(folder, f))
        self._futures.append((label, fut))
        self.held.append(time.perf_counter() - started)
        return fut

    def _hear(self) -> None:
        """Says which of the generations done since the last save failed or
        were not pushed: warned, or raised with `on_push_error="raise"`."""
        while self._heard < len(self._futures) and self._futures[self._heard][1].done():
            label, fut = self._futures[self._heard]
            self._heard += 1
            e = fut.exception()
            if e is None:
                continue
            if self._on_push_error == "raise":
                raise Error(f"{label}: {e} (on_push_error='raise' stops the run)")
            logging.getLogger("wtxt").warning("%s: %s", label, e)

    def _remove_if_committed(self, folder: str, fut: "Future[SnapshotInfo]") -> None:
        """Runs on the Snapshotter's thread when a generation is done."""
        if fut.cancelled() or fut.exception() is not None or not fut.result().commit:
            return
        try:
            if os.path.islink(folder):  # never follow a link to remove what it names
                raise OSError(f"{folder}: a symbolic link, not the framework's folder")
            shutil.rmtree(folder)
        except FileNotFoundError:
            pass  # the framework's own rotation removed it first
        except OSError as e:
            self._not_removed.append(f"{folder}: {e}")

    def finish(self) -> List[SnapshotInfo]:
        """Waits for every generation requested so far; raises `wtxt.Error`
        naming each save whose generation failed."""
        if self._snap is None:
            return self.infos
        self._snap.flush()
        failed = []
        for label, fut in self._futures:
            try:
                self.infos.append(fut.result())
            except Error as e:
                failed.append(f"{label}: {e}")
        self._futures = []
        self._heard = 0
        self._snap.close()
        self._snap = None
        if self._not_removed:
            warnings.warn("committed, but not removed: " + "; ".join(self._not_removed), stacklevel=3)
            self._not_removed = []
        if failed:
            raise Error("checkpoints not snapshotted: " + "; ".join(failed))
        return self.infos


class BehindLoop:
    """What the adapters (`wtxt.trainer`, `wtxt.lightning`, `wtxt.accelerate`)
    share around their `Behind`: `infos`, `held` and `finish`."""

    _behind: Behind

    def _start_behind(self, keep_folders: bool = True, on_push_error: str = "warn", **snapshotter_args: Any) -> None:
        self._behind = Behind(snapshotter_args, keep_folders, on_push_error)

    @property
    def infos(self) -> List[SnapshotInfo]:
        """What each generation came to, once written (after `finish`)."""
        return self._behind.infos

    @property
    def held(self) -> List[float]:
        """Seconds each save held the training loop (building its arrays, the copy)."""
        return self._behind.held

    def finish(self) -> List[SnapshotInfo]:
        """Waits for every generation requested so far; raises `wtxt.Error`
        naming each save whose generation failed."""
        return self._behind.finish()
