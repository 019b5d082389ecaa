// The peers of parley's BM_ProtocolStreamLoopback/1 and /2: the official openai SDK
// (responses.create with stream: true, and responses.stream -> finalResponse, its own
// assembler) and @anthropic-ai/sdk (messages.create with stream: true, and messages.stream ->
// finalMessage, its own assembler) reading the same streams from the same `parley mock`.
// The same for Gemini with @google/genai. Prints one JSON line per peer.
//   node protocols_bench.mjs BASE_URL RESPONSES_BYTES ANTHROPIC_BYTES RUNS GEMINI_BYTES [ONLY]
// ONLY: run the peers whose name holds it (run.sh runs one protocol's peers right after parley's
// client of that protocol). Each line has the best run's wall time and the process's CPU time in
// it (cpu_ms).
import Anthropic from '@anthropic-ai/sdk';
import { GoogleGenAI } from '@google/genai';
import OpenAI from 'openai';

const [baseURL, responsesBytes, anthropicBytes, runsArg, geminiBytes, only] = process.argv.slice(2);
const runs = Number(runsArg ?? 3);
const openai = new OpenAI({ baseURL, apiKey: 'sk-bench', maxRetries: 0 });
const anthropic = new Anthropic({ baseURL: baseURL.replace(/\/v1$/, ''), apiKey: 'sk-bench', maxRetries: 0 });

async function responsesIterate() {
  const stream = await openai.responses.create({ model: 'gpt-4o-mini', input: 'responses stream', stream: true });
  let events = 0;
  let text = '';
  for await (const event of stream) {
    events++;
    if (event.type === 'response.output_text.delta') text += event.delta;
  }
  if (!text) throw new Error('no content');
  return events;
}

// The SDK's own assembler: responses.stream -> finalResponse, as parley's client assembles.
async function responsesAssemble() {
  const stream = openai.responses.stream({ model: 'gpt-4o-mini', input: 'responses stream' });
  let events = 0;
  stream.on('event', () => events++);
  const response = await stream.finalResponse();
  if (!response.output?.[0]?.content?.[0]?.text) throw new Error('no content');
  return events;
}

const anthropicParams = { model: 'gpt-4o-mini', max_tokens: 1024, messages: [{ role: 'user', content: 'anthropic stream' }] };

async function anthropicIterate() {
  const stream = await anthropic.messages.create({ ...anthropicParams, stream: true });
  let events = 0;
  let text = '';
  for await (const event of stream) {
    events++;
    if (event.type === 'content_block_delta' && event.delta.type === 'text_delta') text += event.delta.text;
  }
  if (!text) throw new Error('no content');
  return events;
}

async function anthropicAssemble() {
  const stream = anthropic.messages.stream(anthropicParams);
  let events = 0;
  stream.on('streamEvent', () => events++);
  const message = await stream.finalMessage();
  if (!message.content[0].text) throw new Error('no content');
  return events;
}

// @google/genai: generateContentStream (each chunk a GenerateContentResponse, its text
// concatenated), and a chat's sendMessageStream, which also keeps the reply's parts in its
// history as parley's client keeps them on the message.
const genai = new GoogleGenAI({ apiKey: 'k-bench', httpOptions: { baseUrl: baseURL.replace(/\/v1$/, '') } });

async function geminiIterate() {
  let events = 0;
  let text = '';
  for await (const chunk of await genai.models.generateContentStream({ model: 'gpt-4o-mini', contents: 'gemini stream' })) {
    events++;
    text += chunk.text ?? '';
  }
  if (!text) throw new Error('no content');
  return events;
}

async function geminiAssemble() {
  const chat = genai.chats.create({ model: 'gpt-4o-mini' });
  let events = 0;
  for await (const chunk of await chat.sendMessageStream({ message: 'gemini stream' })) {
    events++;
    if (!chunk.candidates) throw new Error('no candidates');
  }
  if (chat.getHistory().length < 2) throw new Error('no history');
  return events;
}

for (const [peer, fn, bytes] of [
  ['genai generateContentStream', geminiIterate, Number(geminiBytes)],
  ['genai chat sendMessageStream', geminiAssemble, Number(geminiBytes)],
  ['openai-node responses iterate', responsesIterate, Number(responsesBytes)],
  ['openai-node responses assemble', responsesAssemble, Number(responsesBytes)],
  ['anthropic-sdk iterate', anthropicIterate, Number(anthropicBytes)],
  ['anthropic-sdk assemble', anthropicAssemble, Number(anthropicBytes)],
]) {
  if (only && !peer.includes(only)) continue;
  await fn();  // warm-up
  let best = Infinity;
  let bestCpu = 0;
  let events = 0;
  for (let i = 0; i < runs; i++) {
    const t0 = performance.now();
    const cpu0 = process.cpuUsage();
    events = await fn();
    const cpu = process.cpuUsage(cpu0);
    const seconds = (performance.now() - t0) / 1000;
    if (seconds < best) {
      best = seconds;
      bestCpu = (cpu.user + cpu.system) / 1000;
    }
  }
  console.log(JSON.stringify({ peer, chunks: events, seconds: best, cpu_ms: bestCpu, chunks_per_s: events / best, mb_per_s: bytes / best / 1e6 }));
}
