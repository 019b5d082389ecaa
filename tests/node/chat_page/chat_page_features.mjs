// The chat page's reading and control features in Debian's headless chromium (puppeteer-core,
// pinned in package-lock.json), at desktop and at phone width (390 px): Markdown rendered
// safely (a reply holding <script>, <img onerror> and a javascript: link runs nothing), code
// blocks with copy, tokens per reply, a tool approval answered, stop, regenerate and edit (forks),
// delete, the model picker, and the sidebar collapsing at phone width. Screenshots are kept in
// the working folder (chat_page_desktop.png, chat_page_phone.png).
//   node chat_page_features.mjs <parley binary> [chromium]
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import puppeteer from 'puppeteer-core';

import { start, stop } from './parley_process.mjs';

const parley = process.argv[2];
const chromium = process.argv[3] || '/usr/bin/chromium';
assert.ok(parley, 'usage: node chat_page_features.mjs <parley binary> [chromium]');

const kMarkdown = [
  '# Title',
  '',
  'Some **bold** and *it* and `code`.',
  '',
  '```js',
  'console.log(1 < 2)',
  '```',
  '',
  '- one',
  '- two',
  '',
  '<script>window.__pwned = 1</script>',
  '<img src=x onerror="window.__pwned = 2">',
  '[click](javascript:window.__pwned=3) and [ok](https://example.com)',
].join('\n');
const kSlow = Array.from({ length: 200 }, (_, i) => `w${i}`).join(' ');
const script = [
  { name: 'after-tool', match: { last_role: 'tool' }, reply: { content: '{{last_tool_name}} says: {{tool_results}}' } },
  { name: 'markdown', match: { user_contains: 'markdown' }, reply: { content: kMarkdown } },
  { name: 'delete', match: { user_contains: 'delete', tool: 'delete_file' },
    reply: { tool_calls: [{ name: 'delete_file', arguments: { path: 'a.txt' } }] } },
  { name: 'slow', match: { user_contains: 'slow' }, reply: { content: kSlow }, stream: { chunk_delay_ms: 100 } },
  { name: 'echo', reply: { content: 'echo: {{last_user}}' } },
].map((r) => JSON.stringify(r)).join('\n');

const dir = mkdtempSync(join(tmpdir(), 'parley-page-features-'));
writeFileSync(join(dir, 'script.jsonl'), script);
writeFileSync(join(dir, 'prices.toml'), '[prices."parley-mock"]\ninput = 1.0\noutput = 2.0\n');
writeFileSync(join(dir, 'tools.toml'), [
  '[[tool]]', 'name = "delete_file"', 'description = "Deletes a file"', 'command = ["cat"]',
  'requires_approval = true',
  'parameters = \'{"type": "object", "properties": {"path": {"type": "string"}}}\'', '',
].join('\n'));

const mock = await start(parley, ['mock', '--port', '0', '--script', join(dir, 'script.jsonl')]);
const serve = await start(parley, ['serve', '--db', join(dir, 'page.db'), '--port', '0', '--workers', '1',
                           '--base-url', mock.line, '--model', 'parley-mock', '--api-key', 'sk-page-test',
                           '--tools-file', join(dir, 'tools.toml'), '--prices', join(dir, 'prices.toml')]);
const base = serve.line;
const browser = await puppeteer.launch({
  executablePath: chromium,
  headless: true,
  args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'],
});
const timeout = 30_000;
const hash = (page) => page.evaluate(() => decodeURIComponent(location.hash.slice(3)));
const replies = (page) => page.$$eval('.msg.assistant:not(.streaming) .content', (l) => l.map((e) => e.textContent));

try {
  await browser.defaultBrowserContext().overridePermissions(base, ['clipboard-read', 'clipboard-write', 'clipboard-sanitized-write']);
  const page = await browser.newPage();
  page.setDefaultTimeout(timeout);
  await page.setViewport({ width: 1100, height: 800 });
  const errors = [];
  page.on('pageerror', (e) => errors.push(e.message));
  const dialogs = [];
  page.on('dialog', async (d) => {
    dialogs.push(d.type());
    await (d.type() === 'prompt' ? d.accept('edited words') : d.accept());
  });
  await page.goto(base + '/');

  // --- Markdown, rendered as elements; the HTML in it stays text and runs nothing ---
  await page.click('#new-thread');
  await page.waitForFunction(() => /^#t=/.test(location.hash) && !document.getElementById('input').disabled);
  const first = await hash(page);
  await page.type('#input', 'markdown please');
  await page.click('#send');
  await page.waitForSelector('.msg.assistant:not(.streaming) .content h3');
  const md = await page.$eval('.msg.assistant:not(.streaming) .content', (c) => ({
    h3: c.querySelector('h3').textContent,
    strong: c.querySelector('strong').textContent,
    em: c.querySelector('em').textContent,
    code: c.querySelector('p code').textContent,
    block: c.querySelector('.codeblock pre code').textContent,
    lang: c.querySelector('.codeblock pre code').dataset.lang,
    items: [...c.querySelectorAll('ul li')].map((li) => li.textContent),
    links: [...c.querySelectorAll('a')].map((a) => a.getAttribute('href')),
    text: c.textContent,
  }));
  assert.deepEqual(md, {
    h3: 'Title', strong: 'bold', em: 'it', code: 'code', block: 'console.log(1 < 2)', lang: 'js',
    items: ['one', 'two'], links: ['https://example.com'], text: md.text,
  });
  assert.ok(md.text.includes('<script>window.__pwned = 1</script>'), 'the tag shows as text');
  assert.ok(md.text.includes('<img src=x onerror="window.__pwned = 2">'));
  assert.ok(md.text.includes('[click](javascript:window.__pwned=3)'), 'a javascript: link stays text');
  assert.equal(await page.$$eval('#messages script, #messages img, #messages iframe', (l) => l.length), 0);
  assert.equal(await page.evaluate(() => window.__pwned), undefined);
  // Copy puts the code block's text on the clipboard.
  await page.click('.codeblock .copy');
  await page.waitForFunction(() => document.querySelector('.codeblock .copy').textContent === 'copied');
  assert.equal(await page.evaluate(() => navigator.clipboard.readText()), 'console.log(1 < 2)');
  // Tokens and cost per reply (the served price table: 1 and 2 USD per million tokens).
  await page.waitForFunction(() => /\$0\.0\d+$/.test(document.querySelector('.msg.assistant .meta.usage').textContent));
  assert.match(await page.$eval('.msg.assistant .meta.usage', (e) => e.textContent),
               /^parley-mock · \d+ in · \d+ out tokens · \$0\.0\d+$/);
  // The thread took its title from its first prompt.
  await page.waitForFunction(() => document.getElementById('title').textContent === 'markdown please');
  await page.waitForFunction((id) => document.querySelector(`#threads li[data-id="${id}"]`)?.textContent
    .startsWith('markdown please'), {}, first);
  // One model served: no picker to choose from.
  assert.equal(await page.$eval('#model', (e) => e.style.display), 'none');

  // --- a tool that needs approval: the page asks, Approve goes on ---
  await page.type('#input', 'delete a.txt');
  await page.click('#send');
  await page.waitForSelector('#interrupt.shown');
  assert.match(await page.$eval('#interrupt-prompt', (e) => e.textContent), /delete_file/);
  await page.click('#approve');
  await page.waitForFunction(() => [...document.querySelectorAll('.msg.assistant .content')]
    .some((e) => e.textContent === 'delete_file says: {"path":"a.txt"}'));
  assert.equal(await page.$('#interrupt.shown'), null);

  // --- stop a reply streaming in ---
  await page.type('#input', 'slow story');
  await page.click('#send');
  await page.waitForSelector('#stop.shown');
  await page.waitForSelector('#partial');
  await page.click('#stop');
  await page.waitForFunction(() => document.getElementById('status').textContent === 'cancelled');
  assert.equal(await page.$('#stop.shown'), null);
  assert.ok(!(await replies(page)).includes(kSlow), 'the stopped reply was not completed');

  // --- regenerate: a fork before the question, asked again ---
  await page.evaluate(() => [...document.querySelectorAll('.msg.assistant')]
    .find((m) => m.querySelector('h3'))?.querySelector('button.regenerate').click());
  await page.waitForFunction((id) => decodeURIComponent(location.hash.slice(3)) !== id, {}, first);
  await page.waitForSelector('.msg.assistant:not(.streaming) .content h3');
  assert.equal(await page.$$eval('.msg.user', (l) => l.length), 1);
  const regenerated = await hash(page);

  // --- edit the question: another fork, with the edited text ---
  await page.evaluate(() => document.querySelector('.msg.user button.edit').click());
  await page.waitForFunction((id) => decodeURIComponent(location.hash.slice(3)) !== id, {}, regenerated);
  await page.waitForFunction(() => [...document.querySelectorAll('.msg.assistant .content')]
    .some((e) => e.textContent === 'echo: edited words'));
  assert.deepEqual(dialogs, ['prompt']);
  const edited = await hash(page);

  // Search (by the server): only the threads whose title or id holds the text.
  await page.type('#search', 'no such thread');
  await page.waitForFunction(() => document.querySelectorAll('#threads li').length === 0);
  await page.$eval('#search', (e) => { e.value = ''; e.dispatchEvent(new Event('input')); });
  await page.waitForFunction(() => document.querySelectorAll('#threads li').length >= 3);
  await page.screenshot({ path: 'chat_page_desktop.png', fullPage: true });

  // --- delete the open thread ---
  await page.click('#delete-thread');
  await page.waitForFunction((id) => !document.querySelector(`#threads li[data-id="${id}"]`), {}, edited);
  assert.equal((await fetch(`${base}/v1/threads/${edited}`)).status, 404);

  // --- newest threads first ---
  const made = await (await fetch(`${base}/v1/threads`, {
    method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ title: 'second thread' }),
  })).json();

  // --- phone width: the sidebar collapses behind a menu button ---
  await page.setViewport({ width: 390, height: 844, isMobile: true, hasTouch: true });
  await page.goto(`${base}/#t=${encodeURIComponent(first)}`);
  await page.waitForSelector('.msg.assistant .content h3');
  assert.equal(await page.$eval('aside', (e) => getComputedStyle(e).display), 'none');
  const width = await page.$eval('#messages', (e) => e.getBoundingClientRect().width);
  assert.ok(width >= 370, `the chat takes the width (${width} px)`);
  assert.equal(await page.evaluate(() => document.documentElement.scrollWidth <= 390), true, 'nothing overflows sideways');
  await page.screenshot({ path: 'chat_page_phone.png', fullPage: false });
  await page.click('#menu');
  assert.equal(await page.$eval('aside', (e) => getComputedStyle(e).display), 'block');
  assert.equal(await page.$eval('#threads li', (e) => e.dataset.id), made.id, 'the newest thread first');
  await page.click(`#threads li[data-id="${regenerated}"]`);
  await page.waitForFunction((id) => decodeURIComponent(location.hash.slice(3)) === id, {}, regenerated);
  assert.equal(await page.$eval('aside', (e) => getComputedStyle(e).display), 'none');
  // Rename (the dialog answers 'edited words').
  await page.click('#rename');
  await page.waitForFunction(() => document.getElementById('title').textContent === 'edited words');
  assert.equal((await (await fetch(`${base}/v1/threads/${regenerated}`)).json()).title, 'edited words');

  assert.deepEqual(errors, []);
  console.log('chat page features: ok');
} finally {
  await browser.close();
  const s = await stop(serve.child);
  await stop(mock.child);
  rmSync(dir, { recursive: true, force: true });
  assert.equal(s.code, 0, 'parley serve exits 0 on SIGTERM');
}
