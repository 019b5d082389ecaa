// Provider-run tools on the chat page of `parley serve`, in Debian's headless chromium: a thread
// whose reply ran Anthropic's web search (a recorded-shape reply served by the mock, stored by
// `parley ask`) shows the search folded under the reply, its summary naming the tool and the
// query, the input and the result inside, every text as text.
//   node server_tools_page.mjs <parley binary> [chromium]
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import puppeteer from 'puppeteer-core';

import { start, stop } from './parley_process.mjs';

const parley = process.argv[2];
const chromium = process.argv[3] || '/usr/bin/chromium';
assert.ok(parley, 'usage: node server_tools_page.mjs <parley binary> [chromium]');

const message = {
  id: 'msg_1', type: 'message', role: 'assistant', model: 'claude-mock',
  content: [
    { type: 'server_tool_use', id: 'srvtoolu_1', name: 'web_search', input: { query: 'Oslo <b>weather</b> today' } },
    { type: 'web_search_tool_result', tool_use_id: 'srvtoolu_1',
      content: [{ type: 'web_search_result', url: 'https://yr.no/oslo', title: 'Yr <img src=x onerror=alert(1)>' }] },
    { type: 'text', text: 'Oslo is at -3C.' },
  ],
  stop_reason: 'end_turn',
  usage: { input_tokens: 50, output_tokens: 9, server_tool_use: { web_search_requests: 1 } },
};
const script = JSON.stringify({ raw: JSON.stringify(message), content_type: 'application/json' }) + '\n';
const dir = mkdtempSync(join(tmpdir(), 'parley-page-tools-'));
writeFileSync(join(dir, 'script.jsonl'), script);
const db = join(dir, 'page.db');

const mock = await start(parley, ['mock', '--port', '0', '--script', join(dir, 'script.jsonl')]);
let serve = null;
let browser = null;
try {
  execFileSync(parley, ['ask', '--protocol', 'anthropic', '--base-url', mock.line, '--api-key', 'k',
                        '--model', 'claude-mock', '--no-stream', '--db', db, 'weather in Oslo?'],
               { stdio: ['ignore', 'pipe', 'pipe'] });
  const listed = JSON.parse(execFileSync(parley, ['history', 'list', '--db', db, '--json']).toString());
  const id = (Array.isArray(listed) ? listed : listed.threads)[0].id;
  serve = await start(parley, ['serve', '--db', db, '--port', '0', '--workers', '1',
                               '--base-url', mock.line, '--model', 'claude-mock', '--api-key', 'k']);
  browser = await puppeteer.launch({
    executablePath: chromium, headless: true, args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'],
  });
  const page = await browser.newPage();
  page.setDefaultTimeout(30_000);
  const errors = [];
  page.on('pageerror', (e) => errors.push(e.message));
  page.on('dialog', (d) => { errors.push('dialog: ' + d.message()); d.dismiss(); });
  await page.goto(serve.line + '/#t=' + encodeURIComponent(id));
  await page.waitForSelector('details.server-tool summary code');
  assert.equal(await page.$eval('details.server-tool summary code', (e) => e.textContent), 'web_search');
  assert.equal(await page.$eval('details.server-tool summary', (e) => e.textContent),
               'provider tool web_search Oslo <b>weather</b> today');
  assert.equal(await page.$eval('details.server-tool', (e) => e.open), false, 'the search is folded');
  assert.equal(await page.$$eval('details.server-tool b, details.server-tool img', (n) => n.length), 0,
               'nothing the provider sent became markup');
  await page.click('details.server-tool summary');
  assert.match(await page.$eval('details.server-tool .result pre', (e) => e.textContent), /yr\.no\/oslo/);
  assert.match(await page.$eval('.msg.assistant', (e) => e.textContent), /Oslo is at -3C\./);
  assert.deepEqual(errors, []);
  console.log('chat page: a provider-run web search folded under its reply: ok');
} finally {
  if (browser) await browser.close();
  if (serve) await stop(serve.child);
  await stop(mock.child);
  rmSync(dir, { recursive: true, force: true });
}
