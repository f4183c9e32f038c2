#!/usr/bin/env python3
"""Golden references for mtplx's forward pass, made with HF transformers.

Creates tiny random-weight Qwen3, Qwen2 and Llama checkpoints (HF folders:
config.json, model.safetensors, tokenizer.json, tokenizer_config.json) and
records their logits for fixed token ids at several positions, plus a greedy
continuation. mtplx must match them (tests/test_golden_logits.c).

Run where torch, transformers and tokenizers are installed (the GPU machine):
    python3 tools/make_golden_logits.py --text valid.txt --out tests/fixtures/models
The tokenizer is a 512-entry byte-level BPE trained here with HF tokenizers
on the given text, so the same files also serve tokenizer golden tests.
"""
import argparse, json, os, random

import torch

SEQ_LEN = 24
POSITIONS = [0, 5, 11, 23]
VOCAB = 512


def train_tokenizer(text_path, out_dir):
    from tokenizers import Tokenizer, models, pre_tokenizers, decoders, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    with open(text_path, encoding="utf-8", errors="replace") as f:
        text = f.read(400_000)
    tok.train_from_iterator([text[i:i + 2000] for i in range(0, len(text), 2000)], trainer)
    path = os.path.join(out_dir, "tokenizer.json")
    tok.save(path)
    return tok


def make(arch, out_dir, tok_json, seed):
    import transformers as T
    torch.manual_seed(seed)
    common = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                  rms_norm_eps=1e-6, initializer_range=0.1, bos_token_id=0, eos_token_id=0)
    if arch == "qwen3":
        cfg = T.Qwen3Config(head_dim=16, rope_theta=10000.0, tie_word_embeddings=True, **common)
        model = T.Qwen3ForCausalLM(cfg)
    elif arch == "qwen2":
        cfg = T.Qwen2Config(rope_theta=1000000.0, tie_word_embeddings=False, **common)
        model = T.Qwen2ForCausalLM(cfg)
    else:
        scaling = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                   "high_freq_factor": 4.0, "original_max_position_embeddings": 32}
        cfg = T.LlamaConfig(rope_theta=10000.0, tie_word_embeddings=False, rope_scaling=scaling,
                            **common)
        model = T.LlamaForCausalLM(cfg)
    with torch.no_grad():  # norms, biases: not their trivial init, so mistakes show
        for name, p in model.named_parameters():
            if "norm" in name or name.endswith("bias"):
                p.add_(0.2 * torch.randn_like(p))
    model.eval()
    d = os.path.join(out_dir, arch)
    os.makedirs(d, exist_ok=True)
    model.save_pretrained(d, safe_serialization=True)
    with open(os.path.join(d, "tokenizer.json"), "w") as f:
        f.write(tok_json)
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump({"add_bos_token": False, "bos_token": "<|endoftext|>",
                   "eos_token": "<|endoftext|>", "model_max_length": 128}, f)
    rng = random.Random(seed)
    ids = [rng.randrange(1, VOCAB) for _ in range(SEQ_LEN)]
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0].float()
        gen = model.generate(torch.tensor([ids[:8]]), max_new_tokens=16, do_sample=False,
                             attention_mask=torch.ones(1, 8, dtype=torch.long))[0].tolist()
    golden = {"arch": arch, "ids": ids, "positions": POSITIONS,
              "logits": [[float("%.7g" % v) for v in logits[p].tolist()] for p in POSITIONS],
              "greedy_prompt": ids[:8], "greedy_continuation": gen[8:],
              "transformers": T.__version__, "torch": torch.__version__}
    with open(os.path.join(d, "golden.json"), "w") as f:
        json.dump(golden, f)
    # the same model in bf16 (qwen3 only): tests the BF16 path against the F32 logits
    if arch == "qwen3":
        db = os.path.join(out_dir, "qwen3-bf16")
        model.to(torch.bfloat16).save_pretrained(db, safe_serialization=True)
        for fn in ("tokenizer.json", "tokenizer_config.json", "golden.json"):
            with open(os.path.join(d, fn)) as src, open(os.path.join(db, fn), "w") as dst:
                dst.write(src.read())
    print(arch, "written; greedy", gen[8:])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--text", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    tok = train_tokenizer(a.text, a.out)
    tok_json = tok.to_str()
    os.remove(os.path.join(a.out, "tokenizer.json"))
    for i, arch in enumerate(["qwen3", "qwen2", "llama"]):
        make(arch, a.out, tok_json, 1234 + i)


if __name__ == "__main__":
    main()
