// server_bench.mjs: `mtplx serve` under concurrent load, over loopback:
// aggregate generated tokens/s and time-to-first-token p50/p95 at 1, 4 and 8
// concurrent streams, MTP on and off (two server runs), and requests/s for
// short requests. Bounded: a fixed number of requests per configuration.
// Usage: node bench/server_bench.mjs [--bin build/mtplx] [-m MODEL] [--tokens N] [--rounds R]
// Prints a table (medians / percentiles) and writes bench/out/server.json.
import { spawn } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const arg = (k, d) => { const i = process.argv.indexOf(k); return i > 0 ? process.argv[i + 1] : d; };
const bin = arg('--bin', path.join(root, 'build', 'mtplx'));
const model = arg('-m', null);
const maxTokens = Number(arg('--tokens', 64));
const rounds = Number(arg('--rounds', 2));
const prompts = ['It was a dark and stormy night', 'The old man looked at the sea and',
  'CHAPTER I.\n\nIn the year', 'She opened the letter and read', 'The ship sailed at dawn, and',
  'Long ago, in a small village,', 'He said that the river', 'When the rain stopped, the children'];

async function start(extra) {
  const args = ['serve', '--port', '0', '--parallel', '8', ...(model ? ['-m', model] : []), ...extra];
  const proc = spawn(bin, args, { stdio: ['ignore', 'pipe', 'inherit'] });
  const base = await new Promise((resolve, reject) => {
    let out = '';
    proc.stdout.on('data', (d) => { out += d; const m = out.match(/listening on (http:\/\/[^ ]+)/); if (m) resolve(m[1]); });
    proc.on('exit', (c) => reject(new Error('server exited ' + c)));
  });
  return { proc, base };
}

async function stream(base, prompt) {
  const t0 = performance.now();
  const r = await fetch(base + '/v1/completions', { method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ prompt, max_tokens: maxTokens, temperature: 0, stream: true, ignore_eos: true }) });
  const reader = r.body.getReader();
  const dec = new TextDecoder();
  let ttft = null, buf = '', tokens = 0;
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += dec.decode(value, { stream: true });
    let i;
    while ((i = buf.indexOf('\n\n')) >= 0) {
      const ev = buf.slice(0, i); buf = buf.slice(i + 2);
      if (!ev.startsWith('data: ') || ev === 'data: [DONE]') continue;
      const j = JSON.parse(ev.slice(6));
      const n = j.mtplx?.tokens?.length || 0;
      if (n && ttft === null) ttft = performance.now() - t0;
      tokens += n;
    }
  }
  return { ttft, tokens, ms: performance.now() - t0 };
}

const pct = (a, p) => { const s = [...a].sort((x, y) => x - y); return s[Math.min(s.length - 1, Math.floor(p * s.length))]; };
const rows = [];
for (const mtp of [true, false]) {
  const { proc, base } = await start(mtp ? [] : ['--no-mtp']);
  await stream(base, 'warm up'); // warm-up
  for (const conc of [1, 4, 8]) {
    const ttfts = [];
    let tokens = 0, wall = 0;
    for (let r = 0; r < rounds; r++) {
      const t0 = performance.now();
      const res = await Promise.all(Array.from({ length: conc }, (_, i) => stream(base, prompts[(i + r) % prompts.length])));
      wall += performance.now() - t0;
      for (const x of res) { ttfts.push(x.ttft); tokens += x.tokens; }
    }
    rows.push({ mtp, streams: conc, tok_s: tokens / (wall / 1000), ttft_p50_ms: pct(ttfts, 0.5), ttft_p95_ms: pct(ttfts, 0.95) });
  }
  // short requests: 4 tokens each, 16 requests 4 at a time
  const t0 = performance.now();
  for (let i = 0; i < 4; i++)
    await Promise.all(Array.from({ length: 4 }, (_, j) => fetch(base + '/v1/completions', { method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ prompt: prompts[j], max_tokens: 4, temperature: 0 }) }).then((r) => r.json())));
  rows.push({ mtp, short_requests_per_s: 16 / ((performance.now() - t0) / 1000) });
  proc.kill('SIGTERM');
}
console.log('| MTP | streams | aggregate tok/s | TTFT p50 ms | TTFT p95 ms |\n|---|---|---|---|---|');
for (const r of rows) if (r.streams)
  console.log(`| ${r.mtp ? 'on' : 'off'} | ${r.streams} | ${r.tok_s.toFixed(1)} | ${r.ttft_p50_ms.toFixed(1)} | ${r.ttft_p95_ms.toFixed(1)} |`);
for (const r of rows) if (r.short_requests_per_s)
  console.log(`short requests/s (MTP ${r.mtp ? 'on' : 'off'}): ${r.short_requests_per_s.toFixed(1)}`);
mkdirSync(path.join(root, 'bench/out'), { recursive: true });
writeFileSync(path.join(root, 'bench/out/server.json'), JSON.stringify({ bin, model, maxTokens, rounds, rows }, null, 1));
