#!/usr/bin/env bash
# Smoke test of tools/train_default.py: tiny model on CPU, every stage end to end (< 2 min).
# Uses `tokenizers` / `transformers` / `safetensors` when importable, stand-ins otherwise.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PY="${PYTHON:-/usr/bin/python3}"
DATA="${DATA:-$ROOT/../shared/data/gutenberg}"
OUT="$(mktemp -d /tmp/mtplx_smoke.XXXXXX)"
trap 'rm -rf "$OUT"' EXIT
"$PY" "$ROOT/tools/train_default.py" --data "$DATA" --out "$OUT" --smoke
"$PY" - "$OUT" <<'PYEOF'
import json, os, struct, sys, tarfile, io
out = sys.argv[1]
parts = sorted(p for p in os.listdir(out) if p.startswith("default-hf.tar.part-"))
assert len(parts) >= 2, parts
blob = b"".join(open(os.path.join(out, p), "rb").read() for p in parts)
names = tarfile.open(fileobj=io.BytesIO(blob)).getnames()
for need in ["default-hf/config.json", "default-hf/generation_config.json", "default-hf/tokenizer.json",
             "default-hf/tokenizer_config.json", "default-hf/model.safetensors", "golden.json", "train_log.json"]:
    assert need in names, (need, names)
st = open(os.path.join(out, "default-hf/model.safetensors"), "rb").read()
n = struct.unpack("<Q", st[:8])[0]
hdr = json.loads(st[8:8 + n])
keys = sorted(k for k in hdr if k != "__metadata__")
cfg = json.load(open(os.path.join(out, "default-hf/config.json")))
L = cfg["num_hidden_layers"]
want = {"model.embed_tokens.weight", "model.norm.weight", "mtp.fc.weight", "mtp.norm.weight",
        "mtp.pre_fc_norm_embedding.weight", "mtp.pre_fc_norm_hidden.weight"}
for pre in ["model.layers.%d." % i for i in range(L)] + ["mtp.layers.0."]:
    for s in ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
              "self_attn.q_norm", "self_attn.k_norm", "input_layernorm", "post_attention_layernorm",
              "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"]:
        want.add(pre + s + ".weight")
assert set(keys) == want, set(keys) ^ want
assert all(hdr[k]["dtype"] == "BF16" for k in keys)
d = cfg["hidden_size"]
assert hdr["mtp.fc.weight"]["shape"] == [d, 2 * d]
end = max(v["data_offsets"][1] for k, v in hdr.items() if k != "__metadata__")
assert 8 + n + end == len(st), "safetensors size"
assert cfg["tie_word_embeddings"] and cfg["num_nextn_predict_layers"] == 1 and cfg["model_type"] == "qwen3"
tc = json.load(open(os.path.join(out, "default-hf/tokenizer_config.json")))
assert "chat_template" not in tc and tc["add_bos_token"] is False
g = json.load(open(os.path.join(out, "golden.json")))
assert [len(s["ids"]) for s in g["sequences"]] == [12, 33]
for s in g["sequences"]:
    assert len(s["trunk"]) == 4 and len(s["trunk"][0]["first64"]) == 64
    assert len(s["draft_chain"]) == len(s["ids"]) and len(s["draft_chain"][0]) == 3
log = json.load(open(os.path.join(out, "train_log.json")))
acc = log["eval"]["acceptance"]
assert len(acc["greedy_chained_accept"]) == 3 and log["train"]["steps"] > 0
assert log["timings"]["total"] < log["recipe"]["time_budget"] + 5, log["timings"]
print("smoke OK: %d parts, %d tensors, ppl %.2f, steps %d, total %.1fs of %.0fs budget" % (
    len(parts), len(keys), log["eval"]["perplexity"]["ppl"], log["train"]["steps"],
    log["timings"]["total"], log["recipe"]["time_budget"]))
PYEOF
