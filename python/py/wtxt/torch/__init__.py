"""PyTorch `state_dict`s as WTXT snapshots (importable when torch is).

    import wtxt.torch
    wtxt.torch.save_state_dict(model.state_dict(), "model.wtxt", metadata={"format": "pt"})
    model.load_state_dict(wtxt.torch.load_state_dict("model.wtxt"))

Tensors are moved to the CPU and saved under their own names (CUDA tensors
by the copy engine into pinned host buffers that later saves reuse, up to
`set_pinned_budget` bytes); bfloat16 is
kept as bf16 (no ml_dtypes needed), and comes back as torch.bfloat16. A
nested state dict (`{"model": ..., "optim": ...}`) is flattened to dotted
names as `torch.distributed.checkpoint` flattens it, and its entries that
are not tensors (a step, a learning rate, a scheduler's fields) are kept as
Python literals, so a training state saved here and one saved from many
ranks through `wtxt.torch.dcp` are the same snapshot. For snapshots during
training, `wtxt.Snapshotter.publish` takes CPU tensors directly (through
DLPack).
"""
from __future__ import annotations

import os
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import torch

from . import _pinned
import wtxt._rust as _rust
from .._common import (
    Error, Staged, TO_NUMPY, call, from_literal, literal, packed_bytes, save_items, stage_array, staged_as, trust_of,
)

PathLike = Union[str, "os.PathLike[str]"]

# WTXT dtypes of the torch dtypes a snapshot holds.
_FROM_TORCH = {
    torch.float64: "f64", torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16",
    torch.int64: "i64", torch.int32: "i32", torch.int16: "i16", torch.int8: "i8", torch.uint8: "u8",
    torch.bool: "bool", torch.complex64: "c64", torch.complex128: "c128",
}
for _name, _wtxt in (("uint16", "u16"), ("uint32", "u32"), ("uint64", "u64"), ("float8_e4m3fn", "f8e4m3"),
                     ("float8_e5m2", "f8e5m2"), ("float8_e4m3fnuz", "f8e4m3fnuz"), ("float8_e5m2fnuz", "f8e5m2fnuz"),
                     ("float8_e8m0fnu", "f8e8m0"), ("float4_e2m1fn_x2", "f4e2m1")):
    if hasattr(torch, _name):  # torch >= 2.3 (unsigned), 2.1 (float8), 2.7 (e8m0, float4)
        _FROM_TORCH[getattr(torch, _name)] = _wtxt
_TO_TORCH = {v: k for k, v in _FROM_TORCH.items()}

# torch's float4_e2m1fn_x2 is a byte of two f4e2m1 elements: its innermost
# dimension counts bytes where WTXT's (and safetensors' F4) counts
# elements, twice as many. The one rule between the two (FORMAT.md section 4).
_PER_TORCH_ELEMENT = {"f4e2m1": 2}


def wtxt_shape(name: str, dtype: str, shape: Sequence[int]) -> List[int]:
    """The WTXT shape of a torch tensor of WTXT dtype `dtype` and `shape`."""
    k = _PER_TORCH_ELEMENT.get(dtype, 1)
    if k > 1 and not shape:
        raise Error(f"tensor {name!r}: a float4_e2m1fn_x2 scalar has no innermost dimension to count its "
                    "two f4e2m1 elements in; give it shape (1,)")
    return [int(d) for d in shape[:-1]] + [int(d) * k for d in shape[-1:]]


def torch_shape(dtype: str, shape: Sequence[int]) -> List[int]:
    """The torch shape of a WTXT array: the inverse of `wtxt_shape`."""
    k = _PER_TORCH_ELEMENT.get(dtype, 1)
    return [int(d) for d in shape[:-1]] + [int(d) // k for d in shape[-1:]]


def _wtxt_dtype(name: str, dtype: torch.dtype) -> str:
    """The WTXT dtype of a tensor of `dtype`, or an error naming both."""
    if dtype not in _FROM_TORCH:
        raise Error(f"tensor {name!r}: dtype {dtype} has no WTXT equivalent ("
                    f"{' '.join(str(d).removeprefix('torch.') for d in _FROM_TORCH)})")
    return _FROM_TORCH[dtype]


def _bits(t: torch.Tensor) -> Any:
    """A CPU, C-contiguous tensor's bytes as NumPy sees them (bf16, float8
    and float4 as their bit patterns: NumPy has no such types)."""
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy()
    if t.element_size() == 1 and t.dtype not in (torch.uint8, torch.int8, torch.bool):
        return t.view(torch.uint8).numpy()
    return t.numpy()


def _item(name: str, t: Any) -> Staged:
    if not isinstance(t, torch.Tensor):
        return stage_array(name, t)
    t = t.detach().to("cpu").contiguous()
    dtype = _wtxt_dtype(name, t.dtype)
    if dtype in TO_NUMPY:
        return stage_array(name, t.numpy())
    return staged_as(name, dtype, _bits(t), wtxt_shape(name, dtype, t.shape))


def _flat(state_dict: Mapping[str, Any]) -> Dict[str, Any]:
    """`state_dict` with nested dicts (and lists holding tensors or dicts)
    flattened to dotted names, exactly as `torch.distributed.checkpoint`
    flattens a state dict before saving it."""
    if not any(isinstance(v, (Mapping, list, tuple)) for v in state_dict.values()):
        return dict(state_dict)
    try:
        from torch.distributed.checkpoint._nested_dict import flatten_state_dict
    except ImportError:  # a torch built without torch.distributed
        raise Error("a nested state dict needs torch.distributed to be flattened; pass a flat dict") from None
    flat, _ = flatten_state_dict(dict(state_dict))
    return flat


def save_state_dict(state_dict: Mapping[str, Any], filename: PathLike,
                    metadata: Optional[Dict[str, str]] = None, prev: Optional[PathLike] = None,
                    sign_key: Optional[PathLike] = None, hmac_key: Optional[PathLike] = None,
                    part_size: Optional[Union[int, str]] = None, gen: Optional[int] = None,
                    ts: Optional[str] = None, oms_key: Optional[PathLike] = None, digest: str = "sha256") -> str:
    """Writes `state_dict` as a WTXT (see `wtxt.save_file`, `digest` too);
    returns `sha256_all`.

    Tensors become arrays; every other entry (int, float, str, bool, None,
    and lists, tuples, sets and dicts of them) is kept as a Python literal
    and comes back from `load_state_dict`. Nested dicts are flattened to
    dotted names as `torch.distributed.checkpoint` does."""
    if not isinstance(state_dict, Mapping):
        raise Error(f"expected a state dict, found {type(state_dict).__name__}")
    flat = _flat(state_dict)
    tensors, objects = {}, {}
    for k, v in flat.items():
        if isinstance(v, torch.Tensor):
            _wtxt_dtype(k, v.dtype)
            tensors[k] = v
        else:
            objects[k] = literal(k, v)
    with _pinned.shared().staged(tensors) as host:
        items = [_item(k, t) for k, t in host.items()]
        return save_items(items, filename, metadata, prev, sign_key, hmac_key, part_size, gen, ts, oms_key,
                           objects, digest=digest)


def set_pinned_budget(budget: int) -> None:
    """Bytes of pinned host memory that `save_state_dict` and the DCP writer
    may keep for copying CUDA tensors (0: none, copies go through pageable
    memory); the buffers held so far are given back. The default is
    `WTXT_PINNED_BUDGET`, else a quarter of the machine's memory."""
    _pinned.set_budget(budget)


def release_pinned() -> None:
    """Gives back the pinned buffers `save_state_dict` and the DCP writer
    keep between saves (the next save pins anew)."""
    _pinned.shared().release()


def _tensor(name: str, dtype: str, shape: List[int], data: Any) -> torch.Tensor:
    """The tensor over `data`, the flat uint8 array the decoder filled (its
    memory is used, no copy)."""
    if dtype == "bf16":
        t = torch.from_numpy(data.view("<i2")).view(torch.bfloat16)
    elif dtype not in TO_NUMPY:
        if dtype not in _TO_TORCH:
            return torch.from_numpy(packed_bytes(name, dtype, shape, data))
        t = torch.from_numpy(data.view("|u1")).view(_TO_TORCH[dtype])
        shape = torch_shape(dtype, shape)
    else:
        a = data.view(TO_NUMPY[dtype])
        try:
            t = torch.from_numpy(a)
        except TypeError as e:  # unsigned dtypes older torch lacks
            raise Error(f"tensor {name!r}: {dtype} has no tensor type in this torch ({e})") from None
    return t.reshape(shape)


def _load(filename: PathLike, hmac_key: Optional[PathLike], pubkey: Optional[PathLike],
          trusted_keys: Optional[PathLike], require_signature: Optional[bool],
          rows: Optional[Dict[str, Tuple[int, int]]] = None, signer: Optional[PathLike] = None,
          into: Optional[Dict[str, torch.Tensor]] = None) -> Tuple[Dict[str, torch.Tensor], Dict[str, Any], str]:
    """Every tensor of `filename` (verified as `load_state_dict` does), its
    other entries (two dicts under the original names), and the snapshot's
    identity (its `merkle_this`, hex). With `rows` (name: `start, end` of
    the first dimension) only those rows of those tensors are returned
    (each tensor's first dimension counts its rows), proven as `verify`
    proves them: in the 1.1 form every byte of the file is still checked;
    in the tree form only the chunks that hold those rows are decoded (the
    others' digests, bound to the root, stand in for them). The tensors
    named in `into` (CPU, contiguous, each exactly its rows) receive their
    rows in place and are not returned; a failed check leaves them partly
    written."""
    trust = trust_of(hmac_key, pubkey, trusted_keys, require_signature, signer=signer, policy_of=filename)
    dtypes = {name: _wtxt_dtype(name, t.dtype) for name, t in (into or {}).items()}
    mem = {name: (dtypes[name], wtxt_shape(name, dtypes[name], t.shape), t.reshape(-1).view(torch.uint8).numpy())
           for name, t in (into or {}).items()}
    loaded = call(_rust.load, os.fspath(filename), trust, rows=rows, into=mem or None)
    out = {t.name: _tensor(t.name, t.dtype, t.shape, t.data) for t in loaded.tensors}
    return out, {k: from_literal(k, v) for k, v in (loaded.objects or {}).items()}, loaded.identity


def load_state_dict(filename: PathLike, device: Union[str, torch.device] = "cpu",
                    hmac_key: Optional[PathLike] = None, pubkey: Optional[PathLike] = None,
                    require_signature: Optional[bool] = None, trusted_keys: Optional[PathLike] = None,
                    signer: Optional[PathLike] = None) -> Dict[str, Any]:
    """Reads and verifies `filename`: a flat `state_dict` under the original
    names, tensors on `device` and the other entries as they were saved.
    The keys are `wtxt.load_file`'s; `signer` (a signing key) demands a
    signature by its public half where no other key is named."""
    tensors, objects, _ = _load(filename, hmac_key, pubkey, trusted_keys, require_signature, signer=signer)
    out: Dict[str, Any] = {k: t.to(device) for k, t in tensors.items()}
    out.update(objects)
    return out
