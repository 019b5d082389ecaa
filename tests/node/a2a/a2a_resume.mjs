// A durable run's remote A2A task survives its worker's SIGKILL: the official A2A JS SDK's server
// (@a2a-js/sdk, pinned in package-lock.json, on express) is a slow remote agent whose task waits
// for the test's signal; `parley worker --a2a remote` runs a submitted run that delegates to it,
// journals the task's id (docs/scale-out.md, "Crash recovery") and is killed while the task
// works; the next worker takes the run over, follows the same task (GetTask) and answers with
// what the agent said. The agent saw one SendMessage.
//
//   node a2a_resume.mjs PARLEY_BINARY
import { spawn } from 'node:child_process';
import { mkdtempSync, writeFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import express from 'express';
import { A2A_PROTOCOL_VERSION, AGENT_CARD_PATH, TaskState } from '@a2a-js/sdk';
import { DefaultRequestHandler, InMemoryTaskStore, AgentEvent } from '@a2a-js/sdk/server';
import { agentCardHandler, jsonRpcHandler, UserBuilder } from '@a2a-js/sdk/server/express';
import { parleyProcesses } from './parley_process.mjs';

const [parley] = process.argv.slice(2);
if (!parley) {
  console.error('usage: node a2a_resume.mjs PARLEY_BINARY');
  process.exit(2);
}
const dir = mkdtempSync(join(tmpdir(), 'parley-a2a-resume-'));
const { start, children } = parleyProcesses(parley);

function run(args) {
  return new Promise((resolve, reject) => {
    const child = spawn(parley, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    child.stdout.on('data', (d) => (out += d));
    child.stderr.on('data', (d) => (err += d));
    child.once('error', reject);
    child.once('exit', (code) => resolve({ code, out, err }));
  });
}

// A promise and its resolver: the test waits on what the agent sees, never on time.
function signal() {
  let resolve;
  const promise = new Promise((r) => (resolve = r));
  return { promise, resolve };
}

const text = (value) => ({ content: { $case: 'text', value }, metadata: undefined, filename: '', mediaType: 'text/plain' });
const textOf = (message) => message.parts.map((p) => (p.content?.$case === 'text' ? p.content.value : '')).join('');

// The remote agent: works on a job until the test releases it.
const seen = { sendMessage: 0, getTask: 0, executions: 0 };
const executing = signal();
const release = signal();
let getTaskWaiter = null;  // resolved at the next GetTask
class Executor {
  cancelTask = async () => {};
  async execute(context, bus) {
    const { taskId, contextId, userMessage } = context;
    seen.executions += 1;
    const now = () => new Date().toISOString();
    bus.publish(AgentEvent.task({ id: taskId, contextId, status: { state: TaskState.TASK_STATE_WORKING, timestamp: now() }, artifacts: [], history: [userMessage], metadata: {} }));
    executing.resolve();
    await release.promise;
    bus.publish(AgentEvent.artifactUpdate({ taskId, contextId, artifact: { artifactId: randomUUID(), name: 'answer', description: '', parts: [text(`${textOf(userMessage)} done`)], metadata: undefined, extensions: [] }, append: false, lastChunk: true, metadata: undefined }));
    bus.publish(AgentEvent.statusUpdate({ taskId, contextId, status: { state: TaskState.TASK_STATE_COMPLETED, timestamp: now() }, metadata: {} }));
  }
}

const app = express();
const server = app.listen(0, '127.0.0.1');
await new Promise((resolve) => server.once('listening', resolve));
const base = `http://127.0.0.1:${server.address().port}`;
const card = {
  name: 'Slow helper',
  description: 'does long jobs',
  supportedInterfaces: [{ url: `${base}/a2a`, protocolBinding: 'JSONRPC', tenant: '', protocolVersion: A2A_PROTOCOL_VERSION }],
  provider: { organization: 'tests', url: base },
  version: '1.0.0',
  capabilities: { streaming: false, pushNotifications: false, extensions: [], extendedAgentCard: false },
  securitySchemes: {},
  securityRequirements: [],
  defaultInputModes: ['text'],
  defaultOutputModes: ['text'],
  skills: [{ id: 'jobs', name: 'Jobs', description: 'does a job', tags: [], examples: [], inputModes: [], outputModes: [], securityRequirements: [] }],
  documentationUrl: '',
  signatures: [],
};
const handler = new DefaultRequestHandler(card, new InMemoryTaskStore(), new Executor());
// The agent's own count of the operations it served.
const sendMessage = handler.sendMessage.bind(handler);
handler.sendMessage = (...args) => {
  seen.sendMessage += 1;
  return sendMessage(...args);
};
const getTask = handler.getTask.bind(handler);
handler.getTask = async (...args) => {
  seen.getTask += 1;
  const task = await getTask(...args);
  getTaskWaiter?.();
  return task;
};
const nextGetTask = () => new Promise((resolve) => (getTaskWaiter = resolve));
app.use(`/${AGENT_CARD_PATH}`, agentCardHandler({ agentCardProvider: handler }));
app.use('/a2a', jsonRpcHandler({ requestHandler: handler, userBuilder: UserBuilder.noAuthentication }));

const config = join(dir, 'config.toml');
writeFileSync(config, `[a2a.remote]\nurl = "${base}"\ntimeout_ms = 60000\n`);
process.env.PARLEY_CONFIG = config;
const script = join(dir, 'script.jsonl');
writeFileSync(
  script,
  [
    { match: { last_role: 'tool' }, reply: { content: '{{last_tool_name}} says: {{tool_results}}' } },
    { match: { user_contains: 'delegate', tool: 'remote' }, reply: { tool_calls: [{ name: 'remote', arguments: { message: 'the slow job' } }] } },
    { reply: { content: 'no tool offered' } },
  ].map((r) => JSON.stringify(r)).join('\n') + '\n',
);
const db = join(dir, 'runs.db');
const checks = [];
try {
  const mock = await start(['mock', '--port', '0', '--script', script]);
  const workerArgs = (id) => ['worker', '--db', db, '--base-url', mock.line, '--model', 'm', '--api-key', 'k', '--a2a', 'remote', '--lease-ms', '1000', '--worker-id', id];
  const submitted = await run(['submit', '--db', db, '--thread', 't', 'delegate the slow job']);
  assert.equal(submitted.code, 0, submitted.err);
  const runId = submitted.out.trim();

  const first = await start(workerArgs('first'));
  await executing.promise;  // the remote task works
  await nextGetTask();      // the worker follows it: its id was journaled before
  first.child.kill('SIGKILL');
  await new Promise((resolve) => (first.child.exitCode !== null || first.child.signalCode !== null ? resolve() : first.child.once('exit', resolve)));
  const readBefore = seen.getTask;

  const following = nextGetTask();
  await start(workerArgs('second'));
  await following;  // the second worker took the run over and reads the same task
  assert.ok(seen.getTask > readBefore);
  release.resolve();
  const waited = await run(['runs', 'wait', '--db', db, '--timeout', '60000', runId]);
  assert.equal(waited.code, 0, waited.out + waited.err);
  const shown = JSON.parse((await run(['runs', 'show', '--db', db, runId])).out);
  assert.equal(shown.worker, 'second');
  assert.equal(shown.attempts, 2);
  assert.match(shown.result.content, /remote says: the slow job done/);
  assert.equal(seen.sendMessage, 1, 'one SendMessage: the second worker resumed the task');
  assert.equal(seen.executions, 1);
  checks.push('a remote task survives its worker\'s SIGKILL: the next worker follows the same task (one SendMessage)');
  console.log(`a2a resume: ${checks.length} checks passed:\n  ${checks.join('\n  ')}`);
} finally {
  for (const child of children) child.kill('SIGTERM');
  server.close();
  server.closeAllConnections?.();
  rmSync(dir, { recursive: true, force: true });
}
