// The official A2A JS SDK (@a2a-js/sdk, pinned in package-lock.json) as the client of
// `parley serve`'s A2A 1.0 routes, on both bindings (JSON-RPC and HTTP+JSON): the Agent Card and
// the extended card, SendMessage (blocking, and returnImmediately), a follow-up on the same
// context, SendStreamingMessage, a task interrupted for input and resumed by the next message,
// a task cancelled while it waits and one cancelled while it runs, SubscribeToTask (a task
// queued behind another, followed to its end), GetTask with historyLength, ListTasks paged by
// cursor and filtered, push notification configs delivered to a loopback receiver; then the
// refusals each cap and unsupported case gets, as raw requests; and a task that survives a
// SIGKILL of the serving process.
//
//   node a2a_server.mjs PARLEY_BINARY
//
// The model is `parley mock` with a script of its own (a question for the human tool, a slow
// reply, a streamed story).
import { createServer } from 'node:http';
import { mkdtempSync, writeFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { Role, TaskState } from '@a2a-js/sdk';
import {
  ClientFactory,
  ClientFactoryOptions,
  JsonRpcTransportFactory,
  RestTransportFactory,
} from '@a2a-js/sdk/client';
import { parleyProcesses } from './parley_process.mjs';

const [parley] = process.argv.slice(2);
if (!parley) {
  console.error('usage: node a2a_server.mjs PARLEY_BINARY');
  process.exit(2);
}
const dir = mkdtempSync(join(tmpdir(), 'parley-a2a-'));
const { start, children } = parleyProcesses(parley);

const script = join(dir, 'script.jsonl');
writeFileSync(
  script,
  [
    { match: { last_role: 'tool' }, reply: { content: '{{last_tool_name}} says: {{tool_results}}' } },
    { match: { user_contains: 'ask me' }, reply: { tool_calls: [{ name: 'ask_user', arguments: { question: 'Which colour?' } }] } },
    { match: { user_contains: 'slow' }, delay_ms: 3000, reply: { content: 'slow done' } },
    { match: { user_contains: 'story', stream: true }, reply: { content: 'once upon a time a parley began and went on until the end', chunk_size: 8 }, stream: { chunk_delay_ms: 5 } },
    { reply: { content: 'You said: {{last_user}}' } },
  ]
    .map((rule) => JSON.stringify(rule))
    .join('\n') + '\n',
);
// The push notification receiver: every post, with its headers.
const pushes = [];
const pushWaiters = new Set();
const receiver = createServer((req, res) => {
  let body = '';
  req.on('data', (d) => (body += d));
  req.on('end', () => {
    pushes.push({ headers: req.headers, body: JSON.parse(body) });
    for (const check of pushWaiters) check();
    res.writeHead(200).end();
  });
});
await new Promise((resolve) => receiver.listen(0, '127.0.0.1', resolve));
const hookUrl = `http://127.0.0.1:${receiver.address().port}/hook`;
// Resolves with the first push `match` accepts (one waiting on an event, not a sleep).
function pushed(what, match) {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no push: ${what}`)), 20_000);
    const check = () => {
      const found = pushes.find(match);
      if (!found) return;
      clearTimeout(timer);
      pushWaiters.delete(check);
      resolve(found);
    };
    pushWaiters.add(check);
    check();
  });
}

const token = 'a2a-test-token-0123456789';
const mock = await start(['mock', '--port', '0', '--script', script]);
const serveArgs = [
  'serve', '--db', join(dir, 'a2a.db'), '--port', '0', '--workers', '1', '--base-url', mock.url,
  '--model', 'parley-mock', '--api-key', 'mock-key', '--human-tool', 'ask_user',
  '--concurrency', '4', '--auth-token-env', 'A2A_TEST_TOKEN', '--webhook-allow-loopback',
  '--lease-ms', '1500',
];
let serve = await start(serveArgs, { A2A_TEST_TOKEN: token });
const auth = { Authorization: `Bearer ${token}` };
const authedFetch = (url, init = {}) =>
  fetch(url, { ...init, headers: { ...(init.headers ?? {}), ...auth } });

async function clientFor(binding) {
  const factory = new ClientFactory(
    ClientFactoryOptions.createFrom(ClientFactoryOptions.default, {
      transports: [
        new JsonRpcTransportFactory({ fetchImpl: authedFetch }),
        new RestTransportFactory({ fetchImpl: authedFetch }),
      ],
      preferredTransports: [binding],
    }),
  );
  return factory.createFromUrl(serve.url);
}

const userMessage = (text, extra = {}) => ({
  messageId: randomUUID(),
  role: Role.ROLE_USER,
  parts: [{ content: { $case: 'text', value: text } }],
  ...extra,
});
const textOf = (parts) => parts.map((p) => (p.content?.$case === 'text' ? p.content.value : '')).join('');
const answerOf = (task) => textOf(task.artifacts?.[0]?.parts ?? []);
async function collect(stream) {
  const events = [];
  for await (const event of stream) events.push(event.payload);
  return events;
}
async function rejects(promise, reason, what) {
  try {
    await promise;
  } catch (error) {
    assert.equal(error.reason, reason, `${what}: ${error.message}`);
    return error;
  }
  throw new Error(`${what}: expected ${reason}`);
}
const checks = [];

try {
  const card = await (await fetch(`${serve.url}/.well-known/agent-card.json`)).json();
  assert.deepEqual(
    card.supportedInterfaces.map((i) => [i.protocolBinding, i.protocolVersion, i.url]),
    [
      ['JSONRPC', '1.0', `${serve.url}/a2a/jsonrpc`],
      ['HTTP+JSON', '1.0', `${serve.url}/a2a/rest`],
    ],
  );
  assert.equal(card.securitySchemes.bearer.httpAuthSecurityScheme.scheme, 'Bearer');
  assert.deepEqual(card.skills.map((s) => s.id), ['default']);
  assert.equal(card.capabilities.streaming, true);
  checks.push('agent card');

  for (const binding of ['JSONRPC', 'HTTP+JSON']) {
    const client = await clientFor(binding);
    assert.equal(client.transport.protocolName, binding);
    const step = (name) => checks.push(`${binding}: ${name}`);

    const extended = await client.getAgentCard();
    assert.match(extended.description, /\(extended\)/);
    step('GetExtendedAgentCard');

    const first = await client.sendMessage({ message: userMessage('hello') });
    assert.equal(first.status.state, TaskState.TASK_STATE_COMPLETED);
    assert.equal(answerOf(first), 'You said: hello');
    assert.ok(first.contextId);
    const again = await client.sendMessage({
      message: userMessage('again', { contextId: first.contextId }),
    });
    assert.equal(again.contextId, first.contextId);
    assert.notEqual(again.id, first.id);
    assert.equal(answerOf(again), 'You said: again');
    step('SendMessage, a follow-up on its context');

    const streamed = await collect(client.sendMessageStream({ message: userMessage('a story') }));
    assert.equal(streamed[0].$case, 'task');
    const updates = streamed.slice(1);
    assert.equal(updates.at(-1).$case, 'statusUpdate');
    assert.equal(updates.at(-1).value.status.state, TaskState.TASK_STATE_COMPLETED);
    assert.ok(updates.some((u) => u.$case === 'statusUpdate' && u.value.status.state === TaskState.TASK_STATE_WORKING));
    const pieces = updates.filter((u) => u.$case === 'artifactUpdate');
    // Streamed as the worker writes it (chunks coalesced by time: how many is not asserted); the
    // first piece opens the artifact, the last closes it.
    assert.equal(pieces[0].value.append, false);
    assert.equal(pieces.at(-1).value.lastChunk, true);
    assert.equal(
      pieces.map((u) => textOf(u.value.artifact.parts)).join(''),
      'once upon a time a parley began and went on until the end',
    );
    step('SendStreamingMessage');

    const asking = await client.sendMessage({ message: userMessage('ask me') });
    assert.equal(asking.status.state, TaskState.TASK_STATE_INPUT_REQUIRED);
    assert.equal(textOf(asking.status.message.parts), 'Which colour?');
    await rejects(
      client.sendMessage({ message: userMessage('another', { taskId: first.id }) }),
      'UNSUPPORTED_OPERATION',
      'a message on a completed task',
    );
    const answered = await client.sendMessage({
      message: userMessage('blue', { taskId: asking.id, contextId: asking.contextId }),
    });
    assert.equal(answered.id, asking.id);
    assert.equal(answered.status.state, TaskState.TASK_STATE_COMPLETED);
    assert.equal(answerOf(answered), 'ask_user says: blue');
    step('INPUT_REQUIRED, answered by the next message');

    // Push notifications: a config on a task that waits, delivered when it completes.
    const hooked = await client.sendMessage({ message: userMessage('ask me') });
    const config = await client.createTaskPushNotificationConfig({
      taskId: hooked.id, id: 'pn-1', url: hookUrl, token: `tok-${binding}`,
      authentication: { scheme: 'Bearer', credentials: 'push-secret' },
    });
    assert.equal(config.url, hookUrl);
    assert.equal((await client.getTaskPushNotificationConfig({ taskId: hooked.id, id: 'pn-1' })).token, `tok-${binding}`);
    assert.deepEqual((await client.listTaskPushNotificationConfig({ taskId: hooked.id })).configs.map((c) => c.id), ['pn-1']);
    await client.sendMessage({ message: userMessage('green', { taskId: hooked.id }) });
    const push = await pushed('the completed task', (p) => p.body.statusUpdate?.taskId === hooked.id && p.body.statusUpdate.status.state === 'TASK_STATE_COMPLETED');
    assert.equal(push.headers['x-a2a-notification-token'], `tok-${binding}`);
    assert.equal(push.headers.authorization, 'Bearer push-secret');
    await client.deleteTaskPushNotificationConfig({ taskId: hooked.id, id: 'pn-1' });
    assert.deepEqual((await client.listTaskPushNotificationConfig({ taskId: hooked.id })).configs, []);
    step('push notification configs (create, get, list, delete), delivered to a loopback receiver');

    const waiting = await client.sendMessage({ message: userMessage('ask me') });
    assert.equal(waiting.status.state, TaskState.TASK_STATE_INPUT_REQUIRED);
    const cancelled = await client.cancelTask({ id: waiting.id });
    assert.equal(cancelled.status.state, TaskState.TASK_STATE_CANCELED);
    await rejects(client.cancelTask({ id: waiting.id }), 'TASK_NOT_CANCELABLE', 'a second cancel');
    const slow = await client.sendMessage({
      message: userMessage('slow'),
      configuration: { returnImmediately: true, acceptedOutputModes: [] },
    });
    assert.ok([TaskState.TASK_STATE_SUBMITTED, TaskState.TASK_STATE_WORKING].includes(slow.status.state));
    const stopped = await client.cancelTask({ id: slow.id });
    assert.equal(stopped.status.state, TaskState.TASK_STATE_CANCELED);
    step('CancelTask (waiting, running), TaskNotCancelable');

    // A task queued behind one that waits on the same context: subscribed to before it starts,
    // followed to its end once the first is answered.
    const blocker = await client.sendMessage({ message: userMessage('ask me') });
    const queued = await client.sendMessage({
      message: userMessage('a story', { contextId: blocker.contextId }),
      configuration: { returnImmediately: true, acceptedOutputModes: [] },
    });
    assert.equal(queued.status.state, TaskState.TASK_STATE_SUBMITTED);
    const subscription = collect(client.resubscribeTask({ id: queued.id }));
    const unblocked = await client.sendMessage({
      message: userMessage('red', { taskId: blocker.id }),
    });
    assert.equal(answerOf(unblocked), 'ask_user says: red');
    const followed = await subscription;
    assert.equal(followed[0].$case, 'task');
    assert.equal(followed[0].value.status.state, TaskState.TASK_STATE_SUBMITTED);
    assert.equal(followed.at(-1).value.status.state, TaskState.TASK_STATE_COMPLETED);
    assert.equal(
      followed.filter((u) => u.$case === 'artifactUpdate').map((u) => textOf(u.value.artifact.parts)).join(''),
      'once upon a time a parley began and went on until the end',
    );
    await rejects(client.resubscribeTask({ id: queued.id }).next(), 'UNSUPPORTED_OPERATION', 'subscribing to a finished task');
    step('SubscribeToTask');

    const got = await client.getTask({ id: first.id, historyLength: 1 });
    assert.equal(got.history.length, 1);
    assert.equal(textOf(got.history[0].parts), 'You said: hello');
    assert.equal(answerOf(await client.getTask({ id: first.id })), 'You said: hello');
    await rejects(client.getTask({ id: 'r-nope' }), 'TASK_NOT_FOUND', 'an unknown task');
    step('GetTask');

    const seen = [];
    let pageToken = '';
    for (let page = 0; page < 50; ++page) {
      const listed = await client.listTasks({ pageSize: 2, pageToken, includeArtifacts: true });
      assert.ok(listed.tasks.length <= 2);
      seen.push(...listed.tasks.map((t) => t.id));
      pageToken = listed.nextPageToken;
      if (!pageToken) {
        assert.equal(listed.totalSize, seen.length);
        break;
      }
    }
    assert.equal(new Set(seen).size, seen.length, 'each task once');
    for (const id of [first.id, asking.id, queued.id]) assert.ok(seen.includes(id));
    const inContext = await client.listTasks({ contextId: first.contextId });
    assert.deepEqual(inContext.tasks.map((t) => t.id), [first.id, again.id]);
    const cancelledOnes = await client.listTasks({ status: TaskState.TASK_STATE_CANCELED });
    assert.ok(cancelledOnes.tasks.every((t) => t.status.state === TaskState.TASK_STATE_CANCELED));
    assert.ok(cancelledOnes.tasks.some((t) => t.id === waiting.id));
    step('ListTasks');
  }

  // Raw requests: what the SDK would not send.
  const rpc = async (body, headers = {}) => {
    const res = await fetch(`${serve.url}/a2a/jsonrpc`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', ...auth, ...headers },
      body: typeof body === 'string' ? body : JSON.stringify(body),
    });
    return { status: res.status, body: await res.json() };
  };
  const send = (message, method = 'SendMessage') => rpc({ jsonrpc: '2.0', id: 7, method, params: { message } });
  const textMessage = (parts) => ({ messageId: 'm', role: 'ROLE_USER', parts });

  let r = await send(textMessage(Array.from({ length: 65 }, () => ({ text: 'x' }))));
  assert.equal(r.body.error.code, -32602);
  assert.match(r.body.error.message, /65 parts, over 64 \(A2aLimits::maxParts\)/);
  r = await send(textMessage([{ text: 'x'.repeat(600 << 10) }]));
  assert.equal(r.body.error.code, -32602);
  assert.match(r.body.error.message, /A2aLimits::maxMessageBytes/);
  r = await send(textMessage([{ text: 'x' }]), 'message/send');
  assert.equal(r.body.error.code, -32601);
  r = await send(textMessage([{ kind: 'text', text: 'x' }]));
  assert.match(r.body.error.message, /A2A 0.3/);
  r = await send(textMessage([{ url: 'https://example.com/a.pdf', mediaType: 'application/pdf' }]));
  assert.equal(r.body.error.code, -32005);
  r = await rpc({ jsonrpc: '2.0', id: 8, method: 'GetTask', params: { id: 'r-x' } }, { 'A2A-Version': '0.3' });
  assert.equal(r.body.error.code, -32009);
  r = await rpc('{not json');
  assert.equal(r.body.error.code, -32700);
  r = await rpc({ jsonrpc: '2.0', id: 9, method: 'CreateTaskPushNotificationConfig', params: { taskId: 'r-x', url: 'https://example.com/hook' } });
  assert.equal(r.body.error.code, -32001);
  const asks = (await send(textMessage([{ text: 'ask me' }]))).body.result.task;
  const create = (params) => rpc({ jsonrpc: '2.0', id: 10, method: 'CreateTaskPushNotificationConfig', params: { taskId: asks.id, ...params } });
  r = await create({ url: 'https://user:pw@example.com/hook' });
  assert.equal(r.body.error.code, -32602);
  assert.match(r.body.error.message, /url/);
  for (let i = 0; i < 10; ++i) assert.ok((await create({ id: `c${i}`, url: hookUrl })).body.result);
  r = await create({ id: 'c10', url: hookUrl });
  assert.match(r.body.error.message, /10 push notification configs/);
  r = await create({ id: 'c0', url: hookUrl, token: 'x'.repeat(1025) });
  assert.match(r.body.error.message, /token: a string of at most 1024 bytes/);
  r = await rpc({ jsonrpc: '2.0', id: 9, method: 'ListTasks', params: { pageSize: 101 } });
  assert.match(r.body.error.message, /pageSize: 1 to 100/);
  checks.push('JSON-RPC refusals: parts, message size, 0.3 method and part, file URL, version, parse, page size, push targets (scheme, count, token)');

  const rest = await fetch(`${serve.url}/a2a/rest/tasks/r-missing`, { headers: auth });
  assert.equal(rest.status, 404);
  const restError = (await rest.json()).error;
  assert.equal(restError.details[0].reason, 'TASK_NOT_FOUND');
  assert.equal(restError.details[0].domain, 'a2a-protocol.org');
  const anonymous = await fetch(`${serve.url}/a2a/rest/tasks`);
  assert.equal(anonymous.status, 401);
  checks.push('HTTP+JSON errors (google.rpc.Status with ErrorInfo), a request without the token');

  // A task survives a SIGKILL of the serving process (its worker inside): the next process's
  // worker takes the run over once its lease expires, and the task completes.
  {
    let client = await clientFor('JSONRPC');
    const slow = await client.sendMessage({
      message: userMessage('slow survivor'),
      configuration: { returnImmediately: true, acceptedOutputModes: [] },
    });
    const until = Date.now() + 20_000;
    while ((await client.getTask({ id: slow.id })).status.state !== TaskState.TASK_STATE_WORKING) {
      assert.ok(Date.now() < until, 'the task starts');
      await new Promise((resolve) => setTimeout(resolve, 20));  // a poll of the service
    }
    serve.child.kill('SIGKILL');
    await new Promise((resolve) => (serve.child.exitCode !== null || serve.child.signalCode !== null ? resolve() : serve.child.once('exit', resolve)));
    serve = await start(serveArgs, { A2A_TEST_TOKEN: token });
    client = await clientFor('JSONRPC');
    try {
      const followed = await collect(client.resubscribeTask({ id: slow.id }));
      assert.equal(followed.at(-1).value.status.state, TaskState.TASK_STATE_COMPLETED);
    } catch (error) {
      // Finished before the subscription (a slow restart): GetTask below says how.
      if (error.reason !== 'UNSUPPORTED_OPERATION') throw error;
    }
    const done = await client.getTask({ id: slow.id });
    assert.equal(answerOf(done), 'slow done');
    checks.push('a task survives a SIGKILL of the serving process');
  }

  console.log(`a2a server: ${checks.length} checks passed:\n  ${checks.join('\n  ')}`);
} finally {
  for (const child of children) child.kill('SIGTERM');
  receiver.close();
  receiver.closeAllConnections?.();
  rmSync(dir, { recursive: true, force: true });
}
