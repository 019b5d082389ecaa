// The database a node test runs parley on: a SQLite file in the test's folder, or with
// `postgres` a database of its own on the throwaway test cluster (PARLEY_TEST_PG_INFO, which the
// pg_cluster ctest fixture writes; tests/pg_test_cluster.hpp). npm_ci.cmake copies this file
// into every test folder it installs.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';

// A URL `parley --db` takes. `name` names the database: the SQLite file NAME.db in `dir`, or
// NAME_PID on the cluster (dropped and made anew).
export function testDatabase(backend, dir, name) {
  if (backend !== 'postgres') return join(dir, `${name}.db`);
  const info = process.env.PARLEY_TEST_PG_INFO;
  assert.ok(info, 'PARLEY_TEST_PG_INFO names the test cluster (the pg_cluster fixture)');
  const [host, port] = readFileSync(info, 'utf8').trim().split(/\s+/);
  const database = `${name}_${process.pid}`;
  const conninfo = `host=${host} port=${port} user=postgres dbname=postgres`;
  const env = { ...process.env, PGPASSWORD: 'parley-test-secret' };
  for (const sql of [`DROP DATABASE IF EXISTS ${database}`, `CREATE DATABASE ${database}`]) {
    const made = spawnSync('psql', [conninfo, '-q', '-c', sql], { env, encoding: 'utf8' });
    assert.equal(made.status, 0, made.stderr);
  }
  return `postgresql://postgres:parley-test-secret@/${database}?host=${host}&port=${port}`;
}
