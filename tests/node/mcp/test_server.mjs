// MCP servers that misbehave or ask the client for things, for tests/mcp_test.cpp. No npm
// package: plain JSON-RPC over stdio or node:http, written from the specification (2025-11-25;
// the "modern" modes from 2026-07-28, no npm server speaking it yet).
//
// The 2025-era stdio modes answer server/discover with -32601 (method not found), as the SDKs do
// before initialize, except "quiet", which never answers it.
//
//   node test_server.mjs relay        stdio; tool "relay" {method, params} sends that request to
//                                     the client and returns its answer (result or error) as text
//   node test_server.mjs flood        stdio; tool "flood" stops reading stdin and sends pings
//   node test_server.mjs big-tools    stdio; tools/list pages whose definitions total ~1.2 MB
//   node test_server.mjs structured   stdio; tool "weather" with an outputSchema; argument
//                                     {"bad": true} answers structuredContent that does not match
//   node test_server.mjs oauth MODE   HTTP on a free port (printed as "port N" on stdout) that
//                                     needs an OAuth sign-in; MODE: ok, big-metadata, slow-metadata,
//                                     big-token, iss-wrong (the redirect names another issuer),
//                                     iss-missing (iss promised, not sent). "ok" rejects the first access token once after
//                                     it was used, so that the client refreshes it; GET /stats
//                                     tells how many authorizations and refreshes it saw.
//   node test_server.mjs annotated    stdio; tools "read" (readOnlyHint), "safe" (destructiveHint
//                                     false, idempotentHint), "plain" (no annotations), "wipe"
//                                     (destructiveHint true, readOnlyHint false)
//   node test_server.mjs quiet        stdio, 2025 era; tool "hello"; never answers server/discover
//   node test_server.mjs modern [VERSIONS]       stdio, 2026-07-28 (stateless): server/discover,
//                                     _meta required on every request (-32022 otherwise), no
//                                     initialize; VERSIONS (comma-separated) is what it supports.
//                                     Tools: "meta" returns the request's _meta; "ask" answers
//                                     input_required (an elicitation and requestState) until the
//                                     retry carries the answer; "roots" asks for roots/list;
//                                     "forever" asks again on every round.
//                                     "stats" returns how many requests of each method came
//                                     before it; "grow" adds tool "extra" to the list.
//                                     OPTIONS (after VERSIONS): "ttl=MS" or "ttl=none" (tools/
//                                     list's ttlMs, default 60000), "scope=public" (its
//                                     cacheScope, default private), "polls=N" and "poll=MS" for
//                                     the tasks of tools "slow", "held", "failing", "asks";
//                                     "listen=yes", "listen=drop" (streams cut before their
//                                     acknowledgment) or "listen=flood" (five notices at once
//                                     on each stream) for subscriptions/listen
//                                     (tool "await" {key, atLeast} waits for a count).
//   node test_server.mjs modern-http [VERSIONS [OPTIONS]]  the same over HTTP on a free port
//                                     ("port N"); "meta" also returns the Mcp-* headers of its
//                                     request.
import http from 'node:http';
import fs from 'node:fs';
import readline from 'node:readline';

const mode = process.argv[2];

function send(message) {
  fs.writeSync(1, JSON.stringify(message) + '\n');
}

function initializeResult(id, version) {
  return {
    jsonrpc: '2.0', id,
    result: {
      protocolVersion: version || '2025-11-25',
      capabilities: { tools: {} },
      serverInfo: { name: 'parley-test-server', version: '1.0.0' },
    },
  };
}

function stdioServer(onRequest) {
  const lines = readline.createInterface({ input: process.stdin });
  const waiting = new Map();  // our requests to the client: id -> callback
  let next = 1;
  const ask = (method, params, callback) => {
    const id = `s${next++}`;
    waiting.set(id, callback);
    send({ jsonrpc: '2.0', id, method, params });
  };
  lines.on('line', (line) => {
    let message;
    try { message = JSON.parse(line); } catch { return; }
    if (message.method === undefined && waiting.has(message.id)) {
      const callback = waiting.get(message.id);
      waiting.delete(message.id);
      callback(message);
      return;
    }
    if (message.id === undefined) return;  // a notification
    if (message.method === 'server/discover') {
      if (mode === 'quiet') return;
      return send({ jsonrpc: '2.0', id: message.id, error: { code: -32601, message: 'Method not found' } });
    }
    if (message.method === 'initialize') return send(initializeResult(message.id, message.params?.protocolVersion));
    if (message.method === 'ping') return send({ jsonrpc: '2.0', id: message.id, result: {} });
    onRequest(message, ask);
  });
  lines.on('close', () => process.exit(0));
}

function tool(name, extra = {}) {
  return { name, description: `the ${name} tool`, inputSchema: { type: 'object' }, ...extra };
}

function text(id, value) {
  return { jsonrpc: '2.0', id, result: { content: [{ type: 'text', text: value }] } };
}

if (mode === 'relay') {
  stdioServer((message, ask) => {
    if (message.method === 'tools/list') return send({ jsonrpc: '2.0', id: message.id, result: { tools: [tool('relay')] } });
    if (message.method === 'tools/call') {
      const { method, params } = message.params.arguments;
      return ask(method, params, (answer) => send(text(message.id, JSON.stringify(answer.error ? { error: answer.error } : answer.result))));
    }
    send({ jsonrpc: '2.0', id: message.id, error: { code: -32601, message: 'no' } });
  });
} else if (mode === 'flood') {
  stdioServer((message) => {
    if (message.method === 'tools/list') return send({ jsonrpc: '2.0', id: message.id, result: { tools: [tool('flood')] } });
    if (message.method === 'tools/call') {
      process.stdin.pause();  // stop reading: the client's answers pile up in the socket
      for (let i = 0; i < 200000; ++i) {
        try { send({ jsonrpc: '2.0', id: `p${i}`, method: 'ping' }); } catch { process.exit(0); }
      }
      setInterval(() => {}, 1000);
    }
  });
} else if (mode === 'big-tools') {
  stdioServer((message) => {
    if (message.method !== 'tools/list') return;
    const page = Number(message.params?.cursor || 0);
    const tools = [];
    for (let i = 0; i < 4; ++i) tools.push(tool(`t${page}_${i}`, { description: 'x'.repeat(100000) }));
    const result = { tools };
    if (page < 2) result.nextCursor = String(page + 1);
    send({ jsonrpc: '2.0', id: message.id, result });
  });
} else if (mode === 'structured') {
  const outputSchema = { type: 'object', properties: { celsius: { type: 'number' } }, required: ['celsius'] };
  stdioServer((message) => {
    if (message.method === 'tools/list') return send({ jsonrpc: '2.0', id: message.id, result: { tools: [tool('weather', { outputSchema, annotations: { readOnlyHint: true } })] } });
    if (message.method === 'tools/call') {
      const structured = message.params.arguments?.bad ? { celsius: 'warm' } : { celsius: 21.5 };
      send({ jsonrpc: '2.0', id: message.id, result: { content: [{ type: 'text', text: 'It is mild.' }], structuredContent: structured } });
    }
  });
} else if (mode === 'oauth') {
  const variant = process.argv[3] || 'ok';
  const stats = { authorizations: 0, refreshes: 0, tokens: 0 };
  let base = '';
  let rejectedOnce = false;
  const valid = new Set();
  const body = (request) => new Promise((resolve) => {
    let data = '';
    request.on('data', (chunk) => { data += chunk; });
    request.on('end', () => resolve(data));
  });
  const json = (response, status, value, headers = {}) => {
    response.writeHead(status, { 'Content-Type': 'application/json', ...headers });
    response.end(JSON.stringify(value));
  };
  const server = http.createServer(async (request, response) => {
    const url = new URL(request.url, base);
    if (url.pathname === '/stats') return json(response, 200, stats);
    if (url.pathname === '/.well-known/oauth-protected-resource/mcp') {
      if (variant === 'slow-metadata') return;  // never answers
      if (variant === 'big-metadata') return json(response, 200, { resource: `${base}/mcp`, authorization_servers: [base], padding: 'x'.repeat(200000) });
      return json(response, 200, { resource: `${base}/mcp`, authorization_servers: [base], scopes_supported: ['mcp'] });
    }
    if (url.pathname === '/.well-known/oauth-authorization-server') {
      return json(response, 200, {
        issuer: base, authorization_endpoint: `${base}/authorize`, token_endpoint: `${base}/token`,
        registration_endpoint: `${base}/register`, response_types_supported: ['code'],
        code_challenge_methods_supported: ['S256'], token_endpoint_auth_methods_supported: ['none'],
        ...(variant === 'iss-missing' ? { authorization_response_iss_parameter_supported: true } : {}),
      });
    }
    if (url.pathname === '/register') {
      await body(request);
      return json(response, 201, { client_id: 'registered-client' });
    }
    if (url.pathname === '/authorize') {
      stats.authorizations++;
      const back = new URL(url.searchParams.get('redirect_uri'));
      back.searchParams.set('code', 'the-code');
      back.searchParams.set('state', url.searchParams.get('state'));
      if (variant === 'iss-wrong') back.searchParams.set('iss', 'https://attacker.example');
      response.writeHead(302, { Location: back.toString() });
      return response.end();
    }
    if (url.pathname === '/token') {
      const form = new URLSearchParams(await body(request));
      if (variant === 'big-token') return json(response, 200, { access_token: 'x'.repeat(200000), token_type: 'Bearer' });
      if (form.get('grant_type') === 'refresh_token') stats.refreshes++;
      const token = `secret-access-token-${++stats.tokens}`;
      valid.add(token);
      return json(response, 200, { access_token: token, token_type: 'Bearer', expires_in: 3600, refresh_token: `secret-refresh-token-${stats.tokens}` });
    }
    if (url.pathname === '/mcp' && request.method === 'POST') {
      const message = JSON.parse(await body(request) || '{}');
      const auth = request.headers.authorization || '';
      let token = auth.startsWith('Bearer ') ? auth.slice(7) : '';
      // The first token is refused once after its first use: the client must refresh it.
      if (token === 'secret-access-token-1' && !rejectedOnce && message.method === 'tools/list') {
        rejectedOnce = true;
        valid.delete(token);
      }
      if (!valid.has(token)) {
        return json(response, 401, { error: 'invalid_token' }, {
          'WWW-Authenticate': `Bearer error="invalid_token", resource_metadata="${base}/.well-known/oauth-protected-resource/mcp"`,
        });
      }
      if (message.id === undefined) { response.writeHead(202); return response.end(); }
      if (message.method === 'initialize') return json(response, 200, initializeResult(message.id, message.params?.protocolVersion));
      if (message.method === 'tools/list') return json(response, 200, { jsonrpc: '2.0', id: message.id, result: { tools: [tool('hello')] } });
      return json(response, 200, { jsonrpc: '2.0', id: message.id, result: {} });
    }
    response.writeHead(405);
    response.end();
  });
  server.listen(0, '127.0.0.1', () => {
    base = `http://127.0.0.1:${server.address().port}`;
    fs.writeSync(1, `port ${server.address().port}\n`);
  });
} else if (mode === 'annotated') {
  const tools = [
    tool('read', { annotations: { readOnlyHint: true } }),
    tool('safe', { annotations: { destructiveHint: false, idempotentHint: true } }),
    tool('plain'),
    tool('wipe', { annotations: { readOnlyHint: false, destructiveHint: true, openWorldHint: false } }),
  ];
  stdioServer((message) => {
    if (message.method === 'tools/list') return send({ jsonrpc: '2.0', id: message.id, result: { tools } });
    send(text(message.id, `ran ${message.params?.name}`));
  });
} else if (mode === 'quiet') {
  stdioServer((message) => {
    if (message.method === 'tools/list') return send({ jsonrpc: '2.0', id: message.id, result: { tools: [tool('hello')] } });
    send(text(message.id, 'hello'));
  });
} else if (mode === 'modern' || mode === 'modern-http') {
  const supported = (process.argv[3] || '2026-07-28').split(',');
  // argv[4]: options "ttl=MS" (tools/list's ttlMs; "ttl=none" leaves it out) and "scope=public"
  // (tools/list's cacheScope; private otherwise), comma-separated.
  const settings = Object.fromEntries((process.argv[4] || '').split(',').filter(Boolean).map((item) => item.split('=')));
  const complete = (result) => ({ resultType: 'complete', ...result });
  const cacheable = (result) => complete({ ttlMs: 60000, cacheScope: 'private', ...result });
  const listHints = () => {
    const hints = { cacheScope: settings.scope || 'private' };
    if (settings.ttl !== 'none') hints.ttlMs = settings.ttl === undefined ? 60000 : Number(settings.ttl);
    return hints;
  };
  // The only state: how many requests of each method came (tool "stats" answers them, before
  // counting itself) and whether tool "grow" added tool "extra" to the list.
  const counts = {};
  let grown = false;
  // subscriptions/listen ("listen=yes": capabilities.tools.listChanged, streams kept open;
  // "listen=drop": each stream is cut before its acknowledgment). `listeners` send a
  // notification on an open stream; tool "await" {key, atLeast} answers once counts[key] reaches
  // atLeast (counted: "subscriptions/listen" when a stream is registered, "listen-closed" when
  // one ends).
  const listeners = new Map();
  const waiters = [];
  const bump = (key) => {
    counts[key] = (counts[key] || 0) + 1;
    for (let i = waiters.length - 1; i >= 0; --i) {
      if ((counts[waiters[i].key] || 0) >= waiters[i].atLeast) { waiters[i].done(); waiters.splice(i, 1); }
    }
  };
  const awaitCount = (message, respond) => {
    const { key, atLeast } = message.params.arguments;
    const done = () => respond({ jsonrpc: '2.0', id: message.id, result: { resultType: 'complete', content: [{ type: 'text', text: `${key} ${counts[key]}` }] } });
    if ((counts[key] || 0) >= atLeast) return done();
    waiters.push({ key, atLeast, done });
  };
  const ack = (id) => ({ jsonrpc: '2.0', method: 'notifications/subscriptions/acknowledged', params: { _meta: { 'io.modelcontextprotocol/subscriptionId': id }, notifications: { toolsListChanged: true } } });
  const changedNotice = (id) => ({ jsonrpc: '2.0', method: 'notifications/tools/list_changed', params: { _meta: { 'io.modelcontextprotocol/subscriptionId': id } } });
  // The tasks extension (SEP-2663): tools "slow" (ends after `polls` tasks/get, default 2),
  // "held" (works until cancelled), "failing" (fails at the first tasks/get) and "asks" (needs a
  // name through tasks/update) answer with a task when the request declares the extension;
  // pollIntervalMs is "poll=MS" (default 10).
  const tasks = new Map();
  let nextTask = 1;
  const taskView = (task) => {
    const view = { taskId: task.taskId, status: task.status, createdAt: task.createdAt, lastUpdatedAt: new Date().toISOString(), ttlMs: 60000, pollIntervalMs: Number(settings.poll || 10) };
    if (task.status === 'completed') view.result = task.result;
    if (task.status === 'failed') view.error = { code: -32000, message: 'it broke' };
    if (task.status === 'input_required') view.inputRequests = { who: { method: 'elicitation/create', params: { mode: 'form', message: 'Your name?', requestedSchema: { type: 'object', properties: { name: { type: 'string' } }, required: ['name'] } } } };
    return view;
  };
  const form = { type: 'object', properties: { name: { type: 'string' } }, required: ['name'] };
  // One request in, one response out: no state between requests but what requestState carries.
  const answer = (message, headers) => {
    const reply = (result) => ({ jsonrpc: '2.0', id: message.id, result });
    const fail = (code, text, data) => ({ jsonrpc: '2.0', id: message.id, error: { code, message: text, data } });
    if (message.method === 'initialize') return fail(-32601, `initialize is gone: this server speaks ${supported.join(', ')}`);
    const meta = message.params?._meta || {};
    const version = meta['io.modelcontextprotocol/protocolVersion'];
    if (!supported.includes(version)) return fail(-32022, 'Unsupported protocol version', { supported, requested: version ?? null });
    if (typeof meta['io.modelcontextprotocol/clientCapabilities'] !== 'object') return fail(-32602, 'no clientCapabilities in _meta');
    if (message.method === 'server/discover') {
      return reply(cacheable({ supportedVersions: supported, capabilities: { tools: settings.listen ? { listChanged: true } : {} }, instructions: 'A stateless test server.', _meta: { 'io.modelcontextprotocol/serverInfo': { name: 'parley-modern', version: '1.0.0' } } }));
    }
    // x-mcp-header (SEP-2243): `meta` mirrors `region`; `crowded` marks 33 properties, one past
    // parley's cap of 32, and must not be offered.
    const mirrored = { type: 'object', properties: { region: { type: 'string', 'x-mcp-header': 'Region' }, count: { type: 'integer', 'x-mcp-header': 'Count' } } };
    const crowded = { type: 'object', properties: Object.fromEntries(Array.from({ length: 33 }, (_, i) => [`p${i}`, { type: 'string', 'x-mcp-header': `P${i}` }])) };
    const stats = JSON.stringify(counts);
    counts[message.method] = (counts[message.method] || 0) + 1;
    if (message.method === 'tools/list') {
      const tools = [tool('meta', { inputSchema: mirrored }), tool('ask'), tool('roots'), tool('forever'), tool('crowded', { inputSchema: crowded }), tool('stats'), tool('grow'), tool('slow'), tool('held'), tool('failing'), tool('asks')];
      if (grown) tools.push(tool('extra'));
      return reply(complete({ tools, ...listHints() }));
    }
    if (message.method.startsWith('tasks/')) {
      const task = tasks.get(message.params?.taskId);
      if (!task) return fail(-32602, `unknown task ${message.params?.taskId}`);
      if (message.method === 'tasks/cancel') { if (task.status === 'working' || task.status === 'input_required') task.status = 'cancelled'; return reply(complete({})); }
      if (message.method === 'tasks/update') {
        const given = message.params.inputResponses?.who;
        if (task.status === 'input_required' && given?.action === 'accept') { task.status = 'completed'; task.result = { content: [{ type: 'text', text: `Hello, ${given.content.name}` }] }; }
        return reply(complete({}));
      }
      if (message.method !== 'tasks/get') return fail(-32601, 'Method not found');
      task.polls++;
      if (task.status === 'working') {
        if (task.tool === 'slow' && task.polls >= Number(settings.polls || 2)) { task.status = 'completed'; task.result = { content: [{ type: 'text', text: `${task.taskId} done after ${task.polls} polls` }] }; }
        if (task.tool === 'failing') task.status = 'failed';
        if (task.tool === 'asks') task.status = 'input_required';
      }
      return reply(complete(taskView(task)));
    }
    if (message.method !== 'tools/call') return fail(-32601, 'Method not found');
    const { name } = message.params;
    if (name === 'stats') return reply(complete({ content: [{ type: 'text', text: stats }] }));
    if (['slow', 'held', 'failing', 'asks'].includes(name)) {
      const capable = meta['io.modelcontextprotocol/clientCapabilities']?.extensions?.['io.modelcontextprotocol/tasks'];
      if (!capable) return reply(complete({ content: [{ type: 'text', text: `${name} without a task` }] }));
      const task = { taskId: `task-${nextTask++}`, tool: name, status: 'working', polls: 0, createdAt: new Date().toISOString() };
      tasks.set(task.taskId, task);
      return reply({ resultType: 'task', ...taskView(task) });
    }
    if (name === 'grow') {
      grown = true;
      for (const [id, notify] of listeners) notify(changedNotice(id));
      return reply(complete({ content: [{ type: 'text', text: 'grown' }] }));
    }
    const responses = message.params.inputResponses || {};
    const state = message.params.requestState;
    if (name === 'meta') return reply(complete({ content: [{ type: 'text', text: JSON.stringify({ meta, headers }) }] }));
    if (name === 'ask') {
      const given = responses.who;
      if (given?.action === 'accept' && state === 'opaque:ask:1') {
        return reply(complete({ content: [{ type: 'text', text: `Hello, ${given.content.name}` }] }));
      }
      if (given && given.action !== 'accept') return reply(complete({ content: [{ type: 'text', text: `no name (${given.action})` }] }));
      return reply({ resultType: 'input_required', requestState: 'opaque:ask:1', inputRequests: { who: { method: 'elicitation/create', params: { mode: 'form', message: 'Your name?', requestedSchema: form } } } });
    }
    if (name === 'roots') {
      if (responses.r) return reply(complete({ content: [{ type: 'text', text: JSON.stringify(responses.r) }] }));
      return reply({ resultType: 'input_required', inputRequests: { r: { method: 'roots/list', params: {} } } });
    }
    if (name === 'forever') return reply({ resultType: 'input_required', requestState: `again-${Math.random()}` });
    return fail(-32602, `no tool ${name}`);
  };
  if (mode === 'modern') {
    const lines = readline.createInterface({ input: process.stdin });
    lines.on('line', (line) => {
      let message;
      try { message = JSON.parse(line); } catch { return; }
      if (message.method === 'notifications/cancelled' && listeners.has(message.params?.requestId)) {
        listeners.delete(message.params.requestId);
        return bump('listen-closed');
      }
      if (message.id === undefined || message.method === undefined) return;
      if (message.method === 'subscriptions/listen') {
        send(ack(message.id));
        listeners.set(message.id, send);
        return bump('subscriptions/listen');
      }
      if (message.method === 'tools/call' && message.params?.name === 'await') return awaitCount(message, send);
      send(answer(message, {}));
    });
    lines.on('close', () => process.exit(0));
  } else {
    const server = http.createServer((request, response) => {
      let data = '';
      request.on('data', (chunk) => { data += chunk; });
      request.on('end', () => {
        if (request.method !== 'POST') { response.writeHead(405); return response.end(); }
        const message = JSON.parse(data || '{}');
        if (message.id === undefined) { response.writeHead(202); return response.end(); }
        const json = (value) => { response.writeHead(200, { 'Content-Type': 'application/json' }); response.end(JSON.stringify(value)); };
        if (message.method === 'tools/call' && message.params?.name === 'await') return awaitCount(message, json);
        if (message.method === 'subscriptions/listen') {
          response.writeHead(200, { 'Content-Type': 'text/event-stream' });
          if (settings.listen === 'drop') { bump('subscriptions/listen'); bump('listen-closed'); return response.end(': opened\n\n'); }
          const event = (value) => response.write(`data: ${JSON.stringify(value)}\n\n`);
          event(ack(message.id));
          // "listen=flood": five notices at once on every stream.
          if (settings.listen === 'flood') for (let i = 0; i < 5; ++i) event(changedNotice(message.id));
          listeners.set(message.id, event);
          response.on('close', () => { listeners.delete(message.id); bump('listen-closed'); });
          return bump('subscriptions/listen');
        }
        const headers = {};
        for (const key of Object.keys(request.headers)) {
          if (['mcp-method', 'mcp-name', 'mcp-protocol-version', 'mcp-session-id'].includes(key) || key.startsWith('mcp-param-')) headers[key] = request.headers[key];
        }
        const reply = answer(message, headers);
        const status = reply.error?.code === -32022 ? 400 : 200;
        response.writeHead(status, { 'Content-Type': 'application/json', 'Mcp-Session-Id': 'not-in-2026' });
        response.end(JSON.stringify(reply));
      });
    });
    server.listen(0, '127.0.0.1', () => fs.writeSync(1, `port ${server.address().port}\n`));
  }
} else {
  process.stderr.write(`unknown mode ${mode}\n`);
  process.exit(2);
}
