#!/usr/bin/env python3
"""Move the built-in model's MTP head (`mtp.*`) between an HF folder, a small safetensors file,
`mtplx forge train-mtp`'s optimizer state and a GGUF. Pure Python: no torch, no numpy.

    mtp_head_io.py extract HF_DIR -o head.safetensors          # mtp.* tensors only (bf16, ~7 MB)
    mtp_head_io.py merge HF_DIR head.safetensors -o NEW_DIR     # copy of HF_DIR with that head
    mtp_head_io.py to-opt HF_DIR -o init.opt [--seed 1234]      # train-mtp state holding the head
    mtp_head_io.py from-gguf MODEL.gguf -o head.safetensors     # the head a GGUF carries (F32/BF16)

Why: a head trained on a GPU comes back from the device as mtp.* alone (the whole folder is over
the per-file limit), and `forge train-mtp --resume X` continues from any head written as X.opt,
so train-mtp can continue from a trained head instead of one initialised from the trunk.

Formats. safetensors: u64 little-endian header length, JSON header {name: {dtype, shape,
data_offsets}}, raw little-endian bytes. train-mtp's .opt (src/forge/train_mtp.c, write_opt):
"MTPLXOPT", u64[4] = {version 1, parameter count, step, data-order rng state}, then weights, Adam
first and second moments, each f32 in head_layout_init's order (src/forge/mtp_head.c); a matrix is
stored as GGUF ne0 x ne1, i.e. HF's [out, in] row-major (qwen3's q/k are not permuted by convert).
Leaves out: Qwen2-style q/k/v biases (the built-in model has none) and every other architecture.
"""
import argparse
import array
import json
import os
import shutil
import struct
import sys

# HF name (after "mtp.") -> GGUF name (after "blk.N."), in train-mtp's head_layout order.
HEAD = [("pre_fc_norm_embedding.weight", "nextn.enorm.weight"),
        ("pre_fc_norm_hidden.weight", "nextn.hnorm.weight"),
        ("fc.weight", "nextn.eh_proj.weight"),
        ("norm.weight", "nextn.shared_head_norm.weight"),
        ("layers.0.input_layernorm.weight", "attn_norm.weight"),
        ("layers.0.self_attn.q_proj.weight", "attn_q.weight"),
        ("layers.0.self_attn.k_proj.weight", "attn_k.weight"),
        ("layers.0.self_attn.v_proj.weight", "attn_v.weight"),
        ("layers.0.self_attn.q_norm.weight", "attn_q_norm.weight"),
        ("layers.0.self_attn.k_norm.weight", "attn_k_norm.weight"),
        ("layers.0.self_attn.o_proj.weight", "attn_output.weight"),
        ("layers.0.post_attention_layernorm.weight", "ffn_norm.weight"),
        ("layers.0.mlp.gate_proj.weight", "ffn_gate.weight"),
        ("layers.0.mlp.up_proj.weight", "ffn_up.weight"),
        ("layers.0.mlp.down_proj.weight", "ffn_down.weight")]

ST_SIZE = {"BF16": 2, "F16": 2, "F32": 4}


# ---- safetensors ---------------------------------------------------------------------------

def st_read(path):
    """(header without __metadata__, metadata, bytes of the data section)."""
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        sys.exit("%s: too short for safetensors" % path)
    n = struct.unpack("<Q", blob[:8])[0]
    if 8 + n > len(blob):
        sys.exit("%s: header length %d past the end of the file (%d bytes)" % (path, n, len(blob)))
    hdr = json.loads(blob[8:8 + n])
    meta = hdr.pop("__metadata__", None)
    data = memoryview(blob)[8 + n:]
    for name, t in hdr.items():
        a, b = t["data_offsets"]
        count = 1
        for s in t["shape"]:
            count *= s
        if not (0 <= a <= b <= len(data)) or b - a != count * ST_SIZE.get(t["dtype"], 0):
            sys.exit("%s: tensor %s: offsets %s do not fit its %s %s in %d data bytes" % (
                path, name, t["data_offsets"], t["dtype"], t["shape"], len(data)))
    return hdr, meta, data


def st_write(path, tensors, meta=None):
    """tensors: {name: (dtype, shape, bytes)}, written in name order (as safetensors' own writer)."""
    hdr, off, order = {}, 0, sorted(tensors)
    if meta is not None:
        hdr["__metadata__"] = meta
    for name in order:
        dt, shape, b = tensors[name]
        hdr[name] = {"dtype": dt, "shape": list(shape), "data_offsets": [off, off + len(b)]}
        off += len(b)
    h = json.dumps(hdr, separators=(",", ":")).encode("utf-8")
    h += b" " * ((8 - len(h) % 8) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for name in order:
            f.write(tensors[name][2])
    os.replace(tmp, path)


def st_tensors(path, prefix=""):
    hdr, meta, data = st_read(path)
    return {k: (t["dtype"], t["shape"], bytes(data[t["data_offsets"][0]:t["data_offsets"][1]]))
            for k, t in hdr.items() if k.startswith(prefix)}, meta


# ---- bf16 <-> f32 --------------------------------------------------------------------------

def bf16_to_f32(b):
    """bf16 is the top half of an f32: little-endian, its two bytes become bytes 2-3."""
    out = bytearray(2 * len(b))
    out[2::4] = b[0::2]
    out[3::4] = b[1::2]
    return bytes(out)


def f32_to_bf16(b):
    """Round to nearest even (what torch's .to(torch.bfloat16) does); NaN stays NaN."""
    u = array.array("I")
    u.frombytes(b)
    if sys.byteorder != "little":
        u.byteswap()
    out = array.array("H", bytes(2 * len(u)))
    for i, x in enumerate(u):
        if (x & 0x7F800000) == 0x7F800000 and (x & 0x007FFFFF):
            out[i] = (x >> 16) | 0x40
        else:
            out[i] = ((x + 0x7FFF + ((x >> 16) & 1)) >> 16) & 0xFFFF
    if sys.byteorder != "little":
        out.byteswap()
    return out.tobytes()


def as_f32(dt, b):
    if dt == "F32":
        return b
    if dt == "BF16":
        return bf16_to_f32(b)
    sys.exit("unsupported dtype %s (expected BF16 or F32)" % dt)


# ---- GGUF (reading only what a head needs) -------------------------------------------------

GGUF_SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q",
               11: "<q", 12: "<d"}
GGML_TYPE = {0: ("F32", 4), 30: ("BF16", 2)}


def gguf_head(path):
    """{mtp.* HF name: (dtype, HF shape, bytes)} for the GGUF's MTP block (blk.<block_count-1>)."""
    with open(path, "rb") as f:
        blob = f.read()
    pos = 0

    def take(fmt):
        nonlocal pos
        v = struct.unpack_from(fmt, blob, pos)
        pos += struct.calcsize(fmt)
        return v[0]

    def string():
        nonlocal pos
        n = take("<Q")
        if pos + n > len(blob):
            sys.exit("%s: a string runs past the end of the file" % path)
        s = blob[pos:pos + n].decode("utf-8")
        pos += n
        return s

    def value(t):
        if t in GGUF_SCALAR:
            return take(GGUF_SCALAR[t])
        if t == 8:
            return string()
        if t == 9:
            et, n = take("<I"), take("<Q")
            return [value(et) for _ in range(n)]
        sys.exit("%s: unknown GGUF value type %d" % (path, t))

    if blob[:4] != b"GGUF":
        sys.exit("%s: not a GGUF file" % path)
    pos = 4
    ver = take("<I")
    if ver not in (2, 3):
        sys.exit("%s: GGUF version %d, expected 2 or 3" % (path, ver))
    n_t, n_kv = take("<Q"), take("<Q")
    kv = {}
    for _ in range(n_kv):
        k = string()
        kv[k] = value(take("<I"))
    infos = []
    for _ in range(n_t):
        name = string()
        nd = take("<I")
        ne = [take("<Q") for _ in range(nd)]
        infos.append((name, ne, take("<I"), take("<Q")))
    align = kv.get("general.alignment", 32)
    base = (pos + align - 1) // align * align
    arch = kv["general.architecture"]
    blk = kv["%s.block_count" % arch] - 1
    if kv.get("%s.nextn_predict_layers" % arch, 0) < 1:
        sys.exit("%s: no MTP head (%s.nextn_predict_layers is 0)" % (path, arch))
    by_name = {i[0]: i for i in infos}
    out = {}
    for hf, gg in HEAD:
        name = "blk.%d.%s" % (blk, gg)
        if name not in by_name:
            sys.exit("%s: tensor %s missing" % (path, name))
        _, ne, ty, off = by_name[name]
        if ty not in GGML_TYPE:
            sys.exit("%s: %s has GGML type %d; a head kept in F32 or BF16 is expected" % (path, name, ty))
        dt, sz = GGML_TYPE[ty]
        count = 1
        for x in ne:
            count *= x
        a = base + off
        if a + count * sz > len(blob):
            sys.exit("%s: %s runs past the end of the file" % (path, name))
        out["mtp." + hf] = (dt, list(reversed(ne)), blob[a:a + count * sz])
    return out


# ---- commands ------------------------------------------------------------------------------

def head_of(hf_dir):
    t, _ = st_tensors(os.path.join(hf_dir, "model.safetensors"), "mtp.")
    want = {"mtp." + h for h, _ in HEAD}
    if set(t) != want:
        sys.exit("%s: mtp.* tensors %s, expected %s" % (hf_dir, sorted(t), sorted(want)))
    return t


def cmd_extract(a):
    t = head_of(a.hf_dir)
    st_write(a.output, t, {"format": "pt"})
    print("%s: %d head tensors, %d bytes" % (a.output, len(t), os.path.getsize(a.output)))


def cmd_merge(a):
    src = os.path.join(a.hf_dir, "model.safetensors")
    allt, meta = st_tensors(src)
    new, _ = st_tensors(a.head, "mtp.")
    old = {k for k in allt if k.startswith("mtp.")}
    if set(new) != old:
        sys.exit("%s: mtp.* tensors %s differ from %s's %s" % (a.head, sorted(new), src, sorted(old)))
    for k, (dt, shape, b) in new.items():
        if dt != allt[k][0] or list(shape) != list(allt[k][1]):
            sys.exit("%s: %s is %s %s, the folder's is %s %s" % (a.head, k, dt, shape, allt[k][0], allt[k][1]))
        allt[k] = (dt, shape, b)
    os.makedirs(a.output, exist_ok=True)
    for f in os.listdir(a.hf_dir):
        if f != "model.safetensors" and os.path.isfile(os.path.join(a.hf_dir, f)):
            shutil.copy(os.path.join(a.hf_dir, f), os.path.join(a.output, f))
    st_write(os.path.join(a.output, "model.safetensors"), allt, meta)
    print("%s: %s with the head of %s" % (a.output, a.hf_dir, a.head))


def cmd_to_opt(a):
    t = head_of(a.hf_dir)
    w = b"".join(as_f32(t["mtp." + h][0], t["mtp." + h][2]) for h, _ in HEAD)
    n = len(w) // 4
    if a.seed == 0:
        sys.exit("--seed 0: train-mtp's xorshift data order needs a non-zero state")
    with open(a.output, "wb") as f:
        f.write(b"MTPLXOPT")
        f.write(struct.pack("<4Q", 1, n, 0, a.seed))  # version, parameters, step 0, rng state
        f.write(w)
        f.write(bytes(8 * n))  # Adam moments: zero, as at a fresh start
    print("%s: %d head parameters at step 0; pass --resume %s to forge train-mtp" % (
        a.output, n, a.output[:-4] if a.output.endswith(".opt") else a.output))


def cmd_from_gguf(a):
    t = gguf_head(a.gguf)
    out = {}
    for k, (dt, shape, b) in t.items():
        out[k] = ("BF16", shape, b if dt == "BF16" else f32_to_bf16(b))
    st_write(a.output, out, {"format": "pt"})
    print("%s: %d head tensors from %s (as BF16)" % (a.output, len(out), a.gguf))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("extract")
    s.add_argument("hf_dir")
    s.add_argument("-o", "--output", required=True)
    s.set_defaults(fn=cmd_extract)
    s = sub.add_parser("merge")
    s.add_argument("hf_dir")
    s.add_argument("head")
    s.add_argument("-o", "--output", required=True)
    s.set_defaults(fn=cmd_merge)
    s = sub.add_parser("to-opt")
    s.add_argument("hf_dir")
    s.add_argument("-o", "--output", required=True, help="X.opt (train-mtp reads it for --resume X)")
    s.add_argument("--seed", type=int, default=1234, help="data-order state, as train-mtp --seed")
    s.set_defaults(fn=cmd_to_opt)
    s = sub.add_parser("from-gguf")
    s.add_argument("gguf")
    s.add_argument("-o", "--output", required=True)
    s.set_defaults(fn=cmd_from_gguf)
    a = p.parse_args()
    a.fn(a)


if __name__ == "__main__":
    main()
