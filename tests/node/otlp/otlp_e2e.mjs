// parley's OpenTelemetry export end to end (docs/telemetry.md), received by an OTLP/HTTP receiver
// on a loopback port that decodes protobuf with the official opentelemetry-proto definitions (as
// OpenTelemetry JS compiles them: @opentelemetry/otlp-proto-exporter-base, pinned) and JSON with
// OTLP's JSON mapping:
//   1. `parley ask` with a tool, http/protobuf: invoke_agent > chat, execute_tool spans with the
//      conventions' kinds, parents and attribute types; no content; the GenAI metrics;
//   2. the same over http/json with content opted in: messages present, the API key nowhere;
//   3. `parley serve` -> the SQLite (or PostgreSQL) run queue -> `parley worker` SIGKILLed during the model call
//      -> a second worker: the caller's trace id on every span, the new worker's run span under
//      the service's request span;
//   4. `parley serve --workers 1`: /metrics keeps the GenAI and queue metrics, and Prometheus's
//      `promtool check metrics` accepts the page;
//   5. a receiver that never answers does not fail a turn.
//   node otlp_e2e.mjs <parley binary> [sqlite|postgres]
// With postgres only 3 runs, on a database of the test cluster (PARLEY_TEST_PG_INFO, the ctest
// fixture): the trace crosses processes through PostgreSQL's queue.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { testDatabase } from './test_database.mjs';

const [parley, backend = 'sqlite'] = process.argv.slice(2);
assert.ok(parley, 'usage: node otlp_e2e.mjs <parley binary> [sqlite|postgres]');


const require = createRequire(import.meta.url);
const otlp = require('@opentelemetry/otlp-proto-exporter-base/build/src/generated/root.js').opentelemetry.proto;
const TraceRequest = otlp.collector.trace.v1.ExportTraceServiceRequest;
const MetricsRequest = otlp.collector.metrics.v1.ExportMetricsServiceRequest;
const decodeOptions = { longs: String, enums: Number, bytes: String, defaults: false, oneofs: true };

const hex = (b64) => Buffer.from(b64 ?? '', 'base64').toString('hex');

// An attribute's value and its OTLP type.
function anyValue(v) {
  if (v.stringValue !== undefined) return ['string', v.stringValue];
  if (v.boolValue !== undefined) return ['bool', v.boolValue];
  if (v.intValue !== undefined) return ['int', Number(v.intValue)];
  if (v.doubleValue !== undefined) return ['double', v.doubleValue];
  if (v.arrayValue !== undefined) return ['array', (v.arrayValue.values ?? []).map((x) => anyValue(x)[1])];
  return ['?', undefined];
}
const attributes = (list) => Object.fromEntries((list ?? []).map((kv) => [kv.key, anyValue(kv.value ?? {})]));

// --- the receiver ----------------------------------------------------------------------------
const received = { spans: [], metrics: [], bodies: [], types: new Set() };
let answer = true;  // false: hold every request open (a receiver that never answers)
const held = [];
const receiver = http.createServer((req, res) => {
  const chunks = [];
  req.on('data', (c) => chunks.push(c));
  req.on('end', () => {
    const body = Buffer.concat(chunks);
    const type = req.headers['content-type'];
    received.types.add(type);
    received.bodies.push(body.toString('latin1'));
    const json = type === 'application/json';
    if (req.url === '/v1/traces') {
      const doc = json ? JSON.parse(body) : TraceRequest.toObject(TraceRequest.decode(body), decodeOptions);
      for (const rs of doc.resourceSpans ?? []) {
        const resource = attributes(rs.resource?.attributes);
        for (const ss of rs.scopeSpans ?? []) {
          for (const s of ss.spans ?? []) {
            received.spans.push({
              service: resource['service.name']?.[1],
              traceId: json ? s.traceId : hex(s.traceId),
              spanId: json ? s.spanId : hex(s.spanId),
              parentSpanId: json ? (s.parentSpanId ?? '') : hex(s.parentSpanId),
              name: s.name, kind: Number(s.kind), status: s.status ?? {},
              attributes: attributes(s.attributes),
            });
          }
        }
      }
    } else if (req.url === '/v1/metrics') {
      const doc = json ? JSON.parse(body) : MetricsRequest.toObject(MetricsRequest.decode(body), decodeOptions);
      for (const rm of doc.resourceMetrics ?? [])
        for (const sm of rm.scopeMetrics ?? []) received.metrics.push(...(sm.metrics ?? []));
    }
    if (!answer) { held.push(res); return; }
    res.writeHead(200, { 'content-type': type }).end(json ? '{}' : '');
  });
});
await new Promise((resolve) => receiver.listen(0, '127.0.0.1', resolve));
const endpoint = `http://127.0.0.1:${receiver.address().port}`;
const reset = () => { received.spans = []; received.metrics = []; received.bodies = []; received.types = new Set(); };

// --- processes -----------------------------------------------------------------------------
function start(args, env = {}) {
  const child = spawn(parley, args, { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, ...env } });
  child.stderrLines = [];  // kept for a failure's message
  createInterface({ input: child.stderr }).on('line', (line) => child.stderrLines.push(line));
  const firstLine = new Promise((resolve, reject) => {
    child.once('error', reject);
    createInterface({ input: child.stdout }).once('line', (line) => resolve(line.trim()));
  });
  return { child, firstLine };
}
const exited = (child) => new Promise((resolve) => {
  if (child.exitCode !== null || child.signalCode !== null) resolve(child.exitCode);
  else child.once('exit', (code) => resolve(code));
});
function run(args, env) {
  const child = spawn(parley, args, { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, ...env } });
  let out = '', err = '';
  child.stdout.on('data', (d) => { out += d; });
  child.stderr.on('data', (d) => { err += d; });
  return new Promise((resolve) => child.on('exit', (code) => resolve({ code, out, err })));
}

const script = [
  { name: 'answer', match: { last_role: 'tool' }, reply: { content: 'Sunny, says {{tool_results}}.' } },
  { name: 'call', match: { user_contains: 'weather' },
    reply: { tool_calls: [{ id: 'call_1', name: 'get_weather', arguments: { city: 'Oslo' } }],
             usage: { prompt_tokens: 30, completion_tokens: 9 } } },
  // The first call of the durable run is slow (its worker is killed meanwhile); the next is not.
  // Should the first worker die before it asks, the second waits the delay out: no hang.
  { name: 'slow', match: { user_contains: 'durable' }, times: 1, delay_ms: 3000, reply: { content: 'late' } },
  { name: 'durable', match: { user_contains: 'durable' }, reply: { content: 'Done durably.' } },
  { name: 'hello', match: { user_contains: 'Hello' }, reply: { content: 'Hello back.' } },
];
const dir = mkdtempSync(join(tmpdir(), 'parley-otlp-'));
const scriptFile = join(dir, 'script.jsonl');
writeFileSync(scriptFile, script.map((r) => JSON.stringify(r)).join('\n') + '\n');
const mock = start(['mock', '--port', '0', '--script', scriptFile, '--log']);
const mockUrl = await mock.firstLine;

const apiKey = 'sk-e2e-secret-key-0123456789';
const model = ['--base-url', mockUrl, '--model', 'mock-model', '--api-key', apiKey];
const otel = (service, extra = {}) => ({
  OTEL_EXPORTER_OTLP_ENDPOINT: endpoint, OTEL_SERVICE_NAME: service, OTEL_BSP_SCHEDULE_DELAY: '100', ...extra,
});
const byName = (name) => received.spans.filter((s) => s.name === name);
const one = (name) => { const list = byName(name); assert.equal(list.length, 1, `one ${name}: ${JSON.stringify(received.spans.map((s) => s.name))}`); return list[0]; };

try {
  // --- 1. ask, protobuf, no content ----------------------------------------------------------
  if (backend === 'sqlite') {
    const r = await run(['ask', ...model, '--tools', 'demo', '--no-save', 'What is the weather in Oslo?'], otel('parley-ask'));
    assert.equal(r.code, 0, r.err);
    assert.deepEqual([...received.types], ['application/x-protobuf']);
    const agent = one('invoke_agent');
    const chats = byName('chat mock-model');
    const tool = one('execute_tool get_weather');
    assert.equal(chats.length, 2);
    assert.equal(agent.service, 'parley-ask');
    assert.equal(agent.parentSpanId, '');
    assert.equal(agent.kind, 1);  // INTERNAL
    for (const chat of chats) {
      assert.equal(chat.kind, 3);  // CLIENT
      assert.equal(chat.traceId, agent.traceId);
      assert.equal(chat.parentSpanId, agent.spanId);
      assert.deepEqual(chat.attributes['gen_ai.operation.name'], ['string', 'chat']);
      assert.deepEqual(chat.attributes['gen_ai.provider.name'], ['string', 'openai']);
      assert.equal(chat.attributes['server.port'][0], 'int');
      assert.equal(chat.attributes['gen_ai.usage.input_tokens'][0], 'int');
      assert.equal(chat.attributes['gen_ai.response.finish_reasons'][0], 'array');
      assert.equal(chat.attributes['gen_ai.input.messages'], undefined, 'content is opt-in');
    }
    assert.deepEqual(chats[0].attributes['gen_ai.usage.input_tokens'], ['int', 30]);
    assert.equal(tool.parentSpanId, agent.spanId);
    assert.deepEqual(tool.attributes['gen_ai.tool.name'], ['string', 'get_weather']);
    assert.equal(tool.attributes['gen_ai.tool.call.arguments'], undefined);
    const names = received.metrics.map((m) => m.name);
    assert.ok(names.includes('gen_ai.client.operation.duration'), names.join());
    const usage = received.metrics.find((m) => m.name === 'gen_ai.client.token.usage');
    assert.equal(usage.unit, '{token}');
    assert.equal(usage.histogram.aggregationTemporality, 2);
    assert.ok(!received.bodies.some((b) => b.includes(apiKey)));
    console.log('ok 1 - ask over http/protobuf');
  }

  // --- 2. ask, JSON, content opted in --------------------------------------------------------
  reset();
  if (backend === 'sqlite') {
    const r = await run(['ask', ...model, '--tools', 'demo', '--no-save', 'What is the weather in Oslo?'],
      otel('parley-ask', { OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json', OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT: 'true' }));
    assert.equal(r.code, 0, r.err);
    assert.deepEqual([...received.types], ['application/json']);
    const chats = byName('chat mock-model');
    assert.equal(chats.length, 2);
    const input = JSON.parse(chats[1].attributes['gen_ai.input.messages'][1]);
    assert.equal(input[0].role, 'user');
    assert.equal(input[0].parts[0].content, 'What is the weather in Oslo?');
    assert.equal(input[1].parts[0].type, 'tool_call');
    assert.equal(input[2].parts[0].type, 'tool_call_response');
    const output = JSON.parse(chats[1].attributes['gen_ai.output.messages'][1]);
    assert.equal(output[0].finish_reason, 'stop');
    assert.ok(!received.bodies.some((b) => b.includes(apiKey)), 'the API key never leaves');
    console.log('ok 2 - ask over http/json with content');
  }

  // --- 3. serve -> queue -> a worker killed mid-run -> another worker --------------------------
  reset();
  {
    const db = testDatabase(backend, dir, backend === 'postgres' ? 'otlp' : 'runs');
    const serve = start(['serve', '--db', db, '--port', '0'], otel('parley-serve'));
    const serveUrl = await serve.firstLine;
    const workerArgs = (id) => ['worker', '--db', db, ...model, '--lease-ms', '1000', '--worker-id', id];
    const first = start(workerArgs('worker-a'), otel('parley-worker'));
    assert.equal(await first.firstLine, 'worker-a');

    const caller = { trace: '0af7651916cd43dd8448eb211c80319c', span: 'b7ad6b7169203331' };
    const post = async (path, body, headers = {}) => {
      const res = await fetch(serveUrl + path, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) });
      assert.ok(res.ok, `${path}: ${res.status} ${await res.clone().text()}`);
      return res.json();
    };
    const thread = await post('/v1/threads', {});
    const submitted = await post(`/v1/threads/${thread.id}/runs`, { input: 'A durable question' },
      { traceparent: `00-${caller.trace}-${caller.span}-01` });
    // Once the first worker has claimed the run (its model call then hangs in the mock), kill it.
    const runUrl = `${serveUrl}/v1/runs/${submitted.run}`;
    let claimed = '';
    for (let i = 0; i < 600 && claimed !== 'running'; ++i) {
      claimed = (await (await fetch(runUrl)).json()).status;
      if (claimed !== 'running') await new Promise((r) => setTimeout(r, 50));
    }
    assert.equal(claimed, 'running');
    first.child.kill('SIGKILL');
    await exited(first.child);
    const second = start(workerArgs('worker-b'), otel('parley-worker'));
    assert.equal(await second.firstLine, 'worker-b');
    // Waits for the second worker to finish the run (a bounded poll of its status).
    let status = '';
    for (let i = 0; i < 600 && status !== 'completed'; ++i) {
      const res = await fetch(runUrl);
      status = (await res.json()).status;
      if (status !== 'completed') await new Promise((r) => setTimeout(r, 100));
    }
    assert.equal(status, 'completed');
    second.child.kill('SIGTERM');
    serve.child.kill('SIGTERM');
    await exited(second.child);
    await exited(serve.child);

    const inTrace = received.spans.filter((s) => s.traceId === caller.trace);
    assert.ok(inTrace.length >= 4, JSON.stringify(received.spans.map((s) => [s.service, s.name, s.traceId])));
    const server = inTrace.find((s) => s.service === 'parley-serve' && s.kind === 2 && s.parentSpanId === caller.span);
    assert.ok(server, 'the service continued the caller\'s trace');
    const runSpans = inTrace.filter((s) => s.name === 'parley.run');
    assert.equal(runSpans.length, 1, 'only the surviving worker exported its run span');
    assert.equal(runSpans[0].service, 'parley-worker');
    assert.equal(runSpans[0].kind, 5);  // CONSUMER
    assert.equal(runSpans[0].parentSpanId, server.spanId);
    assert.deepEqual(runSpans[0].attributes['parley.worker.id'], ['string', 'worker-b']);
    assert.deepEqual(runSpans[0].attributes['parley.run.attempt'], ['int', 2]);
    const agent = inTrace.find((s) => s.name === 'invoke_agent');
    assert.equal(agent.parentSpanId, runSpans[0].spanId);
    assert.deepEqual(agent.attributes['gen_ai.conversation.id'], ['string', thread.id]);
    const chat = inTrace.find((s) => s.name === 'chat mock-model');
    assert.equal(chat.parentSpanId, agent.spanId);
    const takeovers = received.metrics.find((m) => m.name === 'parley.run.lease.takeovers');
    assert.ok(takeovers, received.metrics.map((m) => m.name).join());
    console.log('ok 3 - one trace across serve, the queue and a replacement worker');
  }

  // --- 4. /metrics keeps the GenAI and queue metrics, and promtool accepts the page ----------
  reset();
  if (backend === 'sqlite') {
    const serve = start(['serve', '--db', join(dir, 'metrics.db'), '--port', '0', '--workers', '1'], otel('parley-serve'));
    const serveUrl = await serve.firstLine;
    const post = async (path, body) => (await fetch(serveUrl + path, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) })).json();
    const thread = await post('/v1/threads', {});
    const submitted = await post(`/v1/threads/${thread.id}/runs`, { input: 'Hello metrics' });
    let status = '';
    for (let i = 0; i < 600 && status !== 'completed'; ++i) {
      status = (await (await fetch(`${serveUrl}/v1/runs/${submitted.run}`)).json()).status;
      if (status !== 'completed') await new Promise((r) => setTimeout(r, 100));
    }
    assert.equal(status, 'completed');
    const page = await (await fetch(`${serveUrl}/metrics`)).text();
    serve.child.kill('SIGTERM');
    await exited(serve.child);
    assert.match(page, /^gen_ai_client_operation_duration_seconds_bucket\{.*le="\+Inf"\} 1$/m);
    assert.match(page, /^gen_ai_client_token_usage_count\{.*gen_ai_token_type="input".*\} 1$/m);
    assert.match(page, /^parley_run_claims_total\{parley_worker_id=".*"\} 1$/m);
    const check = spawn('promtool', ['check', 'metrics'], { stdio: ['pipe', 'pipe', 'pipe'] });
    let said = '';
    check.stdout.on('data', (d) => { said += d; });
    check.stderr.on('data', (d) => { said += d; });
    check.stdin.end(page);
    const code = await new Promise((resolve, reject) => { check.on('error', reject); check.on('exit', resolve); });
    assert.equal(code, 0, `promtool check metrics: ${said}`);
    console.log('ok 4 - /metrics with the GenAI metrics passes promtool check metrics');
  }

  // --- 5. a receiver that never answers ------------------------------------------------------
  reset();
  answer = false;
  if (backend === 'sqlite') {
    const r = await run(['ask', ...model, '--no-save', 'Hello there'],
      otel('parley-ask', { OTEL_EXPORTER_OTLP_TIMEOUT: '500' }));
    assert.equal(r.code, 0, r.err);
    assert.match(r.out, /Hello back/);
    console.log('ok 5 - a receiver that never answers does not fail a turn');
  }
} finally {
  for (const res of held) res.destroy();
  mock.child.kill('SIGTERM');
  receiver.close();
  receiver.closeAllConnections?.();
}
