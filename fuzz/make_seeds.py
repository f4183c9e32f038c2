#!/usr/bin/env python3
"""make_seeds.py OUTDIR: small valid seed files for the fuzzers
(OUTDIR/gguf/*.gguf, OUTDIR/safetensors/*.safetensors). Written from the
GGUF and safetensors specs, independently of the C writer."""
import json
import os
import struct
import sys


def gguf_str(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def gguf(kvs, tensors, align=32):
    out = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs))
    for key, typ, val in kvs:
        out += gguf_str(key) + struct.pack("<I", typ) + val
    off, blobs = 0, []
    for name, dims, ttype, data in tensors:
        out += gguf_str(name) + struct.pack("<I", len(dims))
        out += b"".join(struct.pack("<Q", d) for d in dims)
        out += struct.pack("<IQ", ttype, off)
        blobs.append((off, data))
        off += (len(data) + align - 1) // align * align
    out += b"\0" * (-len(out) % align)
    for o, data in blobs:
        out += data + b"\0" * (-len(data) % align)
    return out


def main():
    root = sys.argv[1]
    os.makedirs(f"{root}/gguf", exist_ok=True)
    os.makedirs(f"{root}/safetensors", exist_ok=True)
    kvs = [
        ("general.architecture", 8, gguf_str("llama")),
        ("llama.block_count", 4, struct.pack("<I", 1)),
        ("llama.rope.freq_base", 6, struct.pack("<f", 10000.0)),
        ("t.i8", 1, struct.pack("<b", -3)),
        ("t.u16", 2, struct.pack("<H", 9)),
        ("t.i64", 11, struct.pack("<q", -9)),
        ("t.f64", 12, struct.pack("<d", 0.5)),
        ("t.bool", 7, b"\x01"),
        ("tokenizer.ggml.tokens", 9, struct.pack("<IQ", 8, 2) + gguf_str("a") + gguf_str("b")),
        ("tokenizer.ggml.scores", 9, struct.pack("<IQ", 6, 2) + struct.pack("<2f", 0.0, -1.0)),
    ]
    f32 = struct.pack("<8f", *range(8))
    q8 = struct.pack("<H", 0x3C00) + bytes(range(32))  # one Q8_0 block
    tensors = [("token_embd.weight", [4, 2], 0, f32), ("blk.0.ffn_up.weight", [32], 8, q8)]
    with open(f"{root}/gguf/seed1.gguf", "wb") as f:
        f.write(gguf(kvs, tensors))
    with open(f"{root}/gguf/seed2.gguf", "wb") as f:
        f.write(gguf(kvs[:2] + [("general.alignment", 4, struct.pack("<I", 64))], tensors, 64))
    with open(f"{root}/gguf/seed3.gguf", "wb") as f:
        f.write(gguf(kvs, []))

    def st(entries):
        hdr, data, off = {"__metadata__": {"format": "pt"}}, b"", 0
        for name, dtype, shape, blob in entries:
            hdr[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(blob)]}
            data += blob
            off += len(blob)
        h = json.dumps(hdr).encode()
        h += b" " * (-len(h) % 8)
        return struct.pack("<Q", len(h)) + h + data

    with open(f"{root}/safetensors/seed1.safetensors", "wb") as f:
        f.write(st([("a", "F32", [2, 4], f32), ("b", "F16", [2], b"\0<\0@"),
                    ("c", "BF16", [1, 1, 2], b"\x80?\0@")]))
    with open(f"{root}/safetensors/seed2.safetensors", "wb") as f:
        f.write(st([("x", "F32", [8], f32)]))


main()
