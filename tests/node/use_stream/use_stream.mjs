// LangGraph's useStream (@langchain/langgraph-sdk/react, at the versions LangGraph's Agent Chat UI
// locks; package-lock.json) in a React page written the way Agent Chat UI uses it (app.jsx,
// bundled here by esbuild into the build tree; no CDN), served from an origin of its own and
// talking to `parley serve`'s LangGraph API across origins (--cors) with an API key
// (X-Api-Key), in Debian's headless chromium driven by puppeteer-core: the server checked with
// /info, a first message that makes the thread, the thread listed by its graph, a second message
// (sent with the thread's latest checkpoint), a tool call approved and another rejected from the
// human-in-the-loop request, a streamed reply stopped, a reply regenerated and a message edited
// (each from the state before it), and a reload that shows the thread from its history. Any
// error useStream reports fails it.
//   node use_stream.mjs <parley binary> [chromium]
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
assert.ok(parley, 'usage: node use_stream.mjs <parley binary> [chromium]');
const here = dirname(fileURLToPath(import.meta.url));
const kToken = 'use-stream-token';

const site = await servePage(build, join(here, 'app.jsx'), 'useStream on parley');
const origin = site.origin;

const kStory = Array.from({ length: 200 }, (_, i) => `word${i + 1}`).join(' ');
const script = [
  { match: { last_role: 'tool' }, reply: { content: '{{last_tool_name}} says: {{tool_results}}' } },
  { match: { user_contains: 'delete', tool: 'delete_file' }, reply: { tool_calls: [{ id: 'call_del', name: 'delete_file', arguments: { path: 'a.txt' } }] } },
  { match: { user_contains: 'remove', tool: 'delete_file' }, reply: { tool_calls: [{ id: 'call_rm', name: 'delete_file', arguments: { path: 'b.txt' } }] } },
  // Held long enough to be stopped however loaded the machine is: streamMode values asks for
  // no streamed reply, so a chunk delay would not hold it.
  { match: { user_contains: 'story' }, delay_ms: 8000, reply: { content: kStory } },
  { match: { user_contains: 'take' }, reply: { content: 'Take {{request}}: {{last_user}}' } },
  { reply: { content: 'You said: {{last_user}}', chunk_size: 4 } },
];
const dir = mkdtempSync(join(tmpdir(), 'parley-use-stream-'));
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
  '--auth-token-env', 'USE_STREAM_TOKEN', '--base-url', mock.url, '--model', 'mock-model',
  '--api-key', 'unused', '--tools-file', join(dir, 'tools.toml'),
], { USE_STREAM_TOKEN: kToken });
const browser = await launchChromium(puppeteer, chromium);
try {
  const page = await browser.newPage();
  page.setDefaultTimeout(30_000);
  const { noError, waitFor } = pageChecks(page, assert);
  const idle = () => waitFor(() => document.getElementById('status').dataset.loading === 'false');
  const texts = (type) => page.$$eval(`.msg.${type} .text`, (l) => l.map((e) => e.textContent));
  // A click in the page, on the element there now: a click at the coordinates of an element
  // that a render has just replaced (useStream re-renders as the history arrives) lands nowhere.
  const click = (selector) => page.$eval(selector, (e) => e.click());
  const send = async (words) => {
    await idle();
    await page.type('#input', words);
    await click('#send');
  };
  const threadId = () => new URL(page.url()).searchParams.get('threadId');

  await page.goto(`${origin}/?apiUrl=${encodeURIComponent(serve.url)}&apiKey=${kToken}`);
  await waitFor(() => document.getElementById('server').textContent !== 'checking');
  assert.equal(await page.$eval('#server', (e) => e.textContent), 'ok', 'GET /info');

  // The first message makes the thread; the reply comes; the thread is listed under its graph.
  await send('hello graph');
  await waitFor(() => [...document.querySelectorAll('.msg.ai .text')].some((e) => e.textContent === 'You said: hello graph'));
  await idle();
  const thread = threadId();
  assert.ok(thread, 'useStream named the thread it made');
  await waitFor((id) => !!document.querySelector(`#threads li[data-id="${id}"]`), thread);

  // The second, sent with the thread's latest checkpoint.
  await send('second one');
  await waitFor(() => [...document.querySelectorAll('.msg.ai .text')].some((e) => e.textContent === 'You said: second one'));
  await idle();
  assert.deepEqual(await texts('human'), ['hello graph', 'second one']);
  assert.deepEqual(await texts('ai'), ['You said: hello graph', 'You said: second one']);

  // A call that needs approval: the human-in-the-loop request, approved.
  await send('delete a.txt');
  await waitFor(() => !!document.querySelector('#approval[data-tool="delete_file"] #approve'));
  assert.equal(await page.$eval('#approval .args', (e) => e.textContent), '{"path":"a.txt"}');
  await idle();
  await click('#approve');
  await waitFor(() => [...document.querySelectorAll('.msg.ai .text')].some((e) => e.textContent.startsWith('delete_file says:')));
  await idle();
  assert.equal(await page.$('#approval'), null);
  assert.match((await texts('tool')).at(-1), /a\.txt/);

  // Another, rejected: the call does not run, and the model is told so.
  await send('remove b.txt');
  await waitFor(() => !!document.querySelector('#approval #reject'));
  await idle();
  await click('#reject');
  await waitFor(() => [...document.querySelectorAll('.msg.tool .text')].some((e) => e.textContent.includes('not approved')));
  await idle();
  assert.doesNotMatch((await texts('tool')).at(-1), /b\.txt"\}$/);

  // A reply stopped while it streams. As Agent Chat UI calls it (no reconnectOnMount), stop
  // leaves the stream, and the run goes on on the server (on_disconnect continue, as on
  // LangGraph's server): the next message is answered after it.
  await send('tell a story');
  await waitFor(() => document.getElementById('status').dataset.loading === 'true');
  await click('#stop');
  await idle();
  const story = (await texts('ai')).filter((t) => t === kStory);
  assert.equal(story.length, 0, 'the stopped reply did not finish');
  await send('after the stop');
  await waitFor(() => [...document.querySelectorAll('.msg.ai .text')].some((e) => e.textContent === 'You said: after the stop'));
  await idle();

  // A reply regenerated: the same question answered again, in place of the first answer.
  await send('take one');
  await waitFor(() => [...document.querySelectorAll('.msg.ai .text')].some((e) => /^Take \d+: take one$/.test(e.textContent)));
  await idle();
  const first = (await texts('ai')).at(-1);
  const humans = await texts('human');
  await page.$$eval('.msg.ai .regenerate', (l) => l.at(-1).click());
  await waitFor((was) => {
    const last = [...document.querySelectorAll('.msg.ai .text')].at(-1);
    return last && /^Take \d+: take one$/.test(last.textContent) && last.textContent !== was;
  }, first);
  await idle();
  assert.deepEqual(await texts('human'), humans, 'the question is asked once');
  assert.equal((await texts('ai')).filter((t) => t === first).length, 0, 'the first answer is gone');
  // A message edited: the new text answered in place of the old question and its answer.
  await page.type('#input', 'take two');
  await page.$$eval('.msg.human .edit', (l) => l.at(-1).click());
  await waitFor(() => [...document.querySelectorAll('.msg.ai .text')].some((e) => /^Take \d+: take two$/.test(e.textContent)));
  await idle();
  assert.deepEqual(await texts('human'), [...humans.slice(0, -1), 'take two']);
  assert.equal((await texts('ai')).filter((t) => t.endsWith(': take one')).length, 0);

  // A reload shows the thread from its history.
  const before = { human: await texts('human'), ai: await texts('ai') };
  await page.reload();
  await waitFor((n) => document.querySelectorAll('.msg.ai').length === n, before.ai.length);
  await idle();
  assert.deepEqual(await texts('human'), before.human);
  assert.deepEqual(await texts('ai'), before.ai);
  assert.equal(threadId(), thread);
  console.log('useStream page: /info, a thread made and listed, sent twice, approved, rejected, stopped, regenerated, edited, reloaded');
} finally {
  await browser.close();
  await stop(serve.child);
  await stop(mock.child);
  site.close();
  rmSync(dir, { recursive: true, force: true });
}
