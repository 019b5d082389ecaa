// `parley history export --format html` on a phone: a thread made through the real binary
// against the mock (a reply with a long code line, a long link, a table and a list), exported
// and opened in Debian's headless chromium (puppeteer-core, pinned in package-lock.json) at 375
// CSS pixels: nothing scrolls sideways, and the page shows the reply's Markdown, model and time.
// The screenshot stays in the working folder (export_page.png).
//   node export_page.mjs <parley binary> [chromium]
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import puppeteer from 'puppeteer-core';

import { start, stop } from './parley_process.mjs';

const parley = process.argv[2];
const chromium = process.argv[3] || '/usr/bin/chromium';
assert.ok(parley, 'usage: node export_page.mjs <parley binary> [chromium]');

const longWord = 'x'.repeat(300);
const reply = [
  '## Result',
  'A **long** line: ' + 'word '.repeat(80),
  '',
  '- see [the docs](https://example.com/' + 'a'.repeat(200) + ')',
  '- ' + longWord,
  '',
  '| column one | column two | column three | column four | column five | column six |',
  '|---|---|---|---|---|---|',
  '',
  '```js',
  'const answer = ' + JSON.stringify('y'.repeat(250)) + ';',
  '```',
].join('\n');
const dir = mkdtempSync(join(tmpdir(), 'parley-export-page-'));
writeFileSync(join(dir, 'script.jsonl'), JSON.stringify({ name: 'long', reply: { content: reply } }) + '\n');

const db = join(dir, 'phone.db');
const mock = await start(parley, ['mock', '--port', '0', '--script', join(dir, 'script.jsonl')]);
let browser;
try {
  execFileSync(parley, ['ask', '--base-url', mock.line, '--model', 'parley-mock', '--api-key', 'sk-test',
                        '--db', db, 'Show me a wide answer'], { stdio: ['ignore', 'ignore', 'inherit'] });
  const threads = JSON.parse(execFileSync(parley, ['history', 'list', '--json', '--db', db]).toString());
  assert.equal(threads.length, 1);
  const html = execFileSync(parley, ['history', 'export', threads[0].id, '--format', 'html', '--db', db]);
  writeFileSync(join(dir, 'page.html'), html);

  browser = await puppeteer.launch({
    executablePath: chromium,
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'],
  });
  const page = await browser.newPage();
  await page.setViewport({ width: 375, height: 812, isMobile: true, hasTouch: true, deviceScaleFactor: 2 });
  await page.goto('file://' + join(dir, 'page.html'));

  const layout = await page.evaluate(() => ({
    viewport: window.innerWidth,
    scroll: document.documentElement.scrollWidth,
    widest: Math.max(...[...document.querySelectorAll('body *')].map((e) => e.getBoundingClientRect().right)),
  }));
  assert.equal(layout.viewport, 375, 'the page takes the phone width (viewport meta)');
  assert.ok(layout.scroll <= layout.viewport, `no sideways scrolling: ${JSON.stringify(layout)}`);
  assert.ok(layout.widest <= layout.viewport + 0.5, `no element past the right edge: ${JSON.stringify(layout)}`);

  assert.equal(await page.$eval('h1', (e) => e.textContent), 'Show me a wide answer');
  assert.equal(await page.$eval('.msg.assistant .meta .model', (e) => e.textContent), 'parley-mock');
  assert.match(await page.$eval('.msg.assistant .meta time', (e) => e.getAttribute('datetime')),
               /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
  assert.equal(await page.$eval('.msg.assistant h4', (e) => e.textContent), 'Result');
  assert.equal(await page.$eval('.msg.assistant strong', (e) => e.textContent), 'long');
  assert.equal(await page.$$eval('.msg.assistant ul li', (l) => l.length), 2);
  assert.match(await page.$eval('.msg.assistant a', (e) => e.href), /^https:\/\/example\.com\/a+$/);
  assert.equal(await page.$eval('.msg.assistant pre code.language-js', (e) => e.textContent.trim()),
               'const answer = "' + 'y'.repeat(250) + '";');
  assert.equal(await page.$$eval('script', (l) => l.length), 0);
  await page.screenshot({ path: 'export_page.png', fullPage: true });
  console.log('export page at phone width: ok');
} finally {
  if (browser) await browser.close();
  await stop(mock.child);
  rmSync(dir, { recursive: true, force: true });
}
