"""WTXT as storage for `torch.distributed.checkpoint` (DCP).

    import torch.distributed.checkpoint as dcp
    from wtxt.torch.dcp import WtxtStorageWriter, WtxtStorageReader

    dcp.save(state_dict, storage_writer=WtxtStorageWriter("ckpt/model.wtxt", sign_key="signer.pem"))
    dcp.load(state_dict, storage_reader=WtxtStorageReader("ckpt/model.wtxt", pubkey="signer.pub"))

Every rank writes its own shards, at once, into one stage file beside the
snapshot (each shard at its place in its tensor's full C-order bytes); the
coordinator then writes the snapshot from the stage file, mapped rather
than read into memory, and removes it. The result is one snapshot (a head
and its parts, or a single file): byte for byte what
`wtxt.torch.save_state_dict` writes for the same full state dict and
options, at any world size and sharding. docs/DISTRIBUTED.md says what each
rank does and what it costs.

Loading verifies the whole snapshot (every check `load_state_dict` runs,
under the same trust options) before it copies anything into the state
dict, then gives each rank the slices its plan asks for, whatever the world
size and sharding it was saved with.
"""
from __future__ import annotations

import io
import os
import secrets
from dataclasses import dataclass, replace
from typing import Dict, List, Optional, Tuple, Union

import numpy as np
import torch
from torch.distributed.checkpoint.metadata import (BytesStorageMetadata, ChunkStorageMetadata, Metadata,
                                                   StorageMeta, TensorProperties,
                                                   TensorStorageMetadata)
from torch.distributed.checkpoint.planner import (LoadItemType, LoadPlan, LoadPlanner, SavePlan, SavePlanner,
                                                  WriteItemType)
from torch.distributed.checkpoint.storage import StorageReader, StorageWriter, WriteResult
from torch.futures import Future

from .. import Error, _call, _literal, _rust, _save_items
from . import _TO_TORCH, _bits, _load, _wtxt_dtype

__all__ = ["WtxtStorageWriter", "WtxtStorageReader"]

PathLike = Union[str, "os.PathLike[str]"]


@dataclass(frozen=True)
class _Region:
    """Where a tensor's full C-order bytes go in the stage file."""

    offset: int
    nbytes: int
    dtype: str
    shape: Tuple[int, ...]


@dataclass(frozen=True)
class _Stage:
    """What the coordinator's plan tells each rank: the stage file, and the
    regions of the tensors that rank writes."""

    path: str
    regions: Dict[str, _Region]


def _stage_prefix(path: str) -> Tuple[str, str]:
    """The folder of the snapshot at `path`, and the name its stage files start with."""
    folder, name = os.path.split(os.path.abspath(path))
    return folder, f".{name}.dcp-"


def _itemsize(dtype: str) -> int:
    return {"f64": 8, "i64": 8, "u64": 8, "f32": 4, "i32": 4, "u32": 4, "f16": 2, "bf16": 2, "i16": 2,
            "u16": 2}.get(dtype, 1)


def _pwrite_all(fd: int, data: memoryview, at: int, path: str) -> None:
    """Writes all of `data` at `at` (a large write may land in pieces)."""
    while len(data):
        n = os.pwrite(fd, data, at)
        if n <= 0:
            raise Error(f"{path}: short write at byte {at}")
        data, at = data[n:], at + n


def _write_shard(fd: int, stage: str, region: _Region, offsets, bits: np.ndarray) -> None:
    """Puts one shard (`bits`, C-contiguous, at `offsets` of the full
    tensor) at its place in the tensor's region of the stage file."""
    if bits.size == 0:
        return
    full = region.shape
    if tuple(bits.shape[1:]) == tuple(full[1:]):
        # Whole rows (dim-0 sharding, or the whole tensor): one range.
        row = _itemsize(region.dtype) * int(np.prod(full[1:], dtype=np.int64))
        start = region.offset + (int(offsets[0]) * row if full else 0)
        _pwrite_all(fd, memoryview(bits.reshape(-1).view(np.uint8)), start, stage)
        return
    mm = np.memmap(stage, dtype=bits.dtype, mode="r+", offset=region.offset, shape=full)
    try:
        mm[tuple(slice(int(o), int(o) + int(s)) for o, s in zip(offsets, bits.shape))] = bits
        mm.flush()
    finally:
        del mm


class WtxtStorageWriter(StorageWriter):
    """Writes a DCP checkpoint as one WTXT snapshot at `path` (a head and its
    parts when its text exceeds `part_size`).

    The options are `wtxt.torch.save_state_dict`'s and the coordinator's
    apply: `metadata` (safetensors-style strings), `prev` (the previous
    generation, verified, to chain from), `sign_key` (Ed25519), `hmac_key`,
    `part_size`, `gen`, `ts`, `oms_key` (an OpenSSF Model Signing
    `model.sig` beside the snapshot). Entries that are not tensors (a step,
    a learning rate) are kept as Python literals.
    """

    def __init__(self, path: PathLike, *, metadata: Optional[Dict[str, str]] = None,
                 prev: Optional[PathLike] = None, sign_key: Optional[PathLike] = None,
                 hmac_key: Optional[PathLike] = None, part_size: Optional[Union[int, str]] = None,
                 gen: Optional[int] = None, ts: Optional[str] = None, oms_key: Optional[PathLike] = None):
        super().__init__()
        if metadata is not None and not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
            raise Error("metadata: expected a dict of str to str")
        self.path = os.fspath(path)
        self.metadata, self.prev, self.sign_key, self.hmac_key = metadata, prev, sign_key, hmac_key
        self.part_size, self.gen, self.ts, self.oms_key = part_size, gen, ts, oms_key
        self.is_coordinator = False
        self._stage: Optional[_Stage] = None

    def reset(self, checkpoint_id: Optional[PathLike] = None) -> None:
        if checkpoint_id is not None:
            self.path = os.fspath(checkpoint_id)
        self._stage = None

    def set_up_storage_writer(self, is_coordinator: bool, *args, **kwargs) -> None:
        self.is_coordinator = is_coordinator

    def storage_meta(self) -> Optional[StorageMeta]:
        return StorageMeta(checkpoint_id=self.path)

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: PathLike) -> bool:
        """A path whose name ends in `.wtxt`: where a snapshot can be written."""
        return isinstance(checkpoint_id, (str, os.PathLike)) and os.fspath(checkpoint_id).endswith(".wtxt")

    def prepare_local_plan(self, plan: SavePlan) -> SavePlan:
        # A dtype WTXT cannot hold is refused here, on the rank that has the
        # tensor, before any rank writes a byte.
        for item in plan.items:
            if item.type != WriteItemType.BYTE_IO and item.tensor_data is not None:
                _wtxt_dtype(item.index.fqn, item.tensor_data.properties.dtype)
        return plan

    def prepare_global_plan(self, plans: List[SavePlan]) -> List[SavePlan]:
        # Every tensor's full size, from the items of all ranks.
        tensors: Dict[str, Tuple[str, Tuple[int, ...]]] = {}
        for plan in plans:
            for item in plan.items:
                if item.type == WriteItemType.BYTE_IO:
                    continue
                fqn, td = item.index.fqn, item.tensor_data
                got = (_wtxt_dtype(fqn, td.properties.dtype), tuple(int(d) for d in td.size))
                if tensors.setdefault(fqn, got) != got:
                    raise Error(f"tensor {fqn!r}: the ranks disagree on its dtype or shape ({tensors[fqn]} / {got})")
        regions, at = {}, 0
        for fqn in sorted(tensors):
            dtype, shape = tensors[fqn]
            n = _itemsize(dtype) * int(np.prod(shape, dtype=np.int64))
            regions[fqn] = _Region(at, n, dtype, shape)
            at += (n + 63) // 64 * 64
        folder, prefix = _stage_prefix(self.path)
        os.makedirs(folder, exist_ok=True)
        # A save that died leaves its stage file; one save at a time writes
        # a snapshot, so this one removes them.
        for e in os.scandir(folder):
            if e.name.startswith(prefix) and e.name.endswith(".stage"):
                os.unlink(e.path)
        stage = os.path.join(folder, f"{prefix}{secrets.token_hex(8)}.stage")
        fd = os.open(stage, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            os.ftruncate(fd, at)
        finally:
            os.close(fd)
        self._stage = _Stage(stage, regions)
        out = []
        for plan in plans:
            mine = {i.index.fqn: regions[i.index.fqn] for i in plan.items if i.index.fqn in regions}
            out.append(replace(plan, storage_data=_Stage(stage, mine)))
        return out

    def write_data(self, plan: SavePlan, planner: SavePlanner) -> "Future[List[WriteResult]]":
        stage: _Stage = plan.storage_data
        results = []
        fd = os.open(stage.path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            for item in plan.items:
                fqn = item.index.fqn
                if item.type == WriteItemType.BYTE_IO:
                    data = planner.resolve_data(item)
                    data.seek(0)
                    try:
                        value = torch.load(data, weights_only=True)
                    except Exception as e:  # noqa: BLE001 - anything torch.load refuses
                        raise Error(f"entry {fqn!r}: not a plain Python value ({type(e).__name__}: {e})") from None
                    results.append(WriteResult(index=item.index, size_in_bytes=0,
                                               storage_data=("object", _literal(fqn, value))))
                    continue
                t = planner.resolve_data(item).detach().to("cpu").contiguous()
                region = stage.regions[fqn]
                _write_shard(fd, stage.path, region, item.tensor_data.chunk.offsets, _bits(t))
                n = t.numel() * t.element_size()
                results.append(WriteResult(index=item.index, size_in_bytes=n, storage_data=("tensor", n)))
        finally:
            os.close(fd)
        fut: Future = Future()
        fut.set_result(results)
        return fut

    def finish(self, metadata: Metadata, results: List[List[WriteResult]]) -> None:
        stage = self._stage
        if stage is None:
            raise Error("finish() without prepare_global_plan(): this writer did not plan the save")
        try:
            objects, written = {}, {}
            for r in (r for rank in results for r in rank):
                kind, value = r.storage_data
                if kind == "object":
                    objects[r.index.fqn] = value
                else:
                    written[r.index.fqn] = written.get(r.index.fqn, 0) + value
            staged = []
            for fqn, reg in sorted(stage.regions.items()):
                if written.get(fqn, 0) != reg.nbytes:
                    raise Error(f"tensor {fqn!r}: the ranks wrote {written.get(fqn, 0)} of its {reg.nbytes} bytes")
                staged.append(((fqn, reg.dtype, list(reg.shape), reg.offset, reg.nbytes), None))
            _save_items(staged, self.path, self.metadata, self.prev, self.sign_key, self.hmac_key, self.part_size,
                        self.gen, self.ts, self.oms_key, objects, stage=stage.path)
        finally:
            self._stage = None
            try:
                os.unlink(stage.path)
            except FileNotFoundError:
                pass


class WtxtStorageReader(StorageReader):
    """Reads a WTXT snapshot (single file or split) for `dcp.load`.

    Every check runs before anything is copied into the state dict: with
    `hmac_key` every array must authenticate, with `pubkey` or
    `trusted_keys` a signature must hold (and be there with
    `require_signature`). A failure raises `wtxt.VerifyError` naming the
    file (the part) and line.
    """

    def __init__(self, path: PathLike, *, hmac_key: Optional[PathLike] = None, pubkey: Optional[PathLike] = None,
                 trusted_keys: Optional[PathLike] = None, require_signature: bool = False):
        super().__init__()
        self.path = os.fspath(path)
        self.hmac_key, self.pubkey, self.trusted_keys = hmac_key, pubkey, trusted_keys
        self.require_signature = require_signature
        self.is_coordinator = False

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

    def read_metadata(self, *args, **kwargs) -> Metadata:
        # Planning needs names, dtypes and shapes only: they come from the
        # `arr` lines, unverified; read_data verifies every byte before it
        # uses any.
        outlined = _call(_rust.outline, self.path)
        if outlined is None:
            _call(_rust.load, self.path, metadata_only=True)  # raises what is wrong
            raise Error(f"{self.path}: not a snapshot this reader can plan from")
        tensors, objects = outlined
        sd: Dict[str, Union[TensorStorageMetadata, BytesStorageMetadata]] = {}
        for name, dtype, shape in tensors:
            size = torch.Size(shape)
            sd[name] = TensorStorageMetadata(
                properties=TensorProperties(dtype=_TO_TORCH[dtype]), size=size,
                chunks=[ChunkStorageMetadata(offsets=torch.Size([0] * len(shape)), sizes=size)])
        for name in objects or {}:
            sd[name] = BytesStorageMetadata()
        return Metadata(state_dict_metadata=sd, storage_meta=StorageMeta(checkpoint_id=self.path))

    def set_up_storage_reader(self, metadata: Metadata, is_coordinator: bool, *args, **kwargs) -> None:
        self.is_coordinator = is_coordinator

    def prepare_local_plan(self, plan: LoadPlan) -> LoadPlan:
        return plan

    def prepare_global_plan(self, plans: List[LoadPlan]) -> List[LoadPlan]:
        return plans

    def read_data(self, plan: LoadPlan, planner: LoadPlanner) -> "Future[None]":
        tensors, objects = _load(self.path, self.hmac_key, self.pubkey, self.trusted_keys, self.require_signature)
        # Every item is matched and checked before the first copy, so a
        # failure leaves the state dict as it was.
        work = []
        for item in plan.items:
            fqn = item.storage_index.fqn
            if item.type == LoadItemType.BYTE_IO:
                if fqn not in objects:
                    raise Error(f"{self.path}: holds no entry {fqn!r}")
                work.append((item, objects[fqn], None))
                continue
            if fqn not in tensors:
                raise Error(f"{self.path}: holds no tensor {fqn!r}")
            src = tensors[fqn]
            for d, (o, n) in enumerate(zip(item.storage_offsets, item.lengths)):
                src = src.narrow(d, int(o), int(n))
            target = planner.resolve_tensor(item).detach()
            if target.shape != src.shape or target.dtype != src.dtype:
                raise Error(f"tensor {fqn!r}: the snapshot holds {src.dtype} {tuple(src.shape)} where the state dict "
                            f"has {target.dtype} {tuple(target.shape)}")
            work.append((item, src, target))
        for item, src, target in work:
            if target is None:
                buf = io.BytesIO()
                torch.save(src, buf)
                buf.seek(0)
                planner.load_bytes(item, buf)
            else:
                target.copy_(src)
                planner.commit_tensor(item, target)
        fut: Future = Future()
        fut.set_result(None)
        return fut

