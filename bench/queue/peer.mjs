// The node peers of parley's durable-run queue (worker_bench's `peer` part), on the same
// PostgreSQL cluster, each in a database of its own, with the same measures:
//   runs/s   one worker of 8 slots draining RUNS trivial jobs submitted beforehand (each job
//            records its start and returns), until the queue holds them all as done
//   latency  submit -> the job's start, jobs submitted one at a time (by another connection:
//            graphile-worker's WorkerUtils, a DBOSClient) while the worker waits, each awaited
//   WAL      pg_current_wal_lsn() before the first submit and after the last completion, per job
//   node peer.mjs graphile|dbos CONNECTION_URL RUNS LATENCY_RUNS
// Prints one JSON line like worker_bench's.
import { readFileSync } from 'node:fs';
import pg from 'pg';

const [peer, url, runsArg, latencyArg] = process.argv.slice(2);
const runs = Number(runsArg);
const latencyRuns = Number(latencyArg);
if (!['graphile', 'dbos'].includes(peer) || !(runs >= 1) || !(latencyRuns >= 1)) {
  console.error('usage: node peer.mjs graphile|dbos CONNECTION_URL RUNS LATENCY_RUNS');
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
const warmUp = Math.max(3, Math.floor(latencyRuns / 10));
let result;

if (peer === 'graphile') {
  const { run, makeWorkerUtils } = await import('graphile-worker');
  const utils = await makeWorkerUtils({ connectionString: url });
  await utils.migrate();
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
    taskList: { bench: async (payload) => body(payload.i) },
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
  result = { peer: `graphile-worker ${version('graphile-worker')}`, runs_per_s: runs / seconds, p50_ms: percentile(latency, 0.5),
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
