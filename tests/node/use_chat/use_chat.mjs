// The AI SDK's useChat (@ai-sdk/react, pinned in package-lock.json) in a minimal React page
// (app.jsx, bundled here by esbuild into the build tree; no CDN), served from an origin of its
// own and talking to `parley serve`'s UI message stream across origins (--cors), in Debian's
// headless chromium driven by puppeteer-core: a message sent and its streamed reply rendered, a
// tool call that needs approval approved from the page and its result rendered, and a reload in
// the middle of a streamed reply that shows the thread and resumes the reply, whole and once.
// Any chunk the SDK cannot read fails it (the page shows useChat's error).
//   node use_chat.mjs <parley binary> [chromium]
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';
import puppeteer from 'puppeteer-core';
import { launchChromium, pageChecks, servePage } from './bundled_page.mjs';
import { start as startParley, stop } from './parley_process.mjs';

const parley = process.argv[2];
const chromium = process.argv[3] || '/usr/bin/chromium';
assert.ok(parley, 'usage: node use_chat.mjs <parley binary> [chromium]');
const here = dirname(fileURLToPath(import.meta.url));

const site = await servePage(build, join(here, 'app.jsx'), 'useChat on parley');
const origin = site.origin;

const kStory = Array.from({ length: 40 }, (_, i) => `word${i + 1}`).join(' ');
const script = [
  { match: { last_role: 'tool' }, reply: { content: '{{last_tool_name}} says: {{tool_results}}' } },
  { match: { user_contains: 'delete', tool: 'delete_file' }, reply: { tool_calls: [{ id: 'call_del', name: 'delete_file', arguments: { path: 'a.txt' } }] } },
  { match: { user_contains: 'story' }, reply: { content: kStory, chunk_size: 6 }, stream: { chunk_delay_ms: 80 } },
  { reply: { content: 'You said: {{last_user}}', chunk_size: 4 } },
];
const dir = mkdtempSync(join(tmpdir(), 'parley-use-chat-'));
writeFileSync(join(dir, 'script.jsonl'), script.map((r) => JSON.stringify(r)).join('\n') + '\n');
writeFileSync(join(dir, 'tools.toml'), [
  '[[tool]]',
  'name = "delete_file"',
  'description = "Deletes a file"',
  'command = ["cat"]',
  'requires_approval = true',
  'parameters = \'{"type": "object", "properties": {"path": {"type": "string"}}}\'',
  '',
].join('\n'));

const mock = await startParley(parley, ['mock', '--port', '0', '--script', join(dir, 'script.jsonl')]);
const serve = await startParley(parley, [
  'serve', '--db', join(dir, 'parley.db'), '--port', '0', '--workers', '1', '--cors', origin,
  '--base-url', mock.url, '--model', 'mock-model', '--api-key', 'unused',
  '--tools-file', join(dir, 'tools.toml'),
]);
const browser = await launchChromium(puppeteer, chromium);
try {
  const page = await browser.newPage();
  page.setDefaultTimeout(30_000);
  const { noError, waitFor } = pageChecks(page, assert);
  const open = async (chat) => {
    await page.goto(`${origin}/?base=${encodeURIComponent(serve.url)}&chat=${chat}`);
    await page.waitForSelector('#input, #error');
    await noError();
  };
  const texts = (role) => page.$$eval(`.msg.${role}`, (l) => l.map((e) =>
    [...e.querySelectorAll('.text')].map((t) => t.textContent).join('')));
  const send = async (words) => {
    await waitFor(() => document.getElementById('status').dataset.status === 'ready');
    await page.type('#input', words);
    await page.$eval('#send', (e) => e.click());
  };

  // A message and its streamed reply.
  await open('uc-1');
  await send('hello page');
  await waitFor(() => document.getElementById('status').dataset.status === 'ready' &&
    document.querySelectorAll('.msg.assistant').length === 1);
  assert.deepEqual(await texts('user'), ['hello page']);
  assert.deepEqual(await texts('assistant'), ['You said: hello page']);

  // A tool call that needs approval: the page asks, a click approves, the same message goes on.
  await send('delete a.txt');
  await waitFor(() => !!document.querySelector('.tool[data-name="delete_file"][data-state="approval-requested"] button.approve'));
  assert.equal(await page.$eval('.tool .input', (e) => e.textContent), '{"path":"a.txt"}');
  await page.$eval('button.approve', (e) => e.click());
  await waitFor(() => [...document.querySelectorAll('.msg.assistant .text')]
    .some((e) => e.textContent.startsWith('delete_file says:')));
  await waitFor(() => document.getElementById('status').dataset.status === 'ready');
  assert.equal(await page.$eval('.tool[data-name="delete_file"]', (e) => e.dataset.state), 'output-available');
  assert.match((await texts('assistant')).at(-1), /^delete_file says: \{"path":"a.txt"\}$/);
  assert.equal(await page.$$eval('.msg.assistant', (l) => l.length), 2, 'the approval went on in the same message');

  // A streamed reply, and a reload in the middle of it: the page shows the thread and resumes.
  await send('tell a story');
  await waitFor(() => {
    const last = [...document.querySelectorAll('.msg.assistant .text')].at(-1);
    return last && last.textContent.startsWith('word1 ') && last.textContent.split(' ').length >= 3;
  });
  const before = (await texts('assistant')).at(-1);
  assert.ok(kStory.startsWith(before) && before !== kStory, `mid-stream: ${before}`);
  await page.reload();
  await page.waitForSelector('#input, #error');
  await noError();
  await waitFor((story) => [...document.querySelectorAll('.msg.assistant')]
    .some((e) => e.textContent === story), kStory);
  await waitFor(() => document.getElementById('status').dataset.status === 'ready');
  // The thread's history (both earlier exchanges) and the story once.
  assert.deepEqual(await texts('user'), ['hello page', 'delete a.txt', 'tell a story']);
  const replies = await texts('assistant');
  assert.equal(replies.filter((t) => t === kStory).length, 1, JSON.stringify(replies));
  assert.equal(replies[0], 'You said: hello page');

  // And after the run, a plain reload shows the same thread from the history alone.
  await page.reload();
  await waitFor((story) => [...document.querySelectorAll('.msg.assistant')]
    .some((e) => e.textContent === story), kStory);
  assert.deepEqual(await texts('user'), ['hello page', 'delete a.txt', 'tell a story']);
  await noError();
  console.log('useChat page: sent, streamed, approved, resumed after a reload');
} finally {
  await browser.close();
  await stop(serve.child);
  await stop(mock.child);
  site.close();
  rmSync(dir, { recursive: true, force: true });
}
