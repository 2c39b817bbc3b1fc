"""Writes the hostile inputs (memory amplification) into DIR.

Each is small on disk and declares or expands to far more than wtxt's heap
cap: real data that must be read in bounded memory, or overlapping and
reused bytes that must be refused before anything is inflated.

Usage: hostile.py DIR MIB
  MIB: how much a "really large" file expands to, in MiB (>= 256 to matter).
Writes:
  npz_deflated.npz   8 deflated members of zeros, MIB in all
  npz_overlap.npz    one 1 MiB stored member listed 3000 times in the directory
  aero_window.aero   2000 tensors over one 1 MiB window of a shard
  aero_tidx.aero     a TIDX of 1,000,000 zero-length tensors (zstd, ~1 MB)
  fold_zstd.fold     2 zstd NPZ0 chunks of zeros, MIB in all
  volp_body.volp     a zstd body of MIB (at most the seed's 256 MiB) zeros
  scrypt22.age       an age header whose scrypt work factor is 2^22
"""
import base64, hashlib, io, json, os, struct, sys, zipfile, zlib

import blake3
import msgpack
import zstandard

MIB = 1 << 20


def npy_header(shape, descr="|u1"):
    d = "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }" % (
        descr, "".join("%d," % s for s in shape))
    pad = 64 - (10 + len(d) + 1) % 64
    h = (d + " " * pad + "\n").encode()
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) + h


def zeros(n, piece=MIB):
    z = bytes(piece)
    while n > 0:
        k = min(n, piece)
        yield z[:k]
        n -= k


def npz_deflated(path, total):
    each = total // 8
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for i in range(8):
            with z.open("m%d.npy" % i, "w", force_zip64=True) as f:
                f.write(npy_header((each,)))
                for p in zeros(each):
                    f.write(p)


def npz_overlap(path):
    data = npy_header((MIB,)) + bytes(MIB)
    crc = zlib.crc32(data)
    name = b"a.npy"
    local = struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, 0, 0, 0, crc, len(data), len(data), len(name), 0)
    body = local + name + data
    cd = b""
    n = 3000
    for i in range(n):
        nm = b"m%d.npy" % i
        cd += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, 0, 0, 0, 0, crc, len(data), len(data),
                          len(nm), 0, 0, 0, 0, 0, 0) + nm
    eocd = struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, n, n, len(cd), len(body), 0)
    open(path, "wb").write(body + cd + eocd)


def aero(path, tensors, shard_len, compress_tidx):
    """A minimal AERO 0.1: a TIDX chunk and one shard of zeros."""
    tidx = msgpack.packb({"tensors": tensors}, use_bin_type=True)
    stored = zstandard.ZstdCompressor().compress(tidx) if compress_tidx else tidx
    names = [b"tensors", b"weights.shard0"]
    st = b"".join(names)
    header_len, toc_off = 96, 96
    toc_len = 16 + 80 * 2
    st_off = toc_off + toc_len
    align = lambda x: (x + 15) // 16 * 16
    tidx_off = align(st_off + len(st))
    shard_off = align(tidx_off + len(stored))
    entries = [
        (b"TIDX", 1 if compress_tidx else 0, tidx_off, len(stored), len(tidx), 0, len(names[0]), blake3.blake3(tidx).digest()),
        (b"WTSH", 0, shard_off, shard_len, shard_len, len(names[0]), len(names[1]),
         blake3.blake3(bytes(shard_len)).digest()),
    ]
    out = bytearray(struct.pack("<4sHHIQQQQQ16s28s", b"AERO", 0, 1, header_len, toc_off, toc_len, st_off, len(st), 0,
                                bytes(16), bytes(28)))
    out += struct.pack("<IIQ", len(entries), 0, 0)
    for fourcc, flags, off, length, ulen, noff, nlen, h in entries:
        out += struct.pack("<4sIQQQIIQ32s", fourcc, flags, off, length, ulen, noff, nlen, 0, h)
    out += st
    out += bytes(tidx_off - len(out)) + stored
    out += bytes(shard_off - len(out)) + bytes(shard_len)
    open(path, "wb").write(bytes(out))


def crc32c(data):
    table = crc32c.table
    c = 0xFFFFFFFF
    for b in data:
        c = table[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


crc32c.table = [
    (lambda c: [c := (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1 for _ in range(8)][-1])(i) for i in range(256)
]


def npz_stream_of_zeros(n, key):
    """The bytes of an .npz holding one stored u8 array of n zeros, as pieces."""
    data_head = npy_header((n,))
    size = len(data_head) + n
    crc = zlib.crc32(data_head)
    for p in zeros(n):
        crc = zlib.crc32(p, crc)
    name = key.encode() + b".npy"
    yield struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, 0, 0, 0, crc, size, size, len(name), 0) + name
    yield data_head
    yield from zeros(n)
    cd = struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, 0, 0, 0, 0, crc, size, size, len(name), 0, 0, 0, 0,
                     0, 0) + name
    local_len = 30 + len(name) + size
    yield cd + struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 1, 1, len(cd), local_len, 0)


def fold_zstd(path, total):
    each = total // 2
    out = bytearray(28)
    chunks = []
    for i in range(2):
        cctx = zstandard.ZstdCompressor()
        buf = io.BytesIO()
        ulen = 0
        with cctx.stream_writer(buf, closefd=False) as w:
            for p in npz_stream_of_zeros(each, "z%d" % i):
                ulen += len(p)
                w.write(p)
        comp = buf.getvalue()
        off = len(out)
        crc = crc32c(comp)
        out += struct.pack(">4sIQQII", b"NPZ0", 1, ulen, len(comp), crc, 0) + comp
        chunks.append({"name": "a%d" % i, "ctype": "NPZ0", "flags": 1, "offset": off, "header_len": 32,
                       "comp_len": len(comp), "uncomp_len": ulen, "crc32c": crc,
                       "sha256": hashlib.sha256(comp).hexdigest(), "ecc_algo": "none", "ecc_len": 0})
    index = json.dumps({"format": "fold", "version": "1.2.0", "metadata": {}, "chunks": chunks}).encode()
    out[0:28] = struct.pack(">8sIQQ", b"FOLDv1\0\0", 28, len(out), len(index))
    open(path, "wb").write(bytes(out) + index)


def volp_body(path, total):
    n = min(total, 256 * MIB)
    header = json.dumps({"version": 1, "shape": [n // MIB, 1024, 1024], "dtype": "uint8", "compression": "zstd",
                         "scale": 1.0, "offset": 0.0}).encode()
    buf = io.BytesIO()
    with zstandard.ZstdCompressor().stream_writer(buf, closefd=False) as w:
        for p in zeros(n // MIB * MIB):
            w.write(p)
    open(path, "wb").write(b"VOLP" + struct.pack("<I", len(header)) + header + buf.getvalue())


def scrypt22(path):
    b64 = lambda b: base64.b64encode(b).decode().rstrip("=")
    head = "age-encryption.org/v1\n-> scrypt %s 22\n%s\n--- %s\n" % (b64(os.urandom(16)), b64(os.urandom(32)),
                                                                     b64(os.urandom(32)))
    binary = head.encode() + os.urandom(16) + os.urandom(64)
    text = base64.b64encode(binary).decode()
    lines = [text[i:i + 64] for i in range(0, len(text), 64)]
    open(path, "w").write("-----BEGIN AGE ENCRYPTED FILE-----\n" + "\n".join(lines) +
                          "\n-----END AGE ENCRYPTED FILE-----\n")


def main(out, mib):
    total = int(mib) * MIB
    os.makedirs(out, exist_ok=True)
    j = lambda n: os.path.join(out, n)
    npz_deflated(j("npz_deflated.npz"), total)
    npz_overlap(j("npz_overlap.npz"))
    aero(j("aero_window.aero"), [{"name": "t%d" % i, "dtype": 5, "shape": [MIB], "shard_id": 0, "data_off": 0,
                                   "data_len": MIB, "flags": 0} for i in range(2000)], MIB, False)
    aero(j("aero_tidx.aero"), [{"name": "t%d" % i, "dtype": 5, "shape": [0], "shard_id": 0, "data_off": 0,
                                 "data_len": 0, "flags": 0} for i in range(1000000)], 16, True)
    fold_zstd(j("fold_zstd.fold"), total)
    volp_body(j("volp_body.volp"), total)
    scrypt22(j("scrypt22.age"))


if __name__ == "__main__":
    main(*sys.argv[1:])
