// The official @google/genai client against `parley mock`, which answers Gemini from the same
// script as the other protocols: generateContent, generateContentStream, a function-call round
// trip in a chat (the SDK carries the thoughtSignature back; the mock refuses a turn without
// it), structured output (responseMimeType with responseJsonSchema or responseSchema), context
// caches (create, get, generate with cachedContent, delete; the mock refuses what Google refuses),
// countTokens and models.list.
//   node genai_compat.mjs <path to the parley binary>
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { GoogleGenAI } from '@google/genai';

const parley = process.argv[2];
assert.ok(parley, 'usage: node genai_compat.mjs <parley binary>');

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
  { name: 'structured', match: { response_format: 'json_schema' }, reply: { content: '{"city": "Oslo", "celsius": -3}', chunk_size: 7 } },
  { name: 'cached', match: { user_contains: 'from the cache' }, reply: { content: 'Read it.' } },
  { name: 'answer', match: { last_role: 'tool' }, reply: { content: 'It is {{tool_results}} — brr.' } },
  {
    name: 'call',
    match: { user_contains: 'Oslo' },
    reply: {
      reasoning_content: 'The user wants the weather; call the tool.',
      content: 'Checking Oslo — un instant.',
      chunk_size: 4,
      tool_calls: [
        { id: 'call_oslo', name: 'get_weather', arguments: { city: 'Oslo', unit: 'celsius' } },
        { id: 'call_rome', name: 'get_weather', arguments: { city: 'Rome', unit: 'celsius' } },
      ],
      usage: { prompt_tokens: 40, completion_tokens: 12, prompt_tokens_details: { cached_tokens: 30 } },
    },
  },
  {
    name: 'text',
    reply: {
      reasoning_content: 'A greeting.',
      content: 'Hello {{last_user}} — ça va?',
      chunk_size: 3,
      usage: { prompt_tokens: 9, completion_tokens: 6, completion_tokens_details: { reasoning_tokens: 2 } },
    },
  },
];
const dir = mkdtempSync(join(tmpdir(), 'parley-genai-'));
const scriptFile = join(dir, 'script.jsonl');
writeFileSync(scriptFile, script.map((r) => JSON.stringify(r)).join('\n') + '\n');

const { child, baseURL } = await startMock(['--script', scriptFile]);
try {
  // The SDK appends /v1beta itself.
  const ai = new GoogleGenAI({ apiKey: 'k-test', httpOptions: { baseUrl: baseURL.replace(/\/v1$/, '') } });
  const config = { systemInstruction: 'Be terse.', thinkingConfig: { includeThoughts: true }, temperature: 0.2 };

  // --- text, whole and streamed --------------------------------------------------------------
  const whole = await ai.models.generateContent({ model: 'gemini-mock', contents: 'Bob', config });
  assert.equal(whole.text, 'Hello Bob — ça va?');
  assert.equal(whole.candidates[0].finishReason, 'STOP');
  assert.equal(whole.usageMetadata.promptTokenCount, 9);
  assert.equal(whole.usageMetadata.thoughtsTokenCount, 2);
  const thought = whole.candidates[0].content.parts.find((p) => p.thought);
  assert.equal(thought.text, 'A greeting.');

  let streamed = '';
  let chunks = 0;
  let finish = '';
  for await (const chunk of await ai.models.generateContentStream({ model: 'gemini-mock', contents: 'Ann', config })) {
    chunks++;
    streamed += chunk.text ?? '';
    finish = chunk.candidates?.[0]?.finishReason ?? finish;
  }
  assert.equal(streamed, 'Hello Ann — ça va?');
  assert.equal(finish, 'STOP');
  assert.ok(chunks > 3, `streamed in ${chunks} chunks`);

  // --- function calls in a chat: the signature goes back with the history ----------------------
  const tools = [{ functionDeclarations: [{ name: 'get_weather', description: 'weather', parametersJsonSchema: { type: 'object', properties: { city: { type: 'string' } } } }] }];
  const chat = ai.chats.create({ model: 'gemini-mock', config: { ...config, tools } });
  const first = await chat.sendMessageStream({ message: 'Weather in Oslo and Rome?' });
  const calls = [];
  for await (const chunk of first) calls.push(...(chunk.functionCalls ?? []));
  assert.deepEqual(calls.map((c) => c.args.city), ['Oslo', 'Rome']);
  const answer = await chat.sendMessage({
    message: calls.map((c) => ({ functionResponse: { id: c.id, name: c.name, response: { output: `${c.args.city} -3C` } } })),
  });
  assert.equal(answer.text, 'It is Oslo -3C; Rome -3C — brr.');

  // The same turn with the signature stripped is refused, as Gemini 3 refuses it.
  const history = chat.getHistory();
  const turn = history.slice(0, history.findIndex((c) => c.parts.some((p) => p.functionResponse)) + 1);
  assert.ok(turn.length >= 3);
  const stripped = turn.map((c) => ({ ...c, parts: c.parts.map(({ thoughtSignature, ...p }) => p) }));
  await ai.models.generateContent({ model: 'gemini-mock', contents: turn, config: { tools } });
  await assert.rejects(
    ai.models.generateContent({ model: 'gemini-mock', contents: stripped, config: { tools } }),
    (e) => e.status === 400 && /thought_signature/.test(e.message),
  );

  // --- structured output: the JSON Schema form and the OpenAPI form ------------------------
  const schema = { type: 'object', properties: { city: { type: 'string' }, celsius: { type: 'integer' } }, required: ['city', 'celsius'] };
  const asJson = await ai.models.generateContent({
    model: 'gemini-mock', contents: 'Weather as JSON', config: { responseMimeType: 'application/json', responseJsonSchema: schema },
  });
  assert.deepEqual(JSON.parse(asJson.text), { city: 'Oslo', celsius: -3 });
  let streamedJson = '';
  for await (const chunk of await ai.models.generateContentStream({
    model: 'gemini-mock', contents: 'Weather as JSON', config: { responseMimeType: 'application/json', responseSchema: { type: 'OBJECT', properties: { city: { type: 'STRING' } } } },
  })) streamedJson += chunk.text ?? '';
  assert.deepEqual(JSON.parse(streamedJson), { city: 'Oslo', celsius: -3 });
  // A schema without the JSON MIME type is refused, as Google refuses it.
  await assert.rejects(
    ai.models.generateContent({ model: 'gemini-mock', contents: 'x', config: { responseJsonSchema: schema } }),
    (e) => e.status === 400 && /response_mime_type/.test(e.message),
  );

  // --- context caches -------------------------------------------------------------------------
  const book = 'A long document. '.repeat(400);
  await assert.rejects(
    ai.caches.create({ model: 'gemini-mock', config: { contents: 'too short', ttl: '300s' } }),
    (e) => e.status === 400 && /too small/.test(e.message),
  );
  const cache = await ai.caches.create({
    model: 'gemini-mock', config: { contents: book, systemInstruction: 'Be terse.', ttl: '300s', displayName: 'book' },
  });
  assert.match(cache.name, /^cachedContents\//);
  assert.equal(cache.model, 'models/gemini-mock');
  assert.ok(cache.usageMetadata.totalTokenCount >= 1024);
  assert.equal((await ai.caches.get({ name: cache.name })).displayName, 'book');
  const fromCache = await ai.models.generateContent({ model: 'gemini-mock', contents: 'Answer from the cache', config: { cachedContent: cache.name } });
  assert.equal(fromCache.text, 'Read it.');
  assert.equal(fromCache.usageMetadata.cachedContentTokenCount, cache.usageMetadata.totalTokenCount);
  // The system instruction lives in the cache: repeating it is refused.
  await assert.rejects(
    ai.models.generateContent({ model: 'gemini-mock', contents: 'Answer from the cache', config: { cachedContent: cache.name, systemInstruction: 'x' } }),
    (e) => e.status === 400 && /CachedContent can not be used/.test(e.message),
  );
  await ai.caches.delete({ name: cache.name });
  await assert.rejects(ai.caches.get({ name: cache.name }), (e) => e.status === 403);
  await assert.rejects(
    ai.models.generateContent({ model: 'gemini-mock', contents: 'Answer from the cache', config: { cachedContent: cache.name } }),
    (e) => e.status === 403,
  );

  // --- countTokens and models.list -----------------------------------------------------------
  const counted = await ai.models.countTokens({ model: 'gemini-mock', contents: 'How many tokens is this?' });
  assert.ok(counted.totalTokens > 0);
  const models = [];
  for await (const m of await ai.models.list()) models.push(m.name);
  assert.deepEqual(models, ['models/parley-mock']);
  console.log('@google/genai: text, stream, function-call round trip, signature refusal, structured output, caches, countTokens, models.list: ok');
} finally {
  await stopMock(child);
}
