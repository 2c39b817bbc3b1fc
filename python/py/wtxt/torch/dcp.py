"""WTXT as storage for `torch.distributed.checkpoint` (DCP).

    import torch.distributed.checkpoint as dcp
    from wtxt.torch.dcp import WtxtStorageWriter, WtxtStorageReader

    dcp.save(state_dict, storage_writer=WtxtStorageWriter("ckpt/model.wtxt", sign_key="signer.pem"))
    dcp.load(state_dict, storage_reader=WtxtStorageReader("ckpt/model.wtxt", pubkey="signer.pub"))

The result is one snapshot (a head and its parts, or a single file): byte
for byte what `wtxt.torch.save_state_dict` writes for the same full state
dict and options, at any world size and sharding. Every rank puts its
shards in a stage file beside the snapshot, encodes and hashes the chunks
it holds (most of each chunk is its own), and hands the running hashes
that cross ranks (each array's SHA-256 and HMAC, `sha256_all`) to the next
rank in the file's order; each then cuts and hashes its share of the
parts. The coordinator writes the head from what the ranks report, without
reading the model back. docs/DISTRIBUTED.md says what each rank does and
what crosses between ranks.

Loading (`WtxtStorageReader`, in `_dcp_load`) verifies the snapshot
(every check `load_state_dict` runs, under the same trust options) before
it copies anything into the state dict, then gives each rank the slices
its plan asks for, whatever the world size and sharding it was saved with.
Each rank keeps only the rows it needs; in the tree digest form it also
decodes only their chunks, the others' digests bound to the root through
their arrays' (docs/DISTRIBUTED.md).
"""
from __future__ import annotations

import fcntl
import io
import logging
import os
import secrets
import shutil
from concurrent.futures import Future as ConcurrentFuture
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union, cast

import numpy as np
import torch
from torch.distributed.checkpoint.metadata import Metadata, StorageMeta
from torch.distributed.checkpoint.planner import SavePlan, SavePlanner, TensorWriteData, WriteItem, WriteItemType
from torch.distributed.checkpoint.storage import StorageWriter, WriteResult
from torch.futures import Future

import wtxt._rust as _rust
from .._common import (
    Error, SnapshotInfo, call, literal, on_push_error_of, record_command, writing_of,
)
from . import _TO_TORCH, _bits, _pinned, _wtxt_dtype, wtxt_shape
from ._dcp_load import WtxtStorageReader, load
from ._ranks import _Ranks, _wtxt_group

__all__ = ["WtxtStorageWriter", "WtxtStorageReader", "load"]

PathLike = Union[str, "os.PathLike[str]"]

# A shard as the global plan lists it: (rank, offsets, sizes).
_Shard = Tuple[int, Tuple[int, ...], Tuple[int, ...]]


@dataclass(frozen=True)
class _Region:
    """Where a tensor's full C-order bytes go in the stage file."""

    offset: int
    nbytes: int
    dtype: str
    shape: Tuple[int, ...]


@dataclass(frozen=True)
class _Stage:
    """What the coordinator's plan tells every rank: the stage file and
    folder, every tensor's region and shards, and the header's values."""

    path: str
    folder: str
    regions: Dict[str, _Region]
    shards: Dict[str, List[_Shard]]
    gen: int
    ts: str
    merkle_prev: bytes


def _stage_prefix(path: str) -> Tuple[str, str]:
    """The folder of the snapshot at `path`, and the name its stage files start with."""
    folder, name = os.path.split(os.path.abspath(path))
    return folder, f".{name}.dcp-"


def _itemsize(dtype: str) -> int:
    """Bytes per torch element of a WTXT dtype (a float4_e2m1fn_x2 is one
    byte of two f4e2m1 elements)."""
    return _TO_TORCH[dtype].itemsize


def _wtxt_shards(fqn: str, region: _Region, shards: List[_Shard]) -> List[Tuple[int, List[int], List[int]]]:
    """A tensor's shards in WTXT's elements (`wtxt_shape`): DCP gives them in torch's."""
    return [(rk, wtxt_shape(fqn, region.dtype, off), wtxt_shape(fqn, region.dtype, size)) for rk, off, size in shards]


def _pwrite_all(fd: int, data: memoryview, at: int, path: str) -> None:
    """Writes all of `data` at `at` (a large write may land in pieces)."""
    while len(data):
        n = os.pwrite(fd, data, at)
        if n <= 0:
            raise Error(f"{path}: short write at byte {at}")
        data, at = data[n:], at + n


def _write_block(stage: str, region: _Region, offsets: Sequence[int], bits: np.ndarray) -> None:
    """Puts a shard that is not whole rows (`bits`, C-contiguous, at
    `offsets` of the full tensor) at its place in the tensor's region of
    the stage file (whole rows go there as one range; see `write_data`)."""
    if bits.size == 0:
        return
    mm = np.memmap(stage, dtype=bits.dtype, mode="r+", offset=region.offset, shape=region.shape)
    try:
        mm[tuple(slice(int(o), int(o) + int(s)) for o, s in zip(offsets, bits.shape))] = bits
        mm.flush()
    finally:
        del mm


def _hash_parts(dw: Any, mine: List[int]) -> List[Any]:
    """The `part` lines of this rank's share of the parts (every rank's
    parts written), read and hashed on the library's threads."""
    with ThreadPoolExecutor(max(1, min(len(mine), _rust.threads())), thread_name_prefix="wtxt-dcp-part") as pool:
        return list(pool.map(lambda k: call(dw.hash_part, k), mine))


def _in_hand(state: Optional[bytes]) -> bytes:
    """The hash state a step hands on or finishes: the schedule gives one
    only after a step that made it."""
    if state is None:
        raise Error("the schedule hands on a hash state this rank does not hold")
    return state


def _resolved(results: List[WriteResult]) -> "Future[List[WriteResult]]":
    """`results` as the finished future DCP waits on."""
    fut: Future[List[WriteResult]] = Future()
    fut.set_result(results)
    return fut


def _item_key(item: WriteItem) -> str:
    """A tensor write item's name for its pinned buffer: its tensor and
    where its shard starts, the same from one save to the next."""
    return f"{item.index.fqn}@{tuple(_tensor_data(item).chunk.offsets)}"


def _tensor_data(item: WriteItem) -> TensorWriteData:
    """A tensor write item's dtype, size and shard (DCP leaves it None only
    on byte items)."""
    if item.tensor_data is None:
        raise Error(f"entry {item.index.fqn!r}: a tensor item without its tensor's size and shard")
    return item.tensor_data


def _row_start(region: _Region, offsets: Sequence[int], shape: Sequence[int]) -> Optional[int]:
    """The first byte, in its tensor's C-order bytes, of a shard of whole
    rows (all of every dimension but the first), which is then one run of
    those bytes; None for any other shard."""
    full = region.shape
    if len(full) == 0:
        return 0
    if tuple(int(d) for d in shape[1:]) != tuple(full[1:]) or any(int(o) for o in offsets[1:]):
        return None
    return int(offsets[0]) * _itemsize(region.dtype) * int(np.prod(full[1:], dtype=np.int64))


def _put_shards(plan: SavePlan, planner: SavePlanner, host: Dict[str, torch.Tensor], stage: _Stage,
                plans: Dict[str, Any], mine: Dict[str, List[Tuple[Any, np.ndarray, int]]],
                results: List[WriteResult]) -> Dict[str, str]:
    """This rank's items in place: entries that are not tensors as Python
    literals (returned), shards that are not whole rows assembled in the
    stage, and of shards of whole rows (kept in `mine`, by tensor: a
    keep-alive, the flat bytes, the first byte in the tensor) the pieces of
    chunks whose owner does not hold them whole."""
    objects: Dict[str, str] = {}
    fd = os.open(stage.path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        for item in plan.items:
            fqn = item.index.fqn
            if item.type == WriteItemType.BYTE_IO:
                data = cast(io.BytesIO, planner.resolve_data(item))
                data.seek(0)
                try:
                    value = torch.load(data, weights_only=True)
                except Exception as e:  # noqa: BLE001 - anything torch.load refuses
                    raise Error(f"entry {fqn!r}: not a plain Python value ({type(e).__name__}: {e})") from None
                objects[fqn] = literal(fqn, value)
                results.append(WriteResult(index=item.index, size_in_bytes=0, storage_data=None))
                continue
            t = host[_item_key(item)].detach().to("cpu").contiguous()
            bits, region, offsets = _bits(t), stage.regions[fqn], _tensor_data(item).chunk.offsets
            results.append(WriteResult(index=item.index, size_in_bytes=t.numel() * t.element_size(),
                                       storage_data=None))
            start = _row_start(region, offsets, bits.shape)
            if start is None:
                # Not whole rows: its pieces are assembled in the stage.
                _write_block(stage.path, region, offsets, bits)
                continue
            flat = bits.reshape(-1).view(np.uint8)
            mine.setdefault(fqn, []).append((t, flat, start))
            # The pieces of chunks its owner does not hold whole go to the stage.
            for (coff, clen), whole in zip(plans[fqn].chunks, plans[fqn].held):
                lo, hi = max(coff, start), min(coff + clen, start + flat.size)
                if lo < hi and not whole:
                    _pwrite_all(fd, memoryview(flat[lo - start:hi - start]), region.offset + lo, stage.path)
    finally:
        os.close(fd)
    return objects


def _chunk_memory(c: Any, mine: Dict[str, List[Tuple[Any, np.ndarray, int]]]) -> Optional[Tuple[int, int]]:
    """Where chunk `c` is: this rank's memory (the shard that holds all of
    it), or (None) the stage."""
    if not c.held:
        return None
    for _, flat, start in mine.get(c.name, []):
        if start <= c.offset and c.offset + c.length <= start + flat.size:
            return (flat.__array_interface__["data"][0] + c.offset - start, c.length)
    raise Error(f"tensor {c.name!r}: chunk {c.index} is planned on this rank, which does not hold it")


def _encode(dw: Any, own: List[Any], rank: int) -> List[Tuple[int, int, bytes]]:
    """This rank's chunks encoded into their part files (rank 0 also writes
    the text no chunk holds); their digests."""
    digests: List[Tuple[int, int, bytes]] = call(dw.write_chunks, own)
    if rank == 0:
        call(dw.write_fixed)
    return digests


def _lock_path(path: str) -> str:
    """The lock file of saves to the snapshot at `path` (beside it, outside
    the names the stage uses)."""
    folder, name = os.path.split(os.path.abspath(path))
    return os.path.join(folder, f".{name}.dcp.lock")


def _take_save_lock(path: str) -> int:
    """Takes the lock of saves to `path` without waiting: one save at a
    time writes a snapshot, and a second one fails here, before it touches
    anything, instead of deleting the first one's stage. The lock file is
    a regular file (never a link or FIFO) and still the one at its name
    once locked; it goes when the save finishes."""
    lock = _lock_path(path)
    while True:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o600)
        try:
            st = os.fstat(fd)
            if not (st.st_mode & 0o170000 == 0o100000):
                raise Error(f"{lock}: not a regular file")
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise Error(f"{path}: another save to this snapshot is in progress (it holds {lock}); "
                            "the snapshot there stays as it is") from None
            try:
                now = os.stat(lock, follow_symlinks=False)
            except FileNotFoundError:
                now = None
            if now is not None and (now.st_dev, now.st_ino) == (st.st_dev, st.st_ino):
                return fd
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)  # the save before removed it after we opened it: again


def _drop_save_lock(path: str, fd: Optional[int]) -> None:
    """Removes the lock file (so a signed folder does not list it), then
    lets it go."""
    if fd is None:
        return
    try:
        os.unlink(_lock_path(path))
    except FileNotFoundError:
        pass
    finally:
        os.close(fd)


# Bytes of the hash states handed between ranks, as the library writes them.
_ARRAY_STATE, _SHA_STATE = _rust.hash_state_bytes()


class WtxtStorageWriter(StorageWriter):
    """Writes a DCP checkpoint as one WTXT snapshot at `path` (a head and its
    parts when its text exceeds `part_size`).

    The options are `wtxt.torch.save_state_dict`'s and apply to the whole
    snapshot (every rank must give the same): `metadata` (safetensors-style
    strings), `prev` (the previous generation, verified, to chain from),
    `sign_key` (Ed25519), `hmac_key`, `part_size`, `gen`, `ts`, `oms_key`
    (an OpenSSF Model Signing `model.sig` beside the snapshot), `digest`
    (`"tree"`, the default: the tree digest form, in which the ranks
    exchange only their chunks' digests and no hash state passes from rank
    to rank; `"sha256"`: WTXT 1.1). Entries that
    are not tensors (a step, a learning rate) are kept as Python literals.
    Construct it on every rank after `init_process_group`: it opens its own
    gloo group there (for `async_save`, whose writes run on another thread).

    With `commit=True` the coordinator commits the snapshot (it must lie in
    a Git work tree) as the next commit on HEAD, and pushes it to `remote`
    when given; other ranks never touch Git. `committed` is a future, new
    for each save, that gives a `wtxt.SnapshotInfo` (on other ranks, None)
    or raises `wtxt.Error` when the save or the push failed (a failed push
    leaves the commit, and the next push carries it). The push is part of
    the save, so a refused one is heard at once: a warning on the `wtxt`
    logger (`on_push_error="warn"`), or with `on_push_error="raise"` the
    save itself fails.
    """

    def __init__(self, path: PathLike, *, metadata: Optional[Dict[str, str]] = None,
                 prev: Optional[PathLike] = None, sign_key: Optional[PathLike] = None,
                 hmac_key: Optional[PathLike] = None, part_size: Optional[Union[int, str]] = None,
                 gen: Optional[int] = None, ts: Optional[str] = None, oms_key: Optional[PathLike] = None,
                 commit: bool = False, remote: Optional[str] = None, digest: str = "tree",
                 on_push_error: str = "warn"):
        super().__init__()
        self.on_push_error = on_push_error_of(on_push_error)
        if remote is not None and not commit:
            raise Error("remote= pushes the commit that commit=True makes: give both")
        if metadata is not None and not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
            raise Error("metadata: expected a dict of str to str")
        self.path = os.fspath(path)
        self.metadata, self.gen, self.commit, self.remote = metadata, gen, commit, remote
        # The options as the Rust side reads them, once: every save takes them from here.
        self.writing = writing_of(prev, sign_key, hmac_key, part_size, gen, ts, oms_key, digest)
        self.bytes_sent = 0  # what this rank sent the others in the last save
        self.committed: "ConcurrentFuture[Optional[SnapshotInfo]]" = ConcurrentFuture()
        self.is_coordinator = False
        self._group = _wtxt_group()
        self._stage: Optional[_Stage] = None
        self._done: Optional[Tuple[Any, List[str], List[Any], Optional[bytes]]] = None
        self._lock: Optional[Tuple[str, int]] = None  # the coordinator's save lock: (path, fd)

    def reset(self, checkpoint_id: Optional[PathLike] = None) -> None:
        self._unlock()  # a save of this writer that failed part way
        if checkpoint_id is not None:
            self.path = os.fspath(checkpoint_id)
        self._stage, self._done = None, None

    def _unlock(self) -> None:
        if self._lock is not None:
            path, fd = self._lock
            self._lock = None
            _drop_save_lock(path, fd)

    def set_up_storage_writer(self, is_coordinator: bool, *args: Any, **kwargs: Any) -> None:
        self.is_coordinator = is_coordinator
        if self.committed.done():  # a new save: a new future
            self.committed = ConcurrentFuture()
        if self._group is None:
            self._group = _wtxt_group()

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
        # Every tensor's full size and shards, from the items of all ranks.
        tensors: Dict[str, Tuple[str, Tuple[int, ...]]] = {}
        shards: Dict[str, List[_Shard]] = {}
        for rank, plan in enumerate(plans):
            for item in plan.items:
                if item.type == WriteItemType.BYTE_IO:
                    continue
                fqn, td = item.index.fqn, _tensor_data(item)
                got = (_wtxt_dtype(fqn, td.properties.dtype), tuple(int(d) for d in td.size))
                if tensors.setdefault(fqn, got) != got:
                    raise Error(f"tensor {fqn!r}: the ranks disagree on its dtype or shape ({tensors[fqn]} / {got})")
                shards.setdefault(fqn, []).append(
                    (rank, tuple(int(o) for o in td.chunk.offsets), tuple(int(s) for s in td.chunk.sizes)))
        regions, at = {}, 0
        for fqn in sorted(tensors):
            dtype, shape = tensors[fqn]
            n = _itemsize(dtype) * int(np.prod(shape, dtype=np.int64))
            regions[fqn] = _Region(at, n, dtype, shape)
            at += (n + 63) // 64 * 64
        folder, prefix = _stage_prefix(self.path)
        os.makedirs(folder, exist_ok=True)
        self._unlock()
        self._lock = (self.path, _take_save_lock(self.path))
        try:
            return self._plan(plans, regions, at, shards, folder, prefix)
        except BaseException:
            self._unlock()
            raise

    def _plan(self, plans: List[SavePlan], regions: Dict[str, _Region], at: int, shards: Dict[str, List[_Shard]],
              folder: str, prefix: str) -> List[SavePlan]:
        """The global plan, once the save lock is held: the stage file and
        folder, every tensor's region, the header's values."""
        gen, chain = self.gen, None
        if self.commit and self.writing["prev"] is None and gen is None:
            # A commit continues HEAD's chain at this path (what the
            # repository's hook would ask), never a new gen 0.
            chain = call(_rust.head_link, self.path)
            if chain is not None:
                gen = chain[0] + 1
        writing = self.writing.copy()
        writing["gen"] = gen
        gen, ts, merkle_prev = call(_rust.snapshot_meta, writing)
        if chain is not None:
            merkle_prev = chain[1]
        # A save that died leaves its stage; one save at a time writes a
        # snapshot (the lock above), so this one removes what is left.
        for e in os.scandir(folder):
            if e.name.startswith(prefix):
                shutil.rmtree(e.path) if e.is_dir(follow_symlinks=False) else os.unlink(e.path)
        base = os.path.join(folder, f"{prefix}{secrets.token_hex(8)}")
        os.mkdir(base, 0o700)
        fd = os.open(base + ".stage", os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            os.ftruncate(fd, at)
        finally:
            os.close(fd)
        self._stage = _Stage(base + ".stage", base, regions, shards, gen, ts, merkle_prev)
        return [replace(plan, storage_data=self._stage) for plan in plans]

    def _options_fingerprint(self) -> Tuple[Optional[str], Optional[str], Optional[Dict[str, str]], bool, Optional[str]]:
        """What every rank must give alike, as it can be compared without
        giving a key away: the HMAC key's fingerprint, the part size, the
        metadata, whether it signs, the digest form."""
        w = self.writing
        return (call(_rust.hmac_fingerprint, w["hmac_key"]), w["part_size"], self.metadata, w["sign_key"] is not None,
                w["digest"])

    def write_data(self, plan: SavePlan, planner: SavePlanner) -> "Future[List[WriteResult]]":
        # This rank's tensors on the host first: CUDA ones by the copy
        # engine into pinned buffers, all in one wait, kept until written.
        tensors = {_item_key(item): cast(torch.Tensor, planner.resolve_data(item)) for item in plan.items
                   if item.type != WriteItemType.BYTE_IO}
        with _pinned.shared().staged(tensors) as host:
            return self._write_data(plan, planner, host)

    def _write_data(self, plan: SavePlan, planner: SavePlanner,
                    host: Dict[str, torch.Tensor]) -> "Future[List[WriteResult]]":
        """This rank's part of a save, in its steps: the options agreed,
        every tensor's chunks planned, this rank's shards put in place, the
        same text planned on every rank, its chunks encoded, the digests
        computed (the tree form's reports, or the 1.1 form's hash states
        handed along), and what it wrote reported to the coordinator."""
        stage: _Stage = plan.storage_data
        ranks = _Ranks(self._group)
        self._agree_on_options(ranks)
        # Every tensor's chunks, who encodes each, and whether that rank has
        # all of it in its own shard: the same answer on every rank.
        plans = {fqn: call(_rust.plan_tensor, r.dtype, wtxt_shape(fqn, r.dtype, r.shape),
                           _wtxt_shards(fqn, r, stage.shards.get(fqn, [])))
                 for fqn, r in stage.regions.items()}
        results: List[WriteResult] = []
        mine: Dict[str, List[Tuple[Any, np.ndarray, int]]] = {}
        put = ranks.agree(lambda: _put_shards(plan, planner, host, stage, plans, mine, results))
        objects = {k: v for o in put for k, v in o.items()}
        # Every piece is in place: each rank plans the same text.
        tensors = [(fqn, r.dtype, wtxt_shape(fqn, r.dtype, r.shape), r.offset, r.nbytes)
                   for fqn, r in sorted(stage.regions.items())]
        dw = call(_rust.DistWriter, tensors, stage.path, stage.folder, self.path, stage.gen, stage.ts,
                  stage.merkle_prev, self.writing, self.metadata, objects or None)
        sched = dw.schedule(plans, ranks.rank, ranks.world)
        at = {(c.array, c.index): _chunk_memory(c, mine) for c in sched.own}
        own = [(c.array, c.index, at[c.array, c.index]) for c in sched.own]
        if self.writing["digest"] == "tree":
            self._hash_as_tree(ranks, dw, sched, own)
        else:
            self._hash_along_runs(ranks, dw, sched, own, at)
        return _resolved(results)

    def _agree_on_options(self, ranks: "_Ranks") -> None:
        """Options that differ between ranks would make them plan different
        texts and wait on each other for ever: they agree first."""
        every = ranks.agree(self._options_fingerprint)
        if any(o != every[0] for o in every):
            names = ("hmac_key", "part_size", "metadata", "sign_key", "digest")
            differ = [n for k, n in enumerate(names) if any(o[k] != every[0][k] for o in every)]
            raise Error(f"the ranks were given different {', '.join(differ)}: every rank must give the writer "
                        "the same options")

    def _hash_as_tree(self, ranks: "_Ranks", dw: Any, sched: Any, own: List[Any]) -> None:
        """The tree form: the ranks report their chunks' SHA-256 and nothing
        passes from rank to rank; the coordinator computes every `arr` line
        and `sha256_all` from them. Each rank then reads back the chunks it
        wrote and checks them as `wtxt verify` would: the coordinator holds
        those reports against the digests the root is built from, and reads
        back only the rest of the text (docs/DISTRIBUTED.md)."""
        written = ranks.agree(lambda: _encode(dw, own, ranks.rank))
        # Its share of `fastxor` comes from the bytes read back, too.
        reports = ranks.agree(lambda: (call(dw.check_chunks, [(a, ix) for a, ix, _ in own]),
                                       _hash_parts(dw, sched.parts)))
        done = None
        if self.is_coordinator:
            for rank, (wrote, ((checked, _), _)) in enumerate(zip(written, reports)):
                if [d for _, _, d in wrote] != checked:
                    raise Error(f"rank {rank}'s chunks, read back, are not what it reported writing: "
                                "the snapshot is not installed")
            lines, sha256_all = call(dw.tree_arr_lines, [d for got in written for d in got])
            done = (dw, lines, [(None, x, parts) for (_, x), parts in reports], sha256_all)
        self._reported(ranks, done)

    def _hash_along_runs(self, ranks: "_Ranks", dw: Any, sched: Any, own: List[Any],
                         at: Dict[Tuple[int, int], Optional[Tuple[int, int]]]) -> None:
        """The 1.1 form: each array's SHA-256 and HMAC, those this rank
        holds whole on a pool (its SHA-256 units side by side), the others
        handed on along their runs, step by step as the schedule says; then
        `sha256_all` along every run in the file's order. The pool reads this
        rank's memory only, so it starts before the chunks are encoded and
        runs beside them."""
        def span(s: Any) -> List[Tuple[int, Optional[Tuple[int, int]]]]:
            return [(ix, at[s.array, ix]) for ix in range(s.start, s.end)]

        with ThreadPoolExecutor(max(1, _rust.threads() - 1), thread_name_prefix="wtxt-dcp-hash") as pool, \
                ThreadPoolExecutor(1, thread_name_prefix="wtxt-dcp-all") as serial:
            whole = {s.array: pool.submit(call, dw.hash_array, s.array, span(s), None) for s in sched.whole}
            arr_lines: Dict[int, str] = {}

            def line(i: int) -> str:
                if i not in arr_lines:
                    arr_lines[i] = call(dw.arr_line, i, whole[i].result())
                return arr_lines[i]

            def chain(agreed: Optional[Dict[int, str]]) -> Optional[bytes]:
                """sha256_all, along every run in the file's order."""
                state: Optional[bytes] = None
                for s in sched.all_steps:
                    if s.kind == "recv":
                        state = ranks.recv(_SHA_STATE, s.peer)
                    elif s.kind == "hash":
                        arr = line(s.array) if agreed is None else agreed[s.array]
                        state = call(dw.hash_all, state, s.array, span(s), arr)
                    else:
                        ranks.send(_in_hand(state), s.peer)
                ranks.wait_sends()
                return state

            # With one rank every step is this process's own and there is
            # nothing to agree on: sha256_all follows the pool's digests as
            # each is done, on a thread of its own beside the encoding, as
            # `save_state_dict` does (one thread of work: after it). With
            # more, the steps pass hash states between ranks, after the
            # encoding's collective.
            alone = serial.submit(chain, None) if ranks.world == 1 and _rust.threads() > 1 else None
            ranks.agree(lambda: _encode(dw, own, ranks.rank))
            state: Optional[bytes] = None
            for s in sched.array_steps:
                if s.kind == "recv":
                    state = ranks.recv(_ARRAY_STATE, s.peer)
                elif s.kind == "hash":
                    state = call(dw.hash_array, s.array, span(s), state if s.carry else None)
                elif s.kind == "send":
                    ranks.send(_in_hand(state), s.peer)
                else:
                    arr_lines[s.array] = call(dw.arr_line, s.array, _in_hand(state))
            ranks.wait_sends()
            agreed = None if ranks.world == 1 else {
                i: l for got in ranks.agree(lambda: {i: line(i) for i in range(sched.arrays)
                                                     if i in arr_lines or i in whole})
                for i, l in got.items()}
            state = chain(agreed) if alone is None else alone.result()
            lines = [line(i) if agreed is None else agreed[i] for i in range(sched.arrays)]

        def report() -> Tuple[Optional[bytes], int, List[Any]]:
            parts = _hash_parts(dw, sched.parts)
            return (state if sched.last == ranks.rank else None, call(dw.fastxor, own), parts)

        reports = ranks.agree(report)
        self._reported(ranks, (dw, lines, reports, None) if self.is_coordinator else None)

    def _reported(self, ranks: "_Ranks", done: Optional[Tuple[Any, List[str], List[Any], Optional[bytes]]]) -> None:
        """Every rank's report is in: the coordinator keeps what `finish`
        installs; another rank's save is done."""
        self.bytes_sent = ranks.sent
        if self.is_coordinator:
            self._done = done
        elif not self.committed.done():
            self.committed.set_result(None)

    def finish(self, metadata: Metadata, results: List[List[WriteResult]]) -> None:
        stage, done = self._stage, self._done
        if stage is None or done is None:
            raise Error("finish() without prepare_global_plan() and write_data(): this writer did not plan the save")
        try:
            dw, lines, reports, tree_all = done
            all_state = next((s for s, _, _ in reports if s is not None), None)
            fastxor = 0
            for _, x, _ in reports:
                fastxor ^= x
            parts = sorted(p for _, _, ps in reports for p in ps)
            # A head built from other processes' hashes is installed (and
            # signed) only once the snapshot verifies: in the tree form every
            # line but the chunks' base64, which each rank checked where it
            # wrote them; in the 1.1 form every byte. One rank wrote and
            # hashed every byte itself, as `save_state_dict` does.
            sha256_all = call(dw.finish, lines, all_state, fastxor, parts, len(reports) > 1, tree_all,
                              tree_all is not None)
        except BaseException as e:
            self.committed.set_exception(Error(f"the snapshot was not written: {e}"))
            raise
        finally:
            self._stage, self._done = None, None
            shutil.rmtree(stage.folder, ignore_errors=True)
            try:
                os.unlink(stage.path)
            except FileNotFoundError:
                pass
            self._unlock()
        try:
            if self.writing["oms_key"] is not None:
                # Signed once the stage is gone: model.sig lists the folder as it stays.
                call(dw.sign_oms, self.writing["oms_key"])
            self._commit(stage.gen, sha256_all)
        except Error as e:
            if not self.committed.done():  # a refused push has told its future already
                self.committed.set_exception(Error(f"the snapshot was written, then: {e}"))
            raise

    def _commit(self, gen: int, sha256_all: str) -> None:
        """Commits (and pushes) the snapshot just written, when asked to."""
        if not self.commit:
            self.committed.set_result(SnapshotInfo(gen=gen, commit=None, pushed=False))
            return
        message = f"wtxt snapshot gen={gen:06} sha256_all={sha256_all}"
        record_command()
        commit, pushed, error = call(_rust.commit_snapshot, self.path, message, self.writing["oms_key"] is not None, self.remote)
        if error is not None:
            failed = Error(f"committed {commit}, not pushed: {error}")
            self.committed.set_exception(failed)
            if self.on_push_error == "raise":
                raise Error(f"{failed} (on_push_error='raise')")
            logging.getLogger("wtxt").warning("%s: %s", self.path, failed)
        else:
            self.committed.set_result(SnapshotInfo(gen=gen, commit=commit, pushed=pushed))
