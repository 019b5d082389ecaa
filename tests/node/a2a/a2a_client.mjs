// parley as an A2A client: the official A2A JS SDK's server (@a2a-js/sdk, pinned in
// package-lock.json, on express) is the remote agent of an [a2a.remote] table; `parley ask
// --a2a remote`, with `parley mock` as the model, delegates to it and answers with what it said.
// The agent wants a bearer token (from bearer_token_env) and a header of the table; a task that
// needs input (INPUT_REQUIRED) comes back to the model as the agent's question with its task id
// (`parley ask` has no one to ask), for the model to answer with that task_id. The streamed
// answer is shown as the call's progress by `parley ask` (stderr) and `parley chat`.
//
//   node a2a_client.mjs PARLEY_BINARY
import { spawn } from 'node:child_process';
import { mkdtempSync, writeFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import express from 'express';
import { A2A_PROTOCOL_VERSION, AGENT_CARD_PATH, Role, TaskState } from '@a2a-js/sdk';
import { DefaultRequestHandler, InMemoryTaskStore, AgentEvent } from '@a2a-js/sdk/server';
import { agentCardHandler, jsonRpcHandler, UserBuilder } from '@a2a-js/sdk/server/express';
import { parleyProcesses } from './parley_process.mjs';

const [parley] = process.argv.slice(2);
if (!parley) {
  console.error('usage: node a2a_client.mjs PARLEY_BINARY');
  process.exit(2);
}
const dir = mkdtempSync(join(tmpdir(), 'parley-a2a-client-'));
const { start, children } = parleyProcesses(parley);

function run(args, env, input) {
  return new Promise((resolve, reject) => {
    const child = spawn(parley, args, { stdio: [input === undefined ? 'ignore' : 'pipe', 'pipe', 'pipe'], env: { ...process.env, ...env } });
    if (input !== undefined) child.stdin.end(input);
    let out = '';
    let err = '';
    child.stdout.on('data', (d) => (out += d));
    child.stderr.on('data', (d) => (err += d));
    child.once('error', reject);
    child.once('exit', (code) => resolve({ code, out, err }));
  });
}

const text = (value) => ({ content: { $case: 'text', value }, metadata: undefined, filename: '', mediaType: 'text/plain' });
const textOf = (message) => message.parts.map((p) => (p.content?.$case === 'text' ? p.content.value : '')).join('');

// The remote agent: answers a question; asks which colour before it paints.
const seen = { messages: [], headers: [] };
class Executor {
  cancelTask = async () => {};
  async execute(context, bus) {
    const { taskId, contextId, userMessage, task } = context;
    const said = textOf(userMessage);
    seen.messages.push(said);
    const status = (state, message) =>
      bus.publish(AgentEvent.statusUpdate({ taskId, contextId, status: { state, message, timestamp: new Date().toISOString() }, metadata: {} }));
    bus.publish(AgentEvent.task(task ?? { id: taskId, contextId, status: { state: TaskState.TASK_STATE_SUBMITTED, timestamp: new Date().toISOString() }, artifacts: [], history: [userMessage], metadata: {} }));
    if (!task && said.includes('paint')) {
      status(TaskState.TASK_STATE_INPUT_REQUIRED, { role: Role.ROLE_AGENT, messageId: randomUUID(), parts: [text('Which colour, red or blue?')], taskId, contextId, extensions: [], metadata: {}, referenceTaskIds: [] });
      return;
    }
    const answer = task ? `painted it ${said}` : `remote answer to: ${said}`;
    bus.publish(AgentEvent.artifactUpdate({ taskId, contextId, artifact: { artifactId: randomUUID(), name: 'answer', description: '', parts: [text(answer)], metadata: undefined, extensions: [] }, append: false, lastChunk: true, metadata: undefined }));
    status(TaskState.TASK_STATE_COMPLETED, undefined);
  }
}

const app = express();
const server = app.listen(0, '127.0.0.1');
await new Promise((resolve) => server.once('listening', resolve));
const base = `http://127.0.0.1:${server.address().port}`;
const card = {
  name: 'Remote helper',
  description: 'answers questions and paints houses',
  supportedInterfaces: [{ url: `${base}/a2a`, protocolBinding: 'JSONRPC', tenant: '', protocolVersion: A2A_PROTOCOL_VERSION }],
  provider: { organization: 'tests', url: base },
  version: '1.0.0',
  capabilities: { streaming: true, pushNotifications: false, extensions: [], extendedAgentCard: false },
  securitySchemes: {},
  securityRequirements: [],
  defaultInputModes: ['text'],
  defaultOutputModes: ['text'],
  skills: [{ id: 'paint', name: 'Painting', description: 'paints a house in a colour', tags: ['paint'], examples: [], inputModes: [], outputModes: [], securityRequirements: [] }],
  documentationUrl: '',
  signatures: [],
};
const handler = new DefaultRequestHandler(card, new InMemoryTaskStore(), new Executor());
// The card says it streams: parley follows its tasks over SendStreamingMessage.
seen.streams = 0;
const sendMessageStream = handler.sendMessageStream.bind(handler);
handler.sendMessageStream = (...args) => {
  seen.streams += 1;
  return sendMessageStream(...args);
};
app.use(`/${AGENT_CARD_PATH}`, agentCardHandler({ agentCardProvider: handler }));
app.use('/a2a', (req, res, next) => {
  seen.headers.push(req.headers['x-team']);
  if (req.headers.authorization !== 'Bearer remote-secret-token') return res.status(401).json({ error: 'token' });
  next();
});
app.use('/a2a', jsonRpcHandler({ requestHandler: handler, userBuilder: UserBuilder.noAuthentication }));

const config = join(dir, 'config.toml');
writeFileSync(config, `[a2a.remote]\nurl = "${base}"\nbearer_token_env = "REMOTE_TOKEN"\nheaders = { "X-Team" = "tests" }\ntimeout_ms = 20000\n`);
const script = join(dir, 'script.jsonl');
writeFileSync(
  script,
  [
    { match: { last_role: 'tool' }, reply: { content: '{{last_tool_name}} says: {{tool_results}}' } },
    { match: { user_contains: 'France', tool: 'remote' }, reply: { tool_calls: [{ name: 'remote', arguments: { message: 'What is the capital of France?' } }] } },
    { match: { user_contains: 'paint', tool: 'remote' }, reply: { tool_calls: [{ name: 'remote', arguments: { message: 'paint my house' } }] } },
    { reply: { content: 'no tool offered' } },
  ].map((r) => JSON.stringify(r)).join('\n') + '\n',
);
const checks = [];
try {
  const mock = await start(['mock', '--port', '0', '--script', script]);
  const env = { PARLEY_CONFIG: config, REMOTE_TOKEN: 'remote-secret-token' };
  const ask = (prompt) => run(['ask', '--base-url', mock.url, '--model', 'm', '--api-key', 'k', '--a2a', 'remote', prompt], env);

  let r = await ask('Ask the remote agent about France');
  assert.equal(r.code, 0, r.err);
  assert.match(r.out, /remote says: remote answer to: What is the capital of France\?/);
  assert.deepEqual(seen.messages, ['What is the capital of France?']);
  assert.equal(seen.streams, 1, 'the task is followed over its stream');
  assert.ok(seen.headers.includes('tests'), 'the table\'s header is sent');
  checks.push('a parley run delegates to the remote agent and answers with what it said');
  // The streamed artifact chunk is the call's progress: a line on stderr, between the call's
  // [tool] lines, and nothing of it in the answer on stdout.
  const lines = r.err.split('\n');
  const progress = lines.findIndex((l) => l === '[tool] remote ... remote answer to: What is the capital of France?');
  assert.ok(progress > 0, r.err);
  assert.match(lines[progress - 1], /^\[tool\] remote \{/);
  assert.match(lines[progress + 1], /^\[tool\] remote -> /);
  assert.doesNotMatch(r.out, /\[tool\]/);
  r = await run(['ask', '--json', '--base-url', mock.url, '--model', 'm', '--api-key', 'k', '--a2a', 'remote', 'Ask the remote agent about France'], env);
  assert.equal(r.code, 0, r.err);
  assert.doesNotMatch(r.err, /\[tool\]/);
  JSON.parse(r.out);
  r = await run(['chat', '--db', join(dir, 'chat.db'), '--base-url', mock.url, '--model', 'm', '--api-key', 'k', '--a2a', 'remote'], env, 'Ask the remote agent about France\n/quit\n');
  assert.equal(r.code, 0, r.err);
  assert.match(r.out, /\[tool\] remote \{[^\n]*\n\[tool\] remote \.\.\. remote answer to: What is the capital of France\?\n\[tool\] remote -> /);
  checks.push('the remote agent\'s progress is shown by parley ask (stderr, not with --json) and parley chat');

  r = await ask('Ask the remote agent to paint my house');
  assert.equal(r.code, 0, r.err);
  assert.match(r.out, /remote says: the agent asks: Which colour, red or blue\?/);
  const taskId = /task_id "([^"]+)"/.exec(r.out)?.[1];
  assert.ok(taskId, r.out);
  checks.push('INPUT_REQUIRED comes back as the agent\'s question with its task id');

  r = await run(['ask', '--base-url', mock.url, '--model', 'm', '--api-key', 'k', '--a2a', 'remote', 'x'], { ...env, REMOTE_TOKEN: '' });
  assert.notEqual(r.code, 0);
  assert.match(r.err, /REMOTE_TOKEN is not set/);
  writeFileSync(join(dir, 'bad.toml'), `[a2a.remote]\nurl = "${base}/nowhere.json"\n`);
  r = await run(['ask', '--base-url', mock.url, '--model', 'm', '--api-key', 'k', '--a2a', 'remote', 'x'], { ...env, PARLEY_CONFIG: join(dir, 'bad.toml') });
  assert.notEqual(r.code, 0);
  assert.match(r.err, /Agent Card/);
  checks.push('a missing token variable, a card that is not there');
  console.log(`a2a client: ${checks.length} checks passed:\n  ${checks.join('\n  ')}`);
} finally {
  for (const child of children) child.kill('SIGTERM');
  server.close();
  server.closeAllConnections?.();
  rmSync(dir, { recursive: true, force: true });
}
