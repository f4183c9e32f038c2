// webui.test.mjs: the web UI in Debian's Chromium (headless), driven by
// playwright-core, against the real `mtplx serve` on the built-in model.
// Run by run_webui.sh (which skips with 77 when chromium or playwright-core is
// missing):  MTPLX_BIN=build/mtplx node --test tests/browser/webui.test.mjs
// Env: MTPLX_BIN (the built binary), MTPLX_SOURCE_DIR (repo root),
// MTPLX_ARTIFACTS (where webui.png goes), MTPLX_WEBUI_URL (use a running
// server instead of starting one), CHROMIUM (default /usr/bin/chromium).
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { createRequire } from "node:module";
import fs from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const root = process.env.MTPLX_SOURCE_DIR || path.resolve(here, "../..");
const require = createRequire(path.join(root, "tests/npm/package.json"));
const { chromium } = require("playwright-core");
const artifacts = process.env.MTPLX_ARTIFACTS || path.join(root, "build/test-artifacts");

let server = null, serverLog = "", base = process.env.MTPLX_WEBUI_URL || "";
let browser = null, userDir = null;

function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.once("error", reject);
    s.listen(0, "127.0.0.1", () => { const p = s.address().port; s.close(() => resolve(p)); });
  });
}

async function waitReady(url, ms) {
  const t0 = Date.now();
  while (Date.now() - t0 < ms) {
    if (server && server.exitCode !== null) throw new Error("mtplx serve exited " + server.exitCode + ":\n" + serverLog);
    try { const r = await fetch(url + "v1/models"); if (r.ok) return; } catch (e) { /* not yet */ }
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error("mtplx serve not ready after " + ms + " ms:\n" + serverLog);
}

before(async () => {
  if (!base) {
    const bin = process.env.MTPLX_BIN || path.join(root, "build/mtplx");
    const port = await freePort();
    server = spawn(bin, ["serve", "--host", "127.0.0.1", "--port", String(port), "--threads", "2"],
      { cwd: root, stdio: ["ignore", "pipe", "pipe"] });
    server.stdout.on("data", (d) => { serverLog += d; });
    server.stderr.on("data", (d) => { serverLog += d; });
    base = "http://127.0.0.1:" + port + "/";
  }
  if (!base.endsWith("/")) base += "/";
  await waitReady(base, 60000);
  userDir = fs.mkdtempSync(path.join(os.tmpdir(), "mtplx-chromium-"));
  // a fresh profile; Playwright takes it as launchPersistentContext's first argument
  browser = await chromium.launchPersistentContext(userDir, {
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    headless: true,
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
});

after(async () => {
  if (browser) await browser.close();
  if (server && server.exitCode === null) {
    server.kill("SIGTERM");
    await new Promise((r) => { const t = setTimeout(() => { server.kill("SIGKILL"); r(); }, 5000); server.once("exit", () => { clearTimeout(t); r(); }); });
  }
  if (userDir) fs.rmSync(userDir, { recursive: true, force: true });
});

// a page that records every request it makes
async function openPage(viewport, colorScheme) {
  const page = await browser.newPage();
  await page.setViewportSize(viewport || { width: 1280, height: 860 });
  await page.emulateMedia({ colorScheme: colorScheme || "dark" });
  const requests = [], errors = [];
  page.on("request", (r) => requests.push(r.url()));
  page.on("pageerror", (e) => errors.push(String(e)));
  page.on("console", (m) => { if (m.type() === "error") errors.push(m.text()); });
  await page.goto(base);
  await page.waitForFunction(() => !/connecting/.test(document.getElementById("model-name").textContent));
  return { page, requests, errors };
}

function assertLocal(requests) {
  const origin = new URL(base).origin;
  const outside = requests.filter((u) => !u.startsWith("data:") && new URL(u).origin !== origin);
  assert.deepEqual(outside, [], "the page made requests outside the server");
  assert.ok(requests.length >= 2, "expected the page and its API calls in the request log");
}

async function setSetting(page, id, value) {
  await page.$eval("#" + id, (el, v) => { el.value = v; el.dispatchEvent(new Event("input", { bubbles: true })); }, String(value));
}

async function useCompletionMode(page) {
  const on = await page.$eval('#mode-seg button[data-mode="completion"]', (b) => b.classList.contains("on"));
  if (!on) await page.click('#mode-seg button[data-mode="completion"]');
  await page.waitForSelector('#mode-seg button[data-mode="completion"].on');
}

test("completion mode streams coloured tokens, tok/s and acceptance; no outside requests", async () => {
  const { page, requests, errors } = await openPage();
  await page.click("#settings-btn");
  await setSetting(page, "f-max", 96);
  await setSetting(page, "f-temp", 0);
  await setSetting(page, "f-depth", 3);
  await page.click("#settings-close");
  await useCompletionMode(page);

  // count DOM updates of the reply while it streams: streaming means several paints
  await page.evaluate(() => {
    window.__paints = 0;
    new MutationObserver(() => { window.__paints++; }).observe(document.getElementById("messages"), { childList: true, subtree: true });
  });
  const prompt = "It was a dark and stormy night, and";
  await page.fill("#input", prompt);
  await page.press("#input", "Enter");
  await page.waitForSelector(".msg.assistant .tok.drafted", { state: "attached", timeout: 60000 });
  await page.waitForSelector("#stop", { state: "hidden", timeout: 120000 });

  const reply = await page.$eval(".msg.assistant .content", (el) => el.textContent);
  assert.ok(reply.startsWith(prompt), "the document starts with the prompt: " + JSON.stringify(reply.slice(0, 80)));
  assert.ok(reply.length > prompt.length + 40, "a continuation was streamed: " + JSON.stringify(reply));
  const paints = await page.evaluate(() => window.__paints);
  assert.ok(paints > 5, "the reply arrived in several pieces (" + paints + " DOM updates)");

  const toks = Number(await page.textContent("#s-toks"));
  assert.ok(Number.isFinite(toks) && toks > 0, "tok/s figure shown: " + toks);
  const tpf = Number(await page.textContent("#s-tpf"));
  assert.ok(tpf >= 1, "tokens per forward >= 1 with MTP: " + tpf);
  const bars = await page.$$eval("#acc-bars .bar", (b) => b.length);
  assert.equal(bars, 3, "one acceptance bar per draft position");
  const meta = await page.textContent(".msg.assistant .meta");
  assert.match(meta, /tok\/s/);
  assert.match(meta, /accept \d\.\d\d\/\d\.\d\d\/\d\.\d\d/);

  // every generated token is coloured by how it was produced
  const kinds = await page.$$eval(".msg.assistant .tok", (els) => els.map((e) => [e.classList[1], getComputedStyle(e).backgroundColor]));
  const drafted = kinds.filter((k) => k[0] === "drafted"), verifier = kinds.filter((k) => k[0] === "verifier");
  assert.ok(drafted.length > 0 && verifier.length > 0, "both drafted and verifier tokens: " + JSON.stringify(kinds.slice(0, 12)));
  assert.notEqual(drafted[0][1], verifier[0][1], "drafted and verifier tokens look different");
  assert.notEqual(drafted[0][1], "rgba(0, 0, 0, 0)", "drafted tokens have a background");

  fs.mkdirSync(artifacts, { recursive: true });
  await page.screenshot({ path: path.join(artifacts, "webui.png") });

  // the conversation survives a reload (localStorage)
  await page.reload();
  await page.waitForSelector(".conv .title");
  const titles = await page.$$eval(".conv .title", (els) => els.map((e) => e.textContent));
  assert.ok(titles.some((t) => prompt.startsWith(t)), "conversation kept: " + JSON.stringify(titles));
  await page.waitForSelector(".msg.assistant .tok.drafted");

  assertLocal(requests);
  assert.deepEqual(errors, [], "no script errors");
  await page.close();
});

test("the stop button ends a long reply", async () => {
  const { page, requests, errors } = await openPage();
  await page.click("#new-chat");
  await useCompletionMode(page);
  await page.click("#settings-btn");
  await setSetting(page, "f-max", 4000);
  await setSetting(page, "f-temp", 0.8);
  await page.click("#settings-close");
  await page.fill("#input", "The ship sailed");
  await page.press("#input", "Enter");
  // attached, not visible: the first drafted token may be a bare newline,
  // which has no box to be visible in
  await page.waitForSelector(".msg.assistant .tok.drafted", { state: "attached", timeout: 60000 });
  await page.click("#stop");
  await page.waitForSelector("#stop", { state: "hidden", timeout: 10000 });
  const meta = await page.textContent(".msg.assistant .meta");
  assert.match(meta, /stopped/);
  const n = await page.$$eval(".msg.assistant .tok", (e) => e.length);
  assert.ok(n < 4000, "stopped before the end (" + n + " tokens)");
  // and the page can send again at once
  await page.click("#settings-btn");
  await setSetting(page, "f-max", 24);
  await page.click("#settings-close");
  await page.fill("#input", " Then");
  await page.press("#input", "Enter");
  await page.waitForSelector("#stop", { state: "hidden", timeout: 120000 });
  assertLocal(requests);
  assert.deepEqual(errors, []);
  await page.close();
});

test("markdown is rendered from escaped text only; small screens get the drawer", async () => {
  const { page, errors } = await openPage({ width: 390, height: 800 }, "light");
  const html = await page.evaluate(() => window.mtplx.markdown(
    "# T <b>x</b>\n<img src=x onerror=alert(1)>\n\n```js\nlet a = '<script>';\n```\n- **b** `c<d>`\n[l](javascript:alert(1)) [ok](https://example.org)"));
  assert.ok(!/<img|<script|<b>/.test(html), "raw HTML escaped: " + html);
  assert.match(html, /<h1>T &lt;b&gt;x&lt;\/b&gt;<\/h1>/);
  assert.match(html, /<pre><div class="lang"><span>js<\/span>.*<code>let a = &#39;&lt;script&gt;&#39;;<\/code><\/pre>/s);
  assert.match(html, /<ul><li><strong>b<\/strong> <code>c&lt;d&gt;<\/code><\/li><\/ul>/);
  assert.ok(!/href="javascript/.test(html), "no javascript: links");
  assert.match(html, /<a href="https:\/\/example.org"/);
  // narrow viewport: the conversation list is a drawer behind the menu button
  assert.ok(await page.isVisible("#menu-btn"));
  await page.click("#menu-btn");
  await page.waitForFunction(() => document.getElementById("sidebar").getBoundingClientRect().left >= 0);
  fs.mkdirSync(artifacts, { recursive: true });
  await page.screenshot({ path: path.join(artifacts, "webui-mobile.png") });
  assert.deepEqual(errors, []);
  await page.close();
});
