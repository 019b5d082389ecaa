// The LangGraph JS API server (@langchain/langgraph-api, in memory, as `langgraphjs dev` runs it)
// serving bench/service/graph.mjs as the assistant `agent` on a free loopback port; prints its
// URL on the first line of stdout and serves until killed.
//   PARLEY_BENCH_MODEL_URL=http://127.0.0.1:PORT/v1 node langgraph_server.mjs
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startServer } from '@langchain/langgraph-api/server';

const here = new URL('.', import.meta.url).pathname;
// Its in-memory store is flushed to files in cwd: a folder of this run's.
const cwd = mkdtempSync(join(tmpdir(), 'parley-langgraph-api-'));
process.chdir(cwd);
const { host } = await startServer({
  port: 0,
  nWorkers: 10,  // langgraphjs dev's default (n_jobs_per_worker)
  host: '127.0.0.1',
  cwd,
  graphs: { agent: join(here, 'graph.mjs') + ':graph' },
});
console.log(`http://${host}`);
