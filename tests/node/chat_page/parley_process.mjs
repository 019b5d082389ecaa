// Starting and stopping parley subcommands (mock, serve) for the browser tests of this folder.
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';

// Starts `parley ARGS` and resolves with the child and the first line it prints (the URL it
// serves).
export function start(parley, args) {
  const child = spawn(parley, args, { stdio: ['ignore', 'pipe', 'inherit'] });
  return new Promise((resolve, reject) => {
    child.once('error', reject);
    child.once('exit', (code) => reject(new Error(`parley ${args[0]} exited early (${code})`)));
    createInterface({ input: child.stdout }).once('line', (line) => {
      child.removeAllListeners('exit');
      resolve({ child, line: line.trim() });
    });
  });
}

// Sends SIGTERM and resolves with how the child ended.
export function stop(child) {
  return new Promise((resolve) => {
    child.once('exit', (code, signal) => resolve({ code, signal }));
    child.kill('SIGTERM');
  });
}
