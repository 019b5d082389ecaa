// `parley serve`'s UI streams (docs/service.md, "UI streams") read by the official parsers: the
// AI SDK's chat transport and readUIMessageStream (package `ai`), and AG-UI's HttpAgent
// (@ag-ui/client): text, a server-side tool, a tool approval answered, a client tool's output,
// a stream resumed with Last-Event-ID. The workers talk to `parley mock` with a script.
//   node ui_streams.mjs <path to the parley binary>
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DefaultChatTransport, readUIMessageStream } from 'ai';
import { HttpAgent } from '@ag-ui/client';
import { start as startParley, stop } from './parley_process.mjs';

const parley = process.argv[2];
assert.ok(parley, 'usage: node ui_streams.mjs <parley binary>');

const start = (args) => startParley(parley, args);

const script = [
  { name: 'after-tool', match: { last_role: 'tool' }, reply: { content: '{{last_tool_name}} says: {{tool_results}}' } },
  { name: 'time', match: { user_contains: 'time', tool: 'get_time' }, reply: { tool_calls: [{ name: 'get_time', arguments: {} }] } },
  { name: 'delete', match: { user_contains: 'delete', tool: 'delete_file' }, reply: { tool_calls: [{ id: 'call_del', name: 'delete_file', arguments: { path: 'a.txt' } }] } },
  { name: 'weather', match: { user_contains: 'weather', tool: 'client_weather' }, reply: { tool_calls: [{ id: 'call_w', name: 'client_weather', arguments: { city: 'Oslo' } }] } },
  { name: 'echo', reply: { content: 'You said: {{last_user}}', chunk_size: 4 } },
];

const dir = mkdtempSync(join(tmpdir(), 'parley-ui-streams-'));
const scriptPath = join(dir, 'script.jsonl');
writeFileSync(scriptPath, script.map((r) => JSON.stringify(r)).join('\n') + '\n');
const toolsPath = join(dir, 'tools.toml');
writeFileSync(toolsPath, [
  '[[tool]]',
  'name = "delete_file"',
  'description = "Deletes a file"',
  'command = ["cat"]',
  'requires_approval = true',
  'parameters = \'{"type": "object", "properties": {"path": {"type": "string"}}}\'',
  '',
].join('\n'));

const mock = await start(['mock', '--port', '0', '--script', scriptPath]);
const serve = await start([
  'serve', '--db', join(dir, 'parley.db'), '--port', '0', '--workers', '1',
  '--base-url', mock.url, '--model', 'mock-model', '--api-key', 'unused',
  '--tools', 'demo', '--tools-file', toolsPath,
]);
const base = serve.url;
const clientWeather = {
  name: 'client_weather',
  description: 'The weather where the user is',
  parameters: { type: 'object', properties: { city: { type: 'string' } } },
};

// One request through the AI SDK's transport, read into the final UIMessage.
async function chat(chatId, messages, { lastMessage, body } = {}) {
  const transport = new DefaultChatTransport({ api: `${base}/v1/ui/chat`, body });
  const chunks = await transport.sendMessages({
    chatId, messages, trigger: 'submit-message', messageId: undefined, abortSignal: undefined,
  });
  let message;
  for await (const m of readUIMessageStream({
    message: lastMessage, stream: chunks, terminateOnError: true,
  })) {
    message = m;
  }
  return message;
}

const text = (message) => message.parts.filter((p) => p.type === 'text').map((p) => p.text).join('');
const user = (id, words) => ({ id, role: 'user', parts: [{ type: 'text', text: words }] });

// The frames of an SSE body: [{ id, data }].
async function frames(response) {
  const body = await response.text();
  return body.split('\n\n').filter((b) => b.includes('data: ')).map((block) => {
    const id = /^id: (\d+)$/m.exec(block)?.[1];
    const data = /^data: (.*)$/m.exec(block)[1];
    return { id: id === undefined ? undefined : Number(id), data };
  });
}

try {
  // --- the AI SDK UI message stream ---
  const raw = await fetch(`${base}/v1/ui/chat`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ id: 'ui-raw', messages: [user('u0', 'hello raw')], trigger: 'submit-message' }),
  });
  assert.equal(raw.status, 200);
  assert.equal(raw.headers.get('x-vercel-ai-ui-message-stream'), 'v1');
  const all = await frames(raw);
  const types = all.map((f) => (f.data === '[DONE]' ? '[DONE]' : JSON.parse(f.data).type));
  assert.equal(types[0], 'start');
  assert.deepEqual(types.slice(-3), ['text-end', 'finish', '[DONE]']);
  // The text arrives as deltas; how many depends on how the worker's reads fell (chunks that
  // arrive together are written as one event), so only their sum is fixed.
  const deltas = all.filter((f) => f.data !== '[DONE]' && JSON.parse(f.data).type === 'text-delta');
  assert.ok(deltas.length >= 1, types.join(' '));
  assert.equal(deltas.map((f) => JSON.parse(f.data).delta).join(''), 'You said: hello raw');

  // Resumed after a frame of the middle: the frames after it, none before, none twice.
  const middle = all.find((f, i) => i > 1 && f.id !== undefined && all[i + 1]?.id !== f.id);
  const resumed = await frames(await fetch(`${base}/v1/ui/chat/ui-raw/stream`, { headers: { 'Last-Event-ID': String(middle.id) } }));
  assert.deepEqual(resumed.map((f) => f.data), all.filter((f) => f.id === undefined || f.id > middle.id).map((f) => f.data));
  // No Last-Event-ID and no run under way: nothing to resume (what resumeStream expects).
  const transport = new DefaultChatTransport({ api: `${base}/v1/ui/chat` });
  assert.equal(await transport.reconnectToStream({ chatId: 'ui-raw' }), null);

  const hello = await chat('ui-1', [user('u1', 'hello there')]);
  assert.equal(hello.role, 'assistant');
  assert.equal(text(hello), 'You said: hello there');
  assert.equal(hello.metadata.usage.totalTokens > 0, true);

  // A server-side tool: its call and output are parts of the message, then the answer.
  const timed = await chat('ui-1', [user('u1', 'hello there'), hello, user('u2', 'what time is it?')]);
  const timePart = timed.parts.find((p) => p.type === 'tool-get_time');
  assert.equal(timePart.state, 'output-available');
  assert.match(text(timed), /^get_time says: {"utc":"\d{4}-/);

  // A tool that needs approval: the message asks; the next request approves; the same message
  // goes on.
  const asked = await chat('ui-2', [user('u1', 'delete a.txt')]);
  const approvalPart = asked.parts.find((p) => p.type === 'tool-delete_file');
  assert.equal(approvalPart.state, 'approval-requested');
  assert.deepEqual(approvalPart.input, { path: 'a.txt' });
  const approved = {
    ...asked,
    parts: asked.parts.map((p) => (p === approvalPart
      ? { ...p, state: 'approval-responded', approval: { id: p.approval.id, approved: true } }
      : p)),
  };
  const done = await chat('ui-2', [user('u1', 'delete a.txt'), approved], { lastMessage: approved });
  assert.equal(done.id, asked.id);
  assert.equal(done.parts.find((p) => p.type === 'tool-delete_file').state, 'output-available');
  assert.equal(text(done), 'delete_file says: {"path":"a.txt"}');

  // A client tool: the call comes to the client, whose output the next request carries.
  const body = { tools: [clientWeather] };
  const wants = await chat('ui-3', [user('u1', 'weather please')], { body });
  const weatherPart = wants.parts.find((p) => p.type === 'tool-client_weather');
  assert.equal(weatherPart.state, 'input-available');
  assert.deepEqual(weatherPart.input, { city: 'Oslo' });
  const answered = {
    ...wants,
    parts: wants.parts.map((p) => (p === weatherPart ? { ...p, state: 'output-available', output: 'sunny' } : p)),
  };
  const sunny = await chat('ui-3', [user('u1', 'weather please'), answered], { lastMessage: answered, body });
  assert.equal(text(sunny), 'client_weather says: sunny');

  // Bad input: OpenAI's error shape.
  const bad = await fetch(`${base}/v1/ui/chat`, {
    method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ id: 'ui-4', messages: [] }),
  });
  assert.equal(bad.status, 400);
  assert.equal((await bad.json()).error.code, 'invalid_messages');

  // --- AG-UI ---
  const agent = new HttpAgent({ url: `${base}/v1/ag-ui`, threadId: 'ag-1' });
  agent.messages = [{ id: 'm1', role: 'user', content: 'hello agent' }];
  const first = await agent.runAgent({ runId: 'run-1' });
  assert.equal(first.newMessages.length, 1, JSON.stringify(first.newMessages));
  assert.equal(first.newMessages[0].role, 'assistant');
  assert.equal(first.newMessages[0].content, 'You said: hello agent');

  agent.messages.push({ id: 'm2', role: 'user', content: 'what time is it?' });
  const second = await agent.runAgent({ runId: 'run-2' });
  const roles = second.newMessages.map((m) => m.role);
  assert.deepEqual(roles, ['assistant', 'tool', 'assistant'], JSON.stringify(second.newMessages));
  assert.equal(second.newMessages[0].toolCalls[0].function.name, 'get_time');
  assert.match(second.newMessages[2].content, /^get_time says: /);

  // The thread's last run again, whole, then after a frame (Last-Event-ID).
  const replay = await frames(await fetch(`${base}/v1/ag-ui/ag-1/stream`));
  const replayTypes = replay.map((f) => JSON.parse(f.data).type);
  assert.equal(replayTypes[0], 'RUN_STARTED');
  assert.equal(replayTypes.at(-1), 'RUN_FINISHED');
  assert.ok(replayTypes.includes('TOOL_CALL_RESULT'), replayTypes.join(' '));
  const cut = replay[Math.floor(replay.length / 2)];
  const tail = await frames(await fetch(`${base}/v1/ag-ui/ag-1/stream`, { headers: { 'Last-Event-ID': String(cut.id) } }));
  assert.deepEqual(tail.map((f) => f.data), replay.filter((f) => f.id > cut.id).map((f) => f.data));

  // An approval is an interrupt; resuming it with the answer goes on.
  const approver = new HttpAgent({ url: `${base}/v1/ag-ui`, threadId: 'ag-2' });
  approver.messages = [{ id: 'm1', role: 'user', content: 'delete a.txt' }];
  await approver.runAgent({ runId: 'run-3' });
  assert.equal(approver.pendingInterrupts.length, 1, JSON.stringify(approver.pendingInterrupts));
  const interrupt = approver.pendingInterrupts[0];
  assert.equal(interrupt.reason, 'tool_approval');
  assert.equal(interrupt.toolCallId, 'call_del');
  const resumedRun = await approver.runAgent({
    runId: 'run-4', resume: [{ interruptId: interrupt.id, status: 'resolved', payload: { approved: true } }],
  });
  const last = resumedRun.newMessages.filter((m) => m.role === 'assistant').at(-1);
  assert.equal(last.content, 'delete_file says: {"path":"a.txt"}');

  console.log('ui_streams: ok');
} finally {
  await stop(serve.child);
  await stop(mock.child);
}
