// An MCP server that needs an OAuth sign-in (tests/node/mcp/test_server.mjs oauth ok), signed in
// to from `parley chat` with a real browser: chat prints the authorization URL, Debian's headless
// chromium (driven by puppeteer-core) opens it, the authorization server sends it back to
// parley's loopback redirect, and the chat goes on with the server's tools. The server refuses
// the first access token once, so the client refreshes it without asking; a later
// `parley mcp list` uses the stored tokens (0600) and asks nobody. No token appears in what
// parley prints.
//   node mcp_signin.mjs <parley binary> <chromium> <test_server.mjs>
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import puppeteer from 'puppeteer-core';

import { start, stop } from './parley_process.mjs';

const [parley, chromium, testServer] = process.argv.slice(2);
assert.ok(parley && chromium && testServer,
          'usage: node mcp_signin.mjs <parley binary> <chromium> <test_server.mjs>');

const dir = mkdtempSync(join(tmpdir(), 'parley-signin-'));
const server = spawn(process.execPath, [testServer, 'oauth', 'ok'], { stdio: ['ignore', 'pipe', 'inherit'] });
// Whatever ends this script ends its servers too (they hold ctest's output pipe).
const children = [server];
process.on('exit', () => children.forEach((c) => c.kill('SIGKILL')));
const port = await new Promise((resolve, reject) => {
  server.once('exit', (code) => reject(new Error(`the OAuth test server exited (${code})`)));
  createInterface({ input: server.stdout }).once('line', (line) => resolve(line.split(' ')[1]));
});
const redirectPort = await new Promise((resolve) => {
  const probe = createServer().listen(0, '127.0.0.1', () => {
    const { port: free } = probe.address();
    probe.close(() => resolve(free));
  });
});
const config = join(dir, 'config.toml');
writeFileSync(config, `[mcp.secure]\nurl = "http://127.0.0.1:${port}/mcp"\noauth = true\n` +
                      `oauth_redirect_port = ${redirectPort}\n`);
const env = { ...process.env, HOME: dir, XDG_STATE_HOME: join(dir, 'state'),
              XDG_DATA_HOME: join(dir, 'data') };
const mock = await start(parley, ['mock', '--port', '0']);
children.push(mock.child);

// Runs `parley ARGS` (stdin: `input`); `onUrl` gets the sign-in URL when parley prints one.
function run(args, input, onUrl) {
  const child = spawn(parley, args, { env });
  child.stdin.end(input);
  let out = '';
  let err = '';
  child.stdout.on('data', (d) => { out += d; });
  child.stderr.on('data', (d) => {
    err += d;
    const url = err.match(/^ {2}(http\S+)$/m);
    if (url && onUrl) {
      const open = onUrl;
      onUrl = null;
      open(url[1]);
    }
  });
  return new Promise((resolve) => child.on('exit', (code) => resolve({ code, out, err })));
}

const browser = await puppeteer.launch({
  executablePath: chromium,
  headless: true,
  args: ['--no-sandbox', '--disable-gpu', '--no-first-run'],
});
let landed = null;
let opened = null;  // the browser's visit, awaited before its result is read
try {
  const first = await run(['chat', '--config', config, '--mcp', 'secure', '--base-url', mock.line,
                           '--model', 'mock-model', '--api-key', 'k', '--no-stream'],
                          'hello\n/quit\n', (url) => {
    opened = (async () => {
      const page = await browser.newPage();
      await page.goto(url, { waitUntil: 'load', timeout: 20000 });
      landed = { url: page.url(), text: await page.evaluate(() => document.body.innerText) };
    })();
  });
  await opened;
  assert.equal(first.code, 0, first.err);
  assert.match(first.err, /needs a sign-in/);
  assert.ok(landed, 'the browser never opened the URL');
  assert.ok(landed.url.startsWith(`http://127.0.0.1:${redirectPort}/callback?`), landed.url);
  assert.match(landed.text, /Signed in/);
  assert.ok(first.out.trim().length > 0, 'the chat printed no reply');

  const tokens = join(dir, 'state', 'parley', 'mcp_tokens.json');
  assert.equal(statSync(tokens).mode & 0o777, 0o600);

  // Signed in already: the stored tokens serve, nobody is asked.
  const second = await run(['mcp', 'list', 'secure', '--config', config], '',
                           () => assert.fail('asked to sign in again'));
  assert.equal(second.code, 0, second.err);
  assert.doesNotMatch(second.err, /needs a sign-in/);
  assert.match(second.out, /hello/);
  for (const printed of [first.out, first.err, second.out, second.err]) {
    assert.doesNotMatch(printed, /secret-(access|refresh)-token/);
  }
  const stats = await (await fetch(`http://127.0.0.1:${port}/stats`)).json();
  assert.equal(stats.authorizations, 1, JSON.stringify(stats));
  assert.equal(stats.refreshes, 1, JSON.stringify(stats));
  console.log('mcp sign-in: a real browser signed in once; the token was refreshed without asking');
} finally {
  await browser.close();
  await stop(mock.child);
  server.kill();
  rmSync(dir, { recursive: true, force: true });
}
