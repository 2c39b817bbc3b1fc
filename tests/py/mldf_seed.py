"""MLDF written and read with the header-design seed's own NumPy dtypes
(HeaderType, FieldDescType, AllocEntryType, the metadata row dtypes), an
implementation independent of `wtxt`, following the decisions in
docs/FORMAT.md where the seed is silent (NDARRAY arguments, 208-byte
descriptors with 4 trailing pad bytes).

Usage: mldf_seed.py write OUT.mldf    (3 samples: INT, FLOAT, BYTES, JSON, NDARRAY)
       mldf_seed.py read IN.mldf      (prints the fields' values as JSON)"""
import json, sys

import numpy as np

MAGIC = b"\x89MLDF\r\n\x1a\n"
HeaderType = np.dtype([
    ("version_major", "<u2"), ("version_minor", "<u2"), ("flags", "<u4"), ("num_samples", "<u8"),
    ("num_fields", "<u2"), ("_pad1", "<u2"), ("page_size", "<u4"), ("field_desc_ptr", "<u8"),
    ("metadata_ptr", "<u8"), ("data_ptr", "<u8"), ("alloc_table_ptr", "<u8"), ("_reserved", "8u1"),
], align=True)
FieldDescType = np.dtype([
    ("name", "S64"), ("type_id", "<u2"), ("flags", "<u2"), ("metadata_size", "<u4"), ("_pad", "<u4"),
    ("arguments", "128u1"), ("_pad2", "4u1"),
], align=True)
AllocEntryType = np.dtype([("ptr", "<u8"), ("size", "<u4"), ("_pad", "<u4")], align=True)
ScalarI = np.dtype([("value", "<i8")])
ScalarF = np.dtype([("value", "<f8")])
BytesMeta = np.dtype([("data_ptr", "<u8"), ("data_size", "<u4"), ("_pad", "<u4")], align=True)
assert HeaderType.itemsize == 64 and FieldDescType.itemsize == 208 and AllocEntryType.itemsize == 16
META = {1: ScalarI, 2: ScalarF, 3: BytesMeta, 4: BytesMeta, 5: BytesMeta}

SAMPLES = [
    {"step": 10, "loss": 0.5, "tag": b"alpha", "info": {"lr": 0.1}, "emb": np.arange(6, dtype="<f4").reshape(2, 3)},
    {"step": -3, "loss": 1.25, "tag": b"", "info": {"lr": 0.05, "note": "x"}, "emb": np.ones((2, 3), "<f4")},
    {"step": 7, "loss": -2.0, "tag": b"\x00\xffbin", "info": [], "emb": np.full((2, 3), -1.5, "<f4")},
]
FIELDS = [("step", 1), ("loss", 2), ("tag", 3), ("info", 5), ("emb", 4)]


def ndarray_args(dtype, shape):
    a = bytearray(128)
    a[:len(dtype)] = dtype.encode()
    a[8] = len(shape)
    for i, d in enumerate(shape):
        a[16 + 8 * i:24 + 8 * i] = int(d).to_bytes(8, "little")
    return bytes(a)


def align(x, a):
    return (x + a - 1) // a * a


def write(path):
    row = np.dtype([(n, META[t]) for n, t in FIELDS], align=True)
    page = 4096
    desc_ptr = len(MAGIC) + 64
    meta_ptr = align(desc_ptr + 208 * len(FIELDS), 64)
    data_ptr = align(meta_ptr + row.itemsize * len(SAMPLES), page)
    table = np.zeros(len(SAMPLES), dtype=row)
    data = bytearray()
    allocs = []
    for i, s in enumerate(SAMPLES):
        for n, t in FIELDS:
            if t in (1, 2):
                table[i][n]["value"] = s[n]
                continue
            blob = {3: lambda v: v, 5: lambda v: json.dumps(v).encode(), 4: lambda v: v.tobytes()}[t](s[n])
            if blob:
                ptr = data_ptr + len(data)
                table[i][n]["data_ptr"] = ptr
                table[i][n]["data_size"] = len(blob)
                allocs.append((ptr, len(blob)))
                data += blob
    alloc_ptr = data_ptr + len(data)
    h = np.zeros(1, HeaderType)[0]
    h["version_major"], h["version_minor"], h["flags"] = 1, 0, 1
    h["num_samples"], h["num_fields"], h["page_size"] = len(SAMPLES), len(FIELDS), page
    h["field_desc_ptr"], h["metadata_ptr"], h["data_ptr"], h["alloc_table_ptr"] = desc_ptr, meta_ptr, data_ptr, alloc_ptr
    out = bytearray(MAGIC + h.tobytes())
    for n, t in FIELDS:
        d = np.zeros(1, FieldDescType)[0]
        d["name"], d["type_id"], d["metadata_size"] = n.encode(), t, META[t].itemsize
        if t == 4:
            d["arguments"][:] = np.frombuffer(ndarray_args("f32", (2, 3)), "u1")
        out += d.tobytes()
    out += bytes(meta_ptr - len(out)) + table.tobytes()
    out += bytes(data_ptr - len(out)) + data
    a = np.zeros(len(allocs), AllocEntryType)
    for i, (p, s) in enumerate(allocs):
        a[i]["ptr"], a[i]["size"] = p, s
    out += np.sort(a, order="ptr").tobytes()
    open(path, "wb").write(out)


def read(path):
    b = open(path, "rb").read()
    assert b[:9] == MAGIC
    h = np.frombuffer(b[9:73], HeaderType)[0]
    assert (h["version_major"], h["flags"] & 1) == (1, 1)
    descs = np.frombuffer(b, FieldDescType, count=int(h["num_fields"]), offset=int(h["field_desc_ptr"]))
    fields = [(bytes(d["name"]).rstrip(b"\0").decode(), int(d["type_id"]), d) for d in descs]
    row = np.dtype([(n, META[t]) for n, t, _ in fields], align=True)
    table = np.frombuffer(b, row, count=int(h["num_samples"]), offset=int(h["metadata_ptr"]))
    allocs = np.frombuffer(b[int(h["alloc_table_ptr"]):], AllocEntryType)
    sizes = {int(a["ptr"]): int(a["size"]) for a in allocs}
    out = {}
    for n, t, d in fields:
        vals = []
        for r in table:
            m = r[n]
            if t in (1, 2):
                vals.append(m["value"].item())
                continue
            p, s = int(m["data_ptr"]), int(m["data_size"])
            blob = b[p:p + s] if s else b""
            if s:
                assert sizes[p] == s
            if t == 3:
                vals.append(blob.hex())
            elif t == 5:
                vals.append(json.loads(blob))
            else:
                a = bytes(d["arguments"])
                dt = {"f32": "<f4"}[a[:8].rstrip(b"\0").decode()]
                shape = [int.from_bytes(a[16 + 8 * i:24 + 8 * i], "little") for i in range(a[8])]
                vals.append(np.frombuffer(blob, dt).reshape(shape).tolist())
        out[n] = vals
    print(json.dumps(out, sort_keys=True))


if __name__ == "__main__":
    {"write": write, "read": read}[sys.argv[1]](sys.argv[2])
