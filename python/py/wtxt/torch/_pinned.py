"""CUDA tensors to host memory through the GPU's copy engine.

A pageable `.cpu()` goes through the driver's own staging buffer, one piece
at a time, at a fraction of the link's speed; a copy into page-locked
(pinned) host memory is one DMA transfer the copy engine runs at the link's
speed while the CPU only waits. Pinning memory is slow (the kernel locks
every page), so the buffers are kept and reused by the next save or publish
of tensors of the same names, shapes and dtypes, up to a budget in bytes:
`WTXT_PINNED_BUDGET` or, by default, a quarter of the machine's memory.
Tensors beyond the budget are copied the pageable way; nothing is refused.
"""
from __future__ import annotations

import os
import threading
from contextlib import contextmanager
from typing import Dict, Iterator, Mapping, Optional

import torch

from .._common import Error


def default_budget() -> int:
    """`WTXT_PINNED_BUDGET` (bytes), or a quarter of physical memory."""
    env = os.environ.get("WTXT_PINNED_BUDGET")
    if env is not None:
        try:
            value = int(env)
        except ValueError:
            raise Error(f"WTXT_PINNED_BUDGET: expected a number of bytes, found {env!r}") from None
        if value < 0:
            raise Error(f"WTXT_PINNED_BUDGET: expected a number of bytes, found {env!r}")
        return value
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 4
    except (ValueError, OSError, AttributeError):  # no sysconf: no pinned buffers
        return 0


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


class PinnedStager:
    """Pinned host buffers by name, filled from CUDA tensors by the copy
    engine and reused across calls; at most `budget` bytes are held."""

    def __init__(self, budget: Optional[int] = None):
        if budget is not None and (not isinstance(budget, int) or budget < 0):
            raise Error(f"pinned_budget: expected a number of bytes, found {budget!r}")
        self.budget = default_budget() if budget is None else budget
        self._buffers: Dict[str, torch.Tensor] = {}
        self.held = 0  # bytes of pinned memory held now
        self._lock = threading.Lock()

    def release(self) -> None:
        """Gives every pinned buffer back (a later call pins anew)."""
        with self._lock:
            self._buffers.clear()
            self.held = 0

    def _drop(self, name: str) -> None:
        old = self._buffers.pop(name, None)
        if old is not None:
            self.held -= _nbytes(old)

    @contextmanager
    def staged(self, tensors: Mapping[str, torch.Tensor]) -> Iterator[Dict[str, torch.Tensor]]:
        """`tensors` with every CUDA tensor copied to the host under the
        same name: by the copy engine into a pinned buffer (values as of
        this call on the current stream), valid until the block ends, or
        the pageable way past the budget. Other values are passed through;
        calls wait for each other."""
        with self._lock:
            yield self._stage(tensors)

    def _stage(self, tensors: Mapping[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
        out: Dict[str, torch.Tensor] = {}
        streams = {}
        for name, t in tensors.items():
            if not isinstance(t, torch.Tensor) or not t.is_cuda:
                out[name] = t  # host memory already: the caller's own path
                continue
            t = t.detach()
            buf = self._buffer(name, t, tensors)
            if buf is None:
                out[name] = t.to("cpu")
                continue
            # Enqueued behind the work already on the current stream, so
            # the copy holds the values the caller sees now.
            buf.copy_(t, non_blocking=True)
            stream = torch.cuda.current_stream(t.device)
            streams[stream.cuda_stream, t.device.index] = stream
            out[name] = buf
        for stream in streams.values():
            stream.synchronize()
        return out

    def _buffer(self, name: str, t: torch.Tensor, wanted: Mapping[str, torch.Tensor]) -> Optional[torch.Tensor]:
        """The pinned buffer for `name`, reused when its shape and dtype
        match, else pinned anew if the budget allows (buffers of names this
        call does not copy are given back first); None past the budget."""
        old = self._buffers.get(name)
        if old is not None and old.dtype == t.dtype and old.shape == t.shape:
            return old
        self._drop(name)
        need = _nbytes(t)
        if self.held + need > self.budget:
            for stale in [k for k in self._buffers if k not in wanted]:
                self._drop(stale)
                if self.held + need <= self.budget:
                    break
        if self.held + need > self.budget:
            return None
        try:
            buf = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
        except RuntimeError:
            # The driver would pin no more: what is held is the budget now.
            self.budget = self.held
            return None
        self._buffers[name] = buf
        self.held += need
        return buf


_SHARED: Optional[PinnedStager] = None
_SHARED_LOCK = threading.Lock()


def shared() -> PinnedStager:
    """The process's stager for `wtxt.torch` saves and the DCP writer."""
    global _SHARED
    with _SHARED_LOCK:
        if _SHARED is None:
            _SHARED = PinnedStager()
        return _SHARED


def set_budget(budget: int) -> None:
    """Sets the shared stager's budget in bytes (0: never pin), giving
    back what it holds."""
    global _SHARED
    stager = PinnedStager(budget)
    with _SHARED_LOCK:
        old, _SHARED = _SHARED, stager
    if old is not None:
        old.release()
