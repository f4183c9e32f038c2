// embed_bench.mjs: embeddings/s for batches of 1, 8 and 32 short texts and
// rerank latency for 1 query x 20 documents, through `mtplx serve` over
// loopback (so HTTP and JSON are included, as a client sees them).
// Models: --embedding-model / --reranker-model paths (default: the tiny
// fixtures in tests/fixtures/embed, which only exercise the path: real
// numbers need a real embedder such as a Qwen3-Embedding GGUF).
// Usage: node bench/embed_bench.mjs [--bin build/mtplx] [--emb DIR] [--rr DIR] [--reps N]
// Prints a table (medians) and writes bench/out/embed.json.
import { spawn } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const arg = (k, d) => { const i = process.argv.indexOf(k); return i > 0 ? process.argv[i + 1] : d; };
const bin = arg('--bin', path.join(root, 'build', 'mtplx'));
const emb = arg('--emb', path.join(root, 'tests/fixtures/embed/bert-embed'));
const rr = arg('--rr', path.join(root, 'tests/fixtures/embed/bert-rerank'));
const reps = Number(arg('--reps', 20));

const proc = spawn(bin, ['serve', '--port', '0', '--embedding-model', emb, '--reranker-model', rr],
                   { stdio: ['ignore', 'pipe', 'inherit'] });
const base = await new Promise((resolve, reject) => {
  let out = '';
  proc.stdout.on('data', (d) => { out += d; const m = out.match(/listening on (http:\/\/[^ ]+)/); if (m) resolve(m[1]); });
  proc.on('exit', (c) => reject(new Error('server exited ' + c)));
});
const post = async (route, body) => {
  const r = await fetch(base + route, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  if (r.status !== 200) throw new Error(route + ' ' + r.status + ' ' + await r.text());
  return r.json();
};
const median = (a) => { const s = [...a].sort((x, y) => x - y); return s[Math.floor(s.length / 2)]; };
const texts = (n) => Array.from({ length: n }, (_, i) => `short text number ${i} about foxes and dogs`);
const rows = [];
for (const n of [1, 8, 32]) {
  const t = [];
  await post('/v1/embeddings', { model: path.basename(emb), input: texts(n) }); // warm-up
  for (let r = 0; r < reps; r++) {
    const t0 = performance.now();
    await post('/v1/embeddings', { model: path.basename(emb), input: texts(n), encoding_format: 'base64' });
    t.push(performance.now() - t0);
  }
  rows.push({ what: `embeddings batch ${n}`, median_ms: median(t), per_s: n / (median(t) / 1000) });
}
const lat = [];
for (let r = 0; r < reps; r++) {
  const t0 = performance.now();
  await post('/v1/rerank', { model: path.basename(rr), query: 'what does the fox do?', documents: texts(20) });
  lat.push(performance.now() - t0);
}
rows.push({ what: 'rerank 1 query x 20 docs', median_ms: median(lat), per_s: 20 / (median(lat) / 1000) });
proc.kill('SIGTERM');
console.log('| what | median ms | items/s |\n|---|---|---|');
for (const r of rows) console.log(`| ${r.what} | ${r.median_ms.toFixed(2)} | ${r.per_s.toFixed(1)} |`);
mkdirSync(path.join(root, 'bench/out'), { recursive: true });
writeFileSync(path.join(root, 'bench/out/embed.json'), JSON.stringify({ emb, rr, reps, rows }, null, 1));
