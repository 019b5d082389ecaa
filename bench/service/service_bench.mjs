// One thread's round trip through the official LangGraph SDK client (@langchain/langgraph-sdk):
// create a thread, run the assistant `agent` on it and stream the run to its end
// (streamMode messages-tuple), against `parley serve` (SQLite, one worker loop) and the LangGraph
// API server (in memory, bench/service/langgraph_server.mjs), both asking the same `parley mock`.
//   node service_bench.mjs PARLEY_BINARY MODEL_URL RUNS
// The two servers take turns, one round trip each, after a warm-up of a tenth of the runs (at
// least 5). Prints one JSON line per server: p50 and p90 in ms, and the server process's peak RSS
// (VmHWM) and RSS at the end, in MiB.
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, readdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { Client } from '@langchain/langgraph-sdk';

const [parley, modelUrl, runsArg] = process.argv.slice(2);
const runs = Number(runsArg);
if (!parley || !modelUrl || !(runs >= 1)) {
  console.error('usage: node service_bench.mjs PARLEY_BINARY MODEL_URL RUNS');
  process.exit(2);
}
const here = new URL('.', import.meta.url).pathname;
const version = (pkg) => JSON.parse(readFileSync(join(here, 'node_modules', pkg, 'package.json'))).version;
const children = [];
process.on('exit', () => children.forEach((c) => c.kill('SIGKILL')));

// Starts a server that prints its URL on a line of stdout of its own (the LangGraph server logs
// there too).
function start(command, args, env = {}) {
  const child = spawn(command, args, { stdio: ['ignore', 'pipe', 'ignore'], env: { ...process.env, ...env } });
  children.push(child);
  return new Promise((resolve, reject) => {
    child.once('exit', (code) => reject(new Error(`${command} exited early (${code})`)));
    const lines = createInterface({ input: child.stdout });
    lines.on('line', (line) => {
      if (!/^http:\/\/\S+$/.test(line.trim())) return;
      lines.removeAllListeners('line');
      child.removeAllListeners('exit');
      resolve({ child, url: line.trim() });
    });
  });
}

// VmHWM and VmRSS of a process and its descendants, in MiB.
function memory(pid) {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const kib = (key) => Number(status.match(new RegExp(`^${key}:\\s+(\\d+)`, 'm'))[1]);
  let hwm = kib('VmHWM');
  let rss = kib('VmRSS');
  for (const task of readdirSync(`/proc/${pid}/task`)) {
    let kids = '';
    try { kids = readFileSync(`/proc/${pid}/task/${task}/children`, 'utf8'); } catch {}
    for (const kid of kids.trim().split(/\s+/).filter(Boolean)) {
      const m = memory(Number(kid));
      hwm += m.hwm * 1024;
      rss += m.rss * 1024;
    }
  }
  return { hwm: hwm / 1024, rss: rss / 1024 };
}

const dir = mkdtempSync(join(tmpdir(), 'parley-service-bench-'));
const servers = [
  { name: 'parley serve', ...(await start(parley, ['serve', '--db', join(dir, 'serve.db'), '--port', '0',
                                                    '--workers', '1', '--base-url', modelUrl, '--api-key', 'sk-bench'])) },
  { name: `langgraph-api ${version('@langchain/langgraph-api')}`,
    ...(await start(process.execPath, [join(here, 'langgraph_server.mjs')], { PARLEY_BENCH_MODEL_URL: modelUrl })) },
];
for (const server of servers) {
  server.client = new Client({ apiUrl: server.url });
  server.times = [];
}

async function roundTrip(server, i) {
  const t0 = performance.now();
  const thread = await server.client.threads.create();
  let text = '';
  for await (const part of server.client.runs.stream(thread.thread_id, 'agent', {
    input: { messages: [{ role: 'user', content: `hello ${i}` }] },
    streamMode: 'messages-tuple',
  })) {
    if (part.event === 'messages' && typeof part.data?.[0]?.content === 'string') text += part.data[0].content;
    if (part.event === 'error') throw new Error(`${server.name}: ${JSON.stringify(part.data)}`);
  }
  const ms = performance.now() - t0;
  if (!text.includes(`hello ${i}`)) throw new Error(`${server.name}: the stream did not carry the reply: ${text}`);
  return ms;
}

const warmUp = Math.max(5, Math.floor(runs / 10));
for (let i = 0; i < warmUp + runs; ++i) {
  for (const server of servers) {
    const ms = await roundTrip(server, i);
    if (i >= warmUp) server.times.push(ms);
  }
}
const percentile = (values, p) => [...values].sort((a, b) => a - b)[Math.min(values.length - 1, Math.floor(p * values.length))];
for (const server of servers) {
  const m = memory(server.child.pid);
  console.log(JSON.stringify({ server: server.name, runs, p50_ms: percentile(server.times, 0.5),
                               p90_ms: percentile(server.times, 0.9), peak_rss_mib: m.hwm, rss_mib: m.rss }));
}
process.exit(0);
