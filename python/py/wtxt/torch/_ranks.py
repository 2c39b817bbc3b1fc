"""The ranks of a distributed save or load as wtxt sees them: the group its
own messages travel in, this rank's place, and the few messages the ranks
exchange (docs/DISTRIBUTED.md)."""
from __future__ import annotations

import pickle
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch
import torch.distributed as dist

from .._common import Error


_GROUPS: Dict[int, Any] = {}


def _wtxt_group() -> Any:
    """The gloo group wtxt's own messages travel in (created once per
    process, on every rank, beside whatever the training uses), or None
    in one process."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return None
    key = id(dist.distributed_c10d._get_default_group())
    if key not in _GROUPS:
        _GROUPS[key] = dist.new_group(backend="gloo")
    return _GROUPS[key]


class _Ranks:
    """This rank's place, and the few messages the ranks exchange (saving
    and loading)."""

    def __init__(self, group: Any) -> None:
        self.group = group
        self.rank = dist.get_rank() if group is not None else 0
        self.world = dist.get_world_size() if group is not None else 1
        self.sends: List[Any] = []
        self.sent = 0  # bytes this rank sent to the others

    def agree(self, fn: Callable[[], Any]) -> List[Any]:
        """Runs `fn` here and gives every rank's result, in rank order; if it
        failed on any rank, every rank raises (none is left waiting)."""
        try:
            mine: Tuple[Optional[str], Any] = (None, fn())
        except Exception as e:  # noqa: BLE001 - every rank must hear of it
            mine = (f"{type(e).__name__}: {e}", None)
            failed: Optional[BaseException] = e
        else:
            failed = None
        every: List[Any] = [mine]
        if self.group is not None:
            every = [None] * self.world
            self.sent += len(pickle.dumps(mine)) * (self.world - 1)
            dist.all_gather_object(every, mine, group=self.group)
        if failed is not None:
            raise failed
        for r, (err, _) in enumerate(every):
            if err is not None:
                raise Error(f"rank {r} failed: {err}")
        return [v for _, v in every]

    def send(self, data: bytes, to: int) -> None:
        t = torch.frombuffer(bytearray(data), dtype=torch.uint8)
        self.sent += len(data)
        self.sends.append(dist.isend(t, to, group=self.group))

    def recv(self, n: int, src: int) -> bytes:
        t = torch.empty(n, dtype=torch.uint8)
        dist.recv(t, src, group=self.group)
        return t.numpy().tobytes()

    def wait_sends(self) -> None:
        for s in self.sends:
            s.wait()
        self.sends.clear()
