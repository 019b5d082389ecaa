// The official LangGraph JS SDK (@langchain/langgraph-sdk, pinned in package-lock.json) against
// `parley serve`'s Agent Protocol routes, end to end: assistants (the profile's, read-only;
// created, updated as versions, a run on an older version set as latest), threads (create, get, search,
// count, update, copy, state, history, delete), runs on a thread and stateless (create, wait,
// stream in each mode, join, joinStream resumed after a cut with Last-Event-ID, list, get,
// cancel), each multitask strategy, an interrupt answered with command.resume, the store,
// a signed webhook on a run's completion to a loopback receiver, refusals of what parley cannot
// honour, and a run that survives a SIGKILL of the serving process.
//
//   node langgraph_sdk.mjs PARLEY_BINARY sqlite|postgres
//
// The model is `parley mock` with a script of its own (a question for the human tool, a slow
// reply to double-text over, a streamed story); PostgreSQL is the test cluster of the ctest
// fixture (PARLEY_TEST_PG_INFO), in a database of this run's.
import { createHmac } from 'node:crypto';
import { createServer } from 'node:http';
import { mkdtempSync, writeFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import assert from 'node:assert/strict';
import { Client } from '@langchain/langgraph-sdk';
import { parleyProcesses } from './parley_process.mjs';
import { testDatabase } from './test_database.mjs';

const [parley, backend = 'sqlite'] = process.argv.slice(2);
if (!parley) {
  console.error('usage: node langgraph_sdk.mjs PARLEY_BINARY sqlite|postgres');
  process.exit(2);
}
const dir = mkdtempSync(join(tmpdir(), 'parley-langgraph-'));
const deadline = Date.now() + 50_000;

const { start, children } = parleyProcesses(parley);

function ended(child) {
  return new Promise((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) return resolve();
    child.once('exit', () => resolve());
  });
}

// Polls `probe` until it returns a truthy value; fails past the test's deadline. A condition,
// not a sleep: each round asks the service.
async function until(what, probe) {
  for (;;) {
    const value = await probe();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

async function rejects(promise, status, what) {
  try {
    await promise;
  } catch (error) {
    assert.equal(error.status, status, `${what}: ${error.message}`);
    return error;
  }
  throw new Error(`${what}: expected HTTP ${status}`);
}

async function collect(stream) {
  const events = [];
  for await (const event of stream) events.push(event);
  return events;
}

const text = (message) => (typeof message.content === 'string' ? message.content : '');
const lastText = (values) => text(values.messages.at(-1));

// The database.
const db = testDatabase(backend, dir, 'langgraph');

// The model: the mock with this test's script.
const script = join(dir, 'script.jsonl');
writeFileSync(
  script,
  [
    { match: { last_role: 'tool' }, reply: { content: '{{last_tool_name}} says: {{tool_results}}' } },
    { match: { user_contains: 'ask me' }, reply: { tool_calls: [{ name: 'ask_user', arguments: { question: 'Which colour?' } }] } },
    { match: { user_contains: 'slow' }, delay_ms: 1500, reply: { content: 'slow done' } },
    { match: { user_contains: 'story', stream: true }, reply: { content: 'once upon a time a parley began and went on and on until the end', chunk_size: 8 }, stream: { chunk_delay_ms: 60 } },
    { match: { user_contains: 'weather', tool: 'get_weather' }, reply: { tool_calls: [{ name: 'get_weather', arguments: { city: 'Paris' } }] } },
    { reply: { content: 'You said: {{last_user}}' } },
  ]
    .map((rule) => JSON.stringify(rule))
    .join('\n') + '\n',
);
const mock = await start(['mock', '--port', '0', '--script', script]);
const serveArgs = [
  'serve', '--db', db, '--port', '0', '--workers', '1', '--base-url', mock.url,
  '--model', 'parley-mock', '--api-key', 'mock-key', '--tools', 'demo', '--human-tool',
  'ask_user', '--lease-ms', '1500', '--concurrency', '4',
  '--webhook-allow-loopback', '--webhook-secret-env', 'PARLEY_TEST_WEBHOOK_SECRET',
];
const webhookSecret = 'whsec-langgraph-test';
process.env.PARLEY_TEST_WEBHOOK_SECRET = webhookSecret;
let serve = await start(serveArgs);
let client = new Client({ apiUrl: serve.url, callerOptions: { maxRetries: 0 } });
const input = (content) => ({ messages: [{ role: 'user', content }] });
const checks = [];
const check = async (name, body) => {
  await body();
  checks.push(name);
};

try {
  await check('assistants', async () => {
    const found = await client.assistants.search({ graphId: 'agent' });
    assert.equal(found.length, 1);
    assert.equal(found[0].assistant_id, 'agent');
    assert.equal((await client.assistants.get('agent')).graph_id, 'agent');
    await rejects(client.assistants.create({ graphId: 'x' }), 400, 'a graph that is no profile');
    await rejects(client.assistants.update('agent', { name: 'mine' }), 409, 'the profile is read-only');
  });

  await check('assistants: create, update, versions, setLatest, search, count, delete; a run on an older version', async () => {
    // Version 1 may call get_weather; version 2 no tool at all.
    const weather = await client.assistants.create({
      assistantId: 'weather-bot', graphId: 'agent', name: 'Weather bot', description: 'asks the weather tool',
      config: { configurable: { tools: ['get_weather'], system_prompt: 'You report the weather.' } },
      context: { max_iterations: 4 }, metadata: { team: 'sky' },
    });
    assert.equal(weather.assistant_id, 'weather-bot');
    assert.equal(weather.version, 1);
    assert.deepEqual(weather.metadata, { team: 'sky' });
    await rejects(client.assistants.create({ assistantId: 'weather-bot', graphId: 'agent' }), 409, 'if_exists raise');
    const same = await client.assistants.create({ assistantId: 'weather-bot', graphId: 'agent', ifExists: 'do_nothing' });
    assert.equal(same.name, 'Weather bot');
    const other = await client.assistants.create({ graphId: 'agent', name: 'Plain', metadata: { team: 'ground' } });
    assert.ok(other.assistant_id);

    const v2 = await client.assistants.update('weather-bot', { config: { configurable: { tools: [] } }, metadata: { stage: 'no tools' } });
    assert.equal(v2.version, 2);
    assert.deepEqual(v2.metadata, { team: 'sky', stage: 'no tools' });
    assert.equal((await client.assistants.get('weather-bot')).version, 2);
    const versions = await client.assistants.getVersions('weather-bot');
    assert.deepEqual(versions.map((v) => v.version), [2, 1]);
    assert.deepEqual(versions[1].config.configurable.tools, ['get_weather']);
    assert.equal((await client.assistants.getVersions('weather-bot', { metadata: { stage: 'no tools' } })).length, 1);

    // The latest version has no tools: the model's plain answer.
    const t = (await client.threads.create()).thread_id;
    let values = await client.runs.wait(t, 'weather-bot', { input: input('what is the weather?') });
    assert.equal(lastText(values), 'You said: what is the weather?');
    // Back to version 1 (not the newest): its tool runs.
    const back = await client.assistants.setLatest('weather-bot', 1);
    assert.equal(back.version, 1);
    values = await client.runs.wait(t, 'weather-bot', { input: input('the weather again?') });
    assert.match(lastText(values), /^get_weather says: /);
    const runs = await client.runs.list(t);
    assert.ok(runs.every((r) => r.assistant_id === 'weather-bot'));
    await rejects(client.assistants.setLatest('weather-bot', 9), 404, 'a version that is not there');

    const bySky = await client.assistants.search({ metadata: { team: 'sky' } });
    assert.deepEqual(bySky.map((a) => a.assistant_id), ['weather-bot']);
    assert.equal(bySky[0].version, 1);
    assert.deepEqual((await client.assistants.search({ name: 'weather' })).map((a) => a.assistant_id), ['weather-bot']);
    const byName = await client.assistants.search({ graphId: 'agent', sortBy: 'name', sortOrder: 'asc', limit: 2, offset: 1 });
    assert.deepEqual(byName.map((a) => a.name), ['Weather bot', 'agent']);
    const paged = await client.assistants.search({ sortBy: 'assistant_id', sortOrder: 'asc', limit: 1, includePagination: true });
    assert.equal(paged.assistants.length, 1);
    assert.equal(paged.next, '1');
    assert.equal(await client.assistants.count({ graphId: 'agent' }), 3);
    assert.equal(await client.assistants.count({ metadata: { team: 'ground' } }), 1);
    await rejects(client.assistants.search({ limit: 5000 }), 400, 'search limit past the cap');
    await rejects(client.assistants.create({ graphId: 'agent', name: 'n'.repeat(300) }), 400, 'name past the cap');

    // The OpenAI-compatible models list them too.
    const models = await (await fetch(`${serve.url}/v1/models`)).json();
    const ids = models.data.map((m) => m.id);
    assert.ok(ids.includes('weather-bot') && ids.includes(other.assistant_id), JSON.stringify(ids));

    await client.assistants.delete(other.assistant_id);
    await rejects(client.assistants.get(other.assistant_id), 404, 'a deleted assistant');
    await rejects(client.runs.create(t, other.assistant_id, { input: input('x') }), 404, 'a run on a deleted assistant');
  });

  const thread = await client.threads.create({ metadata: { user: 'ada' } });
  assert.ok(thread.thread_id, 'threads.create answers a thread_id');
  assert.equal(thread.status, 'idle');
  assert.deepEqual(thread.values.messages, []);

  await check('threads.create if_exists', async () => {
    const named = await client.threads.create({ threadId: 'named-1' });
    assert.equal(named.thread_id, 'named-1');
    const again = await client.threads.create({ threadId: 'named-1', ifExists: 'do_nothing' });
    assert.equal(again.thread_id, 'named-1');
    await rejects(client.threads.create({ threadId: 'named-1' }), 409, 'a taken thread_id');
  });

  await check('runs.wait', async () => {
    const values = await client.runs.wait(thread.thread_id, 'agent', { input: input('hello') });
    assert.equal(values.messages.length, 2);
    assert.equal(values.messages[0].type, 'human');
    assert.equal(values.messages[1].type, 'ai');
    assert.equal(lastText(values), 'You said: hello');
  });

  await check('threads.get, getState, getHistory', async () => {
    const got = await client.threads.get(thread.thread_id);
    assert.equal(got.values.messages.length, 2);
    const state = await client.threads.getState(thread.thread_id);
    assert.deepEqual(state.next, []);
    assert.ok(state.checkpoint.checkpoint_id);
    assert.equal(lastText(state.values), 'You said: hello');
    const again = await client.threads.getState(thread.thread_id, state.checkpoint.checkpoint_id);
    assert.equal(again.values.messages.length, 2);
    const history = await client.threads.getHistory(thread.thread_id, { limit: 5 });
    assert.ok(history.length >= 1);
    assert.equal(history[0].checkpoint.checkpoint_id, state.checkpoint.checkpoint_id);
  });

  await check('threads.update, search, count, copy', async () => {
    const updated = await client.threads.update(thread.thread_id, { metadata: { topic: 'tests' } });
    // A run notes its assistant and graph in the thread's metadata, as LangGraph's server does.
    assert.deepEqual(updated.metadata,
      { user: 'ada', topic: 'tests', graph_id: 'agent', assistant_id: 'agent' });
    const found = await client.threads.search({ metadata: { user: 'ada' }, limit: 5 });
    assert.deepEqual(found.map((t) => t.thread_id), [thread.thread_id]);
    const idle = await client.threads.search({ status: 'idle', sortBy: 'created_at', sortOrder: 'asc' });
    assert.ok(idle.some((t) => t.thread_id === thread.thread_id));
    assert.equal(await client.threads.count({ metadata: { topic: 'tests' } }), 1);
    const copy = await client.threads.copy(thread.thread_id);
    assert.notEqual(copy.thread_id, thread.thread_id);
    assert.equal(copy.values.messages.length, 2);
    assert.equal(copy.metadata.topic, 'tests');
  });

  await check('runs.stream values/updates/messages-tuple, tool calls in order', async () => {
    const events = await collect(
      client.runs.stream(thread.thread_id, 'agent', {
        input: input('what is the weather?'),
        streamMode: ['values', 'updates', 'messages-tuple'],
      }),
    );
    const names = events.map((e) => e.event);
    assert.equal(names[0], 'metadata');
    assert.equal(names.at(-1), 'end');
    // The user's message is in the state before anything the model says.
    const firstValues = events.find((e) => e.event === 'values');
    assert.equal(lastText(firstValues.data), 'what is the weather?');
    const updates = events.filter((e) => e.event === 'updates').map((e) => Object.keys(e.data)[0]);
    assert.deepEqual(updates, ['agent', 'tools', 'agent']);
    const calls = events.find((e) => e.event === 'updates' && e.data.agent).data.agent.messages[0];
    assert.equal(calls.tool_calls[0].name, 'get_weather');
    const tuples = events.filter((e) => e.event === 'messages');
    assert.ok(tuples.length >= 2);
    assert.equal(tuples[0].data[1].langgraph_node, 'agent');
    const last = events.filter((e) => e.event === 'values').at(-1).data;
    assert.match(lastText(last), /^get_weather says: /);
  });

  await check('runs.stream messages (partial/complete), events and custom', async () => {
    const events = await collect(
      client.runs.stream(thread.thread_id, 'agent', {
        input: input('tell me a story'),
        streamMode: ['messages', 'events', 'custom'],
      }),
    );
    const partial = events.filter((e) => e.event === 'messages/partial');
    assert.ok(partial.length >= 2, 'the story streams in pieces');
    const complete = events.find((e) => e.event === 'messages/complete');
    assert.equal(text(complete.data[0]), 'once upon a time a parley began and went on and on until the end');
    assert.equal(text(partial.at(-1).data[0]), text(complete.data[0]));
    assert.ok(events.some((e) => e.event === 'events' && e.data.event === 'on_chat_model_stream'));
    const custom = events.filter((e) => e.event === 'custom').map((e) => e.data.type);
    // parley's own events, in the order a UI renders: the user's message before the model's.
    const added = custom.indexOf('message_added');
    assert.ok(added >= 0 && added < custom.indexOf('llm_stream_chunk'));
    assert.equal(custom.at(-1), 'llm_execution_completed');
  });

  await check('a cut stream resumed with joinStream and Last-Event-ID', async () => {
    const controller = new AbortController();
    let runId;
    const first = [];
    try {
      for await (const event of client.runs.stream(thread.thread_id, 'agent', {
        input: input('another story please'),
        streamMode: ['messages-tuple', 'values'],
        signal: controller.signal,
        onRunCreated: (meta) => {
          runId = meta.run_id;
        },
      })) {
        first.push(event);
        if (first.filter((e) => e.event === 'messages').length === 2) controller.abort();
      }
    } catch (error) {
      if (error.name !== 'AbortError' && !String(error).includes('abort')) throw error;
    }
    assert.ok(runId, 'onRunCreated gave the run id (Content-Location)');
    const lastEventId = first.filter((e) => e.id).at(-1).id;
    const rest = await collect(
      client.runs.joinStream(thread.thread_id, runId, {
        lastEventId,
        streamMode: ['messages-tuple', 'values'],
      }),
    );
    // (The SDK's decoder keeps the last id for an event without one, as `end` is.)
    const ids = [...first, ...rest].filter((e) => e.id && e.event !== 'end').map((e) => e.id);
    assert.equal(new Set(ids).size, ids.length, `no event twice: ${ids.join(' ')}`);
    const pieces = [...first, ...rest]
      .filter((e) => e.event === 'messages')
      .map((e) => text(e.data[0]))
      .join('');
    assert.equal(pieces, 'once upon a time a parley began and went on and on until the end');
    assert.equal(rest.at(-1).event, 'end');
  });

  await check('runs.create, join, get, list', async () => {
    const run = await client.runs.create(thread.thread_id, 'agent', {
      input: input('background'),
      metadata: { origin: 'test' },
    });
    assert.ok(['pending', 'running', 'success'].includes(run.status));
    const values = await client.runs.join(thread.thread_id, run.run_id);
    assert.equal(lastText(values), 'You said: background');
    const got = await client.runs.get(thread.thread_id, run.run_id);
    assert.equal(got.status, 'success');
    assert.equal(got.metadata.origin, 'test');
    assert.equal(got.assistant_id, 'agent');
    const listed = await client.runs.list(thread.thread_id, { limit: 2 });
    assert.equal(listed.length, 2);
    assert.equal(listed[0].run_id, run.run_id, 'newest first');
    await rejects(client.runs.get(thread.thread_id, 'r-none'), 404, 'an unknown run');
  });

  await check('an interrupt answered with command.resume', async () => {
    const asked = await client.threads.create();
    const values = await client.runs.wait(asked.thread_id, 'agent', { input: input('ask me something') });
    assert.equal(values.__interrupt__.length, 1);
    assert.equal(values.__interrupt__[0].value.prompt, 'Which colour?');
    const got = await client.threads.get(asked.thread_id);
    assert.equal(got.status, 'interrupted');
    const state = await client.threads.getState(asked.thread_id);
    assert.equal(state.tasks[0].interrupts[0].value.kind, 'interaction');
    // threads.joinStream: the thread's current run (here the waiting one), then end.
    const joined = await collect(client.threads.joinStream(asked.thread_id, { streamMode: ['values'] }));
    assert.equal(joined.at(-1).event, 'end');
    const lastValues = joined.filter((e) => e.event === 'values').at(-1).data;
    assert.equal(lastValues.__interrupt__[0].value.prompt, 'Which colour?');
    const resumed = await client.runs.wait(asked.thread_id, 'agent', { command: { resume: 'blue' } });
    assert.equal(lastText(resumed), 'ask_user says: blue');
    assert.equal((await client.threads.get(asked.thread_id)).status, 'idle');
    const idle = await collect(client.threads.joinStream(asked.thread_id));
    assert.deepEqual(idle.map((e) => e.event), ['end'], 'an idle thread has no run to join');
    await rejects(
      client.runs.wait(asked.thread_id, 'agent', { command: { resume: 'again' } }),
      409,
      'a resume without an interrupt',
    );
  });

  // Double texting: a slow run holds the thread while a second arrives.
  const slowThread = async () => {
    const t = await client.threads.create();
    const first = await client.runs.create(t.thread_id, 'agent', { input: input('slow one') });
    await until('the slow run to start', async () => (await client.runs.get(t.thread_id, first.run_id)).status === 'running');
    return { t, first };
  };
  await check('multitask reject', async () => {
    const { t, first } = await slowThread();
    await rejects(
      client.runs.create(t.thread_id, 'agent', { input: input('second'), multitaskStrategy: 'reject' }),
      409,
      'reject',
    );
    await client.runs.join(t.thread_id, first.run_id);
  });
  await check('multitask enqueue', async () => {
    const { t, first } = await slowThread();
    const second = await client.runs.create(t.thread_id, 'agent', {
      input: input('second'),
      multitaskStrategy: 'enqueue',
    });
    assert.equal(second.status, 'pending');
    const values = await client.runs.join(t.thread_id, second.run_id);
    assert.deepEqual(values.messages.map(text), ['slow one', 'slow done', 'second', 'You said: second']);
    assert.equal((await client.runs.get(t.thread_id, first.run_id)).status, 'success');
  });
  await check('multitask interrupt', async () => {
    const { t, first } = await slowThread();
    const second = await client.runs.create(t.thread_id, 'agent', {
      input: input('second'),
      multitaskStrategy: 'interrupt',
    });
    const values = await client.runs.join(t.thread_id, second.run_id);
    assert.equal(lastText(values), 'You said: second');
    const before = await client.runs.get(t.thread_id, first.run_id);
    assert.ok(['interrupted', 'success'].includes(before.status), before.status);
  });
  await check('multitask rollback', async () => {
    const { t, first } = await slowThread();
    const second = await client.runs.create(t.thread_id, 'agent', {
      input: input('second'),
      multitaskStrategy: 'rollback',
    });
    const values = await client.runs.join(t.thread_id, second.run_id);
    assert.deepEqual(values.messages.map(text), ['second', 'You said: second']);
    assert.equal((await client.runs.get(t.thread_id, first.run_id)).status, 'interrupted');
  });
  await check('runs.cancel', async () => {
    const { t, first } = await slowThread();
    await client.runs.cancel(t.thread_id, first.run_id, true);
    assert.equal((await client.runs.get(t.thread_id, first.run_id)).status, 'interrupted');
  });

  await check('stateless runs: wait, stream, on_completion', async () => {
    const values = await client.runs.wait(null, 'agent', { input: input('no thread') });
    assert.equal(lastText(values), 'You said: no thread');
    let made;
    const events = await collect(
      client.runs.stream(null, 'agent', {
        input: input('streamed, no thread'),
        onRunCreated: (meta) => {
          made = meta;
        },
      }),
    );
    assert.equal(events.at(-1).event, 'end');
    assert.equal(lastText(events.filter((e) => e.event === 'values').at(-1).data), 'You said: streamed, no thread');
    await until('the stateless thread to go', async () => {
      try {
        await client.threads.get(made.thread_id);
        return false;
      } catch (error) {
        return error.status === 404;
      }
    });
    const kept = await client.runs.create(null, 'agent', { input: input('kept'), onCompletion: 'keep' });
    const joined = await client.runs.join(kept.thread_id, kept.run_id);
    assert.equal(lastText(joined), 'You said: kept');
    assert.equal((await client.threads.get(kept.thread_id)).values.messages.length, 2);
  });

  await check('webhook on completion, signed', async () => {
    const received = [];
    const receiver = createServer((req, res) => {
      let body = '';
      req.on('data', (chunk) => (body += chunk));
      req.on('end', () => {
        received.push({ headers: req.headers, body });
        res.end('ok');
      });
    });
    await new Promise((resolve) => receiver.listen(0, '127.0.0.1', resolve));
    try {
      const url = `http://127.0.0.1:${receiver.address().port}/hook`;
      const t = await client.threads.create();
      const values = await client.runs.wait(t.thread_id, 'agent', { input: input('hooked'), webhook: url });
      assert.equal(lastText(values), 'You said: hooked');
      const got = await until('the webhook', async () => received[0]);
      const run = JSON.parse(got.body);
      assert.equal(run.thread_id, t.thread_id);
      assert.equal(run.status, 'success');
      assert.equal(lastText(run.values), 'You said: hooked');
      const signature = 'sha256=' + createHmac('sha256', webhookSecret).update(got.body).digest('hex');
      assert.equal(got.headers['x-parley-signature-256'], signature);
      assert.equal(got.headers['x-parley-event'], 'run.completed');
      await rejects(client.runs.create(t.thread_id, 'agent', { input: input('x'), webhook: 'ftp://127.0.0.1:1/x' }), 400, 'a webhook not http(s)');
    } finally {
      receiver.close();
    }
  });

  await check('if_not_exists', async () => {
    await rejects(client.runs.create('nowhere-1', 'agent', { input: input('x') }), 404, 'no thread');
    const made = await client.runs.wait('nowhere-2', 'agent', { input: input('x'), ifNotExists: 'create' });
    assert.equal(lastText(made), 'You said: x');
  });

  await check('what parley cannot honour is refused, never ignored', async () => {
    const t = thread.thread_id;
    await rejects(client.runs.create(t, 'agent', { input: input('x'), config: { configurable: { model: 'gpt-4o' } } }), 400, 'config model');
    await rejects(client.runs.create(t, 'agent', { input: input('x'), interruptBefore: ['tools'] }), 400, 'interrupt_before');
    await rejects(client.runs.create(t, 'agent', { input: input('x'), streamMode: ['debug'] }), 400, 'debug mode');
    await rejects(client.runs.create(t, 'agent', { input: { question: 'x' } }), 400, 'input not messages');
    await rejects(client.threads.updateState(t, { values: { messages: [] } }), 400, 'updateState');
    await rejects(client.threads.create({ metadata: { deep: JSON.parse('['.repeat(40) + ']'.repeat(40)) } }), 400, 'metadata depth');
  });

  await check('a run survives a SIGKILL of the serving process', async () => {
    const t = await client.threads.create();
    const run = await client.runs.create(t.thread_id, 'agent', { input: input('slow survivor') });
    await until('the run to start', async () => (await client.runs.get(t.thread_id, run.run_id)).status === 'running');
    serve.child.kill('SIGKILL');
    await ended(serve.child);
    serve = await start(serveArgs);
    client = new Client({ apiUrl: serve.url, callerOptions: { maxRetries: 0 } });
    const values = await client.runs.join(t.thread_id, run.run_id);
    assert.equal(lastText(values), 'slow done');
    assert.equal((await client.runs.get(t.thread_id, run.run_id)).status, 'success');
    // The assistants are in the database: the new process has them, at the version set.
    assert.equal((await client.assistants.get('weather-bot')).version, 1);
  });

  await check('store: put, get, search, namespaces, delete, ttl', async () => {
    await client.store.putItem(['docs', 'ada'], 'a', { kind: 'note', text: 'hi' });
    await client.store.putItem(['docs', 'ada'], 'b', { kind: 'todo' }, { ttl: 60 });
    await client.store.putItem(['docs', 'bob'], 'c', { kind: 'note' });
    const got = await client.store.getItem(['docs', 'ada'], 'a', { refreshTtl: true });
    assert.deepEqual(got.value, { kind: 'note', text: 'hi' });
    assert.deepEqual(got.namespace, ['docs', 'ada']);
    assert.ok(got.createdAt);
    const found = await client.store.searchItems(['docs'], { filter: { kind: 'note' } });
    assert.deepEqual(found.items.map((i) => i.key), ['a', 'c']);
    const ns = await client.store.listNamespaces({ prefix: ['docs'] });
    assert.deepEqual(ns.namespaces, [['docs', 'ada'], ['docs', 'bob']]);
    await client.store.deleteItem(['docs', 'ada'], 'a');
    await rejects(client.store.getItem(['docs', 'ada'], 'a'), 404, 'a deleted item');
    await rejects(client.store.searchItems(['docs'], { query: 'semantic' }), 400, 'query');
    await rejects(client.store.putItem(['docs'], 'big', { text: 'x'.repeat(300_000) }), 400, 'value cap');
  });

  await check('threads.delete', async () => {
    await client.threads.delete(thread.thread_id);
    await rejects(client.threads.get(thread.thread_id), 404, 'a deleted thread');
  });

  console.log(`langgraph sdk (${backend}): ${checks.length} checks passed: ${checks.join('; ')}`);
} finally {
  for (const child of children) child.kill('SIGTERM');
  await Promise.all([...children].map(ended));
  rmSync(dir, { recursive: true, force: true });
}
