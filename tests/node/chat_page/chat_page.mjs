// The chat page of `parley serve` in Debian's headless chromium, driven by puppeteer-core (pinned
// in package-lock.json): send a prompt and see the folded tool call and the streamed reply;
// reload in the middle of a streamed reply and see it go on with nothing lost or doubled; fork
// and switch branches; clear the context and undo it. A screenshot is kept in the working
// folder (chat_page.png).
//   node chat_page.mjs <parley binary> [chromium]
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import puppeteer from 'puppeteer-core';

import { start, stop } from './parley_process.mjs';

const parley = process.argv[2];
const chromium = process.argv[3] || '/usr/bin/chromium';
assert.ok(parley, 'usage: node chat_page.mjs <parley binary> [chromium]');

const kStory = Array.from({ length: 40 }, (_, i) => `word${i + 1}`).join(' ');
const script = [
  { name: 'answer', match: { last_role: 'tool' }, reply: { content: 'It is {{tool_results}}' } },
  { name: 'weather', match: { user_contains: 'weather' },
    reply: { tool_calls: [{ name: 'get_weather', arguments: { city: 'Oslo' } }] } },
  { name: 'story', match: { user_contains: 'story' }, reply: { content: kStory },
    stream: { chunk_delay_ms: 80 } },
  { name: 'echo', reply: { content: 'echo: {{last_user}}' } },
].map((r) => JSON.stringify(r)).join('\n');

const dir = mkdtempSync(join(tmpdir(), 'parley-page-'));
writeFileSync(join(dir, 'script.jsonl'), script);

const mock = await start(parley, ['mock', '--port', '0', '--script', join(dir, 'script.jsonl')]);
const serve = await start(parley, ['serve', '--db', join(dir, 'page.db'), '--port', '0', '--workers', '1',
                           '--base-url', mock.line, '--model', 'parley-mock', '--api-key', 'sk-page-test',
                           '--tools', 'demo']);
const base = serve.line;
const browser = await puppeteer.launch({
  executablePath: chromium,
  headless: true,
  args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'],
});
const timeout = 30_000;
try {
  const page = await browser.newPage();
  page.setDefaultTimeout(timeout);
  await page.setViewport({ width: 1100, height: 800 });
  const errors = [];
  page.on('pageerror', (e) => errors.push(e.message));
  await page.goto(base + '/');

  // A new thread, a prompt, a folded tool call and the answer.
  await page.click('#new-thread');
  await page.waitForFunction(() => /^#t=/.test(location.hash) && !document.getElementById('input').disabled);
  const threadId = decodeURIComponent((await page.evaluate(() => location.hash)).slice(3));
  await page.type('#input', 'weather in Oslo');
  await page.click('#send');
  await page.waitForSelector('details.tool-call summary code');
  assert.equal(await page.$eval('details.tool-call summary code', (e) => e.textContent), 'get_weather');
  assert.equal(await page.$eval('details.tool-call', (e) => e.open), false, 'the tool call is folded');
  await page.waitForFunction(() => [...document.querySelectorAll('.msg.assistant .content')]
    .some((e) => e.textContent.startsWith('It is')));
  assert.match(await page.$eval('details.tool-call .result pre', (e) => e.textContent), /Oslo/);
  // No tool message stands alone: it is folded under its call.
  assert.equal(await page.$$eval('.msg.tool', (l) => l.length), 0);

  // A streamed reply, and a reload in the middle of it.
  await page.type('#input', 'tell a story');
  await page.click('#send');
  await page.waitForFunction(() => {
    const p = document.querySelector('#partial .content');
    return p && p.textContent.split(' ').length >= 3;
  });
  const before = await page.$eval('#partial .content', (e) => e.textContent);
  assert.ok(kStory.startsWith(before) && before !== kStory, `mid-stream: ${before}`);
  await page.reload();
  // The committed reply (not the streaming one) replaces what streamed in.
  await page.waitForFunction((story) => [...document.querySelectorAll('.msg.assistant:not(.streaming)')]
    .some((e) => e.querySelector('.content')?.textContent === story), {}, kStory);
  // The text streamed into the page, across the reload, is the reply exactly once.
  const streamed = await page.$$eval('.msg.assistant[data-streamed]', (l) => l.map((e) => e.dataset.streamed));
  assert.deepEqual(streamed.filter((s) => s.startsWith('word')), [kStory]);
  assert.equal(await page.$$eval('.msg.assistant .content', (l) => l.filter((e) => e.textContent.startsWith('word')).length), 1);
  assert.equal(await page.$('#partial'), null);
  const shown = await page.$$eval('.msg', (l) => l.length);

  // Fork after the first exchange, then switch back to the original branch.
  await page.evaluate(() => document.querySelectorAll('.msg')[0].querySelector('button.fork').click());
  await page.waitForFunction((id) => decodeURIComponent(location.hash.slice(3)) !== id, {}, threadId);
  await page.waitForSelector('#branches button.parent');
  assert.equal(await page.$$eval('.msg', (l) => l.length), 1);
  await page.type('#input', 'hello fork');
  await page.click('#send');
  await page.waitForFunction(() => [...document.querySelectorAll('.msg.assistant .content')]
    .some((e) => e.textContent === 'echo: hello fork'));
  // Clicked inside the page: the branch links are drawn again whenever the thread list reloads.
  await page.$eval('#branches button.parent', (b) => b.click());
  await page.waitForFunction((id) => decodeURIComponent(location.hash.slice(3)) === id, {}, threadId);
  await page.waitForFunction((n) => document.querySelectorAll('.msg').length === n, {}, shown);
  assert.equal(await page.$$eval('#branches button.fork-of', (l) => l.length), 1);
  assert.equal(await page.$$eval('.msg .content', (l) => l.filter((e) => e.textContent === 'echo: hello fork').length), 0);

  // Clear the context, then undo it.
  await page.click('#clear');
  await page.waitForFunction(() => document.querySelectorAll('.msg').length === 0);
  await page.click('#undo');
  await page.waitForFunction((n) => document.querySelectorAll('.msg').length === n, {}, shown);

  await page.screenshot({ path: 'chat_page.png', fullPage: true });
  assert.deepEqual(errors, []);
  console.log('chat page: ok');
} finally {
  await browser.close();
  const s = await stop(serve.child);
  await stop(mock.child);
  rmSync(dir, { recursive: true, force: true });
  assert.equal(s.code, 0, 'parley serve exits 0 on SIGTERM');
}
