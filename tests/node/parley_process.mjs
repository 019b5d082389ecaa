// Starting and stopping parley subcommands (mock, serve, worker, ...) for the node tests: each is
// up once it prints its first line (its URL, or what it says it is). npm_ci.cmake copies this
// file into every test folder it installs.
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';

// Starts `parley ARGS` (with `env` over this process's environment) and resolves with the child
// and the first line it prints, as `url` and as `line`.
export function start(parley, args, env = {}) {
  const child = spawn(parley, args, {
    stdio: ['ignore', 'pipe', 'inherit'],
    env: { ...process.env, ...env },
  });
  return new Promise((resolve, reject) => {
    child.once('error', reject);
    child.once('exit', (code) => reject(new Error(`parley ${args[0]} exited early (${code})`)));
    createInterface({ input: child.stdout }).once('line', (line) => {
      child.removeAllListeners('exit');
      resolve({ child, url: line.trim(), line: line.trim() });
    });
  });
}

// Sends SIGTERM (unless the child has ended) and resolves with how the child ended.
export function stop(child) {
  return new Promise((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) {
      resolve({ code: child.exitCode, signal: child.signalCode });
      return;
    }
    child.once('exit', (code, signal) => resolve({ code, signal }));
    child.kill('SIGTERM');
  });
}

// start() of `binary` that keeps each process in `children` while it runs, so that a test stops
// every one still running at its end.
export function parleyProcesses(binary) {
  const children = new Set();
  async function startKept(args, env = {}) {
    const started = await start(binary, args, env);
    children.add(started.child);
    started.child.once('exit', () => children.delete(started.child));
    if (started.child.exitCode !== null || started.child.signalCode !== null) {
      children.delete(started.child);
    }
    return started;
  }
  return { start: startKept, children };
}
