"""What `wtxt` and `wtxt.torch` both need: the errors, the dtype tables,
arrays staged for the Rust side, the option dicts it reads, and the plain
Python values a state dict keeps beside its tensors. Private: the package's
front is `wtxt` and `wtxt.torch`."""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
import functools
import os
import tempfile
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, TypeVar, Union

import wtxt._rust as _rust

if TYPE_CHECKING:
    from typing_extensions import ParamSpec

    P = ParamSpec("P")
R = TypeVar("R")


class _Numpy:
    """NumPy, imported on first use: the `wtxt` command (`wtxt._cli`) runs
    without it, so no BLAS thread of NumPy's is there to take a signal the
    command must handle."""

    def __getattr__(self, name: str) -> Any:
        import numpy
        globals()["np"] = numpy
        value = getattr(numpy, name)
        # Kept on the proxy too: modules that imported it find it directly.
        setattr(self, name, value)
        return value


np: Any = _Numpy()


PathLike = Union[str, "os.PathLike[str]"]

# An array staged for the Rust side: (name, WTXT dtype, shape, address,
# length in bytes), and the array that keeps that memory alive.
Staged = Tuple[Tuple[str, str, List[int], int, int], Any]


class Error(Exception):
    """A `wtxt` failure: unusable input, a bad argument, or an I/O error."""


class VerifyError(Error):
    """A file failed a check (damage, a wrong key, a bad signature).

    `line` is the 1-based line of the WTXT file at fault, when there is one.
    """

    def __init__(self, message: str, line: Optional[int] = None):
        super().__init__(message)
        self.line = line


# The package's front names them: tracebacks and pickles say `wtxt.Error`.
Error.__module__ = VerifyError.__module__ = "wtxt"



@functools.cache
def record_command() -> None:
    """Tells the compiled core, once, where the `wtxt` script pip installed
    with this package is (the environment's scripts folder, then the
    user's, else the first `wtxt` on PATH): the Git drivers a commit sets up
    call it, as the process is Python's. Called before a commit, not at
    import."""
    import shutil
    import sysconfig
    for scheme in (sysconfig.get_default_scheme(), f"{os.name}_user"):
        try:
            script = os.path.join(sysconfig.get_path("scripts", scheme), "wtxt")
        except KeyError:
            continue
        if os.path.isfile(script) and os.access(script, os.X_OK):
            _rust.set_command(script)
            return
    found = shutil.which("wtxt")
    if found is not None:
        _rust.set_command(found)

def call(fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
    """`fn(*args, **kwargs)`, a failure of the Rust side raised as `Error`
    or, for a failed check, `VerifyError` with its line."""
    try:
        return fn(*args, **kwargs)
    except _rust.WtxtError as e:
        kind, line, message = e.args
        if kind == "check":
            raise VerifyError(message, line) from None
        raise Error(message) from None


# WTXT dtypes and the NumPy dtypes they are (little-endian, as stored).
TO_NUMPY = {
    "f64": "<f8", "f32": "<f4", "f16": "<f2", "i64": "<i8", "u64": "<u8", "i32": "<i4", "u32": "<u4",
    "i16": "<i2", "u16": "<u2", "i8": "|i1", "u8": "|u1", "bool": "|b1", "c64": "<c8", "c128": "<c16",
}
def numpy_to_wtxt() -> Dict[str, str]:
    """NumPy's dtype strings and the WTXT dtypes they are."""
    return {np.dtype(v).str: k for k, v in TO_NUMPY.items()}


# WTXT dtypes NumPy has only through the optional `ml_dtypes` package, and
# the unsigned type of their bits, which they come back as without it.
ML_DTYPES = {"bf16": ("bfloat16", "<u2"), "f8e4m3": ("float8_e4m3fn", "|u1"), "f8e5m2": ("float8_e5m2", "|u1"),
             "f8e4m3fnuz": ("float8_e4m3fnuz", "|u1"), "f8e5m2fnuz": ("float8_e5m2fnuz", "|u1"),
             "f8e8m0": ("float8_e8m0fnu", "|u1")}

# The sub-byte dtypes: (elements, bytes) of their smallest whole-byte run.
SUB_BYTE = {"f4e2m1": (2, 1), "f6e2m3": (4, 3), "f6e3m2": (4, 3)}


def packed_bytes(name: str, dtype: str, shape: Sequence[int], data: Any) -> Any:
    """A sub-byte array that NumPy (or torch, for the f6 types) has no type
    for, as its packed bytes: uint8, the innermost dimension in bytes. A
    warning says so."""
    import warnings
    elems, nbytes = SUB_BYTE[dtype]
    warnings.warn(f"tensor {name!r}: {dtype} comes back as its packed bytes (uint8, {elems} elements in "
                  f"{nbytes} byte{'s' if nbytes > 1 else ''})", stacklevel=3)
    return data.view("|u1").reshape([int(d) for d in shape[:-1]] + [int(shape[-1]) // elems * nbytes])


def ml_dtype(dtype: str) -> Any:
    """NumPy's dtype for `dtype` from `ml_dtypes`, or None without it."""
    try:
        import ml_dtypes  # type: ignore[import-not-found,unused-ignore]  # optional: typed bf16 and float8
    except ImportError:
        return None
    return np.dtype(getattr(ml_dtypes, ML_DTYPES[dtype][0]))



def wtxt_dtype(a: Any, name: str) -> str:
    for wtxt_dtype in ML_DTYPES:
        ml = ml_dtype(wtxt_dtype)
        if ml is not None and a.dtype == ml:
            return wtxt_dtype
    d = a.dtype.newbyteorder("<") if a.dtype.byteorder == ">" else a.dtype
    key = d.str if d.itemsize > 1 else d.str.replace("<", "|").replace(">", "|")
    table = numpy_to_wtxt()
    if key not in table:
        raise Error(f"tensor {name!r}: dtype {a.dtype} has no WTXT equivalent "
                    f"(supported: {', '.join(sorted(TO_NUMPY))}, and with ml_dtypes "
                    f"{', '.join(v[0] for v in ML_DTYPES.values())})")
    return table[key]


def as_array(name: str, a: Any) -> Tuple[str, Any]:
    """`a` as a C-contiguous little-endian NumPy array and its WTXT dtype
    (a copy only when it is not one already)."""
    if not isinstance(name, str):
        raise Error(f"tensor names must be str, found {type(name).__name__}")
    if hasattr(a, "__dlpack__") and not isinstance(a, np.ndarray):
        a = np.from_dlpack(a)  # e.g. a CPU torch tensor, without importing torch
    if not isinstance(a, np.ndarray):
        raise Error(f"tensor {name!r}: expected a NumPy array (or anything with __dlpack__), found {type(a).__name__}")
    if type(a) is not np.ndarray:
        # A subclass's own __array_interface__ or nbytes could name any
        # memory: the base array's buffer is what is read.
        a = np.ndarray.view(a, np.ndarray)
    if a.dtype.hasobject:
        raise Error(f"tensor {name!r}: object arrays cannot be saved")
    dtype = wtxt_dtype(a, name)
    if dtype not in ML_DTYPES:
        a = a.astype(a.dtype.newbyteorder("<"), copy=False)
    # Views, transposes and slices are copied into C order, not refused.
    return dtype, a if a.flags.c_contiguous else a.copy(order="C")


def stage_array(name: str, a: Any) -> Staged:
    """What the Rust side copies an array `a` from: (name, WTXT dtype, shape,
    address, length), and the C-contiguous array to keep alive until it
    has."""
    return staged_as(name, *as_array(name, a))


def staged_as(name: str, dtype: str, a: Any, shape: Optional[List[int]] = None) -> Staged:
    """`stage_array` of a C-contiguous little-endian `a` holding `dtype`'s
    bits, of `shape` where the WTXT shape is not `a`'s (a sub-byte dtype)."""
    shape = [int(d) for d in a.shape] if shape is None else shape
    return (name, dtype, shape, a.__array_interface__["data"][0], a.nbytes), a


def save_items(items: List[Staged], filename: PathLike, metadata: Optional[Dict[str, str]],
               prev: Optional[PathLike], sign_key: Optional[PathLike], hmac_key: Optional[PathLike],
               part_size: Union[int, str, None], gen: Optional[int], ts: Optional[str], oms_key: Optional[PathLike],
               objects: Optional[Dict[str, str]] = None, digest: str = "sha256") -> str:
    """Saves staged items (the arrays stay alive in `items` while the Rust
    side copies them): `save_file` and `wtxt.torch` share it. `objects`
    maps names to `literal` texts."""
    staged = [s for s, _ in items]
    writing = writing_of(prev, sign_key, hmac_key, part_size, gen, ts, oms_key, digest)
    os.makedirs(os.path.dirname(os.path.abspath(os.fspath(filename))), exist_ok=True)
    return call(_rust.save, staged, os.fspath(filename), writing, metadata, objects or None)


def as_path(x: Optional[PathLike]) -> Optional[str]:
    """A path argument as the Rust side takes it (None stays None)."""
    return None if x is None else os.fspath(x)


def trust_of(hmac_key: Optional[PathLike], pubkey: Optional[PathLike], trusted_keys: Optional[PathLike],
             require_signature: Optional[bool], allow_unbound: bool = False,
             signer: Optional[PathLike] = None, policy_of: Optional[PathLike] = None) -> _rust._Trust:
    """What a reader demands of a snapshot, as the Rust side reads it (its `Trust`).

    Naming a key (`pubkey`, `trusted_keys`) requires a valid signature by
    it, as `model_signing verify` does: `require_signature=None` (the
    default) means "required exactly when a key is named". Only an explicit
    `require_signature=False` with a key accepts an unsigned snapshot; one
    signed by another key, or whose signature fails, is refused either way. With `hmac_key`, a snapshot must carry the keyed
    tag that binds its generation, names and set of arrays (every wtxt
    writer given the key writes it); `allow_unbound=True` accepts one from a
    writer that binds nothing. `signer` (a signing key) names its public
    half as the one trusted key when `pubkey` and `trusted_keys` name none:
    a writer's own loads demand its own signature. When no key is named at
    all, the signing policy of the repository around `policy_of` (the
    snapshot read; a revision's copy stands for its work tree's file) holds:
    `wtxt.trustedKeys`, and `wtxt.requireSignature`, as `wtxt verify`."""
    if pubkey is not None or trusted_keys is not None:
        signer = None
    if require_signature is None:
        require_signature = pubkey is not None or trusted_keys is not None or signer is not None
    return {"hmac_key": as_path(hmac_key), "pubkey": as_path(pubkey), "trusted_keys": as_path(trusted_keys),
            "signer": as_path(signer), "require_signature": bool(require_signature),
            "allow_unbound": allow_unbound, "policy": None if policy_of is None else policy_path(policy_of)}


#: What a save does on hearing that an earlier generation failed or was not pushed.
ON_PUSH_ERROR = ("warn", "raise")


def on_push_error_of(value: str, allowed: Tuple[str, ...] = ON_PUSH_ERROR) -> str:
    """`value` of an `on_push_error=` argument, refused unless `allowed`."""
    if value not in allowed:
        raise Error(f"on_push_error must be one of {allowed}, not {value!r}")
    return value


#: The revisions' temporary copies `at_revision` has open: copy -> the work tree's path.
_REV_COPIES: Dict[str, str] = {}


def policy_path(filename: PathLike) -> str:
    """The path whose repository's signing policy holds for `filename`."""
    return _REV_COPIES.get(os.fspath(filename), os.fspath(filename))


def writing_of(prev: Optional[PathLike], sign_key: Optional[PathLike], hmac_key: Optional[PathLike],
               part_size: Union[int, str, None], gen: Optional[int], ts: Optional[str], oms_key: Optional[PathLike],
               digest: str = "sha256") -> _rust._Writing:
    """The options every writer of a snapshot takes, as the Rust side reads
    them (its `Writing`, which maps them onto the library's option
    pieces: the keys, the part size, the digest form)."""
    return {"prev": as_path(prev), "sign_key": as_path(sign_key), "hmac_key": as_path(hmac_key), "gen": gen, "ts": ts,
            "part_size": None if part_size is None else str(part_size), "oms_key": as_path(oms_key), "digest": digest}


# The Python values a state dict may hold beside tensors: what
# `ast.literal_eval` reads back exactly.
LITERAL_TYPES = (int, float, str, bytes, bool, type(None))


def _plain(v: Any) -> bool:
    """Whether `v` is a value `__objects` keeps: one that comes back as
    the same value through `repr` and `ast.literal_eval`."""
    if type(v) in (list, tuple, set):
        return all(_plain(x) for x in v)
    if type(v) is dict:
        return all(_plain(k) and _plain(x) for k, x in v.items())
    if type(v) is float:
        return v == v and v not in (float("inf"), float("-inf"))  # repr of nan and inf is not a literal
    return type(v) in LITERAL_TYPES


_PLAIN = ("int, float but not nan or inf, str, bytes, bool, None, and lists, tuples, sets and dicts of them")


def literal(name: str, value: Any) -> str:
    """`value` (a step, a learning rate, a list of betas, a scheduler's
    fields) as the Python literal `__objects` keeps (FORMAT.md section 14);
    anything that would not come back as the same value is refused."""
    if not _plain(value):
        raise Error(f"entry {name!r}: a {type(value).__name__} is neither a tensor nor a plain Python value ({_PLAIN})")
    return repr(value)


def from_literal(name: str, text: str) -> Any:
    """The value `literal` kept as `text`: only what `literal` writes
    (a complex number, `...` or an overflowing float, which it never
    writes, is refused as a sign of a file it did not write)."""
    import ast
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError) as e:
        # TypeError: a set of lists, a dict keyed by one (unhashable).
        raise Error(f"__objects: entry {name!r} is not a Python literal ({type(e).__name__})") from None
    try:
        plain = _plain(value)
    except RecursionError:
        plain = False
    if not plain:
        raise Error(f"__objects: entry {name!r} holds a {type(value).__name__} where only plain values are kept "
                    f"({_PLAIN})")
    return value


@contextlib.contextmanager
def at_revision(filename: PathLike, rev: Optional[str]) -> Iterator[str]:
    """`filename` itself when `rev` is None; else the snapshot at that path
    (a file in a Git work tree) as revision `rev` holds it, head and parts
    exported from that commit into a temporary folder that lasts the block
    (nothing is verified here: the caller loads it verified). A failure in
    the block names the snapshot `REV:PATH`, as `load_file(rev=)` does, not
    the temporary copy."""
    if rev is None:
        yield os.fspath(filename)
        return
    with tempfile.TemporaryDirectory(prefix="wtxt-rev-") as d:
        out = os.path.join(d, os.path.basename(os.fspath(filename)))
        call(_rust.export, os.fspath(filename), rev, out)
        shown = f"{rev}:{os.fspath(filename)}"
        _REV_COPIES[out] = os.fspath(filename)
        try:
            yield out
        except VerifyError as e:
            raise VerifyError(str(e).replace(out, shown), e.line) from None
        except Error as e:
            raise Error(str(e).replace(out, shown)) from None
        finally:
            _REV_COPIES.pop(out, None)


@dataclass(frozen=True)
class SnapshotInfo:
    """What a snapshot request came to: the generation written (a later one
    when requests coalesced), its commit, whether it reached the remote, and
    the seconds each stage took (write, delta, armor, commit, push)."""

    gen: int
    commit: Optional[str]
    pushed: bool
    stages: Optional[Dict[str, float]] = None
