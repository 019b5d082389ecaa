// Cross-site requests against a token-less `parley serve` (docs/service.md, "Cross-site requests
// and DNS rebinding"), in Debian's headless chromium driven by puppeteer-core: a page of another
// origin (a second loopback port) submits a text/plain POST (no preflight), a form POST (text/plain
// and url-encoded) that would create a thread and clear a context, and tries to read a thread.
// Nothing changes, nothing is read; the service's own page still works.
//   node cross_site.mjs <parley binary> [chromium]
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import puppeteer from 'puppeteer-core';

import { start, stop } from './parley_process.mjs';

const parley = process.argv[2];
const chromium = process.argv[3] || '/usr/bin/chromium';
assert.ok(parley, 'usage: node cross_site.mjs <parley binary> [chromium]');

const dir = mkdtempSync(join(tmpdir(), 'parley-xsite-'));
const serve = await start(parley, ['serve', '--db', join(dir, 'xsite.db'), '--port', '0']);
const base = serve.line;

async function api(method, path, body) {
  const r = await fetch(base + path, {
    method,
    headers: body === undefined ? {} : { 'Content-Type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return { status: r.status, json: await r.json() };
}

// A thread with two messages that a cross-site "clear" would empty.
assert.equal((await api('POST', '/v1/threads', { id: 'kept', system: 'Be terse.' })).status, 201);

// The attacker's page, on another loopback port: every no-preflight way to POST.
const attack = `<!doctype html><body>
<form id="f1" method="POST" action="${base}/v1/threads" enctype="text/plain" target="sink1">
  <input name='{"id":"evil-form","x":"' value='"}'></form>
<form id="f2" method="POST" action="${base}/v1/threads/kept/operations" target="sink2"
  enctype="application/x-www-form-urlencoded"><input name="operation" value="clear"></form>
<iframe name="sink1"></iframe><iframe name="sink2"></iframe>
<script>
window.results = {};
(async () => {
  try {
    await fetch('${base}/v1/threads', { method: 'POST', mode: 'no-cors',
      headers: { 'Content-Type': 'text/plain' }, body: '{"id":"evil-fetch"}' });
    await fetch('${base}/v1/threads/kept/operations', { method: 'POST', mode: 'no-cors',
      headers: { 'Content-Type': 'text/plain' }, body: '{"operation":"clear"}' });
    window.results.posted = true;
  } catch (e) { window.results.postError = String(e); }
  try {
    const r = await fetch('${base}/v1/threads/kept');
    window.results.read = await r.text();
  } catch (e) { window.results.readError = String(e); }
  document.getElementById('f1').submit();
  document.getElementById('f2').submit();
  window.results.done = true;
})();
</script></body>`;
const attacker = createServer((req, res) => {
  res.writeHead(200, { 'Content-Type': 'text/html' });
  res.end(attack);
});
await new Promise((resolve) => attacker.listen(0, '127.0.0.1', resolve));
const attackerUrl = `http://127.0.0.1:${attacker.address().port}/`;

const browser = await puppeteer.launch({
  executablePath: chromium,
  headless: true,
  args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'],
});
try {
  const page = await browser.newPage();
  page.setDefaultTimeout(30_000);
  // Every answer the service gives the attacker's page, to wait for the forms' answers.
  const answered = [];
  page.on('response', (r) => {
    if (r.url().startsWith(base)) answered.push(`${r.request().method()} ${r.url()} ${r.status()}`);
  });
  await page.goto(attackerUrl);
  await page.waitForFunction(() => window.results && window.results.done);
  const results = await page.evaluate(() => window.results);
  // The browser would not let the page read another origin's answer (no CORS header).
  assert.equal(results.read, undefined, 'the attacker page read a thread: ' + results.read);
  // Both forms' answers have come back (403 for a foreign Origin).
  const deadline = Date.now() + 20_000;
  while (answered.filter((a) => a.startsWith('POST')).length < 4 && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 50));
  }
  const posts = answered.filter((a) => a.startsWith('POST'));
  assert.equal(posts.length, 4, 'the four POSTs reached the service: ' + answered.join('; '));
  for (const a of posts) assert.match(a, / 403$/, a);

  // Nothing changed.
  const list = await api('GET', '/v1/threads?limit=100');
  assert.deepEqual(list.json.data.map((t) => t.id), ['kept']);
  const kept = await api('GET', '/v1/threads/kept');
  assert.equal(kept.json.messages.length, 1, 'the context was not cleared');

  // The service's own page still changes state (same origin, JSON).
  const own = await browser.newPage();
  await own.goto(base + '/');
  const created = await own.evaluate(async () => {
    const r = await fetch('/v1/threads', { method: 'POST', headers: { 'Content-Type': 'application/json' },
                                            body: '{"id":"mine"}' });
    return r.status;
  });
  assert.equal(created, 201);
  console.log('cross-site: ok');
} finally {
  await browser.close();
  attacker.close();
  const s = await stop(serve.child);
  rmSync(dir, { recursive: true, force: true });
  assert.equal(s.code, 0, 'parley serve exits 0 on SIGTERM');
}
