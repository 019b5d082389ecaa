// The official npm clients of the two other protocols against `parley mock`, which answers them
// from the same script as Chat Completions: `openai` responses.create with stream: true and
// function calls (the reasoning item carried back), and `@anthropic-ai/sdk` messages.stream with
// tool use and thinking (the signed thinking block carried back).
//   node protocols_compat.mjs <path to the parley binary>
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';

const parley = process.argv[2];
assert.ok(parley, 'usage: node protocols_compat.mjs <parley binary>');

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
    child.once('exit', () => resolve());
    child.kill('SIGTERM');
  });
}

const script = [
  { name: 'answer', match: { last_role: 'tool' }, reply: { content: 'It is {{tool_results}} — brr.' } },
  {
    name: 'call',
    match: { user_contains: 'Oslo' },
    reply: {
      reasoning_content: 'The user wants the weather; call the tool.',
      content: 'Checking Oslo — un instant.',
      chunk_size: 4,
      tool_calls: [{ id: 'call_oslo', name: 'get_weather', arguments: { city: 'Oslo', unit: 'celsius' } }],
      usage: { prompt_tokens: 40, completion_tokens: 12, prompt_tokens_details: { cached_tokens: 30 } },
    },
  },
];
const dir = mkdtempSync(join(tmpdir(), 'parley-protocols-'));
const scriptFile = join(dir, 'script.jsonl');
writeFileSync(scriptFile, script.map((r) => JSON.stringify(r)).join('\n') + '\n');

const { child, baseURL } = await startMock(['--script', scriptFile]);
try {
  // --- OpenAI Responses --------------------------------------------------------------------
  const openai = new OpenAI({ baseURL, apiKey: 'sk-test', maxRetries: 0 });
  const tools = [{ type: 'function', name: 'get_weather', description: 'weather', parameters: { type: 'object', properties: {} } }];
  const input = [{ role: 'user', content: 'Weather in Oslo?' }];
  const stream = await openai.responses.create({
    model: 'mock-model', input, tools, stream: true, store: false, include: ['reasoning.encrypted_content'],
  });
  let text = '';
  let args = '';
  let reasoning = '';
  let completed = null;
  for await (const event of stream) {
    if (event.type === 'response.output_text.delta') text += event.delta;
    if (event.type === 'response.function_call_arguments.delta') args += event.delta;
    if (event.type === 'response.reasoning_summary_text.delta') reasoning += event.delta;
    if (event.type === 'response.completed') completed = event.response;
  }
  assert.equal(text, 'Checking Oslo — un instant.');
  assert.deepEqual(JSON.parse(args), { city: 'Oslo', unit: 'celsius' });
  assert.equal(reasoning, 'The user wants the weather; call the tool.');
  assert.ok(completed, 'response.completed arrived');
  assert.equal(completed.usage.input_tokens, 40);
  assert.equal(completed.usage.input_tokens_details.cached_tokens, 30);
  const [rs, msg, call] = completed.output;
  assert.equal(rs.type, 'reasoning');
  assert.ok(rs.encrypted_content, 'the reasoning item carries encrypted content');
  assert.equal(msg.type, 'message');
  assert.equal(call.type, 'function_call');
  assert.equal(call.call_id, 'call_oslo');
  // Carry every output item back with the call's output, as OpenAI's stateless pattern does.
  const followUp = await openai.responses.create({
    model: 'mock-model', tools, store: false,
    input: [...input, ...completed.output, { type: 'function_call_output', call_id: call.call_id, output: '-3C' }],
  });
  assert.equal(followUp.output_text, 'It is -3C — brr.');
  // Without the reasoning item, the follow-up is refused as the real API refuses it.
  await assert.rejects(
    openai.responses.create({
      model: 'mock-model', tools, store: false,
      input: [...input, msg, call, { type: 'function_call_output', call_id: call.call_id, output: '-3C' }],
    }),
    (e) => e.status === 400 && /reasoning/.test(e.message),
  );

  // --- Anthropic Messages ------------------------------------------------------------------
  const anthropic = new Anthropic({ baseURL: baseURL.replace(/\/v1$/, ''), apiKey: 'sk-ant-test', maxRetries: 0 });
  const atools = [{ name: 'get_weather', description: 'weather', input_schema: { type: 'object', properties: {} } }];
  const messages = [{ role: 'user', content: 'Weather in Oslo?' }];
  const thinking = { type: 'enabled', budget_tokens: 1024 };
  let streamedText = '';
  let streamedThinking = '';
  const ms = anthropic.messages.stream({ model: 'mock-model', max_tokens: 256, messages, tools: atools, thinking });
  ms.on('text', (delta) => { streamedText += delta; });
  ms.on('thinking', (delta) => { streamedThinking += delta; });
  const final = await ms.finalMessage();
  assert.equal(streamedText, 'Checking Oslo — un instant.');
  assert.equal(streamedThinking, 'The user wants the weather; call the tool.');
  assert.equal(final.stop_reason, 'tool_use');
  assert.equal(final.usage.cache_read_input_tokens, 30);
  assert.equal(final.usage.input_tokens, 10);
  const [think, atext, use] = final.content;
  assert.equal(think.type, 'thinking');
  assert.ok(think.signature.length > 0, 'the thinking block is signed');
  assert.equal(atext.type, 'text');
  assert.equal(use.type, 'tool_use');
  assert.equal(use.id, 'call_oslo');
  assert.deepEqual(use.input, { city: 'Oslo', unit: 'celsius' });
  const answer = await anthropic.messages.create({
    model: 'mock-model', max_tokens: 256, tools: atools, thinking,
    messages: [...messages, { role: 'assistant', content: final.content },
               { role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: '-3C' }] }],
  });
  assert.equal(answer.content[0].text, 'It is -3C — brr.');
  await assert.rejects(
    anthropic.messages.create({
      model: 'mock-model', max_tokens: 256, tools: atools, thinking,
      messages: [...messages, { role: 'assistant', content: [atext, use] },
                 { role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: '-3C' }] }],
    }),
    (e) => e.status === 400 && /thinking/.test(e.message),
  );
  console.log('protocols compat ok: openai responses and anthropic messages');
} finally {
  await stopMock(child);
}
