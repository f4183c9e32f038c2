// embed.test.mjs: /v1/embeddings and /v1/rerank end to end. One `mtplx serve`
// runs the default chat model plus the tiny BERT embedder and cross-encoder
// of tests/fixtures/embed (made by tools/make_embed_goldens.py with
// transformers / sentence-transformers). Embeddings go through the official
// openai package (float and base64, dimensions); rerank through raw HTTP.
// Reference values: the fixtures' golden.json (cosine >= 0.9999, scores
// within 1e-4), batched and single inputs alike.
// Usage: node --test tests/js/embed.test.mjs  (MTPLX_BIN = the mtplx binary)
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const require = createRequire(path.join(root, 'tests', 'npm', 'package.json'));
const OpenAI = require('openai');
const bin = process.env.MTPLX_BIN || path.join(root, 'build', 'mtplx');
const fix = path.join(root, 'tests', 'fixtures', 'embed');
const gEmb = JSON.parse(readFileSync(path.join(fix, 'bert-embed', 'golden.json'), 'utf8'));
const gRr = JSON.parse(readFileSync(path.join(fix, 'bert-rerank', 'golden.json'), 'utf8'));

let proc, client, baseURL;

before(async () => {
  proc = spawn(bin, ['serve', '--port', '0', '-t', '1',
                     '--embedding-model', path.join(fix, 'bert-embed'),
                     '--reranker-model', path.join(fix, 'bert-rerank')],
               { stdio: ['ignore', 'pipe', 'inherit'] });
  baseURL = await new Promise((resolve, reject) => {
    let out = '';
    const timer = setTimeout(() => reject(new Error('server did not start')), 60000);
    proc.stdout.on('data', (d) => {
      out += d;
      const m = out.match(/listening on (http:\/\/[^ ]+)/);
      if (m) { clearTimeout(timer); resolve(m[1]); }
    });
    proc.on('exit', (code) => reject(new Error(`server exited ${code}`)));
  });
  client = new OpenAI({ baseURL: baseURL + '/v1', apiKey: 'none', maxRetries: 0 });
});

after(() => { if (proc) proc.kill('SIGTERM'); });

const cosine = (a, b) => {
  let ab = 0, aa = 0, bb = 0;
  for (let i = 0; i < a.length; i++) { ab += a[i] * b[i]; aa += a[i] * a[i]; bb += b[i] * b[i]; }
  return ab / Math.sqrt(aa * bb);
};

test('embeddings: a batch of texts of different lengths matches the reference', async () => {
  const r = await client.embeddings.create({ model: 'bert-embed', input: gEmb.texts,
                                             encoding_format: 'float' });
  assert.equal(r.object, 'list');
  assert.equal(r.data.length, gEmb.texts.length);
  assert.ok(r.usage.prompt_tokens > 0);
  r.data.forEach((d, i) => {
    assert.equal(d.index, i);
    assert.equal(d.embedding.length, gEmb.dim);
    assert.ok(cosine(d.embedding, gEmb.embeddings[i]) >= 0.9999, `text ${i}`);
  });
});

test('embeddings: single input, base64 (the SDK default) and dimensions', async () => {
  const one = await client.embeddings.create({ model: 'bert-embed', input: gEmb.texts[1] });
  assert.ok(cosine(one.data[0].embedding, gEmb.embeddings[1]) >= 0.9999);
  const dims = 8;
  const cut = await client.embeddings.create({ model: 'bert-embed', input: gEmb.texts[1],
                                               dimensions: dims, encoding_format: 'float' });
  const v = cut.data[0].embedding;
  assert.equal(v.length, dims);
  const norm = Math.sqrt(v.reduce((s, x) => s + x * x, 0));
  assert.ok(Math.abs(norm - 1) < 1e-5);
  assert.ok(cosine(v, gEmb.embeddings[1].slice(0, dims)) >= 0.9999);
});

test('embeddings: token ids as input', async () => {
  // the golden ids include [CLS] / [SEP]; strip them, the server adds its own
  const ids = gEmb.ids[0].slice(1, -1);
  const r = await client.embeddings.create({ model: 'bert-embed', input: [ids], encoding_format: 'float' });
  assert.ok(cosine(r.data[0].embedding, gEmb.embeddings[0]) >= 0.9999);
});

test('embeddings: errors are OpenAI errors and the server stays up', async () => {
  await assert.rejects(client.embeddings.create({ model: 'bert-embed', input: [] }),
                       (e) => e.status === 400 && /input/.test(e.message));
  await assert.rejects(client.embeddings.create({ model: 'bert-embed', input: 'x', dimensions: 10000 }),
                       (e) => e.status === 400 && /dimensions/.test(e.message));
  await assert.rejects(client.embeddings.create({ model: 'default', input: 'x' }),
                       (e) => e.status === 400 && /cannot embed/.test(e.message));
  await assert.rejects(client.embeddings.create({ model: 'nope', input: 'x' }),
                       (e) => e.status === 404);
  const long = 'word '.repeat(5000);
  await assert.rejects(client.embeddings.create({ model: 'bert-embed', input: long }),
                       (e) => e.status === 400);
  const ok = await client.embeddings.create({ model: 'bert-embed', input: 'still fine' });
  assert.equal(ok.data.length, 1);
});

async function rerank(body, route = '/v1/rerank') {
  const r = await fetch(baseURL + route, { method: 'POST', headers: { 'content-type': 'application/json' },
                                           body: JSON.stringify(body) });
  return { status: r.status, json: await r.json() };
}

test('rerank: scores match the cross-encoder reference, sorted, top_n', async () => {
  const { status, json } = await rerank({ model: 'bert-rerank', query: gRr.query, documents: gRr.documents });
  assert.equal(status, 200);
  assert.equal(json.results.length, gRr.documents.length);
  for (let i = 1; i < json.results.length; i++)
    assert.ok(json.results[i - 1].relevance_score >= json.results[i].relevance_score);
  for (const r of json.results) {
    assert.ok(Math.abs(r.relevance_score - gRr.scores[r.index]) <= 1e-4, `doc ${r.index}`);
    assert.equal(r.document.text, gRr.documents[r.index]);
  }
  const top = await rerank({ query: gRr.query, documents: gRr.documents.map((text) => ({ text })),
                             top_n: 2, return_documents: false }, '/rerank');
  assert.equal(top.status, 200);
  assert.equal(top.json.results.length, 2);
  assert.equal(top.json.results[0].document, undefined);
  assert.equal(top.json.results[0].index, json.results[0].index);
});

test('rerank: errors', async () => {
  assert.equal((await rerank({ query: 'q' })).status, 400);
  assert.equal((await rerank({ query: 5, documents: ['a'] })).status, 400);
  const wrong = await rerank({ model: 'bert-embed', query: 'q', documents: ['a'] });
  assert.equal(wrong.status, 400);
  assert.match(wrong.json.error.message, /cannot rerank/);
});
