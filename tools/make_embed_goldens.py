#!/usr/bin/env python3
"""Golden references for mtplx's embeddings and reranking (tests/test_embed_golden.c).

Creates four TINY random-weight models as HF folders and records what
sentence-transformers / transformers compute for a few texts:

  bert-embed/      BertModel + WordPiece tokenizer + sentence-transformers config
                   (modules.json, 1_Pooling mean pooling, 2_Normalize)
  bert-rerank/     BertForSequenceClassification, 1 label (a cross-encoder):
                   score = sigmoid(logit) of "[CLS] q [SEP] d [SEP]"
  qwen3-embed/     Qwen3Model used as an embedder (Qwen3-Embedding style):
                   last-token pooling, normalize, tokenizer appends <|endoftext|>,
                   query prompt "Instruct: ...\\nQuery:" in
                   config_sentence_transformers.json
  qwen3-reranker/  Qwen3ForCausalLM scored as Qwen3-Reranker: p(yes) from the
                   yes/no logits after the model card's prompt format

Each folder gets golden.json: texts, HF token ids, embeddings / scores of
every input run ALONE (no padding) and the largest difference to the same
inputs run as ONE padded batch (must be ~0: padding must not change results).
Where sentence-transformers can load the folder, its results are recorded
too (st_max_abs_diff) as a check that the folders are what it expects.

Usage (no network; < 60 s on a CPU):
    python3 tools/make_embed_goldens.py --out tests/fixtures/embed
    python3 tools/make_embed_goldens.py --out DIR --files-only   # tokenizers/configs only,
                                                                 # no torch / transformers
The tokenizers are written by hand (tokenizer.json + vocab.txt), not trained,
so --files-only runs anywhere with plain Python.
"""
import argparse, json, os, sys, time

SEED = 4321

# ---------------------------------------------------------------- texts

EMBED_TEXTS = [
    "hello world",
    "The quick brown fox jumps over the lazy dog.",
    "a",
    "Embeddings, and re-ranking: 42 tests!",
    "Cafe na\u00efve quokka zebra-like XYZZY",
]
QUERIES = ["what does the fox do?", "hello"]
RERANK_QUERY = "what does the fox do?"
RERANK_DOCS = [
    "The quick brown fox jumps over the lazy dog.",
    "hello world",
    "Dogs sleep all day; the fox runs.",
    "no",
]
QWEN3_EMBED_PROMPT = ("Instruct: Given a web search query, retrieve relevant passages that "
                      "answer the query\nQuery:")
# Qwen3-Reranker model card (Qwen/Qwen3-Reranker-0.6B, "Transformers Usage")
RR_PREFIX = ("<|im_start|>system\nJudge whether the Document meets the requirements based on "
             "the Query and the Instruct provided. Note that the answer can only be \"yes\" or "
             "\"no\".<|im_end|>\n<|im_start|>user\n")
RR_SUFFIX = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
RR_INSTRUCT = "Given a web search query, retrieve relevant passages that answer the query"


def rr_format(query, doc, instruct=RR_INSTRUCT):
    return "<Instruct>: {}\n<Query>: {}\n<Document>: {}".format(instruct, query, doc)

# ---------------------------------------------------------------- tokenizers (by hand)

BERT_WORDS = """the quick brown fox jumps over lazy dog hello world what does do a an and or
of to in is it for on with as at by this that be are was from not but all day sleep sleeps
runs run re rank ranking embed embedding embeddings test tests cafe naive zebra like dogs
yes no query document passage search web good bad one two three""".split()


def bert_vocab():
    v = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    v += list(".,;:!?'\"-()")
    v += [str(d) for d in range(10)]
    v += [chr(c) for c in range(ord("a"), ord("z") + 1)]
    v += ["##" + chr(c) for c in range(ord("a"), ord("z") + 1)]
    v += ["##" + str(d) for d in range(10)]
    v += ["##s", "##ing", "##ed", "##er", "##ly"]
    for w in BERT_WORDS:
        if w not in v:
            v.append(w)
    out, seen = [], set()
    for p in v:
        if p not in seen:
            seen.add(p)
            out.append(p)
    return out


def bert_tokenizer_json(vocab):
    ids = {p: i for i, p in enumerate(vocab)}
    sp = lambda t: {"id": t, "type_id": 0}
    added = [{"id": ids[t], "content": t, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for t in vocab[:5]]
    return {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": {"type": "BertNormalizer", "clean_text": True, "handle_chinese_chars": True,
                       "strip_accents": None, "lowercase": True},
        "pre_tokenizer": {"type": "BertPreTokenizer"},
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": sp("[CLS]")}, {"Sequence": {"id": "A", "type_id": 0}},
                       {"SpecialToken": sp("[SEP]")}],
            "pair": [{"SpecialToken": sp("[CLS]")}, {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": sp("[SEP]")}, {"Sequence": {"id": "B", "type_id": 1}},
                     {"SpecialToken": {"id": "[SEP]", "type_id": 1}}],
            "special_tokens": {t: {"id": t, "ids": [ids[t]], "tokens": [t]}
                               for t in ("[CLS]", "[SEP]")}},
        "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": True},
        "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
                  "max_input_chars_per_word": 100, "vocab": ids},
    }


def bert_tokenizer_config():
    return {"tokenizer_class": "BertTokenizer", "do_lower_case": True, "model_max_length": 64,
            "cls_token": "[CLS]", "sep_token": "[SEP]", "pad_token": "[PAD]",
            "unk_token": "[UNK]", "mask_token": "[MASK]", "clean_up_tokenization_spaces": True}


def bytes_to_unicode():
    bs = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("\u00a1"), ord("\u00ac") + 1)) +
          list(range(ord("\u00ae"), ord("\u00ff") + 1)))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


QWEN_MERGE_WORDS = ["yes", "no", "the", "Query", "Document", "Instruct", "fox", "hello", "world",
                    "\u0120the", "\u0120fox", "\u0120query", "\u0120search", "\u0120passages"]
QWEN_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
QWEN_ADDED_PLAIN = ["<think>", "</think>"]  # Qwen3: added, not special


def qwen_tokenizer_json(append_eos):
    """Byte-level BPE: the 256 byte symbols plus left-to-right merges that spell a few
    words (so "yes" and "no" are single tokens), then Qwen3's added tokens."""
    b2u = bytes_to_unicode()
    vocab = {b2u[b]: i for i, b in enumerate(sorted(b2u))}
    merges = []
    for w in QWEN_MERGE_WORDS:
        w = "".join(b2u[b] for b in w.encode("utf-8")) if not w.startswith("\u0120") else w
        cur = w[0]
        for ch in w[1:]:
            pair = (cur, ch)
            if pair not in merges:
                merges.append(pair)
            cur += ch
            if cur not in vocab:
                vocab[cur] = len(vocab)
    added = []
    for t in QWEN_SPECIALS + QWEN_ADDED_PLAIN:
        vocab_id = len(vocab) + len(added)
        added.append({"id": vocab_id, "content": t, "single_word": False, "lstrip": False,
                      "rstrip": False, "normalized": False, "special": t in QWEN_SPECIALS})
    eos = added[0]["id"]
    post = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
            "use_regex": False}
    if append_eos:  # what Qwen3-Embedding's tokenizer.json does
        post = {"type": "TemplateProcessing",
                "single": [{"Sequence": {"id": "A", "type_id": 0}},
                           {"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}}],
                "pair": [{"Sequence": {"id": "A", "type_id": 0}},
                         {"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}},
                         {"Sequence": {"id": "B", "type_id": 1}},
                         {"SpecialToken": {"id": "<|endoftext|>", "type_id": 1}}],
                "special_tokens": {"<|endoftext|>": {"id": "<|endoftext|>", "ids": [eos],
                                                     "tokens": ["<|endoftext|>"]}}}
    tok = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                          "use_regex": True},
        "post_processor": post,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                    "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": "", "end_of_word_suffix": "", "fuse_unk": False,
                  "byte_fallback": False, "ignore_merges": False, "vocab": vocab,
                  "merges": [[a, b] for a, b in merges]},
    }
    return tok, len(vocab) + len(added), eos


def qwen_tokenizer_config(padding_side):
    return {"tokenizer_class": "Qwen2Tokenizer", "model_max_length": 128,
            "eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>", "bos_token": None,
            "add_bos_token": False, "padding_side": padding_side, "errors": "replace",
            "clean_up_tokenization_spaces": False}

# ---------------------------------------------------------------- folders

def dump(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False, indent=1)


def st_files(d, dim, mode, prompts=None, max_len=64):
    """sentence-transformers' own folder layout: modules.json, 1_Pooling/config.json,
    sentence_bert_config.json, config_sentence_transformers.json."""
    dump(os.path.join(d, "modules.json"), [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}])
    os.makedirs(os.path.join(d, "1_Pooling"), exist_ok=True)
    os.makedirs(os.path.join(d, "2_Normalize"), exist_ok=True)
    dump(os.path.join(d, "1_Pooling", "config.json"), {
        "word_embedding_dimension": dim, "pooling_mode_cls_token": mode == "cls",
        "pooling_mode_mean_tokens": mode == "mean", "pooling_mode_max_tokens": False,
        "pooling_mode_mean_sqrt_len_tokens": False, "pooling_mode_weightedmean_tokens": False,
        "pooling_mode_lasttoken": mode == "lasttoken", "include_prompt": True})
    dump(os.path.join(d, "sentence_bert_config.json"), {"max_seq_length": max_len,
                                                        "do_lower_case": False})
    dump(os.path.join(d, "config_sentence_transformers.json"), {
        "prompts": prompts or {}, "default_prompt_name": None, "similarity_fn_name": "cosine"})


def write_tokenizers(out):
    """Everything that needs no torch: tokenizer files and sentence-transformers configs."""
    vocab = bert_vocab()
    for name in ("bert-embed", "bert-rerank"):
        d = os.path.join(out, name)
        os.makedirs(d, exist_ok=True)
        dump(os.path.join(d, "tokenizer.json"), bert_tokenizer_json(vocab))
        dump(os.path.join(d, "tokenizer_config.json"), bert_tokenizer_config())
        dump(os.path.join(d, "special_tokens_map.json"), {
            "cls_token": "[CLS]", "sep_token": "[SEP]", "pad_token": "[PAD]",
            "unk_token": "[UNK]", "mask_token": "[MASK]"})
        with open(os.path.join(d, "vocab.txt"), "w", encoding="utf-8") as f:
            f.write("\n".join(vocab) + "\n")
    st_files(os.path.join(out, "bert-embed"), 32, "mean")
    qn = {}
    for name, eos_post, side in (("qwen3-embed", True, "left"), ("qwen3-reranker", False, "left")):
        d = os.path.join(out, name)
        os.makedirs(d, exist_ok=True)
        tj, n_vocab, eos = qwen_tokenizer_json(eos_post)
        dump(os.path.join(d, "tokenizer.json"), tj)
        dump(os.path.join(d, "tokenizer_config.json"), qwen_tokenizer_config(side))
        qn[name] = (n_vocab, eos)
    st_files(os.path.join(out, "qwen3-embed"), 32, "lasttoken",
             prompts={"query": QWEN3_EMBED_PROMPT, "document": ""}, max_len=128)
    return len(vocab), qn

# ---------------------------------------------------------------- models + goldens

def rnd(x):
    return [float("%.7g" % v) for v in x]


def perturb(model, torch):
    """LayerNorm / RMSNorm weights and biases away from their trivial init, so a
    missing bias or a wrong norm shows in the goldens."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name.lower() or name.endswith("bias"):
                p.add_(0.2 * torch.randn_like(p))


def load_tok(d):
    """The folder's tokenizer.json exactly (HF tokenizers underneath)."""
    cfg = json.load(open(os.path.join(d, "tokenizer_config.json")))
    kw = {k: v for k, v in cfg.items() if k.endswith("_token") and v}
    try:
        from transformers import PreTrainedTokenizerFast as Fast
    except ImportError:  # transformers 5 may only have the new name
        from transformers import TokenizersBackend as Fast
    tok = Fast(tokenizer_file=os.path.join(d, "tokenizer.json"), **kw)
    tok.padding_side = cfg.get("padding_side", "right")
    return tok


def try_st(what, fn):
    try:
        return fn()
    except Exception as e:  # record, never fail: the manual reference is the golden
        print("  sentence-transformers %s: skipped (%s: %s)" % (what, type(e).__name__, e))
        return None


def max_diff(a, b, torch):
    return float((torch.as_tensor(a) - torch.as_tensor(b)).abs().max())


def bert_embed(out, n_vocab, torch, T):
    d = os.path.join(out, "bert-embed")
    torch.manual_seed(SEED)
    cfg = T.BertConfig(vocab_size=n_vocab, hidden_size=32, num_hidden_layers=2,
                       num_attention_heads=4, intermediate_size=64, max_position_embeddings=64,
                       type_vocab_size=2, hidden_act="gelu", layer_norm_eps=1e-12,
                       initializer_range=0.2, pad_token_id=0)
    model = T.BertModel(cfg, add_pooling_layer=True)
    perturb(model, torch)
    model.eval()
    model.save_pretrained(d, safe_serialization=True)
    tok = load_tok(d)

    def embed(texts):
        b = tok(texts, padding=True, return_tensors="pt")
        with torch.no_grad():
            h = model(input_ids=b["input_ids"], attention_mask=b["attention_mask"],
                      token_type_ids=b.get("token_type_ids", torch.zeros_like(b["input_ids"]))).last_hidden_state
        m = b["attention_mask"].unsqueeze(-1).float()
        e = (h * m).sum(1) / m.sum(1)
        return torch.nn.functional.normalize(e, dim=-1)

    single = torch.cat([embed([t]) for t in EMBED_TEXTS])
    batch = embed(EMBED_TEXTS)
    g = {"kind": "embed", "pooling": "mean", "normalize": True, "dim": 32,
         "texts": EMBED_TEXTS, "ids": [tok(t)["input_ids"] for t in EMBED_TEXTS],
         "embeddings": [rnd(r) for r in single.tolist()],
         "batch_max_abs_diff": max_diff(single, batch, torch)}

    def st():
        from sentence_transformers import SentenceTransformer
        m = SentenceTransformer(d, device="cpu")
        return m.encode(EMBED_TEXTS, convert_to_tensor=True).cpu()
    s = try_st("bert-embed", st)
    if s is not None:
        g["st_max_abs_diff"] = max_diff(single, s, torch)
    dump(os.path.join(d, "golden.json"), g)
    return g


def bert_rerank(out, n_vocab, torch, T):
    d = os.path.join(out, "bert-rerank")
    torch.manual_seed(SEED + 1)
    cfg = T.BertConfig(vocab_size=n_vocab, hidden_size=32, num_hidden_layers=2,
                       num_attention_heads=4, intermediate_size=64, max_position_embeddings=64,
                       type_vocab_size=2, hidden_act="gelu", layer_norm_eps=1e-12,
                       initializer_range=0.2, pad_token_id=0, num_labels=1)
    model = T.BertForSequenceClassification(cfg)
    perturb(model, torch)
    model.eval()
    model.save_pretrained(d, safe_serialization=True)
    tok = load_tok(d)

    def score(docs):
        b = tok([RERANK_QUERY] * len(docs), docs, padding=True, return_tensors="pt", return_token_type_ids=True)
        with torch.no_grad():
            lg = model(**b).logits[:, 0]
        return torch.sigmoid(lg), lg

    single = [score([x]) for x in RERANK_DOCS]
    s1 = torch.cat([s for s, _ in single])
    lg1 = torch.cat([l for _, l in single])
    sb, _ = score(RERANK_DOCS)
    g = {"kind": "rerank", "head": "classifier-sigmoid", "query": RERANK_QUERY,
         "documents": RERANK_DOCS,
         "ids": [tok(RERANK_QUERY, x, return_token_type_ids=True)["input_ids"] for x in RERANK_DOCS],
         "token_type_ids": [tok(RERANK_QUERY, x, return_token_type_ids=True)["token_type_ids"] for x in RERANK_DOCS],
         "scores": rnd(s1.tolist()), "logits": rnd(lg1.tolist()),
         "batch_max_abs_diff": max_diff(s1, sb, torch)}

    def st():
        from sentence_transformers import CrossEncoder
        m = CrossEncoder(d, device="cpu")
        return torch.as_tensor(m.predict([(RERANK_QUERY, x) for x in RERANK_DOCS])).float()
    s = try_st("bert-rerank", st)
    if s is not None:
        g["st_max_abs_diff"] = max_diff(s1, s, torch)
    dump(os.path.join(d, "golden.json"), g)
    return g


def qwen3_cfg(T, n_vocab, eos, tied):
    return T.Qwen3Config(vocab_size=n_vocab, hidden_size=32, intermediate_size=64,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         head_dim=8, max_position_embeddings=256, rms_norm_eps=1e-6,
                         rope_theta=10000.0, initializer_range=0.2, tie_word_embeddings=tied,
                         bos_token_id=eos, eos_token_id=eos, pad_token_id=eos)


def qwen3_embed(out, n_vocab, eos, torch, T):
    d = os.path.join(out, "qwen3-embed")
    torch.manual_seed(SEED + 2)
    model = T.Qwen3Model(qwen3_cfg(T, n_vocab, eos, False))
    perturb(model, torch)
    model.eval()
    model.save_pretrained(d, safe_serialization=True)
    tok = load_tok(d)

    def embed(texts):  # Qwen3-Embedding README: left padding, last token, normalize
        b = tok(texts, padding=True, return_tensors="pt")
        with torch.no_grad():
            h = model(input_ids=b["input_ids"], attention_mask=b["attention_mask"]).last_hidden_state
        last = b["attention_mask"].sum(1) - 1
        if tok.padding_side == "left":
            e = h[:, -1]
        else:
            e = h[torch.arange(h.shape[0]), last]
        return torch.nn.functional.normalize(e, dim=-1)

    qtexts = [QWEN3_EMBED_PROMPT + q for q in QUERIES]
    single = torch.cat([embed([t]) for t in EMBED_TEXTS])
    batch = embed(EMBED_TEXTS)
    qsingle = torch.cat([embed([t]) for t in qtexts])
    g = {"kind": "embed", "pooling": "last", "normalize": True, "dim": 32,
         "texts": EMBED_TEXTS, "ids": [tok(t)["input_ids"] for t in EMBED_TEXTS],
         "embeddings": [rnd(r) for r in single.tolist()],
         "queries": QUERIES, "query_prompt": QWEN3_EMBED_PROMPT,
         "query_ids": [tok(t)["input_ids"] for t in qtexts],
         "query_embeddings": [rnd(r) for r in qsingle.tolist()],
         "batch_max_abs_diff": max_diff(single, batch, torch)}

    def st():
        from sentence_transformers import SentenceTransformer
        m = SentenceTransformer(d, device="cpu")
        a = m.encode(EMBED_TEXTS, convert_to_tensor=True).cpu()
        q = m.encode(QUERIES, prompt_name="query", convert_to_tensor=True).cpu()
        return a, q
    s = try_st("qwen3-embed", st)
    if s is not None:
        g["st_max_abs_diff"] = max(max_diff(single, s[0], torch), max_diff(qsingle, s[1], torch))
    dump(os.path.join(d, "golden.json"), g)
    return g


def qwen3_reranker(out, n_vocab, eos, torch, T):
    d = os.path.join(out, "qwen3-reranker")
    torch.manual_seed(SEED + 3)
    model = T.Qwen3ForCausalLM(qwen3_cfg(T, n_vocab, eos, True))
    perturb(model, torch)
    model.eval()
    model.save_pretrained(d, safe_serialization=True)
    tok = load_tok(d)
    yes, no = tok.convert_tokens_to_ids("yes"), tok.convert_tokens_to_ids("no")
    pre = tok.encode(RR_PREFIX, add_special_tokens=False)
    suf = tok.encode(RR_SUFFIX, add_special_tokens=False)
    ids = [pre + tok.encode(rr_format(RERANK_QUERY, x), add_special_tokens=False) + suf
           for x in RERANK_DOCS]

    def score(seqs):  # model card: left padding, logits[:, -1], log_softmax over [no, yes]
        n = max(len(s) for s in seqs)
        inp = torch.tensor([[eos] * (n - len(s)) + s for s in seqs])
        att = torch.tensor([[0] * (n - len(s)) + [1] * len(s) for s in seqs])
        with torch.no_grad():
            lg = model(input_ids=inp, attention_mask=att).logits[:, -1, :]
        two = torch.stack([lg[:, no], lg[:, yes]], dim=1).float()
        return torch.log_softmax(two, dim=1)[:, 1].exp()

    s1 = torch.cat([score([x]) for x in ids])
    sb = score(ids)
    g = {"kind": "rerank", "head": "yes-no", "query": RERANK_QUERY, "documents": RERANK_DOCS,
         "instruct": RR_INSTRUCT, "prefix": RR_PREFIX, "suffix": RR_SUFFIX,
         "yes_id": yes, "no_id": no, "ids": ids, "scores": rnd(s1.tolist()),
         "batch_max_abs_diff": max_diff(s1, sb, torch)}
    dump(os.path.join(d, "golden.json"), g)
    return g


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--files-only", action="store_true",
                    help="write tokenizers and configs only (no torch needed)")
    a = ap.parse_args()
    t0 = time.time()
    os.makedirs(a.out, exist_ok=True)
    n_bert, qn = write_tokenizers(a.out)
    print("tokenizers written: bert vocab %d, qwen vocab %d" % (n_bert, qn["qwen3-embed"][0]))
    if a.files_only:
        return
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import torch
    import transformers as T
    torch.set_num_threads(min(4, os.cpu_count() or 1))
    versions = {"torch": torch.__version__, "transformers": T.__version__}
    try:
        import sentence_transformers
        versions["sentence_transformers"] = sentence_transformers.__version__
    except Exception:
        pass
    for name, fn in (("bert-embed", lambda: bert_embed(a.out, n_bert, torch, T)),
                     ("bert-rerank", lambda: bert_rerank(a.out, n_bert, torch, T)),
                     ("qwen3-embed", lambda: qwen3_embed(a.out, *qn["qwen3-embed"], torch, T)),
                     ("qwen3-reranker", lambda: qwen3_reranker(a.out, *qn["qwen3-reranker"], torch, T))):
        g = fn()
        g["versions"] = versions
        dump(os.path.join(a.out, name, "golden.json"), g)
        print("%-15s batch diff %.2e  st diff %s" % (name, g["batch_max_abs_diff"],
                                                     g.get("st_max_abs_diff", "n/a")))
    total = 0
    for root, _, files in os.walk(a.out):
        total += sum(os.path.getsize(os.path.join(root, f)) for f in files)
    print("done in %.1f s, %d bytes" % (time.time() - t0, total))
    if total > 2 * 1024 * 1024:
        print("WARNING: fixtures exceed 2 MB", file=sys.stderr)


if __name__ == "__main__":
    main()
