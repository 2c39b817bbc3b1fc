import os
from typing import Any, Dict, Literal, Mapping, Optional, Union

import torch

PathLike = Union[str, os.PathLike[str]]

def save_state_dict(
    state_dict: Mapping[str, Any],
    filename: PathLike,
    metadata: Optional[Dict[str, str]] = ...,
    prev: Optional[PathLike] = ...,
    sign_key: Optional[PathLike] = ...,
    hmac_key: Optional[PathLike] = ...,
    part_size: Optional[Union[int, str]] = ...,
    gen: Optional[int] = ...,
    ts: Optional[str] = ...,
    oms_key: Optional[PathLike] = ...,
    digest: Literal["sha256", "tree"] = ...,
) -> str: ...
def load_state_dict(
    filename: PathLike,
    device: Union[str, torch.device] = ...,
    hmac_key: Optional[PathLike] = ...,
    pubkey: Optional[PathLike] = ...,
    require_signature: Optional[bool] = ...,
    trusted_keys: Optional[PathLike] = ...,
) -> Dict[str, Any]: ...
def set_pinned_budget(budget: int) -> None: ...
def release_pinned() -> None: ...
