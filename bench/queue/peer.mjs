// The node peers of parley's durable-run queue (worker_bench's `peer` part), on the same
// PostgreSQL cluster, each in a database of its own, with the same measures:
//   runs/s   one worker of 8 slots draining RUNS trivial jobs submitted beforehand (each job
//            records its start and returns), until the queue holds them all as done
//   latency  submit -> the job's start, jobs submitted one at a time (by another connection:
//            graphile-worker's WorkerUtils, a DBOSClient) while the worker waits, each awaited
//   WAL      pg_current_wal_lsn() before the first submit and after the last completion, per job
//   node peer.mjs graphile|dbos CONNECTION_URL RUNS LATENCY_RUNS
//   node peer.mjs graphile-fetch|graphile-openai CONNECTION_URL RUNS LATENCY_RUNS MODEL_URL
// graphile-fetch, graphile-openai: graphile-worker's job does what a parley run does at the
// least: it calls the model (MODEL_URL, ".../v1": `parley mock` with worker_bench's zero-latency
// script, Chat Completions)
// with its prompt, by fetch() or by the official openai client, and keeps the prompt and the reply
// as two rows of a table of messages (idempotent on the job's id: a job run again keeps them once)
// before it completes. A parley run keeps more (its thread, its run row, its events); this is the
// comparison of a user building durable model calls on graphile-worker.
// Prints one JSON line like worker_bench's.
import { readFileSync } from 'node:fs';
import pg from 'pg';

const [peer, url, runsArg, latencyArg, modelUrl] = process.argv.slice(2);
const runs = Number(runsArg);
const latencyRuns = Number(latencyArg);
const turnPeer = ['graphile-fetch', 'graphile-openai'].includes(peer);
if (!(['graphile', 'dbos'].includes(peer) || turnPeer) || !(runs >= 1) || !(latencyRuns >= 1) ||
    turnPeer !== Boolean(modelUrl)) {
  console.error('usage: node peer.mjs graphile|dbos CONNECTION_URL RUNS LATENCY_RUNS\n' +
                '       node peer.mjs graphile-fetch|graphile-openai CONNECTION_URL RUNS LATENCY_RUNS MODEL_URL');
  process.exit(2);
}
const version = (pkg) =>
  JSON.parse(readFileSync(new URL(`./node_modules/${pkg}/package.json`, import.meta.url))).version;
const now = () => performance.now();
const percentile = (values, p) => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))];
};
const sql = new pg.Client({ connectionString: url });
await sql.connect();
const wal = async () => Number((await sql.query("SELECT (pg_current_wal_lsn() - '0/0')::float8 AS b")).rows[0].b);
// Polls every millisecond, as worker_bench waits for its runs.
const until = async (probe) => {
  while (!(await probe())) await new Promise((resolve) => setTimeout(resolve, 1));
};

const started = new Map();  // job number -> when its body began
let finished = 0;            // bodies that returned
const body = async (i) => {
  started.set(i, now());
  finished += 1;
  return i;
};
// The turn peers' job: the model's reply to its prompt, kept with the prompt before it completes.
const openai = peer === 'graphile-openai'
  ? new (await import('openai')).default({ baseURL: modelUrl, apiKey: 'bench', maxRetries: 0 })
  : null;
const complete = async (messages) => {
  if (openai) return (await openai.chat.completions.create({ model: 'parley-mock', messages })).choices[0].message;
  const response = await fetch(`${modelUrl}/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'parley-mock', messages }),
  });
  if (!response.ok) throw new Error(`the model answered ${response.status}`);
  return (await response.json()).choices[0].message;
};
const turn = async (payload, helpers) => {
  started.set(payload.i, now());
  const prompt = `run ${payload.i}`;
  const reply = await complete([{ role: 'user', content: prompt }]);
  await helpers.query(
    'INSERT INTO bench_messages (job_id, seq, role, content) VALUES ($1, 0, $2, $3), ($1, 1, $4, $5) ' +
      'ON CONFLICT DO NOTHING',
    [helpers.job.id, 'user', prompt, reply.role, reply.content]);
  finished += 1;
  return payload.i;
};
const warmUp = Math.max(3, Math.floor(latencyRuns / 10));
let result;

if (peer === 'graphile' || turnPeer) {
  const { run, makeWorkerUtils } = await import('graphile-worker');
  const utils = await makeWorkerUtils({ connectionString: url });
  await utils.migrate();
  if (turnPeer) {
    await sql.query('CREATE TABLE bench_messages (job_id BIGINT NOT NULL, seq INT NOT NULL, ' +
                    'role TEXT NOT NULL, content TEXT NOT NULL, PRIMARY KEY (job_id, seq))');
  }
  const pending = async () =>
    Number((await sql.query('SELECT count(*) AS n FROM graphile_worker.jobs')).rows[0].n);
  const wal0 = await wal();
  for (let i = 0; i < runs; ++i) await utils.addJob('bench', { i });
  const t0 = now();
  const runner = await run({
    connectionString: url,
    concurrency: 8,
    noHandleSignals: true,
    logger: new (await import('graphile-worker')).Logger(() => () => {}),
    taskList: { bench: peer === 'graphile' ? async (payload) => body(payload.i) : turn },
  });
  await until(async () => finished >= runs && (await pending()) === 0);
  const seconds = (now() - t0) / 1e3;
  const walPerRun = ((await wal()) - wal0) / runs;
  const latency = [];
  for (let i = 0; i < latencyRuns + warmUp; ++i) {
    const n = runs + i;
    const submitted = now();
    await utils.addJob('bench', { i: n });
    await until(async () => finished > n && (await pending()) === 0);
    if (i >= warmUp) latency.push(started.get(n) - submitted);
  }
  await runner.stop();
  await utils.release();
  if (turnPeer) {
    const kept = Number((await sql.query('SELECT count(*) AS n FROM bench_messages')).rows[0].n);
    if (kept !== 2 * (runs + latencyRuns + warmUp)) throw new Error(`${kept} messages kept`);
  }
  const how = peer === 'graphile-fetch' ? 'fetch' : `openai ${version('openai')}`;
  const name = `graphile-worker ${version('graphile-worker')}${turnPeer ? `, a turn (${how})` : ''}`;
  result = { peer: name, runs_per_s: runs / seconds, p50_ms: percentile(latency, 0.5),
             p99_ms: percentile(latency, 0.99), wal_bytes_per_run: walPerRun };
} else {
  const { DBOS, DBOSClient } = await import('@dbos-inc/dbos-sdk');
  // DBOS polls its queues; its default interval is 1 s. 10 ms is the lowest sensible setting
  // here (lower costs the machine's two cores more than it gains).
  const queueOptions = { workerConcurrency: 8, minPollingIntervalMs: 10 };
  DBOS.setConfig({ name: 'parley-bench', systemDatabaseUrl: url, logLevel: 'error' });
  const step = async (i) => DBOS.runStep(async () => body(i), { name: 'trivial' });
  const workflow = DBOS.registerWorkflow(step, { name: 'bench' });
  await DBOS.migrate(url);
  const client = await DBOSClient.create({ systemDatabaseUrl: url });
  const done = async (n) =>
    Number((await sql.query("SELECT count(*) AS n FROM dbos.workflow_status WHERE status = 'SUCCESS'")).rows[0].n) >= n;
  const wal0 = await wal();
  // Registered and filled by the client before DBOS is launched, so the queue starts full; the
  // clock starts at the first job's start, so DBOS's launch (recovery, set-up) is not counted.
  await client.registerQueue('bench', { ...queueOptions, applicationName: 'parley-bench' });
  for (let i = 0; i < runs; ++i) await client.enqueue({ workflowName: 'bench', queueName: 'bench' }, i);
  await DBOS.launch();
  await until(async () => finished >= runs && (await done(runs)));
  const seconds = (now() - Math.min(...started.values())) / 1e3;
  const walPerRun = ((await wal()) - wal0) / runs;
  const latency = [];
  for (let i = 0; i < latencyRuns + warmUp; ++i) {
    const n = runs + i;
    const submitted = now();
    await client.enqueue({ workflowName: 'bench', queueName: 'bench' }, n);
    // Not handle.getResult(): it polls about once a second.
    await until(async () => finished > n && (await done(n + 1)));
    if (i >= warmUp) latency.push(started.get(n) - submitted);
  }
  await client.destroy();
  await DBOS.shutdown();
  void workflow;
  result = { peer: `DBOS ${version('@dbos-inc/dbos-sdk')}`, runs_per_s: runs / seconds, p50_ms: percentile(latency, 0.5),
             p99_ms: percentile(latency, 0.99), wal_bytes_per_run: walPerRun };
}
await sql.end();
console.log(JSON.stringify({ ...result, runs, latency_runs: latencyRuns }));
