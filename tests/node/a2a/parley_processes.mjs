// The parley processes a test of this folder starts, shared by them: each is up once it prints
// its first line (its URL, or what it says it is), and every one still running is stopped at the
// end with stopAll().
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';

export function parleyProcesses(binary) {
  const children = new Set();
  function start(args, env = {}) {
    const child = spawn(binary, args, { stdio: ['ignore', 'pipe', 'inherit'], env: { ...process.env, ...env } });
    children.add(child);
    child.once('exit', () => children.delete(child));
    return new Promise((resolve, reject) => {
      child.once('error', reject);
      child.once('exit', (code) => reject(new Error(`parley ${args[0]} exited early (${code})`)));
      createInterface({ input: child.stdout }).once('line', (line) => {
        child.removeAllListeners('exit');
        child.once('exit', () => children.delete(child));
        resolve({ child, url: line.trim(), line: line.trim() });
      });
    });
  }
  return { start, children };
}
