// A2A push notifications across processes (docs/a2a.md, "Push notifications"): two `parley
// serve` processes and a `parley worker` on one database (SQLite, or PostgreSQL on the test
// cluster). A config made on one service, its task worked by the worker and answered through the
// other service: each state is posted once, by one of them. Then the service holding a task's
// cursor is SIGKILLed while the task waits; another service takes its claim over once it lapses
// and posts the rest, once.
//
//   node a2a_push_processes.mjs PARLEY_BINARY sqlite|postgres
import { createServer } from 'node:http';
import { mkdtempSync, writeFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { parleyProcesses } from './parley_process.mjs';
import { testDatabase } from './test_database.mjs';

const [parley, backend = 'sqlite'] = process.argv.slice(2);
if (!parley) {
  console.error('usage: node a2a_push_processes.mjs PARLEY_BINARY sqlite|postgres');
  process.exit(2);
}
const dir = mkdtempSync(join(tmpdir(), 'parley-a2a-push-'));
const { start, children } = parleyProcesses(parley);
const exited = (child) =>
  new Promise((resolve) => (child.exitCode !== null || child.signalCode !== null ? resolve() : child.once('exit', resolve)));

const db = testDatabase(backend, dir, 'a2a_push');

const script = join(dir, 'script.jsonl');
writeFileSync(
  script,
  [
    { match: { last_role: 'tool' }, reply: { content: '{{last_tool_name}} says: {{tool_results}}' } },
    { match: { user_contains: 'ask me' }, reply: { tool_calls: [{ name: 'ask_user', arguments: { question: 'Which colour?' } }] } },
    { reply: { content: 'You said: {{last_user}}' } },
  ].map((rule) => JSON.stringify(rule)).join('\n') + '\n',
);

// The receiver: every post; waiters are woken by each (no sleeps).
const pushes = [];
const waiters = new Set();
const receiver = createServer((req, res) => {
  let body = '';
  req.on('data', (d) => (body += d));
  req.on('end', () => {
    pushes.push({ headers: req.headers, body: JSON.parse(body) });
    for (const check of waiters) check();
    res.end();
  });
});
await new Promise((resolve) => receiver.listen(0, '127.0.0.1', resolve));
const hookUrl = `http://127.0.0.1:${receiver.address().port}/hook`;
const stateOf = (p) => p.body.statusUpdate?.status?.state;
function pushed(taskId, state) {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no push of ${state} for ${taskId}`)), 30_000);
    const check = () => {
      const found = pushes.find((p) => p.body.statusUpdate?.taskId === taskId && stateOf(p) === state);
      if (!found) return;
      clearTimeout(timer);
      waiters.delete(check);
      resolve(found);
    };
    waiters.add(check);
    check();
  });
}
const count = (taskId, state) => pushes.filter((p) => p.body.statusUpdate?.taskId === taskId && stateOf(p) === state).length;

async function rpc(service, method, params) {
  const res = await fetch(`${service.url}/a2a/jsonrpc`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', 'A2A-Version': '1.0' },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method, params }),
  });
  const body = await res.json();
  assert.ok(body.result, JSON.stringify(body));
  return body.result;
}
const message = (text, extra = {}) => ({ messageId: randomUUID(), role: 'ROLE_USER', parts: [{ text }], ...extra });
async function askWithPush(service, token) {
  const result = await rpc(service, 'SendMessage', {
    message: message('ask me'),
    configuration: { taskPushNotificationConfig: { url: hookUrl, token } },
  });
  return result.task;
}

const checks = [];
const serveArgs = ['serve', '--db', db, '--port', '0', '--webhook-allow-loopback'];
try {
  const mock = await start(['mock', '--port', '0', '--script', script]);
  // The worker's first line is its id, once it runs.
  await start(['worker', '--db', db, '--base-url', mock.url, '--model', 'parley-mock', '--api-key',
    'mock-key', '--human-tool', 'ask_user']);
  const a = await start(serveArgs);
  let b = await start(serveArgs);

  // 1. Made on A, answered through B: each state once, from one process or the other.
  const first = await askWithPush(a, 'tok-1');
  assert.equal(first.status.state, 'TASK_STATE_INPUT_REQUIRED');
  const asked = await pushed(first.id, 'TASK_STATE_INPUT_REQUIRED');
  assert.equal(asked.headers['x-a2a-notification-token'], 'tok-1');
  const answered = await rpc(b, 'SendMessage', { message: message('blue', { taskId: first.id, contextId: first.contextId }) });
  assert.equal(answered.task.status.state, 'TASK_STATE_COMPLETED');
  await pushed(first.id, 'TASK_STATE_COMPLETED');
  checks.push(`${backend}: a config made on one service, its task answered through another: delivered`);

  // 2. B stopped: A alone holds the next task's cursor. A is SIGKILLed while the task waits;
  //    C, a new service, takes the lapsed claim over and posts the rest.
  b.child.kill('SIGTERM');
  await exited(b.child);
  const second = await askWithPush(a, 'tok-2');
  await pushed(second.id, 'TASK_STATE_INPUT_REQUIRED');
  a.child.kill('SIGKILL');
  await exited(a.child);
  const c = await start(serveArgs);
  const done = await rpc(c, 'SendMessage', { message: message('green', { taskId: second.id, contextId: second.contextId }) });
  assert.equal(done.task.status.state, 'TASK_STATE_COMPLETED');
  const last = await pushed(second.id, 'TASK_STATE_COMPLETED');
  assert.equal(last.headers['x-a2a-notification-token'], 'tok-2');
  checks.push(`${backend}: the service holding a cursor SIGKILLed; another took it over and delivered the rest`);

  // Each state of each task was posted once: the first task's by then had every round of two
  // services (several seconds of them) to post it twice.
  for (const [task, state] of [[first.id, 'TASK_STATE_INPUT_REQUIRED'], [first.id, 'TASK_STATE_COMPLETED'],
    [second.id, 'TASK_STATE_INPUT_REQUIRED'], [second.id, 'TASK_STATE_COMPLETED']]) {
    assert.equal(count(task, state), 1, `${state} of ${task} posted ${count(task, state)} times`);
  }
  checks.push(`${backend}: each state of each task posted exactly once`);
  console.log(`a2a push across processes: ${checks.length} checks passed:\n  ${checks.join('\n  ')}`);
} finally {
  for (const child of children) child.kill('SIGTERM');
  receiver.close();
  receiver.closeAllConnections?.();
  rmSync(dir, { recursive: true, force: true });
}
