// The official openai npm client against `parley mock`: a streamed tool-calling reply, assembled
// by the SDK, must read as the same message and usage as the non-streaming reply; the demo
// agent, models and embeddings must read as they would from OpenAI.
//   node openai_compat.mjs <path to the parley binary>
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import OpenAI from 'openai';

const parley = process.argv[2];
assert.ok(parley, 'usage: node openai_compat.mjs <parley binary>');

// Starts `parley mock` on a free port and resolves with { child, baseURL }.
function startMock(args) {
  const child = spawn(parley, ['mock', '--port', '0', ...args], { stdio: ['ignore', 'pipe', 'inherit'] });
  return new Promise((resolve, reject) => {
    child.once('error', reject);
    child.once('exit', (code) => reject(new Error(`parley mock exited early (${code})`)));
    createInterface({ input: child.stdout }).once('line', (line) => resolve({ child, baseURL: line.trim() }));
  });
}

function stopMock(child) {
  return new Promise((resolve) => {
    child.removeAllListeners('exit');
    child.once('exit', (code, signal) => resolve({ code, signal }));
    child.kill('SIGTERM');
  });
}

const tools = ['get_weather', 'get_time', 'calculate'].map((name) => ({
  type: 'function',
  function: { name, description: name, parameters: { type: 'object', properties: {} } },
}));

const script = [
  // First match wins: the tool-result rule must come before the one matching the user text.
  { name: 'answer', match: { last_role: 'tool' }, reply: { content: 'Paris: {{tool_results}}' } },
  {
    name: 'parallel-tools',
    match: { user_contains: 'Paris and Oslo' },
    reply: {
      content: 'Let me check both — un café?',
      chunk_size: 3,
      tool_calls: [
        { name: 'get_weather', arguments: { city: 'Paris' } },
        { id: 'call_oslo', name: 'get_weather', arguments: { city: 'Oslo', unit: 'celsius' } },
      ],
      usage: { prompt_tokens: 42, completion_tokens: 17, prompt_tokens_details: { cached_tokens: 8 } },
    },
  },
];

const dir = mkdtempSync(join(tmpdir(), 'parley-compat-'));
const scriptPath = join(dir, 'script.jsonl');
writeFileSync(scriptPath, script.map((r) => JSON.stringify(r)).join('\n') + '\n');

const { child, baseURL } = await startMock(['--script', scriptPath]);
try {
  const client = new OpenAI({ baseURL, apiKey: 'sk-compat', maxRetries: 0 });
  const request = {
    model: 'compat-model',
    messages: [{ role: 'user', content: 'Weather in Paris and Oslo?' }],
    tools,
  };

  const plain = await client.chat.completions.create(request);
  assert.equal(plain.object, 'chat.completion');
  const message = plain.choices[0].message;
  assert.equal(message.content, 'Let me check both — un café?');
  assert.equal(message.tool_calls.length, 2);
  assert.equal(message.tool_calls[1].id, 'call_oslo');
  assert.deepEqual(JSON.parse(message.tool_calls[1].function.arguments), { city: 'Oslo', unit: 'celsius' });
  assert.equal(plain.choices[0].finish_reason, 'tool_calls');
  assert.deepEqual(plain.usage, {
    prompt_tokens: 42, completion_tokens: 17, total_tokens: 59, prompt_tokens_details: { cached_tokens: 8 },
  });

  // Streamed, assembled by the SDK's own stream helper.
  const stream = client.chat.completions.stream({ ...request, stream_options: { include_usage: true } });
  let chunks = 0;
  for await (const chunk of stream) {
    assert.equal(chunk.object, 'chat.completion.chunk');
    chunks += 1;
  }
  const assembled = await stream.finalChatCompletion();
  const streamed = assembled.choices[0].message;
  assert.ok(chunks > 10, `expected many chunks, got ${chunks}`);
  assert.equal(streamed.content, message.content);
  assert.equal(streamed.tool_calls.length, message.tool_calls.length);
  for (let i = 0; i < message.tool_calls.length; i++) {
    // Generated ids carry the request number (call_<request>_<n>); given ids are kept.
    assert.match(streamed.tool_calls[i].id, i === 0 ? /^call_2_1$/ : /^call_oslo$/);
    assert.equal(streamed.tool_calls[i].type, 'function');
    assert.equal(streamed.tool_calls[i].function.name, message.tool_calls[i].function.name);
    assert.equal(streamed.tool_calls[i].function.arguments, message.tool_calls[i].function.arguments);
  }
  assert.equal(assembled.choices[0].finish_reason, 'tool_calls');
  assert.deepEqual(assembled.usage, plain.usage);

  // Raw chunks through create({stream: true}), reassembled by hand.
  const raw = await client.chat.completions.create({ ...request, stream: true, stream_options: { include_usage: true } });
  let text = '';
  let usage = null;
  const args = [];
  for await (const chunk of raw) {
    if (chunk.usage) usage = chunk.usage;
    for (const choice of chunk.choices) {
      text += choice.delta.content ?? '';
      for (const tc of choice.delta.tool_calls ?? []) args[tc.index] = (args[tc.index] ?? '') + (tc.function?.arguments ?? '');
    }
  }
  assert.equal(text, message.content);
  assert.deepEqual(args, message.tool_calls.map((c) => c.function.arguments));
  assert.deepEqual(usage, plain.usage);

  // The next turn answers from the tool results.
  const followUp = await client.chat.completions.create({
    ...request,
    messages: [
      ...request.messages,
      message,
      { role: 'tool', tool_call_id: message.tool_calls[0].id, content: '18 C' },
      { role: 'tool', tool_call_id: message.tool_calls[1].id, content: '4 C' },
    ],
  });
  assert.equal(followUp.choices[0].message.content, 'Paris: 18 C; 4 C');

  // Errors reach the SDK as its APIError with status and message.
  await assert.rejects(
    client.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'unmatched' }] }),
    (err) => err instanceof OpenAI.APIError && err.status === 400 && /no script rule matches/.test(err.message));
} finally {
  const { code } = await stopMock(child);
  assert.equal(code, 0, 'parley mock should exit 0 on SIGTERM');
}

// The demo agent (no --script), models and embeddings.
const demo = await startMock([]);
try {
  const client = new OpenAI({ baseURL: demo.baseURL, apiKey: 'unused', maxRetries: 0 });
  const models = [];
  for await (const m of client.models.list()) models.push(m.id);
  assert.deepEqual(models, ['parley-mock']);

  const stream = client.chat.completions.stream({
    model: 'parley-mock', tools, messages: [{ role: 'user', content: 'What is the weather in Lisbon?' }],
  });
  const call = (await stream.finalChatCompletion()).choices[0].message.tool_calls[0];
  assert.equal(call.function.name, 'get_weather');
  assert.deepEqual(JSON.parse(call.function.arguments), { city: 'Lisbon' });

  // The SDK asks for base64 by default and decodes it; it must equal the float form.
  const input = ['sunny weather in Lisbon', 'rainy weather in Lisbon', 'tax forms'];
  const b64 = await client.embeddings.create({ model: 'e', input });
  const floats = await client.embeddings.create({ model: 'e', input, encoding_format: 'float' });
  assert.equal(b64.data.length, 3);
  for (let i = 0; i < 3; i++) {
    assert.equal(b64.data[i].embedding.length, 256);
    b64.data[i].embedding.forEach((x, j) => assert.ok(Math.abs(x - floats.data[i].embedding[j]) < 1e-6));
  }
  const dot = (a, b) => a.reduce((s, x, j) => s + x * b[j], 0);
  const [a, b, c] = floats.data.map((d) => d.embedding);
  assert.ok(dot(a, b) > dot(a, c), 'texts sharing words should be closer');
} finally {
  const { code } = await stopMock(demo.child);
  assert.equal(code, 0);
}
console.log('openai npm client: compatible');
