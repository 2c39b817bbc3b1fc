"""Rank bodies for test_dcp.py: each runs in its own process (spawned by
`run`), joins a gloo process group on 127.0.0.1 and saves or loads through
`torch.distributed.checkpoint` with the WTXT storage."""
from __future__ import annotations

import os
import socket
import sys
import traceback

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _entry(rank: int, world: int, port: int, fn, args, errors) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        fn(rank, world, *args)
        # No rank tears the group down while another still uses it.
        dist.barrier()
    except BaseException:  # noqa: BLE001 - reported to the test
        errors.put((rank, traceback.format_exc()))
        raise
    dist.destroy_process_group()
    # Done and reported: leave without the interpreter's teardown, where
    # gloo's threads now and then abort ("terminate called without an
    # active exception") after the work has finished.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def run(world: int, fn, *args) -> None:
    """Runs `fn(rank, world, *args)` on `world` processes; raises with every
    rank's traceback if one failed."""
    ctx = mp.get_context("spawn")
    errors = ctx.SimpleQueue()
    try:
        mp.start_processes(_entry, args=(world, free_port(), fn, args, errors), nprocs=world, start_method="spawn")
    except Exception as e:  # noqa: BLE001
        found = []
        while not errors.empty():
            found.append(errors.get())
        raise AssertionError("\n".join(f"rank {r}:\n{t}" for r, t in sorted(found)) or str(e)) from None


def training_state(seed: int = 0):
    """A full (unsharded) training state: arrays of several chunks whose
    shards end inside a chunk, uneven row counts, bf16, a scalar, an empty
    tensor, and entries that are not tensors."""
    g = torch.Generator().manual_seed(seed)
    return {
        "model": {
            "embed.weight": torch.randn(301, 24, generator=g),
            "layers.0.weight": torch.randn(131, 5, generator=g).to(torch.bfloat16),
            "layers.0.bias": torch.randn(9001, generator=g, dtype=torch.float64),
            "norm.scale": torch.randn(7, 3, 2, generator=g),
            "count": torch.tensor(12, dtype=torch.int64),
            "mask": torch.rand(9, 4, generator=g) > 0.5,
            "empty": torch.zeros(0, 3),
        },
        "optim": {"step": 3, "lr": 0.001, "betas": (0.9, 0.999), "params": ["embed.weight", "norm.scale"],
                  "fused": None},
    }


# Tensors that are sharded (dim given) on the ranks; the rest are replicated.
SHARDED = {"embed.weight": 0, "layers.0.weight": 0, "layers.0.bias": 0, "norm.scale": 1, "mask": 0}


def sharded_state(world: int, seed: int = 0):
    """`training_state` as DTensors: `Shard(dim)` for the tensors in
    SHARDED (uneven where the size does not divide), replicated otherwise."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    mesh = init_device_mesh("cpu", (world,))
    state = training_state(seed)
    model = {}
    for k, v in state["model"].items():
        placement = Shard(SHARDED[k]) if k in SHARDED else Replicate()
        model[k] = distribute_tensor(v, mesh, [placement]) if v.dim() > 0 else v
    return {"model": model, "optim": state["optim"]}


def save_sharded(rank: int, world: int, path: str, opts: dict, use_async: bool = False) -> None:
    import torch.distributed.checkpoint as dcp

    from wtxt.torch.dcp import WtxtStorageWriter

    writer = WtxtStorageWriter(path, **opts)
    state = sharded_state(world)
    if use_async:
        dcp.async_save(state, storage_writer=writer).result()
    else:
        dcp.save(state, storage_writer=writer)


def load_sharded(rank: int, world: int, path: str, opts: dict, out_dir: str) -> None:
    """Loads into a zeroed sharded state of this world size; each rank
    writes what it got back, gathered to full tensors, to `out_dir`."""
    import torch.distributed.checkpoint as dcp

    from wtxt.torch.dcp import WtxtStorageReader

    state = sharded_state(world, seed=1)  # other values, same shapes
    for v in state["model"].values():
        v.zero_() if not hasattr(v, "full_tensor") else v.to_local().zero_()
    state["optim"] = {k: None for k in state["optim"]}
    try:
        dcp.load(state, storage_reader=WtxtStorageReader(path, **opts))
    finally:
        full = {k: (v.full_tensor() if hasattr(v, "full_tensor") else v) for k, v in state["model"].items()}
        torch.save({"model": full, "optim": state["optim"]}, os.path.join(out_dir, f"rank{rank}.pt"))


def load_sharded_keeping(rank: int, world: int, path: str, out_dir: str, opts: dict = {}) -> None:
    """`load_sharded`, writing also the shape of each tensor the rank's
    verified read kept (`rank{N}.kept.json`) and of each it decoded
    straight into the state dict (`rank{N}.placed.json`)."""
    import json

    import wtxt.torch._dcp_load as wdcp

    real = wdcp._load
    kept, placed = {}, {}

    def recording(*args, **kw):
        got = real(*args, **kw)
        kept.update({k: list(v.shape) for k, v in got[0].items()})
        placed.update({k: list(v.shape) for k, v in (kw.get("into") or {}).items()})
        return got

    wdcp._load = recording
    try:
        load_sharded(rank, world, path, opts, out_dir)
    finally:
        for what, shapes in (("kept", kept), ("placed", placed)):
            with open(os.path.join(out_dir, f"rank{rank}.{what}.json"), "w") as f:
                json.dump(shapes, f)


def fsdp_model(seed: int, lr: float):
    """A small MLP sharded with FSDP2 (`fully_shard`, each linear layer and
    the whole), and its AdamW."""
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(13, 37), torch.nn.ReLU(), torch.nn.Linear(37, 5))
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer)
    fully_shard(model)
    return model, torch.optim.AdamW(model.parameters(), lr=lr)


def fsdp_train_save(rank: int, world: int, path: str, ref: str, opts: dict) -> None:
    """Trains a small FSDP2 model with AdamW for two steps on `world` ranks,
    saves model and optimizer through DCP to `path`, and (rank 0) the same
    state gathered whole with `wtxt.torch.save_state_dict` to `ref`."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

    import wtxt.torch
    from wtxt.torch.dcp import WtxtStorageWriter

    model, optim = fsdp_model(seed=0, lr=0.01)
    g = torch.Generator().manual_seed(rank)
    for _ in range(2):
        loss = model(torch.randn(8, 13, generator=g)).pow(2).mean()
        loss.backward()
        optim.step()
        optim.zero_grad()
    msd, osd = get_state_dict(model, optim)
    dcp.save({"model": msd, "optim": osd}, storage_writer=WtxtStorageWriter(path, **opts))
    fm, fo = get_state_dict(model, optim, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    if rank == 0:
        wtxt.torch.save_state_dict({"model": fm, "optim": fo}, ref, **opts)
    dist.barrier()


def fsdp_load(rank: int, world: int, path: str, out_dir: str) -> None:
    """Builds the same FSDP2 model on `world` ranks, loads model and
    optimizer from `path`, and writes the full state it holds to `out_dir`."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import (StateDictOptions, get_state_dict, set_state_dict)

    from wtxt.torch.dcp import WtxtStorageReader

    model, optim = fsdp_model(seed=1, lr=0.5)
    # One step so that the optimizer has state to load into.
    model(torch.randn(2, 13)).sum().backward()
    optim.step()
    optim.zero_grad()
    msd, osd = get_state_dict(model, optim)
    state = {"model": msd, "optim": osd}
    dcp.load(state, storage_reader=WtxtStorageReader(path))
    set_state_dict(model, optim, model_state_dict=state["model"], optim_state_dict=state["optim"])
    fm, fo = get_state_dict(model, optim, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    if rank == 0:
        torch.save({"model": fm, "optim": fo}, os.path.join(out_dir, "loaded.pt"))
    dist.barrier()


def save_bad_dtype(rank: int, world: int, path: str) -> None:
    import torch.distributed.checkpoint as dcp

    from wtxt.torch.dcp import WtxtStorageWriter

    state = {"w": torch.zeros(4, 2), "z": torch.zeros(3, dtype=torch.complex32)}  # no WTXT dtype
    dcp.save(state, storage_writer=WtxtStorageWriter(path))


def save_failing_rank(rank: int, world: int, path: str, how: str) -> None:
    """A save in which rank 1's writes fail while the others write: its
    disk is full (`how="error"`), or the process dies (`how="exit"`)."""
    import torch.distributed.checkpoint as dcp

    import wtxt.torch.dcp as wdcp

    if rank == 1:
        def fail(*args):
            if how == "exit":
                os._exit(3)
            raise OSError(28, "No space left on device")
        wdcp._write_block = fail
        wdcp._pwrite_all = fail
    dcp.save(sharded_state(world), storage_writer=wdcp.WtxtStorageWriter(path))


def save_and_commit(rank: int, world: int, path: str, opts: dict, report: str) -> None:
    """Saves through DCP with commit=True; the coordinator writes what its
    `committed` future gave to `report`."""
    import json

    import torch.distributed.checkpoint as dcp

    from wtxt.torch.dcp import WtxtStorageWriter

    writer = WtxtStorageWriter(path, commit=True, **opts)
    dcp.save(sharded_state(world), storage_writer=writer)
    info = writer.committed.result(timeout=60)
    if rank == 0:
        with open(report, "w") as f:
            json.dump(info.__dict__, f)
    else:
        assert info is None


def save_with_rank_options(rank: int, world: int, path: str, per_rank: list) -> None:
    """Saves with each rank given its own options (`per_rank[rank]`)."""
    import torch.distributed.checkpoint as dcp

    from wtxt.torch.dcp import WtxtStorageWriter

    dcp.save(sharded_state(world), storage_writer=WtxtStorageWriter(path, **per_rank[rank]))


def save_with_a_lying_rank(rank: int, world: int, path: str, opts: dict, lie: str = "fastxor") -> None:
    """A save in which rank 1 lies in what the calls `lie` names return
    (several joined by `+`): a `fastxor` share that is not what it wrote,
    or (the tree form) a chunk's digest, in the report of what it wrote or
    in that of what it read back."""
    import torch.distributed.checkpoint as dcp

    import wtxt.torch.dcp as wdcp

    if rank == 1:
        real = wdcp.call

        def lying(fn, *args, **kwargs):
            got = real(fn, *args, **kwargs)
            name = getattr(fn, "__name__", "")
            if name not in lie.split("+"):
                return got
            if name == "fastxor":
                return got ^ 1
            if name == "write_chunks":
                return [(got[0][0], got[0][1], bytes(32))] + got[1:]
            digests, share = got
            return [bytes(32)] + digests[1:], share
        wdcp.call = lying
    dcp.save(sharded_state(world), storage_writer=wdcp.WtxtStorageWriter(path, **opts))


def load_two_generations(rank: int, world: int, path: str, other: str, out_dir: str) -> None:
    """Loads `path`, except that rank 1 finds `other` there (the snapshot
    replaced between the ranks' reads)."""
    import wtxt.torch._dcp_load as wdcp

    if rank == 1:
        real = wdcp._load
        wdcp._load = lambda p, *rest, **kw: real(other, *rest, **kw)
    load_sharded(rank, world, path, {}, out_dir)


def mx_state(seed: int = 0):
    """An MXFP4-style pair (F4 blocks, E8M0 scales), the FNUZ float8s and complex."""
    g = torch.Generator().manual_seed(seed)
    return {
        "experts.down_blocks": torch.randint(0, 256, (40, 8), generator=g, dtype=torch.uint8)
        .view(torch.float4_e2m1fn_x2),
        "experts.down_scales": torch.randint(120, 135, (40, 1), generator=g, dtype=torch.uint8)
        .view(torch.float8_e8m0fnu),
        "q.weight": torch.randn(6, 5, generator=g).to(torch.float8_e4m3fnuz),
        "k.weight": torch.randn(9, generator=g).to(torch.float8_e5m2fnuz),
        "rope.freqs": torch.polar(torch.ones(5), torch.arange(5.0)),
        "fft.kernel": torch.randn(3, 2, generator=g, dtype=torch.complex128),
    }


# `mx_state`'s tensors that are sharded (dim given): the F4 blocks by rows
# and by bytes of their innermost dimension.
MX_SHARDED = {"experts.down_blocks": 0, "q.weight": 0, "fft.kernel": 1}


def _mx_sharded(world: int, seed: int, inner: bool):
    """`mx_state` as DTensors: shards by rows, or with `inner` the F4 blocks
    by their innermost dimension (each rank a run of whole bytes)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    mesh = init_device_mesh("cpu", (world,))
    dims = dict(MX_SHARDED, **({"experts.down_blocks": 1} if inner else {}))
    out = {}
    for k, v in mx_state(seed).items():
        # gloo has no collectives for these dtypes: shards are cut from
        # their bytes (the same on every rank), then viewed back.
        raw = v.view(torch.uint8) if v.element_size() == 1 else v
        placement = Shard(dims[k]) if k in dims else Replicate()
        d = distribute_tensor(raw, mesh, [placement], src_data_rank=None)
        out[k] = d if raw is v else type(d).from_local(d.to_local().view(v.dtype), mesh, [placement],
                                                          shape=v.shape, stride=v.stride())
    return {"model": out}


def save_mx(rank: int, world: int, path: str, inner: bool) -> None:
    import torch.distributed.checkpoint as dcp

    from wtxt.torch.dcp import WtxtStorageWriter

    dcp.save(_mx_sharded(world, 0, inner), storage_writer=WtxtStorageWriter(path, ts="2026-01-01T00:00:00Z", digest="sha256"))


def load_mx(rank: int, world: int, path: str, out_dir: str) -> None:
    """Loads into a sharded state of other values; writes this rank's
    shards, as their bytes, to `out_dir`."""
    import torch.distributed.checkpoint as dcp

    from wtxt.torch.dcp import WtxtStorageReader

    state = _mx_sharded(world, 1, False)
    dcp.load(state, storage_reader=WtxtStorageReader(path))
    local = {k: (v.to_local() if hasattr(v, "to_local") else v) for k, v in state["model"].items()}
    torch.save({k: v.contiguous().view(torch.uint8) if v.element_size() == 1 else v for k, v in local.items()},
               os.path.join(out_dir, f"{rank}.pt"))
