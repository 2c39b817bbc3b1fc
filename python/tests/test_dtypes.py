"""The dtypes torch 2.15 and safetensors 0.8 write besides the classic ones:
the AMD float8 pair, the OCP MX scales and FP4 (torch's float4_e2m1fn_x2,
a byte of two), complex. Bit for bit through `wtxt.torch`, the NumPy API,
`wtxt snapshot`/`extract` against safetensors' own files, and DCP."""
import json
import os
import pathlib
import subprocess
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
st = pytest.importorskip("safetensors.torch")

import wtxt  # noqa: E402
import wtxt.torch as wt  # noqa: E402
from dcp_workers import mx_state  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]
CLI = os.environ.get("WTXT_BIN") or str(ROOT / "target" / "debug" / "wtxt")


def bits(t):
    return t.contiguous().view(torch.uint8)


def assert_same(got, want):
    assert sorted(got) == sorted(want)
    for k, v in want.items():
        assert got[k].dtype == v.dtype and got[k].shape == v.shape, (k, got[k].dtype, got[k].shape)
        assert torch.equal(bits(got[k]), bits(v)), k


def test_every_fixed_layout_torch_dtype_round_trips_bit_for_bit(tmp_path):
    sd = mx_state()
    f = tmp_path / "mx.wtxt"
    wt.save_state_dict(sd, f)
    assert_same(wt.load_state_dict(f), sd)
    r = subprocess.run([CLI, "inspect", f, "--json"], capture_output=True, text=True)
    arrays = {a["name"]: a for a in json.loads(r.stdout)["arrays"]}
    # float4_e2m1fn_x2 (40, 8) bytes are f4e2m1 (40, 16) elements, as safetensors' F4 counts them.
    assert (arrays["experts_down_blocks"]["dtype"], arrays["experts_down_blocks"]["shape"]) == ("f4e2m1", [40, 16])
    assert {a["dtype"] for a in arrays.values()} >= {"f8e8m0", "f8e4m3fnuz", "f8e5m2fnuz", "c64", "c128"}


def test_the_f4_rule_is_safetensors_own_both_ways(tmp_path):
    sd = {k: v for k, v in mx_state().items() if k != "fft.kernel"}  # safetensors has no complex128
    ref = tmp_path / "ref.safetensors"
    st.save_file(sd, ref)
    # safetensors -> wtxt -> torch: the tensors safetensors itself loads.
    w = tmp_path / "from_st.wtxt"
    subprocess.run([CLI, "snapshot", ref, "-o", w], check=True, capture_output=True)
    got = wt.load_state_dict(w)
    assert_same(got, st.load_file(ref))
    # torch -> wtxt -> safetensors: the file safetensors itself writes, byte for byte.
    w2 = tmp_path / "from_torch.wtxt"
    wt.save_state_dict(sd, w2)
    back = tmp_path / "back.safetensors"
    subprocess.run([CLI, "extract", w2, "-o", back], check=True, capture_output=True)
    assert back.read_bytes() == ref.read_bytes()


@pytest.mark.filterwarnings("ignore:ComplexHalf support is experimental")
def test_what_has_no_wtxt_shape_or_no_library_type_is_said_in_one_line(tmp_path):
    scalar = torch.tensor(0x21, dtype=torch.uint8).view(torch.float4_e2m1fn_x2)
    with pytest.raises(wtxt.Error, match=r"'s': a float4_e2m1fn_x2 scalar has no innermost dimension"):
        wt.save_state_dict({"s": scalar}, tmp_path / "s.wtxt")
    assert not (tmp_path / "s.wtxt").exists()
    with pytest.raises(wtxt.Error, match=r"dtype torch.complex32 has no WTXT equivalent"):
        wt.save_state_dict({"h": torch.zeros(2, dtype=torch.complex32)}, tmp_path / "h.wtxt")
    # NumPy has no 4-bit type: the packed bytes, and a warning that says so.
    f = tmp_path / "mx.wtxt"
    sd = mx_state()
    wt.save_state_dict(sd, f)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        arrays = wtxt.load_file(f)
    blocks = arrays["experts.down_blocks"]
    assert blocks.dtype == np.uint8 and blocks.shape == (40, 8)
    assert (blocks == bits(sd["experts.down_blocks"]).numpy()).all()
    assert any("f4e2m1 comes back as its packed bytes" in str(w.message) for w in caught)
    assert arrays["rope.freqs"].dtype == np.complex64
    assert (arrays["rope.freqs"] == sd["rope.freqs"].numpy()).all()


def test_numpy_complex_saves_and_loads(tmp_path):
    a = {"z": (np.arange(6) * (1 - 2j)).astype(np.complex64).reshape(2, 3), "zz": np.array([1j, -2.5], np.complex128)}
    f = tmp_path / "z.wtxt"
    wtxt.save_file(a, f)
    back = wtxt.load_file(f)
    for k, v in a.items():
        assert back[k].dtype == v.dtype and (back[k] == v).all(), k


@pytest.mark.parametrize("world,inner", [(1, False), (2, False), (2, True)])
def test_dcp_writes_the_new_dtypes_as_save_state_dict_does_and_loads_them(tmp_path, world, inner):
    """One snapshot whatever the world size and however the F4 blocks are
    sharded (by rows, or by whole bytes of their innermost dimension)."""
    import dcp_workers as w

    ref = tmp_path / "ref" / "mx.wtxt"
    ref.parent.mkdir()
    wt.save_state_dict({"model": mx_state()}, ref, ts="2026-01-01T00:00:00Z")
    out = tmp_path / "dcp" / "mx.wtxt"
    w.run(world, w.save_mx, str(out), inner)
    assert out.read_bytes() == ref.read_bytes()
    got = tmp_path / "got"
    got.mkdir()
    w.run(world, w.load_mx, str(out), str(got))
    want = mx_state()
    for rank in range(world):
        shards = torch.load(got / f"{rank}.pt")
        for k, v in want.items():
            full = v.contiguous().view(torch.uint8) if v.element_size() == 1 else v
            dim = w.MX_SHARDED.get(k)
            mine = full if dim is None or world == 1 else full.tensor_split(world, dim)[rank]
            assert torch.equal(shards[k], mine), (rank, k)


def test_fp6_from_a_safetensors_file_comes_back_to_torch_as_its_packed_bytes(tmp_path):
    # safetensors' Python package cannot write F6 (torch has no such dtype):
    # the file is laid out by hand, as its format defines.
    header = json.dumps({"w": {"dtype": "F6_E3M2", "shape": [2, 4], "data_offsets": [0, 6]}}).encode()
    header += b" " * (-len(header) % 8)
    f = tmp_path / "f6.safetensors"
    f.write_bytes(len(header).to_bytes(8, "little") + header + bytes([1, 2, 3, 4, 5, 6]))
    w = tmp_path / "f6.wtxt"
    subprocess.run([CLI, "snapshot", f, "-o", w], check=True, capture_output=True)
    with pytest.warns(UserWarning, match=r"'w': f6e3m2 comes back as its packed bytes \(uint8, 4 elements in 3 bytes\)"):
        got = wt.load_state_dict(w)["w"]
    assert got.dtype == torch.uint8 and got.tolist() == [[1, 2, 3], [4, 5, 6]]
