"""Independent check of a large FOLD against a safetensors holding the same
tensors (for benchmarks; tests/py/check_fold.py, whose pure-Python CRC32C
is too slow past a few MB, checks the small files the tests write): header,
index, SHA-256 of every stored payload, zstd decode to uncomp_len, NPZ
members equal byte for byte to the safetensors tensors.

Usage: check_fold_large.py FILE.fold FILE.safetensors
"""
import hashlib, io, json, struct, sys
import numpy as np, zstandard
fold, st = sys.argv[1], sys.argv[2]
b = open(fold, "rb")
magic, hlen, ioff, ilen = struct.unpack(">8sIQQ", b.read(28))
assert magic == b"FOLDv1\0\0" and hlen == 28
b.seek(ioff); index = json.loads(b.read(ilen))
s = open(st, "rb"); n = struct.unpack("<Q", s.read(8))[0]; hdr = json.loads(s.read(n)); base = 8 + n
seen = {}
for c in index["chunks"]:
    b.seek(c["offset"]); ctype, flags, ulen, clen, crc, elen = struct.unpack(">4sIQQII", b.read(32))
    comp = b.read(clen)
    assert "sha256:" + hashlib.sha256(comp).hexdigest() == c["sha256"] == index["metadata"]["chunk_hashes"][c["name"]]
    raw = zstandard.ZstdDecompressor().decompress(comp, max_output_size=ulen) if flags == 1 else comp
    del comp
    assert len(raw) == ulen, c["name"]
    with np.load(io.BytesIO(raw)) as z:
        for k in z.files:
            a = z[k]; t = hdr[k]; s.seek(base + t["data_offsets"][0])
            want = s.read(t["data_offsets"][1] - t["data_offsets"][0])
            assert a.tobytes() == want and list(a.shape) == t["shape"], k
            seen[k] = c["name"]
    del raw
assert set(seen) == set(k for k in hdr if k != "__metadata__"), (set(seen), hdr.keys())
print("ok", len(index["chunks"]), "chunks:", sorted(set(seen.values())), len(seen), "tensors")
