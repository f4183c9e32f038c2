// server.test.mjs: `mtplx serve` through the official openai npm package
// (tests/npm/node_modules). Starts the server on a free port with a small
// Hermes-style chat template (--chat-template), so tools are rendered, and
// checks chat (stream / non-stream), completions, models, a forced tool call
// round trip, json_schema output and errors as the SDK's APIError.
// Usage: node --test tests/js/server.test.mjs  (MTPLX_BIN = the mtplx binary)
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { spawn } from 'node:child_process';
import { writeFileSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const require = createRequire(path.join(root, 'tests', 'npm', 'package.json'));
const OpenAI = require('openai');
const bin = process.env.MTPLX_BIN || path.join(root, 'build', 'mtplx');

const HERMES = `{%- if tools %}<|im_start|>system
Tools: {{ tools | tojson }}
Call one with <tool_call>{"name": ..., "arguments": ...}</tool_call>.<|im_end|>
{% endif %}{%- for m in messages %}<|im_start|>{{ m.role }}
{% if m.tool_calls %}{% for c in m.tool_calls %}<tool_call>{"name": "{{ c.function.name }}", "arguments": {{ c.function.arguments | tojson }}}</tool_call>{% endfor %}{% else %}{{ m.content }}{% endif %}<|im_end|>
{% endfor %}{%- if add_generation_prompt %}<|im_start|>assistant
{% endif %}`;

let proc, client, baseURL;

before(async () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'mtplx-js-'));
  const tmpl = path.join(dir, 'hermes.jinja');
  writeFileSync(tmpl, HERMES);
  proc = spawn(bin, ['serve', '--port', '0', '-t', '1', '--parallel', '2', '--api-key', 'k3y',
                     '--chat-template', tmpl], { stdio: ['ignore', 'pipe', 'inherit'] });
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
  client = new OpenAI({ baseURL: baseURL + '/v1', apiKey: 'k3y', maxRetries: 0 });
});

after(() => { if (proc) proc.kill('SIGTERM'); });

test('models', async () => {
  const list = await client.models.list();
  assert.equal(list.data[0].id, 'default');
});

test('chat: stream equals non-stream at temperature 0', async () => {
  const req = { model: 'default', messages: [{ role: 'user', content: 'Once upon a time' }],
                temperature: 0, max_tokens: 24 };
  const r = await client.chat.completions.create(req);
  assert.equal(r.object, 'chat.completion');
  assert.equal(typeof r.choices[0].message.content, 'string');
  assert.ok(r.usage.completion_tokens > 0 && r.usage.prompt_tokens > 0);
  const stream = await client.chat.completions.create({ ...req, stream: true,
                                                        stream_options: { include_usage: true } });
  let text = '', usage = null, finish = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    const c = chunk.choices[0];
    if (c?.delta?.content) text += c.delta.content;
    if (c?.finish_reason) finish = c.finish_reason;
  }
  assert.equal(text, r.choices[0].message.content);
  assert.equal(finish, r.choices[0].finish_reason);
  assert.equal(usage.completion_tokens, r.usage.completion_tokens);
});

test('completions', async () => {
  const r = await client.completions.create({ model: 'default', prompt: 'It was a dark and stormy night',
                                              max_tokens: 16, temperature: 0 });
  assert.equal(r.object, 'text_completion');
  assert.ok(r.choices[0].text.length > 0);
  assert.equal(r.usage.completion_tokens, 16);
});

test('tool call round trip (forced by tool_choice, enforced by the JSON mask)', async () => {
  const tools = [{ type: 'function', function: { name: 'get_weather', description: 'weather of a city',
    parameters: { type: 'object', properties: { city: { type: 'string' }, days: { type: 'integer' } },
                  required: ['city', 'days'] } } }];
  const messages = [{ role: 'user', content: 'Weather in Paris for 3 days?' }];
  const r = await client.chat.completions.create({ model: 'default', messages, tools, temperature: 0,
                                                   max_tokens: 100, tool_choice: 'required' });
  const c = r.choices[0];
  assert.equal(c.finish_reason, 'tool_calls');
  const call = c.message.tool_calls[0];
  assert.equal(call.type, 'function');
  assert.equal(call.function.name, 'get_weather');
  const args = JSON.parse(call.function.arguments);
  assert.equal(typeof args.city, 'string');
  assert.ok(Number.isInteger(args.days));
  // streamed: the same call arrives as a tool_calls delta
  const stream = await client.chat.completions.create({ model: 'default', messages, tools, temperature: 0,
    max_tokens: 100, tool_choice: { type: 'function', function: { name: 'get_weather' } }, stream: true });
  let name = '', sargs = '', finish = null;
  for await (const chunk of stream) {
    const d = chunk.choices[0]?.delta;
    for (const tc of d?.tool_calls ?? []) { name += tc.function?.name ?? ''; sargs += tc.function?.arguments ?? ''; }
    if (chunk.choices[0]?.finish_reason) finish = chunk.choices[0].finish_reason;
  }
  assert.equal(name, 'get_weather');
  assert.deepEqual(JSON.parse(sargs), args);
  assert.equal(finish, 'tool_calls');
  // round trip: the call and its result go back in, rendered by the template
  const r2 = await client.chat.completions.create({ model: 'default', temperature: 0, max_tokens: 8, tools,
    messages: [...messages, c.message, { role: 'tool', tool_call_id: call.id, content: '{"temp": 21}' }] });
  assert.equal(r2.choices[0].message.role, 'assistant');
});

test('json_schema output parses and validates', async () => {
  const schema = { type: 'object', properties: { title: { type: 'string' }, year: { type: 'integer' },
    genre: { enum: ['novel', 'poem'] }, tags: { type: 'array', items: { type: 'string' }, maxItems: 2 } },
    required: ['title', 'year', 'genre', 'tags'] };
  const r = await client.chat.completions.create({ model: 'default', temperature: 0, max_tokens: 200,
    messages: [{ role: 'user', content: 'A book' }],
    response_format: { type: 'json_schema', json_schema: { name: 'book', schema } } });
  assert.equal(r.choices[0].finish_reason, 'stop', r.choices[0].message.content);
  const v = JSON.parse(r.choices[0].message.content);
  assert.ok(v.tags.length <= 2);
  assert.equal(typeof v.title, 'string');
  assert.ok(Number.isInteger(v.year));
  assert.ok(['novel', 'poem'].includes(v.genre));
  assert.ok(Array.isArray(v.tags));
});

test('errors are APIErrors with the right status', async () => {
  await assert.rejects(client.chat.completions.create({ model: 'nope', messages: [{ role: 'user', content: 'x' }] }),
    (e) => e instanceof OpenAI.APIError && e.status === 404);
  await assert.rejects(client.chat.completions.create({ model: 'default', messages: [{ role: 'user', content: 'x' }], n: 3 }),
    (e) => e instanceof OpenAI.BadRequestError && e.status === 400 && e.param === 'n');
  await assert.rejects(client.chat.completions.create({ model: 'default', messages: [{ role: 'user', content: 5 }] }),
    (e) => e.status === 400 && e.param === 'messages[0].content');
  const bad = new OpenAI({ baseURL: baseURL + '/v1', apiKey: 'wrong', maxRetries: 0 });
  await assert.rejects(bad.models.list(), (e) => e instanceof OpenAI.AuthenticationError && e.status === 401);
});

test('logprobs: top_logprobs alternatives, greedy picks the most likely', async () => {
  const r = await client.chat.completions.create({
    model: 'default', messages: [{ role: 'user', content: 'The sea was' }],
    temperature: 0, max_tokens: 8, logprobs: true, top_logprobs: 3 });
  const content = r.choices[0].logprobs.content;
  assert.ok(content.length > 0);
  for (const e of content) {
    assert.equal(e.top_logprobs.length, 3);
    for (let k = 1; k < 3; k++) assert.ok(e.top_logprobs[k - 1].logprob >= e.top_logprobs[k].logprob);
    assert.ok(e.top_logprobs[0].logprob <= 0);
    // greedy: the chosen token is the most likely one
    assert.ok(Math.abs(e.logprob - e.top_logprobs[0].logprob) < 1e-4);
  }
  const c = await client.completions.create({ model: 'default', prompt: 'The sea was', max_tokens: 4,
                                              temperature: 0, logprobs: 2 });
  const lp = c.choices[0].logprobs;
  assert.equal(lp.top_logprobs.length, lp.tokens.length);
  for (const m of lp.top_logprobs) assert.ok(Object.keys(m).length >= 1 && Object.keys(m).length <= 2);
});

test('metrics: Prometheus text that promtool accepts, counters move', async () => {
  const { spawnSync } = await import('node:child_process');
  const get = async () => (await fetch(baseURL + '/metrics', { headers: { authorization: 'Bearer k3y' } })).text();
  const count = (txt) => {
    const m = txt.match(/^mtplx_generated_tokens_total (\d+)/m);
    return m ? Number(m[1]) : NaN;
  };
  const before = count(await get());
  await client.completions.create({ model: 'default', prompt: 'Once', max_tokens: 5, temperature: 0 });
  // the scheduler books a finished generation just after the answer is
  // sent: look again a bounded number of times
  let txt = await get();
  for (let i = 0; i < 40 && !(count(txt) >= before + 1); i++) {
    await new Promise((r) => setTimeout(r, 50));
    txt = await get();
  }
  assert.ok(count(txt) >= before + 1, 'generated tokens counter moved');
  const probe = spawnSync('promtool', ['--version']);
  if (probe.error) return; // Debian's prometheus package not installed: format checked above only
  const r = spawnSync('promtool', ['check', 'metrics'], { input: txt });
  assert.equal(r.status, 0, String(r.stdout) + String(r.stderr));
});
