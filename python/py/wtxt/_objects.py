"""Python objects of a training state (a torch file's dict, a Lightning
checkpoint) as arrays plus a plain JSON structure, and back: tensors and
NumPy arrays become arrays named by their path in the object; ints,
floats (by `repr`, so nan and inf too), str, bool and None, and dicts,
lists and tuples of them, become JSON nodes that rebuild the same object
(int keys stay ints, tuples stay tuples). Anything else is refused."""

from typing import Any, Dict

import numpy as np
import torch

from ._common import Error


def numpy_globals() -> Any:
    """What `torch.load(weights_only=True)` must allow for NumPy arrays (the
    Trainer's RNG state holds one), as transformers allows it."""
    core = getattr(np, "_core", None) or np.core
    return torch.serialization.safe_globals(
        [core.multiarray._reconstruct, np.ndarray, np.dtype, type(np.dtype(np.uint32))])


class Encoder:
    """An object as plain JSON with its arrays set apart into `arrays`
    (named by their path in it; a name taken already gets `#2`, `#3`...)."""

    def __init__(self, arrays: Dict[str, Any]):
        self.arrays = arrays

    def put(self, name: str, a: Any) -> str:
        if name in self.arrays:
            n = 2
            while f"{name}#{n}" in self.arrays:
                n += 1
            name = f"{name}#{n}"
        self.arrays[name] = a
        return name

    def encode(self, obj: Any, name: str) -> Any:
        if isinstance(obj, np.generic):  # a NumPy scalar: its Python value
            obj = obj.item()
        if isinstance(obj, torch.Tensor):
            return {"tensor": self.put(name, obj.detach().cpu())}
        if isinstance(obj, np.ndarray):
            return {"ndarray": self.put(name, obj)}
        if obj is None or isinstance(obj, (bool, str)):
            return {"value": obj}
        if isinstance(obj, int):
            return {"int": str(obj)}
        if isinstance(obj, float):
            return {"float": repr(float(obj))}
        if isinstance(obj, dict):
            return {"dict": [[self.encode(k, f"{name}/key"), self.encode(v, f"{name}/{k}")]
                             for k, v in obj.items()]}
        if isinstance(obj, (list, tuple)):
            items = [self.encode(v, f"{name}/{i}") for i, v in enumerate(obj)]
            return {"tuple" if isinstance(obj, tuple) else "list": items}
        raise Error(f"{name}: a {type(obj).__name__} has no plain form")


def decode(node: Any, arrays: Dict[str, Any]) -> Any:
    (kind, v), = node.items()
    if kind == "tensor":
        return arrays[v]
    if kind == "ndarray":
        return arrays[v].numpy()
    if kind == "value":
        return v
    if kind == "int":
        return int(v)
    if kind == "float":
        return float(v)
    if kind == "dict":
        return {decode(k, arrays): decode(x, arrays) for k, x in v}
    if kind == "list":
        return [decode(x, arrays) for x in v]
    if kind == "tuple":
        return tuple(decode(x, arrays) for x in v)
    raise Error(f"unknown node {kind!r} in a stored object")
