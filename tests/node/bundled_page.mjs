// A React page of a test bundled by esbuild (no CDN), served from an origin of its own on
// loopback, and Debian's chromium to open it (puppeteer-core): what the browser tests of the
// UI hooks (use_chat, use_stream) share. The packages are the caller's (each test folder pins its
// own), passed in. npm_ci.cmake copies this file into every test folder it installs.
import { createServer } from 'node:http';

// Bundles `entry` and serves it at `/app.js` under a page titled `title` with a #root element.
// Resolves with the site's origin and close().
export async function servePage(build, entry, title) {
  const bundled = await build({
    entryPoints: [entry],
    bundle: true,
    write: false,
    format: 'iife',
    jsx: 'automatic',
    minify: true,
    define: { 'process.env.NODE_ENV': '"production"' },
    logLevel: 'error',
  });
  const appJs = bundled.outputFiles[0].text;
  const html = `<!doctype html><meta charset="utf-8"><title>${title}</title>` +
    '<div id="root"></div><script src="/app.js"></script>';
  const site = createServer((req, res) => {
    if (req.url.startsWith('/app.js')) {
      res.writeHead(200, { 'content-type': 'text/javascript' }).end(appJs);
    } else {
      res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' }).end(html);
    }
  });
  await new Promise((resolve) => site.listen(0, '127.0.0.1', resolve));
  return { origin: `http://127.0.0.1:${site.address().port}`, close: () => site.close() };
}

export function launchChromium(puppeteer, executablePath) {
  return puppeteer.launch({
    executablePath,
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'],
  });
}

// Checks for a page that shows its hook's error in #error: noError() fails with it, and
// waitFor(condition, arg) waits for `condition` in the page or fails at once with the error.
export function pageChecks(page, assert) {
  const errors = [];
  page.on('pageerror', (e) => errors.push(e.message));
  const noError = async () => {
    const shown = await page.$eval('#error', (e) => e.textContent).catch(() => null);
    assert.equal(shown, null, `the page's error: ${shown}`);
    assert.deepEqual(errors, []);
  };
  const waitFor = async (condition, arg) => {
    await page.waitForFunction(
      `document.getElementById('error') || (${condition})(${JSON.stringify(arg)})`);
    await noError();
  };
  return { noError, waitFor };
}
