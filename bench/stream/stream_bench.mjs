// The peer of parley's BM_StreamLoopback: the official openai SDK (pinned in package.json)
// reading the same stream from the same `parley mock`. Prints one JSON line per mode.
//   node stream_bench.mjs BASE_URL STREAM_BYTES [RUNS]
// Each line has the best run's wall time and the process's CPU time in it (cpu_ms).
// Modes: "iterate" reads every chunk and concatenates the content deltas (the least the SDK
// can do); "assemble" uses the SDK's own assembler (chat.completions.stream ->
// finalChatCompletion), the counterpart of parley's generateStream.
import OpenAI from 'openai';

const [baseURL, bytesArg, runsArg] = process.argv.slice(2);
const streamBytes = Number(bytesArg);
const runs = Number(runsArg ?? 3);
const client = new OpenAI({ baseURL, apiKey: 'sk-bench', maxRetries: 0 });
const params = {
  model: 'gpt-4o-mini',
  messages: [{ role: 'user', content: 'stream please' }],
  stream: true,
  stream_options: { include_usage: true },
};

async function iterate() {
  const stream = await client.chat.completions.create(params);
  let chunks = 0;
  let content = '';
  for await (const chunk of stream) {
    chunks++;
    const delta = chunk.choices[0]?.delta;
    if (delta?.content) content += delta.content;
  }
  if (!content) throw new Error('no content');
  return chunks;
}

async function assemble() {
  const runner = client.chat.completions.stream(params);
  let chunks = 0;
  runner.on('chunk', () => chunks++);
  const completion = await runner.finalChatCompletion();
  if (!completion.choices[0].message.content) throw new Error('no content');
  return chunks;
}

for (const [mode, fn] of [['iterate', iterate], ['assemble', assemble]]) {
  await fn();  // warm-up
  let best = Infinity;
  let bestCpu = 0;
  let chunks = 0;
  for (let i = 0; i < runs; i++) {
    const t0 = performance.now();
    const cpu0 = process.cpuUsage();
    chunks = await fn();
    const cpu = process.cpuUsage(cpu0);
    const seconds = (performance.now() - t0) / 1000;
    if (seconds < best) {
      best = seconds;
      bestCpu = (cpu.user + cpu.system) / 1000;
    }
  }
  console.log(JSON.stringify({
    peer: `openai-node ${mode}`,
    chunks,
    seconds: best,
    cpu_ms: bestCpu,
    chunks_per_s: chunks / best,
    mb_per_s: streamBytes / best / 1e6,
  }));
}
