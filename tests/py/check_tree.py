#!/usr/bin/env python3
"""An independent check of a WTXT snapshot of the tree digest form
(docs/FORMAT.md section 19), written from the document alone with Python's
hashlib, hmac and base64: every chunk decoded and its SHA-256 and CRC32C
recomputed, each array's digest from its chunks, each HMAC under the tree
form's derived key, `sha256_all` from the `arr` lines, `merkle_this` and
`fastxor`; a split snapshot's head is joined with its parts by their
`part` lines. Prints one JSON object of what it computed and exits 1 on any
mismatch (naming it), so the Rust tests hold the writer to a second
computation rather than to itself.

    check_tree.py HEAD.wtxt [--hmac-key FILE] [--pubkey SPKI.pem] [--bind-only]

With `--pubkey`, the `sign` line is checked too (Ed25519 over the four
header lines, through the `cryptography` package). With `--hmac-key`, the
keyed tag that binds the file (`wtxt.bind` on the audit line, section 5)
must be there and hold, and every salt must derive from `gen` and the
array's name. `--bind-only` checks just that, in a file of either digest
form.
"""
import base64
import hashlib
import hmac
import json
import os
import struct
import sys


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli), bit by bit: slow, and no library's."""
    crc = 0xFFFFFFFF
    table = crc32c.table
    for b in data:
        crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def _table():
    t = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        t.append(c)
    return t


crc32c.table = _table()


def fields(line: str) -> dict:
    return dict(f.split("=", 1) for f in line.split(" ")[1:] if "=" in f)


def text_lines(head: str):
    """The snapshot's lines, a split one's parts joined in (by its `part` lines)."""
    with open(head, "rb") as f:
        lines = f.read().decode("ascii").split("\n")
    assert lines[-1] == "", "the last line ends with LF"
    lines = lines[:-1]
    if not any(l.startswith("part ") for l in lines):
        return lines
    # The head holds the header, every `arr` line and the tail; each part's
    # `begin` line stands where its array's `arr` line goes, and its other
    # framing (its first line, `cont`, `endpart`) is not text of the snapshot.
    arr = {fields(l)["name"]: l for l in lines if l.startswith("arr ")}
    out = [l for l in lines[:5] if not l.startswith("part ") and not l.startswith("arr ")]
    parts_dir = head + ".parts"
    for l in lines:
        if l.startswith("part "):
            ix = int(fields(l)["ix"])
            with open(os.path.join(parts_dir, "%06d.wtxtpart" % ix), "rb") as f:
                body = f.read().decode("ascii").split("\n")[:-1]
            for b in body:
                if b.startswith("begin "):
                    out.append(arr[fields(b)["name"]])
                elif not (b.startswith("WTXT part ") or b.startswith("cont ") or b == "endpart"):
                    out.append(b)
    out.extend(l for l in lines[5:] if l.startswith("audit ") or l == "endwtxt")
    return out


def check_bind(lines, key, problems):
    """The keyed tag over the meta and cap lines, the root's three hashes and
    the audit pairs before it, under HMAC(key, "WT-BIND"); and the salts."""
    meta, root = fields(lines[1]), fields(lines[3])
    audit = [l for l in lines if l.startswith("audit ")]
    if not audit or " wtxt.bind=" not in audit[0]:
        problems.append("no keyed tag")
        return None
    before, tag = audit[0].rsplit(" wtxt.bind=", 1)
    message = (b"WTXT-BIND-1\0" + (lines[1] + "\n" + lines[2] + "\n").encode("ascii")
               + bytes.fromhex(root["sha256_all"]) + bytes.fromhex(root["merkle_prev"])
               + bytes.fromhex(root["merkle_this"]) + before.encode("ascii"))
    derived = hmac.new(key, b"WT-BIND", hashlib.sha256).digest()
    want = hmac.new(derived, message, hashlib.sha256).hexdigest()
    if want != tag:
        problems.append(f"keyed tag: computed {want}, the file says {tag}")
    for l in lines:
        if l.startswith("arr "):
            a = fields(l)
            salt = hashlib.sha256(b"wtxt-salt" + meta["gen"].encode() + b"\0" + a["name"].encode()).hexdigest()[:16]
            if salt != a["salt"]:
                problems.append(f"{a['name']}: salt not derived")
    return want


def main():
    head = sys.argv[1]
    key = None
    if "--hmac-key" in sys.argv:
        with open(sys.argv[sys.argv.index("--hmac-key") + 1]) as f:
            key = bytes.fromhex(f.read().strip())
    lines = text_lines(head)
    assert lines[0] == "WTXT 1", lines[0]
    if "--bind-only" in sys.argv:
        problems = []
        tag = check_bind(lines, key, problems)
        print(json.dumps({"bind": tag, "problems": problems}))
        sys.exit(1 if problems else 0)
    meta, cap, root = fields(lines[1]), lines[2], fields(lines[3])
    assert "digest_tree" in cap.split("=", 1)[1].split(","), cap
    problems, arrays, arr_lines = [], [], []
    raw_all = bytearray()
    i = 4
    while i < len(lines):
        l = lines[i]
        if l.startswith("arr "):
            arr_lines.append(l)
            a = fields(l)
            chunks, data = [], bytearray()
            i += 1
            while lines[i] != "endarr":
                if lines[i].startswith("ch "):
                    ch = fields(lines[i])
                    n = int(ch["lines"])
                    b64 = "".join(x.rsplit(" ", 1)[0] for x in lines[i + 1:i + 1 + n])
                    raw = base64.b64decode(b64, validate=True) if n else b""
                    assert lines[i + 1 + n] == "endch", lines[i + 1 + n]
                    if len(raw) != int(ch["len"]):
                        problems.append(f"{a['name']} chunk {ch['ix']}: length")
                    if hashlib.sha256(raw).hexdigest() != ch["sha256"]:
                        problems.append(f"{a['name']} chunk {ch['ix']}: sha256")
                    if "%08x" % crc32c(raw) != ch["crc32c"]:
                        problems.append(f"{a['name']} chunk {ch['ix']}: crc32c")
                    chunks.append((len(raw), hashlib.sha256(raw).digest()))
                    data += raw
                    i += n + 2
                else:
                    i += 1  # idx
            node = hashlib.sha256(b"WTXT-TREE-1 array\0" + struct.pack("<QQ", len(data), len(chunks)))
            for n, d in chunks:
                node.update(struct.pack("<Q", n) + d)
            digest = node.digest()
            if digest.hex() != a["sha256"]:
                problems.append(f"{a['name']}: array digest")
            if key is not None:
                derived = hmac.new(key, b"WT-TREE", hashlib.sha256).digest()
                tag = hmac.new(derived, bytes.fromhex(a["salt"]) + digest, hashlib.sha256).hexdigest()
                if tag != a["hmac"]:
                    problems.append(f"{a['name']}: hmac")
            arrays.append({"name": a["name"], "sha256": digest.hex(), "chunks": len(chunks)})
            raw_all += data
        i += 1
    top = hashlib.sha256(b"WTXT-TREE-1 all\0" + struct.pack("<Q", len(arr_lines)))
    for l in arr_lines:
        top.update(struct.pack("<Q", len(l)) + l.encode("ascii"))
    sha256_all = top.digest()
    prev = bytes.fromhex(root["merkle_prev"])
    merkle = hashlib.sha256(prev + sha256_all + meta["ts"].encode() + meta["gen"].encode()
                            + meta["build"].encode()).hexdigest()
    raw_all += b"\0" * (-len(raw_all) % 8)
    fx = 0
    for (w,) in struct.iter_unpack("<Q", bytes(raw_all)):
        fx ^= w
    for name, got, want in [("sha256_all", sha256_all.hex(), root["sha256_all"]),
                            ("merkle_this", merkle, root["merkle_this"]), ("fastxor", "%016x" % fx, root["fastxor"])]:
        if got != want:
            problems.append(f"{name}: computed {got}, the root says {want}")
    if key is not None:
        check_bind(lines, key, problems)
    if "--pubkey" in sys.argv:
        from cryptography.hazmat.primitives.serialization import load_pem_public_key
        with open(sys.argv[sys.argv.index("--pubkey") + 1], "rb") as f:
            pub = load_pem_public_key(f.read())
        sign = [l for l in lines[4:6] if l.startswith("sign ")]
        if not sign:
            problems.append("no sign line")
        else:
            try:
                pub.verify(base64.b64decode(fields(sign[0])["ed25519"]), ("\n".join(lines[:4]) + "\n").encode())
            except Exception as e:  # noqa: BLE001 - any failure is the finding
                problems.append(f"signature: {type(e).__name__}")
    print(json.dumps({"sha256_all": sha256_all.hex(), "merkle_this": merkle, "fastxor": "%016x" % fx,
                      "arrays": arrays, "problems": problems}))
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
