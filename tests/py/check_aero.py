"""Independent AERO reader following the reference reader's checks
(blake3, msgpack, zstandard), used by the tests on files `wtxt` writes.

Usage: check_aero.py FILE.aero EXPECTED.json
Prints "ok" or raises."""
import hashlib, json, struct, sys

import blake3
import msgpack
import zstandard


def main(path, expected_path):
    b = open(path, "rb").read()
    (magic, major, minor, hsize, toc_off, toc_len, st_off, st_len, flags, uuid, _r) = struct.unpack(
        "<4sHHIQQQQQ16s28s", b[:96])
    assert magic == b"AERO" and (major, minor) == (0, 1) and hsize == 96 and flags == 0
    (count, _, _) = struct.unpack("<IIQ", b[toc_off:toc_off + 16])
    st = b[st_off:st_off + st_len]
    chunks = {}
    for i in range(count):
        e = struct.unpack("<4sIQQQIIQ32s", b[toc_off + 16 + 80 * i:toc_off + 96 + 80 * i])
        fourcc, cflags, off, length, ulen, noff, nlen, _, h = e
        assert off % 16 == 0
        stored = b[off:off + length]
        data = zstandard.ZstdDecompressor().decompress(stored, max_output_size=ulen) if cflags & 1 else stored
        assert len(data) == ulen and blake3.blake3(data).digest() == h, "BLAKE3 of chunk %d" % i
        chunks[(fourcc, st[noff:noff + nlen].decode())] = data
    # AIP-0001: BLAKE3 over the covered ranges with every TOC hash zeroed.
    for (fourcc, name), data in chunks.items():
        if fourcc == b"IHSH":
            ih = msgpack.unpackb(data, raw=False)
            region = bytearray(b)
            for i in range(count):
                at = toc_off + 16 + 80 * i + 48
                region[at:at + 32] = bytes(32)
            h = blake3.blake3()
            for s, e in ih["covered_ranges"]:
                h.update(bytes(region[s:e]))
            assert ih["algo"] == "blake3-256" and h.digest() == ih["digest"], "IHSH"
        if fourcc == b"PHSH":
            ph = msgpack.unpackb(data, raw=False)
            shard = chunks[(b"WTSH", ph["shard_name"])]
            p = ph["page_size"]
            pages = [shard[i:i + p] for i in range(0, len(shard), p)]
            assert [blake3.blake3(x).digest() for x in pages] == ph["digests"], "PHSH"
    tidx = msgpack.unpackb(chunks[(b"TIDX", "tensors")], raw=False)
    expected = json.load(open(expected_path))
    assert uuid.hex() == expected["uuid"]
    meta = json.loads(chunks[(b"MJSN", "meta.json")])
    assert meta["model_name"] == expected["model_name"]
    codes = ["f16", "f32", "bf16", "f64", "i8", "u8", "i16", "u16", "i32", "u32", "i64", "u64", "bool"]
    by_name = {t["name"]: t for t in tidx["tensors"]}
    for t in expected["tensors"]:
        e = by_name[t["name"]]
        raw = chunks[(b"WTSH", "weights.shard%d" % e["shard_id"])][e["data_off"]:e["data_off"] + e["data_len"]]
        if e["dtype"] == 0x8000:
            assert t["dtype"] == "u8" and [e["data_len"]] == t["shape"] and "quant_params" in e, t["name"]
        else:
            assert codes[e["dtype"]] == t["dtype"] and e["shape"] == t["shape"], t["name"]
        assert hashlib.sha256(raw).hexdigest() == t["sha256"], t["name"]
        if e.get("hash_b3"):
            assert blake3.blake3(raw).hexdigest() == e["hash_b3"]
    print("ok")


if __name__ == "__main__":
    main(*sys.argv[1:])
