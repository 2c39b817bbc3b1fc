"""Independent FOLD reader (reedsolo, zstandard, numpy), used by the tests to
check files `wtxt` writes: header, index, per-block Reed-Solomon parity,
CRC32C, SHA-256, chunk_hashes, manifest_hash, decompression, NPZ members.

Usage: check_fold.py FILE.fold EXPECTED.json CHUNKS_DIR
Prints "ok" or raises."""
import hashlib, io, json, struct, sys

import numpy as np
import reedsolo
import zstandard

TABLE = []
for i in range(256):
    c = i
    for _ in range(8):
        c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
    TABLE.append(c)


def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def main(path, expected_path, chunks_dir):
    b = open(path, "rb").read()
    magic, hlen, ioff, ilen = struct.unpack(">8sIQQ", b[:28])
    assert magic == b"FOLDv1\0\0" and hlen == 28 and ioff + ilen == len(b)
    index = json.loads(b[ioff:ioff + ilen])
    meta = index["metadata"]
    want = meta.pop("manifest_hash")
    got = hashlib.sha256(json.dumps(meta, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    assert want == "sha256:" + got, "manifest_hash"
    expected = json.load(open(expected_path))
    tensors = {}
    payloads = {}
    for c in index["chunks"]:
        o = c["offset"]
        ctype, flags, ulen, clen, crc, elen = struct.unpack(">4sIQQII", b[o:o + 32])
        assert ctype.decode() == c["ctype"] and flags == c["flags"] and clen == c["comp_len"]
        comp = b[o + 32:o + 32 + clen]
        ecc = b[o + 32 + clen:o + 32 + clen + elen]
        if c["ecc_algo"] != "none":
            n = int(c["ecc_algo"][3:-1])
            rs = reedsolo.RSCodec(n)
            k = 255 - n
            blocks = [comp[i:i + k] for i in range(0, len(comp), k)]
            assert len(ecc) == n * len(blocks)
            for j, blk in enumerate(blocks):
                assert bytes(rs.encode(blk))[-n:] == ecc[j * n:(j + 1) * n], "parity of block %d" % j
        assert crc32c(comp) == crc == c["crc32c"], "crc32c"
        assert "sha256:" + hashlib.sha256(comp).hexdigest() == c["sha256"] == meta["chunk_hashes"][c["name"]]
        raw = zstandard.ZstdDecompressor().decompress(comp, max_output_size=ulen) if flags == 1 else comp
        assert len(raw) == ulen == c["uncomp_len"]
        payloads[c["name"]] = raw
        if c["ctype"] == "NPZ0":
            with np.load(io.BytesIO(raw)) as z:
                for k in z.files:
                    tensors[k] = z[k]
    for t in expected["tensors"]:
        a = tensors[t["name"]]
        assert str(a.dtype) == {"i64": "int64", "f32": "float32", "f64": "float64", "bool": "bool"}[t["dtype"]]
        assert list(a.shape) == t["shape"]
        assert hashlib.sha256(a.astype(a.dtype.newbyteorder("<")).tobytes()).hexdigest() == t["sha256"], t["name"]
    for c in expected["chunks"]:
        if c["ctype"] != "NPZ0":
            assert payloads[c["name"]] == open(chunks_dir + "/" + c["file"].split("/")[-1], "rb").read(), c["name"]
    for k, v in expected["index_metadata"].items():
        assert meta[k] == v, k
    print("ok")


if __name__ == "__main__":
    main(*sys.argv[1:])
