import os
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Dict, List, Literal, Mapping, Optional, Tuple, Union

import numpy as np

PathLike = Union[str, os.PathLike[str]]

class Error(Exception): ...

class VerifyError(Error):
    line: Optional[int]
    def __init__(self, message: str, line: Optional[int] = ...) -> None: ...

@dataclass
class Report:
    ok: bool
    gen: int
    signature: str
    errors: List[Tuple[int, str]]
    arrays: List[dict]
    sha256_all: Optional[str]
    def __bool__(self) -> bool: ...

def save_file(
    tensors: Mapping[str, np.ndarray],
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
def load_file(
    filename: PathLike,
    hmac_key: Optional[PathLike] = ...,
    pubkey: Optional[PathLike] = ...,
    require_signature: Optional[bool] = ...,
    trusted_keys: Optional[PathLike] = ...,
) -> Dict[str, np.ndarray]: ...
def load_metadata(filename: PathLike) -> Dict[str, str]: ...
def verify(
    filename: PathLike,
    hmac_key: Optional[PathLike] = ...,
    pubkey: Optional[PathLike] = ...,
    trusted_keys: Optional[PathLike] = ...,
    require_signature: Optional[bool] = ...,
    wsum: Optional[PathLike] = ...,
    prev: Optional[PathLike] = ...,
    allow_unauthenticated: bool = ...,
) -> Report: ...

@dataclass(frozen=True)
class SnapshotInfo:
    gen: int
    commit: Optional[str]
    pushed: bool
    stages: Optional[Dict[str, float]] = ...

class Snapshotter:
    def __init__(
        self,
        repo: PathLike,
        path_in_repo: PathLike = ...,
        remote: Optional[str] = ...,
        sign_key: Optional[PathLike] = ...,
        hmac_key: Optional[PathLike] = ...,
        ring: Optional[PathLike] = ...,
        part_size: Optional[Union[int, str]] = ...,
        recipients: Optional[List[str]] = ...,
        keep: Optional[int] = ...,
        oms_key: Optional[PathLike] = ...,
        coalesce: bool = ...,
        max_pending: int = ...,
        digest: Literal["sha256", "tree"] = ...,
        pinned_budget: Optional[int] = ...,
    ) -> None: ...
    def publish(self, state: Mapping[str, Any], metadata: Optional[Dict[str, str]] = ...) -> int: ...
    def request_snapshot(self) -> Future[SnapshotInfo]: ...
    def flush(self) -> None: ...
    def status(self) -> Dict[str, object]: ...
    def close(self) -> None: ...
    def __enter__(self) -> Snapshotter: ...
    def __exit__(self, *exc: object) -> None: ...

def save_folder(
    folder: PathLike,
    filename: PathLike,
    prev: Optional[PathLike] = ...,
    sign_key: Optional[PathLike] = ...,
    hmac_key: Optional[PathLike] = ...,
    part_size: Optional[Union[int, str]] = ...,
    gen: Optional[int] = ...,
    ts: Optional[str] = ...,
    oms_key: Optional[PathLike] = ...,
    digest: Literal["sha256", "tree"] = ...,
) -> str: ...
def extract_folder(
    filename: PathLike,
    out: PathLike,
    hmac_key: Optional[PathLike] = ...,
    pubkey: Optional[PathLike] = ...,
    trusted_keys: Optional[PathLike] = ...,
    require_signature: Optional[bool] = ...,
) -> int: ...
