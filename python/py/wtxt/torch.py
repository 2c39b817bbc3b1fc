"""PyTorch `state_dict`s as WTXT snapshots (importable when torch is).

    import wtxt.torch
    wtxt.torch.save_state_dict(model.state_dict(), "model.wtxt", metadata={"format": "pt"})
    model.load_state_dict(wtxt.torch.load_state_dict("model.wtxt"))

Tensors are moved to the CPU and saved under their own names; bfloat16 is
kept as bf16 (no ml_dtypes needed), and comes back as torch.bfloat16. For
snapshots during training, `wtxt.Snapshotter.publish` takes CPU tensors
directly (through DLPack).
"""
from __future__ import annotations

import os
from typing import Dict, Mapping, Optional, Union

import torch

from . import _TO_NUMPY, Error, _call, _rust, _save_items, _staged, _staged_as

PathLike = Union[str, "os.PathLike[str]"]


def _item(name: str, t: torch.Tensor):
    if not isinstance(t, torch.Tensor):
        return _staged(name, t)
    t = t.detach().to("cpu").contiguous()
    if t.dtype == torch.bfloat16:
        # NumPy has no bfloat16: the bits travel as int16.
        return _staged_as(name, "bf16", t.view(torch.int16).numpy())
    return _staged(name, t.numpy())


def save_state_dict(state_dict: Mapping[str, torch.Tensor], filename: PathLike,
                    metadata: Optional[Dict[str, str]] = None, prev: Optional[PathLike] = None,
                    sign_key: Optional[PathLike] = None, hmac_key: Optional[PathLike] = None,
                    part_size: Optional[Union[int, str]] = None, gen: Optional[int] = None,
                    ts: Optional[str] = None, oms_key: Optional[PathLike] = None) -> str:
    """Writes `state_dict` as a WTXT (see `wtxt.save_file`); returns `sha256_all`."""
    items = [_item(k, v) for k, v in state_dict.items()]
    return _save_items(items, filename, metadata, prev, sign_key, hmac_key, part_size, gen, ts, oms_key)


def load_state_dict(filename: PathLike, device: Union[str, torch.device] = "cpu",
                    hmac_key: Optional[PathLike] = None, pubkey: Optional[PathLike] = None,
                    require_signature: bool = False) -> Dict[str, torch.Tensor]:
    """Reads and verifies `filename`: a `state_dict` under the original names."""
    p = lambda x: None if x is None else os.fspath(x)
    tensors, _ = _call(_rust.load, os.fspath(filename), p(hmac_key), p(pubkey), None, require_signature)
    out = {}
    for name, dtype, shape, data in tensors:
        # `data` is the flat uint8 array the decoder filled: the tensors use
        # its memory, no copy.
        if dtype == "bf16":
            t = torch.from_numpy(data.view("<i2")).view(torch.bfloat16)
        else:
            a = data.view(_TO_NUMPY[dtype])
            try:
                t = torch.from_numpy(a)
            except TypeError as e:  # unsigned dtypes older torch lacks
                raise Error(f"tensor {name!r}: {dtype} has no tensor type in this torch ({e})") from None
        out[name] = t.reshape(shape).to(device)
    return out
