#!/usr/bin/env python3
"""Head-only self-distillation of the built-in model's MTP head: trunk and embedding frozen, one GPU.

    python3 tools/finetune_head.py --init HF_DIR --data DIR --out OUT            # the H200 run
    python3 tools/finetune_head.py --data DIR --out OUT --smoke                  # CPU, tiny, random

Loads an HF folder made by tools/train_default.py (model.safetensors, or model.safetensors.xz when
carried compressed; config.json; tokenizer.json), freezes every trunk parameter and the tied
embedding (the head's lm_head is that embedding, so it must not move) and trains only `mtp.*`,
for each configuration of --configs in turn, each from the same starting head:

    loss = mean over depths d of  kl * CE(softmax(trunk logits), head_d)     (= KL + const)
                                + top1 * CE(argmax trunk, head_d)
                                + text * CE(text, head_d)

with the trunk's logits for the same target position as teacher (detached; the bf16 weights of
the folder under bf16 autocast, i.e. not the runtime's Q8_0 trunk). Depths weigh the same: chained
acceptance needs all three. KL to the teacher is the principled default: sum_x min(p, q), the
sampled acceptance, is 1 - TV(p, q) >= 1 - sqrt(KL / 2); top1 is the greedy surrogate. `gen=F`
draws a share F of each batch from the trunk's own greedy continuations of training text (a
pool made once, with a KV cache, checked against train_default.greedy_generate), because greedy
acceptance is measured along such continuations, which loop and repeat far more than books do.

Evaluation is train_default.py's own (held-out perplexity, which cannot change; teacher-forced
agreement; greedy chained acceptance and simulated tokens per verification; expected acceptance at
temperature 0.7) on its prompts (the first --eval-prompts of them: 32 is train_default's set,
128 a less noisy one), before and after every configuration, with the weights rounded to bf16.

The shipped head (models/MODEL_CARD.md, 2026-12-01) is config kl=1,gen=0.5 of one H200 run of
    python3 tools/finetune_head.py --init .carry/ft/hf --data .carry/ft/data --out $OUT \
            --time-budget 420 --train-seconds 150
(the two default configs; 123 s of training, 141 M tokens; the pool alone took 128 s).

Writes into --out (at most 8 files): head-NAME.safetensors (mtp.* in bf16, ~7 MB: merge it into
the folder with tools/mtp_head_io.py merge), golden-NAME.json (made exactly as train_default.py
makes tests/fixtures/default/golden.json: full bf16 folder written, reloaded on the CPU, golden()),
finetune_log.json and finetune_stdout.log. tools/finetune_head.sh packs the inputs for the device
and compares the result in the runtime.
"""
import argparse
import glob
import json
import lzma
import math
import os
import shutil
import sys
import tempfile
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train_default as td  # noqa: E402  (imports numpy and torch, and starts td.T0)

np, torch, F = td.np, td.torch, td.F
log = td.log
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LOSS_KEYS = ("kl", "top1", "text", "gen", "lr")


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--init", help="HF folder of the model whose head is fine-tuned")
    p.add_argument("--data", required=True, help="dir with train-*.txt.xz and valid.txt.xz")
    p.add_argument("--out", required=True)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--smoke", action="store_true", help="tiny random model on the CPU, every code path")
    p.add_argument("--device", default="auto")
    p.add_argument("--configs", default="kl=1;kl=1,gen=0.5",
                   help="';'-separated runs, each a ','-list of key=value; keys: kl, top1, text (loss "
                        "weights), gen (share of on-policy windows), lr")
    p.add_argument("--train-seconds", type=float, default=150.0, help="training time of each config")
    p.add_argument("--time-budget", type=float, default=540.0, help="whole run, start to end")
    p.add_argument("--reserve", type=float, default=40.0, help="seconds kept per config for eval + export")
    p.add_argument("--seq-len", type=int, default=512)
    p.add_argument("--micro-batch", type=int, default=128)
    p.add_argument("--batch-tokens", type=int, default=65536)
    p.add_argument("--lr", type=float, default=3e-4, help="peak AdamW LR (the joint run ended near 2e-4)")
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--min-lr-frac", type=float, default=0.1)
    p.add_argument("--wd", type=float, default=0.0)
    p.add_argument("--compile", default="auto", choices=["auto", "on", "off"])
    p.add_argument("--max-train-chars", type=int, default=0, help="0 = all")
    p.add_argument("--chunk-chars", type=int, default=32768)
    p.add_argument("--gen-seqs", type=int, default=16384, help="on-policy pool: windows")
    p.add_argument("--gen-dtype", default="fp32", choices=["fp32", "bf16"],
                   help="precision of the pool's greedy decoding (bf16: faster; the runtime's trunk is Q8_0 "
                        "anyway, so neither is its exact greedy path)")
    p.add_argument("--gen-prefix", type=int, default=64, help="text tokens before the continuation")
    p.add_argument("--gen-batch", type=int, default=4096, help="sequences per KV-cached decode (35 GB)")
    p.add_argument("--valid-chars", type=int, default=2_000_000)
    p.add_argument("--eval-prompts", default="32,128", help="prompt counts (prefixes of one draw)")
    p.add_argument("--eval-prompt-len", type=int, default=64)
    p.add_argument("--eval-gen", type=int, default=128)
    p.add_argument("--temperature", type=float, default=0.7)
    p.add_argument("--golden-check", default=os.path.join(REPO, "tests/fixtures/default/golden.json"),
                   help="compare the golden of --init with this file ('' = skip)")
    a = p.parse_args()
    if a.smoke:
        a.seq_len, a.micro_batch, a.batch_tokens, a.warmup = 64, 8, 1024, 3
        a.max_train_chars, a.valid_chars, a.gen_seqs, a.gen_prefix, a.gen_batch = 1_000_000, 20_000, 32, 16, 16
        a.eval_prompts, a.eval_prompt_len, a.eval_gen = "4,6", 16, 24
        a.train_seconds, a.time_budget, a.reserve = min(a.train_seconds, 8.0), 240.0, 20.0
        a.golden_check = ""
    elif not a.init:
        p.error("--init is required (except with --smoke)")
    a.prompt_counts = sorted(int(x) for x in a.eval_prompts.split(","))
    a.runs = []
    for spec in a.configs.split(";"):
        cfg = {"kl": 0.0, "top1": 0.0, "text": 0.0, "gen": 0.0, "lr": a.lr}
        for kv in spec.split(","):
            k, v = kv.split("=")
            if k.strip() not in LOSS_KEYS:
                p.error("--configs: unknown key %r in %r (keys: %s)" % (k, spec, ", ".join(LOSS_KEYS)))
            cfg[k.strip()] = float(v)
        if cfg["kl"] + cfg["top1"] + cfg["text"] <= 0 or not 0 <= cfg["gen"] <= 1:
            p.error("--configs: %r needs a positive loss weight and 0 <= gen <= 1" % spec)
        cfg["name"] = spec.replace("=", "").replace(",", "_").replace(".", "p")
        a.runs.append(cfg)
    return a


# --------------------------------------------------------------------------------------------
# model and data


def load_init(a):
    """(config dict c, head depth, {name: bf16 tensor}, tokenizer) of --init (--smoke: tiny, random)."""
    if a.smoke:
        c = {"hidden_size": 64, "intermediate_size": 176, "num_hidden_layers": 2, "num_attention_heads": 4,
             "num_key_value_heads": 2, "head_dim": 16, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
             "max_position_embeddings": 256, "vocab_size": 320}
        m = td.Model(c)
        m.init_weights(a.seed)
        sd = {k: v.detach().to(torch.bfloat16).contiguous() for k, v in m.state_dict().items()}
        return c, 3, sd, td.ByteTok()
    from tokenizers import Tokenizer
    tk = td.HFTok(Tokenizer.from_file(os.path.join(a.init, "tokenizer.json")))
    with open(os.path.join(a.init, "config.json")) as f:
        cfg = json.load(f)
    c = {k: cfg[k] for k in ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                             "num_key_value_heads", "head_dim", "rms_norm_eps", "rope_theta",
                             "max_position_embeddings", "vocab_size")}
    depth = int(cfg.get("mtplx_mtp", {}).get("depth_trained", 3))
    st = os.path.join(a.init, "model.safetensors")
    if not os.path.exists(st) and os.path.exists(st + ".xz"):
        tmp = tempfile.mkdtemp(prefix="mtplx_init_")
        with lzma.open(st + ".xz", "rb") as fi, open(os.path.join(tmp, "model.safetensors"), "wb") as fo:
            shutil.copyfileobj(fi, fo, 1 << 24)
        st = os.path.join(tmp, "model.safetensors")
    return c, depth, td.st_load(st), tk


def model_from(c, sd):
    m = td.Model(c)
    missing, unexpected = m.load_state_dict({k: v.float() for k, v in sd.items()}, strict=False)
    assert not missing and not unexpected, (missing, unexpected)
    return m


def read_data(a, tk):
    files = sorted(glob.glob(os.path.join(a.data, "train-*.txt.xz")))
    if not files:
        sys.exit("%s: no train-*.txt.xz" % a.data)
    books = []
    for fn in files:
        # errors="ignore": a shard cut by bytes for the trip to the device may end inside a character
        with lzma.open(fn, "rt", encoding="utf-8", errors="ignore") as f:
            books += td.split_books(f.read(a.max_train_chars) if a.max_train_chars > 0 else f.read())
        if a.max_train_chars:
            break
    vtext = td.read_xz(os.path.join(a.data, "valid.txt.xz"))
    train_ids = td.encode_books(tk, books, a.chunk_chars)
    valid_ids = td.encode_books(tk, td.split_books(vtext), a.chunk_chars)
    ppl_region = td.encode_books(tk, td.split_books(vtext[:a.valid_chars]), a.chunk_chars)
    return files, train_ids, valid_ids, ppl_region


# --------------------------------------------------------------------------------------------
# the trunk's own continuations, with a KV cache


@torch.no_grad()
def generate_cached(model, prompts, n_new, dtype=torch.float32):
    """Greedy continuation of prompts [B, P] by the trunk, one token per step over a KV cache.
    Returns [B, P + n_new]. Same math as td.make_layer_fn. dtype float32: all in f32; bfloat16:
    matmuls, cache and attention in bf16 under autocast, the residual stream in f32 (as the
    teacher runs), faster."""
    if dtype == torch.float32:
        return _generate_cached(model, prompts, n_new, dtype)
    with torch.autocast(device_type=prompts.device.type, dtype=dtype):
        return _generate_cached(model, prompts, n_new, dtype)


def _generate_cached(model, prompts, n_new, cdt):
    c = model.c
    H, KV, hd, eps = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"], c["rms_norm_eps"]
    B, P = prompts.shape
    L = P + n_new
    layers = model.model.layers
    kc = [torch.empty(B, KV, L, hd, device=prompts.device, dtype=cdt) for _ in layers]
    vc = [torch.empty(B, KV, L, hd, device=prompts.device, dtype=cdt) for _ in layers]

    def attend(q, k, v, causal):
        try:
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
        except TypeError:  # torch < 2.5
            r = H // KV
            return F.scaled_dot_product_attention(q, k.repeat_interleave(r, 1), v.repeat_interleave(r, 1),
                                                  is_causal=causal)

    def forward(ids, t0):
        T = ids.shape[1]
        x = model.model.embed_tokens(ids)
        cos, sin = model.cos[t0:t0 + T], model.sin[t0:t0 + T]
        for li, layer in enumerate(layers):
            at, mlp = layer.self_attn, layer.mlp
            n = td.rms_norm(x, layer.input_layernorm.weight, eps)
            q = F.linear(n, at.q_proj.weight).view(B, T, H, hd)
            k = F.linear(n, at.k_proj.weight).view(B, T, KV, hd)
            v = F.linear(n, at.v_proj.weight).view(B, T, KV, hd).transpose(1, 2)
            q = td.rms_norm(q, at.q_norm.weight, eps).transpose(1, 2)
            k = td.rms_norm(k, at.k_norm.weight, eps).transpose(1, 2)
            q = q * cos + td.rotate_half(q) * sin
            k = k * cos + td.rotate_half(k) * sin
            kc[li][:, :, t0:t0 + T] = k
            vc[li][:, :, t0:t0 + T] = v
            o = attend(q.to(cdt), kc[li][:, :, :t0 + T], vc[li][:, :, :t0 + T], causal=T > 1)
            x = x + F.linear(o.transpose(1, 2).reshape(B, T, H * hd), at.o_proj.weight)
            m = td.rms_norm(x, layer.post_attention_layernorm.weight, eps)
            x = x + F.linear(F.silu(F.linear(m, mlp.gate_proj.weight)) * F.linear(m, mlp.up_proj.weight),
                             mlp.down_proj.weight)
        return model.trunk_logits_from_h(x[:, -1])

    seq = torch.empty(B, L, dtype=torch.long, device=prompts.device)
    seq[:, :P] = prompts
    logits = forward(prompts, 0)  # one prefill with a causal mask (T > 1)
    for t in range(P, L):
        seq[:, t] = logits.argmax(-1)
        if t + 1 < L:
            logits = forward(seq[:, t:t + 1], t)
    return seq


def make_pool(a, model, train_ids, Wlen, dev, R):
    """[gen_seqs, Wlen] windows: gen_prefix tokens of training text, then the trunk's greedy tokens."""
    t = time.time()
    rng = np.random.RandomState(a.seed + 7)
    P = a.gen_prefix
    starts = rng.randint(0, len(train_ids) - P, size=a.gen_seqs)
    prompts = torch.from_numpy(np.stack([train_ids[s:s + P] for s in starts]).astype(np.int64)).to(dev)
    # the cached decoder against train_default's (no cache) on a few prompts, both fp32
    k, n_chk = min(4, a.gen_seqs), min(32, Wlen - P)
    ref = td.greedy_generate(model, prompts[:k], n_chk)
    mine = generate_cached(model, prompts[:k], n_chk)
    same = [bool((ref[i] == mine[i]).all()) for i in range(k)]
    R["pool"] = {"check_identical": same}
    if sum(same) < k - 1:
        log("!!!!!!!! the KV-cached generator disagrees with greedy_generate (%s): no on-policy pool" % same)
        return None
    gdt = torch.bfloat16 if a.gen_dtype == "bf16" else torch.float32
    if gdt != torch.float32:  # how far the pool's precision moves the greedy path, on the same prompts
        try:
            low = generate_cached(model, prompts[:k], n_chk, gdt)
        except Exception as e:
            log("bf16 pool decoder failed (%s) -> f32" % repr(e)[:300])
            gdt, low = torch.float32, mine
            R["pool"]["bf16_failed"] = repr(e)[:300]
        R["pool"]["bf16_token_agreement"] = float((low[:, P:] == mine[:, P:]).float().mean())
        log("bf16 pool decoder: %.3f of the first %d greedy tokens of %d prompts as in f32" % (
            R["pool"]["bf16_token_agreement"], n_chk, k))
    out = []
    for b0 in range(0, a.gen_seqs, a.gen_batch):
        out.append(generate_cached(model, prompts[b0:b0 + a.gen_batch], Wlen - P, gdt).to(torch.int32))
    pool = torch.cat(out)
    distinct = float(np.mean([len(set(r)) / len(r) for r in pool[:256, P:].tolist()]))
    R["pool"].update({"windows": int(pool.shape[0]), "prefix": P, "tokens": int(pool.numel()), "dtype": a.gen_dtype,
                      "seconds": time.time() - t, "distinct_token_share": distinct})
    log("on-policy pool: %d windows of %d (%d text + %d greedy trunk tokens) in %.1fs; cached decoder = "
        "greedy_generate on %d/%d prompts; distinct tokens per continuation %.2f" % (
            pool.shape[0], Wlen, P, Wlen - P, time.time() - t, sum(same), k, distinct))
    return pool


# --------------------------------------------------------------------------------------------
# loss


def kd_eager(q, p):
    """q: head logits, p: the trunk's (no gradient), rows [N, V]. Returns (CE(softmax(p), q), which
    carries the gradient of KL(p || q); entropy of p; top-1 agreement), in fp32."""
    lp = torch.log_softmax(p.float(), -1)
    pp = lp.exp()
    ce = -(pp * torch.log_softmax(q.float(), -1)).sum(-1).mean()
    ent = -(pp * lp).sum(-1).mean()
    agree = (q.argmax(-1) == p.argmax(-1)).float().mean()
    return ce, ent.detach(), agree.detach()


def head_loss(model, w, D, cfg, kd):
    """w: [B, T + 1 + D] windows. Returns (loss, [kl_1..D, agree_1..D] detached)."""
    T = w.shape[1] - 1 - D
    V = model.c["vocab_size"]
    with torch.no_grad():
        emb_all = model.model.embed_tokens(w[:, :T + D])
        h_all = model.hidden(w[:, :T + D], emb=emb_all)
        teacher = model.trunk_logits_from_h(h_all)
    g, total, kls, agrees = h_all[:, :T], 0.0, [], []
    for d in range(1, D + 1):
        g = model.mtp_step(g, None, emb=emb_all[:, d:d + T])
        ql = model.mtp_logits(g).reshape(-1, V)
        pl = teacher[:, d:d + T].reshape(-1, V)
        ce, ent, agree = kd(ql, pl)
        ld = cfg["kl"] * ce
        if cfg["top1"]:
            ld = ld + cfg["top1"] * F.cross_entropy(ql.float(), pl.argmax(-1))
        if cfg["text"]:
            ld = ld + cfg["text"] * F.cross_entropy(ql.float(), w[:, d + 1:d + 1 + T].reshape(-1))
        total = total + ld / D
        kls.append(ce.detach() - ent)
        agrees.append(agree)
    return total, kls + agrees


# --------------------------------------------------------------------------------------------
# evaluation and export


@torch.no_grad()
def evaluate(model, a, ppl_ids, prompts, D, dev):
    """train_default's evaluation (weights must already be bf16-exact)."""
    t = time.time()
    if dev.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    model.eval()
    ev = {"perplexity": td.eval_perplexity(model, ppl_ids, a.seq_len, D, dev)}
    for n in a.prompt_counts:
        ev["acceptance_%d" % n] = td.eval_acceptance(model, prompts[:n], a.eval_gen, D, a.temperature)
    ev["seconds"] = time.time() - t
    model.train()
    return ev


def eval_line(ev):
    p = ev["perplexity"]
    s = "ppl %.3f | agree %s" % (p.get("ppl", float("nan")),
                                 "/".join("%.3f" % x for x in p.get("mtp_top1_agree_with_trunk", [])))
    for k in sorted((k for k in ev if k.startswith("acceptance_")), key=lambda k: int(k.split("_")[1])):
        x = ev[k]
        s += " | %s prompts: chained %s, tok/verify %.3f (expected %.3f), T=%.1f chained %s (%.3f)" % (
            k.split("_")[1], "/".join("%.3f" % v for v in x["greedy_chained_accept"]),
            x["greedy_simulated_tokens_per_verify"], x["greedy_expected_tokens_per_verify"], x["temperature"],
            "/".join("%.3f" % v for v in x["sampled_chained_accept"]), x["sampled_expected_tokens_per_verify"])
    return s


def make_golden(c, sd, valid_ids, tk, D):
    """As train_default.py: the bf16 folder's weights written, reloaded into a fresh CPU model."""
    stage = tempfile.mkdtemp(prefix="mtplx_golden_")
    path = os.path.join(stage, "model.safetensors")
    td.st_save(sd, path)
    ref = model_from(c, td.st_load(path))
    ref.eval()
    shutil.rmtree(stage, ignore_errors=True)
    gseqs = [valid_ids[1000:1012].astype(np.int64).tolist(), valid_ids[5000:5033].astype(np.int64).tolist()]
    gold = td.golden(ref, gseqs, D)
    for gs in gold["sequences"]:
        gs["text"] = tk.decode(gs["ids"])
    return gold


def golden_diff(mine, theirs):
    """Exact fields (ids, argmaxes, draft chains) and the largest float difference."""
    exact, worst = True, 0.0
    for s, o in zip(mine["sequences"], theirs["sequences"]):
        for k in ("ids", "next_greedy_appended", "positions", "trunk_argmax_all", "draft_chain"):
            exact = exact and s[k] == o[k]
        for k in ("trunk", "mtp_depth1"):
            for r, q in zip(s[k], o[k]):
                exact = exact and r["argmax"] == q["argmax"]
                worst = max([worst] + [abs(x - y) for x, y in zip(r["first64"], q["first64"])])
    return exact and len(mine["sequences"]) == len(theirs["sequences"]), worst


# --------------------------------------------------------------------------------------------
# main


def main():
    a = parse_args()
    dev = td.start_run(a, "finetune_stdout.log")
    R = {"recipe": {k: v for k, v in vars(a).items()}, "timings": {},
         "versions": {"python": sys.version.split()[0], "torch": torch.__version__, "numpy": np.__version__},
         "teacher": "the --init folder's bf16 trunk under bf16 autocast (not the runtime's Q8_0 trunk)"}
    log("mtplx finetune_head: seed", a.seed, "device", dev, "configs", [r["name"] for r in a.runs],
        "%.0fs each, budget %.0fs" % (a.train_seconds, a.time_budget), "smoke" if a.smoke else "")
    if dev.type == "cuda":
        log("gpu", torch.cuda.get_device_name(0))

    t = time.time()
    c, D, init_sd, tk = load_init(a)
    model = model_from(c, init_sd).to(dev)
    for p_ in model.model.parameters():
        p_.requires_grad_(False)
    head_params = list(model.mtp.parameters())
    init_head = {k: v.detach().clone() for k, v in model.mtp.state_dict().items()}
    R["model"] = dict(c, depth=D, head_params=sum(p_.numel() for p_ in head_params),
                      frozen_params=sum(p_.numel() for p_ in model.model.parameters()))
    files, train_ids, valid_ids, ppl_region = read_data(a, tk)
    R["data"] = {"train_files": [os.path.basename(f) for f in files], "train_tokens": int(len(train_ids)),
                 "valid_tokens": int(len(valid_ids)), "ppl_tokens": int(len(ppl_region))}
    log("model %s, depth %d, %d head parameters trained, %d frozen; train %.2f M tokens from %s, valid %.2f M "
        "(%.1fs)" % (a.init or "random (smoke)", D, R["model"]["head_params"], R["model"]["frozen_params"],
                     len(train_ids) / 1e6, R["data"]["train_files"], len(valid_ids) / 1e6, time.time() - t))
    R["timings"]["setup"] = time.time() - t

    # the prompts of train_default.py's evaluation (the same draw; more of them for the larger count)
    rng = np.random.RandomState(a.seed + 2)
    lo, hi = len(ppl_region) + 1, len(valid_ids) - a.eval_prompt_len - 1
    if hi <= lo:
        lo = 0
    starts = rng.randint(lo, hi, size=max(a.prompt_counts))
    prompts = torch.tensor(np.stack([valid_ids[s:s + a.eval_prompt_len] for s in starts]).astype(np.int64),
                           device=dev)
    ppl_ids = torch.from_numpy(ppl_region.astype(np.int64))

    t = time.time()
    R["before"] = evaluate(model, a, ppl_ids, prompts, D, dev)
    log("before: " + eval_line(R["before"]))
    if a.golden_check and os.path.exists(a.golden_check):
        with open(a.golden_check) as f:
            theirs = json.load(f)
        exact, worst = golden_diff(make_golden(c, init_sd, valid_ids, tk, D), theirs)
        R["golden_check"] = {"file": a.golden_check, "exact_fields_equal": exact, "max_abs_logit_diff": worst}
        log("%s golden of --init vs %s: ids/argmax/draft chains equal %s, max |dlogit| %.3g" % (
            "MATCH:" if exact and worst < 1e-3 else "!!!!!!!! MISMATCH !!!!!!!!", a.golden_check, exact, worst))
    R["timings"]["before"] = time.time() - t

    T, mb = a.seq_len, a.micro_batch
    Wlen = T + 1 + D
    pool = None
    if any(r["gen"] > 0 for r in a.runs):
        pool = make_pool(a, model, train_ids, Wlen, dev, R)
    data = torch.from_numpy(train_ids.astype(np.int32)).to(dev)
    ar = torch.arange(Wlen, device=dev)

    kd, compiled = kd_eager, False
    if a.compile == "on" or (a.compile == "auto" and dev.type == "cuda"):
        td.raise_compile_limits()
        try:
            model.fn = torch.compile(model.eager_fn, dynamic=False)
            kd = torch.compile(kd_eager, dynamic=False)
            compiled = True
        except Exception as e:
            log("torch.compile unavailable:", repr(e)[:300])
    accum = max(1, a.batch_tokens // (mb * T))
    n_data = data.numel()
    R["configs"] = {}

    for ri, cfg in enumerate(a.runs):
        name = cfg["name"]
        if cfg["gen"] > 0 and pool is None:
            log("config %s skipped: no on-policy pool" % name)
            R["configs"][name] = {"config": cfg, "skipped": "no on-policy pool"}
            continue
        with torch.no_grad():
            model.mtp.load_state_dict(init_head)
        opt = torch.optim.AdamW(head_params, lr=cfg["lr"], betas=(0.9, 0.95), eps=1e-8, weight_decay=a.wd,
                                **({"fused": True} if dev.type == "cuda" else {}))
        order = torch.Generator(device=dev)
        order.manual_seed(a.seed + 1)
        n_gen = int(round(cfg["gen"] * mb))

        def batch():
            st = torch.randint(0, n_data - Wlen + 1, (mb - n_gen,), device=dev, generator=order)
            w = data[st[:, None] + ar[None, :]]
            if n_gen:
                rows = torch.randint(0, pool.shape[0], (n_gen,), device=dev, generator=order)
                w = torch.cat([w, pool[rows]])
            return w.long()

        def lr_at(step, total):
            if step < a.warmup:
                return cfg["lr"] * (step + 1) / a.warmup
            p_ = min(1.0, (step - a.warmup) / max(1, total - a.warmup)) if total else 0.0
            return cfg["lr"] * (a.min_lr_frac + (1 - a.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * p_)))

        def run_step(step, total):
            lr = lr_at(step, total)
            for gr in opt.param_groups:
                gr["lr"] = lr
            acc = None
            for _ in range(accum):
                with torch.autocast(device_type=dev.type, dtype=torch.bfloat16):
                    loss, parts = head_loss(model, batch(), D, cfg, kd)
                (loss / accum).backward()
                pt = torch.stack([loss.detach()] + parts)
                acc = pt if acc is None else acc + pt
            gn = torch.nn.utils.clip_grad_norm_(head_params, 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
            return acc / accum, gn, lr

        left = len(a.runs) - ri  # this config and those after it share what the budget has left
        share = (td.T0 + a.time_budget - time.time() - a.reserve * left) / left
        deadline = time.time() + min(a.train_seconds, share)
        log("config %s: %s; %d x %d windows (%d on-policy) = %d tokens/step; training %.0fs" % (
            name, {k: cfg[k] for k in LOSS_KEYS}, accum, mb, n_gen, accum * mb * T, deadline - time.time()))
        model.train()
        t0 = time.time()
        step, total, hist, acc_h, n_h, last = 0, None, [], None, 0, time.time()
        t_meas = None
        while time.time() < deadline and (total is None or step < total):
            if step == 0:
                while True:
                    try:
                        parts, gn, lr = run_step(0, None)
                        break
                    except Exception as e:
                        opt.zero_grad(set_to_none=True)
                        if not compiled:
                            raise
                        log("torch.compile failed at the first step -> eager. " + repr(e)[:500])
                        log(traceback.format_exc()[-2000:])
                        model.fn, kd, compiled = model.eager_fn, kd_eager, False
                log("first step %.1fs (compile %s)" % (time.time() - t0, compiled))
            else:
                parts, gn, lr = run_step(step, total)
            step += 1
            acc_h = parts if acc_h is None else acc_h + parts
            n_h += 1
            if step == 2:
                if dev.type == "cuda":
                    torch.cuda.synchronize()
                t_meas = time.time()
            if step == a.warmup and t_meas is not None:
                if dev.type == "cuda":
                    torch.cuda.synchronize()
                dt = (time.time() - t_meas) / (step - 2)
                total = max(step + 1, step + int((deadline - time.time()) / dt * 0.97))
                log("  %.3f s/step (%.0f tok/s) -> %d steps" % (dt, accum * mb * T / dt, total))
            if time.time() - last >= 10.0 or step == a.warmup:
                v = (acc_h / n_h).tolist()
                el = time.time() - t0
                rec = {"step": step, "t": round(el, 1), "lr": lr, "loss": v[0], "kl": v[1:1 + D],
                       "agree": v[1 + D:], "grad_norm": float(gn), "tokens": step * accum * mb * T}
                hist.append(rec)
                log("  step %d/%s loss %.4f kl %s agree %s lr %.2e gnorm %.2f | %.0f tok/s | ETA %s" % (
                    step, total or "?", v[0], " ".join("%.3f" % x for x in rec["kl"]),
                    " ".join("%.3f" % x for x in rec["agree"]), lr, float(gn), rec["tokens"] / max(el, 1e-9),
                    ("%.0fs" % ((total - step) * el / step)) if total else "?"))
                acc_h, n_h, last = None, 0, time.time()
        if dev.type == "cuda":
            torch.cuda.synchronize()
        t_train = time.time() - t0
        tokens = step * accum * mb * T
        with torch.no_grad():
            for p_ in head_params:
                p_.data = p_.data.to(torch.bfloat16).float()
        fn_train, model.fn = model.fn, model.eager_fn
        after = evaluate(model, a, ppl_ids, prompts, D, dev)
        model.fn = fn_train
        log("after %s: %s" % (name, eval_line(after)))
        t = time.time()
        head = {k: v.detach().to(torch.bfloat16).cpu().contiguous() for k, v in model.state_dict().items()
                if k.startswith("mtp.")}
        td.st_save(head, os.path.join(a.out, "head-%s.safetensors" % name))
        sd = dict(init_sd)
        sd.update(head)
        trunk_same = all(torch.equal(init_sd[k], v.detach().to(torch.bfloat16).cpu())
                         for k, v in model.state_dict().items() if not k.startswith("mtp."))
        gold = make_golden(c, sd, valid_ids, tk, D)
        with open(os.path.join(a.out, "golden-%s.json" % name), "w") as f:
            json.dump(gold, f, indent=1)
        log("wrote head-%s.safetensors and golden-%s.json (%.1fs); trunk and embedding bit-identical to "
            "--init: %s" % (name, name, time.time() - t, trunk_same))
        R["configs"][name] = {"config": cfg, "steps": step, "planned_steps": total, "tokens": tokens,
                              "train_s": t_train, "tokens_per_s": tokens / max(t_train, 1e-9),
                              "compiled": compiled, "history": hist, "after": after,
                              "trunk_unchanged": trunk_same}
        with open(os.path.join(a.out, "finetune_log.json"), "w") as f:
            json.dump(R, f, indent=1)

    big = "acceptance_%d" % max(a.prompt_counts)
    done = {k: v for k, v in R["configs"].items() if "after" in v}
    b0 = R["before"][big]["greedy_simulated_tokens_per_verify"]
    log("SUMMARY (%s prompts, greedy simulated tokens/verify; T=%.1f expected): before %.3f (%.3f)" % (
        big.split("_")[1], a.temperature, b0, R["before"][big]["sampled_expected_tokens_per_verify"]))
    for k, v in done.items():
        x = v["after"][big]
        log("  %-22s %.3f (%.3f)  chained %s  agree %s  %d steps %.1f M tokens %.0fs" % (
            k, x["greedy_simulated_tokens_per_verify"], x["sampled_expected_tokens_per_verify"],
            "/".join("%.3f" % y for y in x["greedy_chained_accept"]),
            "/".join("%.3f" % y for y in v["after"]["perplexity"]["mtp_top1_agree_with_trunk"]),
            v["steps"], v["tokens"] / 1e6, v["train_s"]))
    if done:
        R["best"] = max(done, key=lambda k: done[k]["after"][big]["greedy_simulated_tokens_per_verify"])
        log("best by the training script's greedy simulation: %s (the runtime decides)" % R["best"])
    R["timings"]["total"] = td.elapsed()
    with open(os.path.join(a.out, "finetune_log.json"), "w") as f:
        json.dump(R, f, indent=1)
    log("done in %.0fs; --out: %s" % (td.elapsed(), " ".join(sorted(os.listdir(a.out)))))


if __name__ == "__main__":
    main()
