"""WTXT snapshots of ML weights from Python, in process.

`save_file`, `load_file`, `load_metadata` and `verify` mirror
`safetensors.numpy`: a dict of NumPy arrays under their own names (dotted
Hugging Face names included) goes into a deterministic, self-checking WTXT
file and comes back the same. Everything runs in the Rust library; this
module only moves arrays across and turns failures into `wtxt.Error` and
`wtxt.VerifyError`.
"""
from __future__ import annotations

import json
import collections
import logging
import os
import queue
import atexit
import threading
import weakref
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Tuple, Union

from . import _rust
from ._common import (
    Error, PathLike, VerifyError, as_path, call, literal, ml_dtype, np, on_push_error_of, record_command, save_items,
    packed_bytes, stage_array, trust_of, writing_of, ML_DTYPES, ON_PUSH_ERROR, SUB_BYTE, TO_NUMPY, SnapshotInfo,
)

__all__ = ["Error", "VerifyError", "Report", "save_file", "load_file", "load_metadata", "verify", "Snapshotter",
           "SnapshotInfo", "save_folder", "extract_folder"]


def _staged(name: str, a: Any) -> Tuple[Tuple[str, str, List[int], int, int], Any]:
    """What the Rust side copies `a` from, and the array to keep alive until
    it has. A torch tensor goes as `wtxt.torch` takes it (detached, bf16
    kept)."""
    if type(a).__module__.startswith("torch") and hasattr(a, "detach"):
        from .torch import _item  # torch is loaded: the tensor came from it
        staged: Tuple[Tuple[str, str, List[int], int, int], Any] = _item(name, a)
        return staged
    return stage_array(name, a)


def _arrays_and_objects(state: Mapping[str, Any]) -> Tuple[Mapping[str, Any], Optional[Dict[str, str]]]:
    """`state` as the arrays to stage and the other entries as literals
    (`__objects`), as `wtxt.torch.save_state_dict` splits a state: a nested
    one (`{"model": model.state_dict(), "optim": opt.state_dict()}`) is
    flattened to dotted names as `torch.distributed.checkpoint` flattens
    it, so a training loop publishes what it has and `load_state_dict`
    gives it back under the same names."""
    def is_array(v: Any) -> bool:
        return isinstance(v, np.ndarray) or hasattr(v, "__dlpack__") or hasattr(v, "__array_interface__")
    if all(is_array(v) for v in state.values()):
        return state, None
    flat: Mapping[str, Any] = state
    if any(isinstance(v, (Mapping, list, tuple)) for v in state.values()):
        try:
            from .torch import _flat
        except ImportError:
            raise Error("a nested state is flattened as torch.distributed.checkpoint flattens it: "
                        "that needs torch (pip install torch), or publish a flat dict") from None
        flat = _flat(state)
    arrays = {k: v for k, v in flat.items() if is_array(v)}
    objects = {k: literal(k, v) for k, v in flat.items() if not is_array(v)}
    return arrays, objects or None


def save_file(tensors: Mapping[str, np.ndarray], filename: PathLike, metadata: Optional[Dict[str, str]] = None,
              prev: Optional[PathLike] = None, sign_key: Optional[PathLike] = None,
              hmac_key: Optional[PathLike] = None, part_size: Optional[Union[int, str]] = None,
              gen: Optional[int] = None, ts: Optional[str] = None, oms_key: Optional[PathLike] = None,
              digest: str = "sha256") -> str:
    """Writes `tensors` as a canonical WTXT at `filename` (atomically).

    Names need not be WTXT names: they are mapped, and kept so that
    `load_file` (and `wtxt extract`) give them back. `metadata` is a
    safetensors-style dict of strings. `prev` chains to a previous
    generation; `sign_key` (Ed25519 PEM or OpenSSH) signs, `hmac_key` (a hex
    key file) authenticates every array. A snapshot whose text exceeds
    `part_size` (bytes, or a str such as "45M" or "none"; default 45 MiB) is
    written split: `filename` is the head, the parts go to
    `filename + ".parts/"`. `gen` and `ts` are the CLI's `--gen` and `--ts`
    (give `prev` or `gen`, not both). `oms_key` (an EC P-256/384/521 PEM)
    also writes an OpenSSF Model Signing `model.sig` beside the snapshot.
    `digest="tree"` writes the opt-in tree form (the arrays' digests and
    `sha256_all` from the chunks' SHA-256: no serial pass; FORMAT.md
    section 19); the default is WTXT 1.1. Returns `sha256_all` as hex.
    """
    if not isinstance(tensors, Mapping):
        raise Error(f"expected a dict of arrays, found {type(tensors).__name__}")
    if metadata is not None and not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
        raise Error("metadata: expected a dict of str to str")
    items = [_staged(k, v) for k, v in tensors.items()]
    return save_items(items, filename, metadata, prev, sign_key, hmac_key, part_size, gen, ts, oms_key,
                       digest=digest)


def save_folder(folder: PathLike, filename: PathLike, prev: Optional[PathLike] = None,
                sign_key: Optional[PathLike] = None, hmac_key: Optional[PathLike] = None,
                part_size: Optional[Union[int, str]] = None, gen: Optional[int] = None, ts: Optional[str] = None,
                oms_key: Optional[PathLike] = None, digest: str = "sha256") -> str:
    """Writes a Hugging Face folder (as `save_pretrained` leaves it: shards
    and their index, config, tokenizer files) as one snapshot, `wtxt
    snapshot FOLDER`: every shard checked against the index, every file
    covered by the snapshot's hashes and signature, `extract_folder` gives
    it back byte for byte. Options as `save_file`. Returns `sha256_all`."""
    os.makedirs(os.path.dirname(os.path.abspath(os.fspath(filename))), exist_ok=True)
    sha, _ = call(_rust.save_folder, os.fspath(folder), os.fspath(filename),
                   writing_of(prev, sign_key, hmac_key, part_size, gen, ts, oms_key, digest))
    return sha


def extract_folder(filename: PathLike, out: PathLike, hmac_key: Optional[PathLike] = None,
                   pubkey: Optional[PathLike] = None, trusted_keys: Optional[PathLike] = None,
                   require_signature: Optional[bool] = None) -> int:
    """Verifies `filename` (as `load_file` does) and writes the Hugging Face
    folder it was made from into `out`, a new folder that appears whole or
    not at all; every file byte for byte. Returns the number of shards."""
    return call(_rust.extract_folder, os.fspath(filename), os.fspath(out),
                 trust_of(hmac_key, pubkey, trusted_keys, require_signature, policy_of=filename))


def _from_bytes(name: str, dtype: str, shape: List[int], data: np.ndarray) -> np.ndarray:
    """The array over `data` itself: the flat uint8 array the decoder filled
    (writable, no copy). bf16 and float8 come back typed with `ml_dtypes`
    (the `bf16` extra); without it, as their bits, and a warning says so.
    The sub-byte types come back as their packed bytes (`packed_bytes`)."""
    if dtype in ML_DTYPES:
        ml = ml_dtype(dtype)
        if ml is None:
            import warnings
            warnings.warn(f"{dtype} arrays come back as their bits ({ML_DTYPES[dtype][1]}): install ml_dtypes "
                          "(pip install 'wtxt[bf16]') for typed arrays", stacklevel=3)
        return data.view(ml if ml is not None else ML_DTYPES[dtype][1]).reshape(shape)
    if dtype in SUB_BYTE:
        return packed_bytes(name, dtype, shape, data)
    return data.view(TO_NUMPY[dtype]).reshape(shape)


def load_file(filename: PathLike, hmac_key: Optional[PathLike] = None, pubkey: Optional[PathLike] = None,
              require_signature: Optional[bool] = None, trusted_keys: Optional[PathLike] = None,
              allow_unbound: bool = False, names: Optional[List[str]] = None,
              rev: Optional[str] = None) -> Dict[str, np.ndarray]:
    """Reads and verifies `filename`: a dict of arrays under their original names.

    Every check runs; with `hmac_key` every array must authenticate, with
    `pubkey` or `trusted_keys` a valid signature by one of those keys is
    required (an unsigned snapshot, or one signed by another key, is
    refused; `require_signature=False` accepts an unsigned one, never
    another key's); with
    `hmac_key` the keyed tag that binds the file whole must hold too
    (`allow_unbound=True` accepts a file from a writer that binds nothing).
    A failed check raises `VerifyError` with its line.

    With `names` (original names), only those tensors are returned, proven
    as a whole load proves them: in the 1.1 form every byte is still
    checked; in the tree form only their chunks are decoded, the others'
    digests (bound to the root and its signature) standing in for them;
    every part is checked for what can be checked unread (present, of the
    head's size: docs/SECURITY.md, "What a load of some rows proves").
    A name the snapshot does not hold, one listed twice, or an empty list
    raises `wtxt.Error`.

    With `rev` (a Git revision: "HEAD~3", a branch, a commit), `filename`
    is a snapshot in a Git work tree read as that revision holds it, as
    `wtxt git export` reads it; with `names` too, a split snapshot of the
    tree form is read, and in a blobless clone or an LFS repository
    fetched, only from the parts that hold those tensors.
    """
    if names is not None:
        names = list(names)
        if not names:
            raise Error(f"{os.fspath(filename)}: names=[] asks for no tensor (leave names out to load every one)")
        twice = sorted(n for n, k in collections.Counter(names).items() if k > 1)
        if twice:
            raise Error(f"{os.fspath(filename)}: names lists {twice[0]!r} more than once")
    trust = trust_of(hmac_key, pubkey, trusted_keys, require_signature, allow_unbound, policy_of=filename)
    if rev is not None:
        loaded = call(_rust.load_at, os.fspath(filename), rev, trust, names=names)
        return {t.name: _from_bytes(t.name, t.dtype, t.shape, t.data) for t in loaded.tensors}
    rows = None
    if names is not None:
        # Each named tensor whole: its rows, from the outline (unverified;
        # the load checks what it keeps against the verified names).
        outline = call(_rust.outline, os.fspath(filename))
        shapes = {t.name: t.shape for t in outline.tensors} if outline is not None else {}
        rows = {n: (0, shapes[n][0] if shapes.get(n) else 1) for n in names}
    loaded = call(_rust.load, os.fspath(filename), trust, rows=rows)
    return {t.name: _from_bytes(t.name, t.dtype, t.shape, t.data) for t in loaded.tensors}


def load_metadata(filename: PathLike) -> Dict[str, str]:
    """The safetensors-style metadata saved with `filename` (empty if none)."""
    # Every array is verified; only the metadata is kept.
    return dict(call(_rust.load, os.fspath(filename), metadata_only=True).metadata or {})


@dataclass
class Report:
    """What `verify` found: `ok`, `gen`, `signature` (valid, invalid,
    absent or untrusted) and `errors`, a list of (line, message)."""

    ok: bool
    gen: int
    signature: str
    errors: List[Tuple[int, str]] = field(default_factory=list)
    arrays: List[Dict[str, Any]] = field(default_factory=list)
    sha256_all: Optional[str] = None

    def __bool__(self) -> bool:
        return self.ok


def verify(filename: PathLike, hmac_key: Optional[PathLike] = None, pubkey: Optional[PathLike] = None,
           trusted_keys: Optional[PathLike] = None, require_signature: Optional[bool] = None,
           wsum: Optional[PathLike] = None, prev: Optional[PathLike] = None,
           allow_unauthenticated: bool = False, allow_unbound: bool = False) -> Report:
    """`wtxt verify` of `filename`, as a `Report` (a failed check is in the
    report, not raised; an unreadable file raises `Error`)."""
    trust = trust_of(hmac_key, pubkey, trusted_keys, require_signature, allow_unbound, policy_of=filename)
    text = call(_rust.verify, os.fspath(filename), trust,
                 as_path(wsum), as_path(prev), allow_unauthenticated)
    r = json.loads(text)
    return Report(ok=r["ok"], gen=r["gen"], signature=r["signature"],
                  errors=[(e["line"], e["message"]) for e in r["errors"]], arrays=r["arrays"],
                  sha256_all=r.get("sha256_all"))


_OPEN_SNAPSHOTTERS: "weakref.WeakSet[Snapshotter]" = weakref.WeakSet()


@atexit.register
def _close_open_snapshotters() -> None:
    """Finishes every open Snapshotter before the interpreter goes: its
    threads must not be inside Rust when Python stops them."""
    for s in list(_OPEN_SNAPSHOTTERS):
        s.close()


#: What a Snapshotter's next publish does with a generation that failed or was not pushed.
SNAPSHOTTER_ON_PUSH_ERROR = ON_PUSH_ERROR + ("quiet",)


class Snapshotter:
    """The snapshot daemon's pipeline inside the training process.

    `publish(state)` stages one copy of the arrays and returns; the copy is
    made with the GIL released. `request_snapshot()` returns a
    `concurrent.futures.Future` at once: hashing, writing the WTXT (split
    above `part_size`), the delta, age encryption (`recipients`), the commit
    and the push (`remote`, with the user's own git authentication) happen on
    background threads. The future gives a `SnapshotInfo`, or raises
    `wtxt.Error` when the snapshot failed or was committed but not pushed
    (the push is retried from the resend queue). `flush()` waits for all of
    it; `status()` is the daemon's status dict. With `oms_key` (an EC PEM)
    each commit carries an OpenSSF Model Signing `model.sig` beside the
    snapshot. It writes the tree digest form unless told `digest="sha256"`
    (WTXT 1.1): a reader of one tensor then reads the parts that hold it
    alone. Use it as a context manager, or call `close()`.

    CUDA tensors are published through the GPU's copy engine into pinned
    host buffers kept for the next publish (at most `pinned_budget` bytes;
    default `WTXT_PINNED_BUDGET`, else a quarter of the machine's memory;
    tensors past it are copied the pageable way).

    Every requested generation is written and committed, in order: a
    request pins the state published last. At most `max_pending` requests
    wait (each holds its state's copy); a request beyond that waits until
    the oldest is written. With `coalesce=True` a request never waits:
    requests made while one waits fold into it and the newest state is
    written (`status()["coalesced"]` counts them).

    A generation that failed, or was committed but not pushed (a host's
    guard refused it, the remote is down), is heard at the next `publish`
    whether or not its future was asked: `on_push_error="warn"` (the
    default) logs it on the `wtxt` logger, `"raise"` raises `wtxt.Error`
    from that `publish`, which stops a loop, and `"quiet"` leaves it to the
    future and `status()["last_error"]`. A refused generation waits in the
    ring's resend queue, in the repository's `.git`, and the next
    Snapshotter on that repository pushes it.
    """

    def __init__(self, repo: PathLike, path_in_repo: PathLike = "model.wtxt", remote: Optional[str] = None,
                 sign_key: Optional[PathLike] = None, hmac_key: Optional[PathLike] = None,
                 ring: Optional[PathLike] = None, part_size: Optional[Union[int, str]] = None,
                 recipients: Optional[List[str]] = None, keep: Optional[int] = None,
                 oms_key: Optional[PathLike] = None, coalesce: bool = False, max_pending: int = 2,
                 digest: str = "tree", pinned_budget: Optional[int] = None, on_push_error: str = "warn"):
        if max_pending < 1:
            raise Error(f"max_pending must be at least 1, not {max_pending}")
        self._on_push_error = on_push_error_of(on_push_error, SNAPSHOTTER_ON_PUSH_ERROR)
        #: Failures the watcher resolved that no publish has heard yet.
        self._unheard: List[str] = []
        record_command()
        writing = writing_of(None, sign_key, hmac_key, part_size, None, None, oms_key, digest)
        self._inner = call(_rust.Snapshotter, os.fspath(repo), os.fspath(path_in_repo), writing, remote, as_path(ring),
                            list(recipients or []), keep, None, bool(coalesce), int(max_pending))
        self._lock = threading.Lock()
        self._closed = False
        self._pinned_budget = pinned_budget
        self._stager: Optional[Any] = None  # made by the first publish of a CUDA tensor
        # Requests' futures in order, an Event that flush() waits on (set
        # once every future before it is resolved), or None to stop.
        self._pending: "queue.Queue[Union[None, threading.Event, Tuple[int, Future[SnapshotInfo]]]]" = queue.Queue()
        self._watcher = threading.Thread(target=self._watch, name="wtxt-snapshot-futures", daemon=True)
        self._watcher.start()
        _OPEN_SNAPSHOTTERS.add(self)

    def _check_open(self) -> None:
        if self._closed:
            raise Error("the Snapshotter is closed")

    def publish(self, state: Mapping[str, np.ndarray], metadata: Optional[Dict[str, str]] = None) -> int:
        """Stages a copy of `state` (a dict of arrays, torch tensors through
        DLPack) as the next generation, which it returns. The arrays may be
        changed as soon as this returns: the snapshot holds these values.
        A nested state (model and optimizer `state_dict()`s, lists, scalars)
        is taken as `wtxt.torch.save_state_dict` takes it: flattened to
        dotted names, its other entries kept as Python literals."""
        self._check_open()
        self._hear()
        if not isinstance(state, Mapping):
            raise Error(f"expected a dict of arrays, found {type(state).__name__}")
        arrays, objects = _arrays_and_objects(state)
        if not any(getattr(a, "is_cuda", False) is True for a in arrays.values()):
            return self._publish(arrays, metadata, objects)
        if self._stager is None:
            from .torch._pinned import PinnedStager  # a CUDA tensor: torch is loaded
            self._stager = PinnedStager(self._pinned_budget)
        with self._stager.staged(arrays) as host:
            return self._publish(host, metadata, objects)

    def _hear(self) -> None:
        """Says what failed since the last publish (see the class's text)."""
        with self._lock:
            unheard, self._unheard = self._unheard, []
        if not unheard or self._on_push_error == "quiet":
            return
        if self._on_push_error == "raise":
            raise Error("; ".join(unheard) + " (on_push_error='raise' stops the run)")
        for message in unheard:
            logging.getLogger("wtxt").warning("%s", message)

    def _fail(self, fut: "Future[SnapshotInfo]", gen: int, message: str) -> None:
        with self._lock:
            self._unheard.append(message if message.startswith(f"gen {gen} ") else f"gen {gen}: {message}")
        fut.set_exception(Error(message))

    def _publish(self, arrays: Mapping[str, Any], metadata: Optional[Dict[str, str]],
                 objects: Optional[Dict[str, str]]) -> int:
        items = [_staged(name, a) for name, a in arrays.items()]  # the arrays alive until copied
        return call(self._inner.publish, [s for s, _ in items], metadata, objects)

    def request_snapshot(self) -> "Future[SnapshotInfo]":
        """Asks for a snapshot of the last published state; returns a future
        at once (never waits on hashing, writing, Git or the network), unless
        `max_pending` requests already wait to be written: then it waits for
        the oldest (never with `coalesce=True`)."""
        self._check_open()
        gen = call(self._inner.request)
        fut: "Future[SnapshotInfo]" = Future()
        fut.set_running_or_notify_cancel()
        self._pending.put((gen, fut))
        return fut

    def _watch(self) -> None:
        while True:
            item = self._pending.get()
            if item is None:
                return
            if isinstance(item, threading.Event):
                item.set()
                continue
            gen, fut = item
            try:
                r = self._inner.wait(gen)
            except Exception as e:  # noqa: BLE001 - the future carries it
                self._fail(fut, gen, str(e))
                continue
            if r is None:
                fut.set_exception(Error(f"the Snapshotter closed before generation {gen} was snapshotted"))
                continue
            if r.error:
                self._fail(fut, gen, r.error)
            else:
                fut.set_result(SnapshotInfo(gen=r.gen, commit=r.commit, pushed=r.pushed,
                                            stages=None if r.stages is None else json.loads(r.stages)))

    def flush(self) -> None:
        """Waits until every request so far is written, committed and pushed
        (a failed push is retried once more and stays in the resend queue),
        and its future resolved (its callbacks run)."""
        self._check_open()
        call(self._inner.flush)
        if threading.current_thread() is not self._watcher:  # a callback's own flush cannot wait for itself
            resolved = threading.Event()
            self._pending.put(resolved)
            resolved.wait()

    def status(self) -> Dict[str, object]:
        """The daemon's status: last_gen, queue_depth, coalesced, resend_queue,
        last_error, snapshots_written, pushed_gen, ..."""
        self._check_open()
        status: Dict[str, object] = json.loads(call(self._inner.status))
        return status

    def close(self) -> None:
        """Finishes queued snapshots and stops the background threads."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._inner.close()
        self._pending.put(None)
        self._watcher.join()

    def __enter__(self) -> "Snapshotter":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
