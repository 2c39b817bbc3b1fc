"""The reading side of `wtxt.torch.dcp`: `WtxtStorageReader`, and `load`,
which raises a rank's `wtxt.Error` rather than torch's wrapper. Each rank
verifies the snapshot before it fills a tensor, keeps only the rows its
plan spans and, in the tree form, decodes only their chunks
(docs/DISTRIBUTED.md, "Loading")."""
from __future__ import annotations

import io
import os
from typing import Any, Dict, List, Optional, Tuple, Union

import torch
from torch.distributed.checkpoint.metadata import (BytesStorageMetadata, ChunkStorageMetadata, Metadata,
                                                   StorageMeta, TensorProperties, TensorStorageMetadata)
from torch.distributed.checkpoint.planner import LoadItemType, LoadPlan, LoadPlanner
from torch.distributed.checkpoint.storage import StorageReader
from torch.futures import Future

import wtxt._rust as _rust
from .._common import Error, call
from . import _TO_TORCH, _load, torch_shape
from ._ranks import _Ranks, _wtxt_group

PathLike = Union[str, "os.PathLike[str]"]


class WtxtStorageReader(StorageReader):
    """Reads a WTXT snapshot (single file or split) for `dcp.load`.

    Every check runs before anything is copied into the state dict: with
    `hmac_key` every array must authenticate, with `pubkey` or
    `trusted_keys` a valid signature by one of those keys is required
    (`require_signature=False` is the explicit opt-out). A failure raises
    `wtxt.VerifyError` naming the file (the part) and line. A rank keeps
    only the rows its plan spans, and of a tree-form snapshot decodes only
    the chunks that hold them.

    With `in_place=True` a rank decodes the rows of each tensor its plan
    reads whole (rows of the first dimension, all of the others; CPU,
    contiguous, the snapshot's dtype) straight into the state dict's
    tensor: no buffer of its own and no copy. The signature policy is
    decided from the head before any row is written; a later check that
    fails leaves those tensors partly written (the load still raises).
    Without it, a failure leaves the state dict as it was.
    """

    def __init__(self, path: PathLike, *, hmac_key: Optional[PathLike] = None, pubkey: Optional[PathLike] = None,
                 trusted_keys: Optional[PathLike] = None, require_signature: Optional[bool] = None,
                 in_place: bool = False):
        super().__init__()
        self.path = os.fspath(path)
        self.hmac_key, self.pubkey, self.trusted_keys = hmac_key, pubkey, trusted_keys
        self.require_signature = require_signature
        self.in_place = in_place
        self.is_coordinator = False
        self._group = None
        self._metadata: Optional[Metadata] = None

    def reset(self, checkpoint_id: Optional[PathLike] = None) -> None:
        if checkpoint_id is not None:
            self.path = os.fspath(checkpoint_id)

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: PathLike) -> bool:
        """A regular file that begins as a WTXT does."""
        try:
            path = os.fspath(checkpoint_id)
            # Never opened unless it is a regular file (a FIFO would block).
            if not os.path.isfile(path):
                return False
            with open(path, "rb") as f:
                return f.read(7) == b"WTXT 1\n"
        except (OSError, TypeError):
            return False

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        # Planning needs names, dtypes and shapes only: they come from the
        # `arr` lines, unverified; read_data verifies every byte before it
        # uses any.
        outlined = call(_rust.outline, self.path)
        if outlined is None:
            call(_rust.load, self.path, metadata_only=True)  # raises what is wrong
            raise Error(f"{self.path}: not a snapshot this reader can plan from")
        sd: Dict[str, Union[TensorStorageMetadata, BytesStorageMetadata]] = {}
        for t in outlined.tensors:
            if t.dtype not in _TO_TORCH:
                raise Error(f"{self.path}: tensor {t.name!r} is {t.dtype}, which torch has no dtype for")
            size = torch.Size(torch_shape(t.dtype, t.shape))
            sd[t.name] = TensorStorageMetadata(
                properties=TensorProperties(dtype=_TO_TORCH[t.dtype]), size=size,
                chunks=[ChunkStorageMetadata(offsets=torch.Size([0] * len(t.shape)), sizes=size)])
        for name in outlined.objects or {}:
            sd[name] = BytesStorageMetadata()
        return Metadata(state_dict_metadata=sd, storage_meta=StorageMeta(checkpoint_id=self.path))

    def set_up_storage_reader(self, metadata: Metadata, is_coordinator: bool, *args: Any, **kwargs: Any) -> None:
        self.is_coordinator = is_coordinator
        self._metadata = metadata
        if self._group is None:
            self._group = _wtxt_group()

    def prepare_local_plan(self, plan: LoadPlan) -> LoadPlan:
        return plan

    def prepare_global_plan(self, plans: List[LoadPlan]) -> List[LoadPlan]:
        return plans

    def read_data(self, plan: LoadPlan, planner: LoadPlanner) -> "Future[None]":
        loaded: List[Any] = []
        # The rows of each tensor this rank's items span (of its first
        # dimension): only those rows are kept, so a rank holds its share of
        # the state, not all of it (and in the tree form decodes only that).
        rows: Dict[str, Tuple[int, int]] = {}
        for item in plan.items:
            if item.type != LoadItemType.BYTE_IO:
                fqn = item.storage_index.fqn
                o, n = (int(item.storage_offsets[0]), int(item.lengths[0])) if len(item.lengths) else (0, 1)
                lo, hi = rows.get(fqn, (o, o + n))
                rows[fqn] = (min(lo, o), max(hi, o + n))

        in_place = self._in_place(plan, planner) if self.in_place else {}

        def load() -> str:
            loaded[:] = got = _load(self.path, self.hmac_key, self.pubkey, self.trusted_keys, self.require_signature,
                                    rows=rows, into={fqn: t for fqn, (_, t) in in_place.items()})
            return got[2]

        # Every rank verified what it read; they also agree that it was one
        # snapshot (one `merkle_this`) before any fills a tensor: a file
        # replaced while the ranks read it would fill one model from two
        # generations.
        identities = _Ranks(self._group).agree(load)
        if len(set(identities)) > 1:
            seen = ", ".join(f"rank {r}: {i[:16]}" for r, i in enumerate(identities))
            raise Error(f"{self.path}: the ranks read different snapshots ({seen}): it changed while they read it; "
                        "load again once it is no longer being written")
        tensors, objects, _ = loaded
        # Every item is matched and checked before the first copy, so a
        # failure leaves the state dict as it was.
        work: List[Tuple[Any, Any, Optional[torch.Tensor]]] = []
        for item in plan.items:
            fqn = item.storage_index.fqn
            if fqn in in_place:
                continue
            if item.type == LoadItemType.BYTE_IO:
                if fqn not in objects:
                    raise Error(f"{self.path}: holds no entry {fqn!r}")
                work.append((item, objects[fqn], None))
                continue
            if fqn not in tensors:
                raise Error(f"{self.path}: holds no tensor {fqn!r}")
            src = tensors[fqn]
            for d, (o, n) in enumerate(zip(item.storage_offsets, item.lengths)):
                # The first dimension holds only the rows asked for, from rows[fqn][0] on.
                src = src.narrow(d, int(o) - (rows[fqn][0] if d == 0 else 0), int(n))
            target = planner.resolve_tensor(item).detach()
            if target.shape != src.shape or target.dtype != src.dtype:
                raise Error(f"tensor {fqn!r}: the snapshot holds {src.dtype} {tuple(src.shape)} where the state dict "
                            f"has {target.dtype} {tuple(target.shape)}")
            work.append((item, src, target))
        for item, src, into in work:
            if into is None:
                buf = io.BytesIO()
                torch.save(src, buf)
                buf.seek(0)
                planner.load_bytes(item, buf)
            else:
                into.copy_(src)
                planner.commit_tensor(item, into)
        for item, target in in_place.values():
            planner.commit_tensor(item, target)
        fut: Future[None] = Future()
        fut.set_result(None)
        return fut

    def _in_place(self, plan: LoadPlan, planner: LoadPlanner) -> Dict[str, Tuple[Any, torch.Tensor]]:
        """The tensors (by name, with their one item) that the rows of a
        tensor can be decoded straight into: the only item of that tensor in
        the plan, all of every dimension past the first, and a target on the
        CPU, contiguous, of the dtype and shape that item reads."""
        items: Dict[str, List[Any]] = {}
        for item in plan.items:
            if item.type != LoadItemType.BYTE_IO:
                items.setdefault(item.storage_index.fqn, []).append(item)
        out: Dict[str, Tuple[Any, torch.Tensor]] = {}
        for fqn, (item, *more) in items.items():
            held = self._metadata.state_dict_metadata.get(fqn) if self._metadata else None
            if more or not isinstance(held, TensorStorageMetadata) or len(item.lengths) == 0:
                continue
            whole = all(int(o) == 0 and int(n) == int(s) for o, n, s in
                        zip(item.storage_offsets[1:], item.lengths[1:], held.size[1:]))
            target = planner.resolve_tensor(item).detach()
            if (whole and target.device.type == "cpu" and target.is_contiguous() and target.numel() > 0
                    and target.dtype == held.properties.dtype and tuple(target.shape) == tuple(item.lengths)):
                out[fqn] = (item, target)
        return out


def load(state_dict: Dict[str, Any], storage_reader: "WtxtStorageReader", **kwargs: Any) -> None:
    """`torch.distributed.checkpoint.load(state_dict, storage_reader=...)`,
    raising the `wtxt.Error` (a `wtxt.VerifyError` for a snapshot that does
    not verify) that a rank raised. `dcp.load` itself wraps it in torch's
    `CheckpointException`, which derives from `BaseException`, so `except
    Exception` does not catch it; its `failures` map each failed rank to
    the `wtxt.Error` and its traceback."""
    from torch.distributed.checkpoint.api import CheckpointException
    from torch.distributed.checkpoint.state_dict_loader import load as dcp_load

    try:
        dcp_load(state_dict, storage_reader=storage_reader, **kwargs)
    except CheckpointException as e:
        for _, failure in sorted(e.failures.items()):
            exc = failure[0] if isinstance(failure, tuple) else failure
            if isinstance(exc, Error):
                raise exc from e
        raise
