// The official openai npm client against `parley serve`'s OpenAI-compatible endpoints
// (docs/service.md, "OpenAI-compatible endpoints"): models, chat completions streamed and not,
// with a server-side tool and a client tool, the Responses API with previous_response_id, and
// errors past the caps in OpenAI's shape. The workers talk to `parley mock` with a script.
//   node service_openai.mjs <path to the parley binary>
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import { start as startParley, stop } from './parley_process.mjs';

const parley = process.argv[2];
assert.ok(parley, 'usage: node service_openai.mjs <parley binary>');

const start = (args) => startParley(parley, args);

const script = [
  { name: 'after-tool', match: { last_role: 'tool' }, reply: { content: '{{last_tool_name}} says: {{tool_results}}' } },
  { name: 'time', match: { user_contains: 'time', tool: 'get_time' }, reply: { tool_calls: [{ name: 'get_time', arguments: {} }] } },
  {
    name: 'order',
    match: { user_contains: 'order', tool: 'lookup_order' },
    reply: { content: 'Looking it up.', tool_calls: [{ id: 'call_order', name: 'lookup_order', arguments: { id: '42' } }] },
  },
  { name: 'echo', reply: { content: 'You said: {{last_user}}', usage: { prompt_tokens: 11, completion_tokens: 5 } } },
];

const dir = mkdtempSync(join(tmpdir(), 'parley-service-openai-'));
const scriptPath = join(dir, 'script.jsonl');
writeFileSync(scriptPath, script.map((r) => JSON.stringify(r)).join('\n') + '\n');

const mock = await start(['mock', '--port', '0', '--script', scriptPath]);
const serve = await start([
  'serve', '--db', join(dir, 'parley.db'), '--port', '0', '--workers', '1',
  '--base-url', mock.url, '--model', 'mock-model', '--tools', 'demo', '--api-key', 'unused',
]);
const base = serve.url;
const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: 'not-needed', maxRetries: 0 });
const lookupOrder = {
  type: 'function',
  function: { name: 'lookup_order', description: 'Where an order is', parameters: { type: 'object', properties: { id: { type: 'string' } } } },
};

try {
  // --- models ---
  const models = [];
  for await (const m of client.models.list()) models.push(m.id);
  assert.deepEqual(models, ['default']);
  assert.equal((await client.models.retrieve('default')).owned_by, 'parley');

  // --- a plain answer, not streamed and streamed: the same message and usage ---
  const { data: plain, response } = await client.chat.completions
    .create({ model: 'default', messages: [{ role: 'user', content: 'hello there' }] })
    .withResponse();
  assert.equal(plain.object, 'chat.completion');
  assert.equal(plain.choices[0].message.role, 'assistant');
  assert.equal(plain.choices[0].message.content, 'You said: hello there');
  assert.equal(plain.choices[0].finish_reason, 'stop');
  assert.deepEqual(plain.usage, { prompt_tokens: 11, completion_tokens: 5, total_tokens: 16 });
  // store is false by default: the run's thread is gone once answered.
  const thread = response.headers.get('x-parley-thread');
  assert.ok(thread);
  assert.equal((await fetch(`${base}/v1/threads/${thread}`)).status, 404);

  const stream = await client.chat.completions.create({
    model: 'default',
    messages: [{ role: 'user', content: 'hello there' }],
    stream: true,
    stream_options: { include_usage: true },
  });
  let streamed = '';
  let finish = null;
  let usage = null;
  let chunks = 0;
  for await (const chunk of stream) {
    ++chunks;
    assert.equal(chunk.object, 'chat.completion.chunk');
    if (chunk.usage) usage = chunk.usage;
    for (const choice of chunk.choices) {
      streamed += choice.delta.content ?? '';
      finish = choice.finish_reason ?? finish;
    }
  }
  assert.ok(chunks > 2, `${chunks} chunks`);
  assert.equal(streamed, 'You said: hello there');
  assert.equal(finish, 'stop');
  assert.deepEqual(usage, plain.usage);

  // --- a server-side tool (the workers' get_time) runs; the answer is the model's ---
  const timed = await client.chat.completions.create({
    model: 'default',
    messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'what time is it?' }],
    store: true,
  }).withResponse();
  assert.match(timed.data.choices[0].message.content, /^get_time says: {"utc":"\d{4}-/);
  assert.equal(timed.data.choices[0].message.tool_calls, undefined);
  // Kept (store: true): the thread holds the turn, the tool call and its result.
  const kept = await (await fetch(`${base}/v1/threads/${timed.response.headers.get('x-parley-thread')}`)).json();
  assert.deepEqual(kept.messages.map((m) => m.role), ['system', 'user', 'assistant', 'tool', 'assistant']);
  assert.equal(kept.title, 'what time is it?', 'a kept thread is titled from its first prompt');

  // --- a client tool: the reply carries the call; the client sends its output back ---
  const asked = [{ role: 'user', content: 'where is my order?' }];
  const call = await client.chat.completions.create({ model: 'default', messages: asked, tools: [lookupOrder] });
  const msg = call.choices[0].message;
  assert.equal(call.choices[0].finish_reason, 'tool_calls');
  assert.equal(msg.content, 'Looking it up.');
  assert.equal(msg.tool_calls.length, 1);
  assert.equal(msg.tool_calls[0].id, 'call_order');
  assert.equal(msg.tool_calls[0].function.name, 'lookup_order');
  assert.deepEqual(JSON.parse(msg.tool_calls[0].function.arguments), { id: '42' });
  const answered = await client.chat.completions.create({
    model: 'default',
    tools: [lookupOrder],
    messages: [...asked, msg, { role: 'tool', tool_call_id: 'call_order', content: 'shipped' }],
  });
  assert.equal(answered.choices[0].message.content, 'lookup_order says: shipped');

  // The same streamed, assembled by the SDK's own helper.
  const runner = client.chat.completions.stream({ model: 'default', messages: asked, tools: [lookupOrder] });
  const final = await runner.finalChatCompletion();
  assert.equal(final.choices[0].finish_reason, 'tool_calls');
  assert.equal(final.choices[0].message.content, 'Looking it up.');
  assert.equal(final.choices[0].message.tool_calls[0].function.name, 'lookup_order');
  assert.deepEqual(JSON.parse(final.choices[0].message.tool_calls[0].function.arguments), { id: '42' });

  async function refused(promise, status, code) {
    try {
      await promise;
    } catch (e) {
      assert.ok(e instanceof OpenAI.APIError, String(e));
      assert.equal(e.status, status, e.message);
      if (code) assert.equal(e.code, code, e.message);
      return e;
    }
    assert.fail(`expected HTTP ${status}`);
  }

  // --- the Responses API: the server keeps the history; a response id forks off any earlier one ---
  const first = await client.responses.create({ model: 'default', input: 'my name is Ada' });
  assert.equal(first.object, 'response');
  assert.equal(first.status, 'completed');
  assert.equal(first.output_text, 'You said: my name is Ada');
  assert.equal(first.usage.input_tokens, 11);
  assert.equal(first.usage.output_tokens, 5);
  const second = await client.responses.create({ model: 'default', input: 'and my job?', previous_response_id: first.id });
  assert.equal(second.previous_response_id, first.id);
  assert.equal(second.output_text, 'You said: and my job?');
  // The history is the server's: the thread of `second` holds both exchanges.
  const history = await (await fetch(`${base}/v1/threads/${second.id}`)).json();
  assert.deepEqual(history.messages.map((m) => m.content),
    ['my name is Ada', 'You said: my name is Ada', 'and my job?', 'You said: and my job?']);
  // A fork: another answer off `first`; `second` is unchanged.
  const other = await client.responses.create({ model: 'default', input: 'a fork', previous_response_id: first.id });
  const forked = await (await fetch(`${base}/v1/threads/${other.id}`)).json();
  assert.deepEqual(forked.messages.map((m) => m.content),
    ['my name is Ada', 'You said: my name is Ada', 'a fork', 'You said: a fork']);
  assert.equal(history.title, 'my name is Ada', 'a fork keeps the title of the first response');
  const again = await client.responses.retrieve(second.id);
  assert.equal(again.output_text, 'You said: and my job?');
  assert.equal(again.status, 'completed');
  await refused(client.responses.retrieve('resp_nope'), 404, 'response_not_found');
  await refused(client.responses.create({ model: 'default', input: 'x', previous_response_id: 'resp_nope' }),
    404, 'previous_response_not_found');

  // Streamed, read by the SDK's ResponseStream (which checks the events' order and indexes).
  const events = [];
  const rs = client.responses.stream({ model: 'default', input: 'stream me', previous_response_id: second.id });
  rs.on('event', (e) => events.push(e.type));
  const streamedResponse = await rs.finalResponse();
  // (output_text is the SDK's own convenience on create(), not on a streamed response)
  assert.equal(streamedResponse.status, 'completed');
  assert.equal(streamedResponse.output[0].content[0].text, 'You said: stream me');
  assert.equal(events[0], 'response.created');
  assert.ok(events.includes('response.output_text.delta'));
  assert.equal(events.at(-1), 'response.completed');

  // A client function tool: the response carries the call; its output continues the response.
  const fnTool = { type: 'function', name: 'lookup_order', description: 'Where an order is', parameters: lookupOrder.function.parameters };
  const withCall = await client.responses.create({ model: 'default', input: 'where is my order?', tools: [fnTool] });
  const fc = withCall.output.find((o) => o.type === 'function_call');
  assert.ok(fc, JSON.stringify(withCall.output));
  assert.equal(fc.name, 'lookup_order');
  assert.equal(fc.call_id, 'call_order');
  const afterCall = await client.responses.create({
    model: 'default',
    tools: [fnTool],
    previous_response_id: withCall.id,
    input: [{ type: 'function_call_output', call_id: fc.call_id, output: 'shipped' }],
  });
  assert.equal(afterCall.output_text, 'lookup_order says: shipped');
  await refused(client.responses.create({
    model: 'default', tools: [fnTool], previous_response_id: withCall.id,
    input: [{ type: 'function_call_output', call_id: 'call_other', output: 'x' }],
  }), 400, 'missing_tool_output');

  // --- errors, in OpenAI's shape, read by the SDK's error classes ---
  await refused(client.chat.completions.create({ model: 'gpt-nope', messages: asked }), 404, 'model_not_found');
  await refused(client.chat.completions.create({ model: 'default', messages: [] }), 400, 'invalid_messages');
  await refused(client.chat.completions.create({ model: 'default', messages: asked, n: 2 }), 400, 'unsupported_n');
  const many = Array.from({ length: 1001 }, () => ({ role: 'user', content: 'x' }));
  await refused(client.chat.completions.create({ model: 'default', messages: many }), 400, 'too_many_messages');
  const tools = Array.from({ length: 129 }, (_, i) => ({ ...lookupOrder, function: { ...lookupOrder.function, name: `t${i}` } }));
  await refused(client.chat.completions.create({ model: 'default', messages: asked, tools }), 400, 'invalid_tools');
  await refused(
    client.chat.completions.create({ model: 'default', messages: asked, tools: [lookupOrder], tool_choice: 'required' }),
    400, 'unsupported_tool_choice');
  await refused(
    client.chat.completions.create({ model: 'default', messages: [{ role: 'user', content: 'x'.repeat(1100000) }] }),
    413, 'body_too_large');

  // --- renaming a thread (PATCH /v1/threads/{id}), the title's cap ---
  const patch = (id, body) => fetch(`${base}/v1/threads/${id}`, {
    method: 'PATCH', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body),
  });
  const renamed = await patch(first.id, { title: 'Ada' });
  assert.equal(renamed.status, 200);
  assert.equal((await renamed.json()).title, 'Ada');
  const proposed = await (await patch(first.id, { title_from: `\n  ${'long words '.repeat(20)}\nmore` })).json();
  assert.equal(proposed.title, `${'long words '.repeat(20)}`.slice(0, 80) + '\u2026');
  assert.equal((await patch(first.id, { title: 'x'.repeat(1001) })).status, 400);
  assert.equal((await patch('t-none', { title: 'x' })).status, 404);
  assert.equal((await patch(first.id, { name: 'x' })).status, 400);

  console.log('service_openai: ok');
} finally {
  await stop(serve.child);
  await stop(mock.child);
}
