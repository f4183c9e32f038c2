// make_tokenizer_goldens_js.mjs: PROVISIONAL golden ids from @lenml/tokenizers
// (a transformers.js port we did not write), until tools/make_tokenizer_goldens.py
// (HF `tokenizers`, the real reference) is run. Same fixture shape:
//   {"tokenizer": name, "reference": "...", "cases": [{"text"|"text_b64", "add_special", "ids"}]}
// add_special follows the post-processor, plus BOS/EOS from tokenizer_config.json's
// add_bos_token/add_eos_token when the post-processor is not a template (as mtplx does).
// Usage: npm install --prefix tests/npm && node tools/make_tokenizer_goldens_js.mjs [OUTDIR]
import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const nm = path.join(root, "tests/npm/node_modules");
const require = createRequire(path.join(nm, "x.js"));
const { TokenizerLoader } = require("@lenml/tokenizers");
const outDir = process.argv[2] || path.join(root, "tests/fixtures/tokenizer");
const texts = JSON.parse(fs.readFileSync(path.join(root, "tests/fixtures/tokenizer/texts.json"), "utf8")).cases;
const names = ["qwen3", "llama3", "llama2", "deepseek_v3", "gemma3"];

function tokenId(tj, s) {
  for (const a of tj.added_tokens) if (a.content === s) return a.id;
  const v = tj.model.vocab;
  return v && !Array.isArray(v) && s in v ? v[s] : -1;
}
function cfgTok(c, k) { const v = c[k]; return typeof v === "string" ? v : v && v.content; }

for (const name of names) {
  const dir = path.join(nm, `@lenml/tokenizer-${name}/models`);
  if (!fs.existsSync(dir)) { console.error(`skip ${name}: ${dir} missing`); continue; }
  const tj = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer.json"), "utf8"));
  const cfg = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer_config.json"), "utf8"));
  const tok = TokenizerLoader.fromPreTrained({ tokenizerJSON: tj, tokenizerConfig: cfg });
  const post = tj.post_processor && tj.post_processor.type;
  const templ = ["TemplateProcessing", "BertProcessing", "RobertaProcessing"].includes(post);
  const bos = cfgTok(cfg, "bos_token") ? tokenId(tj, cfgTok(cfg, "bos_token")) : -1;
  const eos = cfgTok(cfg, "eos_token") ? tokenId(tj, cfgTok(cfg, "eos_token")) : -1;
  const cases = [];
  for (const c of texts) {
    const text = c.text !== undefined ? c.text : Buffer.from(c.text_b64, "base64").toString("utf8");
    for (const add of [false, true]) {
      // transformers.js applies the post-processor only; apply the config rule ourselves.
      let ids = Array.from(tok.encode(text, { add_special_tokens: false }));
      if (add) {
        ids = Array.from(tok.encode(text, { add_special_tokens: true }));
        if (!templ) {
          if (cfg.add_bos_token && bos >= 0) ids.unshift(bos);
          if (cfg.add_eos_token && eos >= 0) ids.push(eos);
        }
      }
      const k = c.text !== undefined ? { text: c.text } : { text_b64: c.text_b64 };
      cases.push({ ...k, add_special: add, ids });
    }
  }
  const out = { tokenizer: name, reference: "@lenml/tokenizers 3.7.2 (transformers.js port), PROVISIONAL", cases };
  fs.writeFileSync(path.join(outDir, `golden_${name}.json`), JSON.stringify(out) + "\n");
  console.log(`${name}: ${cases.length} cases`);
}
