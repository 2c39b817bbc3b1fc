import os
from concurrent.futures import Future as ConcurrentFuture
from typing import Dict, List, Literal, Optional, Union

from wtxt import SnapshotInfo

from torch.distributed.checkpoint.metadata import Metadata, StorageMeta
from torch.distributed.checkpoint.planner import LoadPlan, LoadPlanner, SavePlan, SavePlanner
from torch.distributed.checkpoint.storage import StorageReader, StorageWriter, WriteResult
from torch.futures import Future

PathLike = Union[str, os.PathLike[str]]

class WtxtStorageWriter(StorageWriter):
    path: str
    def __init__(
        self,
        path: PathLike,
        *,
        metadata: Optional[Dict[str, str]] = ...,
        prev: Optional[PathLike] = ...,
        sign_key: Optional[PathLike] = ...,
        hmac_key: Optional[PathLike] = ...,
        part_size: Optional[Union[int, str]] = ...,
        gen: Optional[int] = ...,
        ts: Optional[str] = ...,
        oms_key: Optional[PathLike] = ...,
        commit: bool = ...,
        remote: Optional[str] = ...,
        digest: Literal["sha256", "tree"] = ...,
    ) -> None: ...
    committed: ConcurrentFuture[Optional[SnapshotInfo]]
    def reset(self, checkpoint_id: Optional[PathLike] = ...) -> None: ...
    def set_up_storage_writer(self, is_coordinator: bool, *args: object, **kwargs: object) -> None: ...
    def storage_meta(self) -> Optional[StorageMeta]: ...
    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: PathLike) -> bool: ...
    def prepare_local_plan(self, plan: SavePlan) -> SavePlan: ...
    def prepare_global_plan(self, plans: List[SavePlan]) -> List[SavePlan]: ...
    def write_data(self, plan: SavePlan, planner: SavePlanner) -> Future[List[WriteResult]]: ...
    def finish(self, metadata: Metadata, results: List[List[WriteResult]]) -> None: ...

class WtxtStorageReader(StorageReader):
    path: str
    def __init__(
        self,
        path: PathLike,
        *,
        hmac_key: Optional[PathLike] = ...,
        pubkey: Optional[PathLike] = ...,
        trusted_keys: Optional[PathLike] = ...,
        require_signature: Optional[bool] = ...,
    ) -> None: ...
    def reset(self, checkpoint_id: Optional[PathLike] = ...) -> None: ...
    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: PathLike) -> bool: ...
    def read_metadata(self, *args: object, **kwargs: object) -> Metadata: ...
    def set_up_storage_reader(self, metadata: Metadata, is_coordinator: bool, *args: object, **kwargs: object) -> None: ...
    def prepare_local_plan(self, plan: LoadPlan) -> LoadPlan: ...
    def prepare_global_plan(self, plans: List[LoadPlan]) -> List[LoadPlan]: ...
    def read_data(self, plan: LoadPlan, planner: LoadPlanner) -> Future[None]: ...

def load(state_dict: Dict[str, object], storage_reader: WtxtStorageReader, **kwargs: object) -> None: ...
