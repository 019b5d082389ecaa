// The parley processes a test of this folder starts (../parley_process.mjs), kept in `children`
// while they run, so that the test stops every one still running at its end.
import { start as startParley } from './parley_process.mjs';

export function parleyProcesses(binary) {
  const children = new Set();
  async function start(args, env = {}) {
    const started = await startParley(binary, args, env);
    children.add(started.child);
    started.child.once('exit', () => children.delete(started.child));
    if (started.child.exitCode !== null || started.child.signalCode !== null) {
      children.delete(started.child);
    }
    return started;
  }
  return { start, children };
}
