#include "service/chat_page.hpp"

#include <string>

#include "parley/event_names.hpp"

namespace parley::service {

namespace {

// The page keeps no state of its own beyond the tab: the thread is in the URL (#t=ID), and the
// last event it handled and the reply streaming in are in sessionStorage, so a reload opens the
// stream after that event (?after=N) and the reply goes on where it was. Messages carry their
// storage index (the thread's "messages" and message_added events both do), so a message the
// page shows already is never added twice; message_added below the thread's storage size when
// it was read is known already.
constexpr std::string_view kPage = R"page(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>parley</title>
<style>
  :root { --fg: #1d1d1f; --muted: #6e6e73; --line: #d2d2d7; --accent: #0a66c2; --bg: #fbfbfd; }
  * { box-sizing: border-box; }
  body { margin: 0; font: 15px/1.45 system-ui, sans-serif; color: var(--fg); background: var(--bg);
         display: grid; grid-template-columns: 260px 1fr; height: 100vh; }
  aside { border-right: 1px solid var(--line); padding: 12px; overflow-y: auto; }
  main { display: flex; flex-direction: column; min-width: 0; height: 100vh; }
  header { padding: 10px 16px; border-bottom: 1px solid var(--line); display: flex; gap: 8px;
           align-items: center; flex-wrap: wrap; }
  header h1 { font-size: 16px; margin: 0 8px 0 0; font-weight: 600; }
  #messages { flex: 1; overflow-y: auto; padding: 16px; }
  .msg { margin: 0 0 12px; padding: 8px 12px; border-radius: 8px; background: #fff;
         border: 1px solid var(--line); max-width: 820px; }
  .msg.user { background: #eef4fb; margin-left: auto; }
  .msg.system { color: var(--muted); font-style: italic; }
  .msg .role { font-size: 12px; color: var(--muted); display: flex; justify-content: space-between; }
  .msg pre { white-space: pre-wrap; word-wrap: break-word; margin: 4px 0 0; font: inherit; }
  .msg details pre { font: 13px/1.4 ui-monospace, monospace; background: #f5f5f7; padding: 6px; }
  .msg.streaming, .msg.pending { border-style: dashed; }
  button { font: inherit; padding: 4px 10px; border: 1px solid var(--line); border-radius: 6px;
           background: #fff; cursor: pointer; }
  button:disabled { opacity: .5; cursor: default; }
  button.link { border: none; background: none; color: var(--accent); padding: 0 4px; }
  #threads { list-style: none; padding: 0; margin: 8px 0; }
  #threads li { padding: 4px 6px; border-radius: 6px; cursor: pointer; overflow: hidden;
                text-overflow: ellipsis; white-space: nowrap; }
  #threads li.fork { padding-left: 20px; }
  #threads li.current { background: #e8e8ed; }
  form#prompt { display: flex; gap: 8px; padding: 12px 16px; border-top: 1px solid var(--line); }
  #input { flex: 1; font: inherit; padding: 8px; border: 1px solid var(--line); border-radius: 6px;
           resize: vertical; min-height: 42px; }
  #status { font-size: 12px; color: var(--muted); padding: 0 16px 8px; min-height: 1.5em; }
  #token-box { display: none; margin-bottom: 8px; }
  #token-box input { width: 100%; }
  .branches { font-size: 13px; color: var(--muted); }
</style>
</head>
<body>
<aside>
  <div id="token-box"><label>Token <input id="token" type="password" autocomplete="off"></label>
    <button id="save-token">Use</button></div>
  <button id="new-thread">New thread</button>
  <ul id="threads"></ul>
</aside>
<main>
  <header>
    <h1 id="title">parley</h1>
    <span class="branches" id="branches"></span>
    <span style="flex:1"></span>
    <button id="clear" disabled title="Clear the context (a context operation)">Clear context</button>
    <button id="undo" disabled title="Undo the last context operation">Undo</button>
  </header>
  <div id="messages"></div>
  <div id="status"></div>
  <form id="prompt"><textarea id="input" placeholder="Ask something" disabled></textarea>
    <button id="send" disabled>Send</button></form>
</main>
<script>
'use strict';
const $ = (id) => document.getElementById(id);
const state = { token: sessionStorage.getItem('parley.token') || '', id: null, thread: null,
                messages: [], known: 0, partial: '', after: 0, source: null, threads: [],
                pending: [] };

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === 'class') e.className = v; else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v);
  }
  for (const c of children) if (c !== null && c !== undefined) e.append(c);
  return e;
}

async function api(method, path, body) {
  const headers = {};
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  if (state.token) headers.Authorization = 'Bearer ' + state.token;
  const r = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await r.text();
  const json = text ? JSON.parse(text) : {};
  if (r.status === 401) { $('token-box').style.display = 'block'; }
  if (!r.ok) throw new Error(json.error ? json.error.message : 'HTTP ' + r.status);
  return json;
}

function status(text) { $('status').textContent = text; }

function saveStream() {
  if (!state.id) return;
  sessionStorage.setItem('parley.stream.' + state.id,
                         JSON.stringify({ after: state.after, partial: state.partial }));
}

function pretty(args) { try { return JSON.stringify(JSON.parse(args), null, 2); } catch { return args; } }

function renderMessages() {
  const box = $('messages');
  box.replaceChildren();
  const all = state.messages;
  const folded = new Set();
  all.forEach((m, i) => {
    if (folded.has(i)) return;
    const role = m.role;
    const div = el('div', { class: 'msg ' + role, 'data-index': m.index });
    if (m.streamed !== undefined) div.setAttribute('data-streamed', m.streamed);
    div.append(el('div', { class: 'role' }, el('span', {}, role),
                  el('button', { class: 'link fork', title: 'Fork the thread after this message',
                                 onclick: () => fork(m.index + 1) }, 'fork here')));
    const text = typeof m.content === 'string' ? m.content : (m.content ? JSON.stringify(m.content) : '');
    if (text) div.append(el('pre', { class: 'content' }, text));
    for (const call of m.tool_calls || []) {
      const name = call.function ? call.function.name : call.name;
      const args = call.function ? call.function.arguments : call.arguments;
      const d = el('details', { class: 'tool-call' },
                   el('summary', {}, 'tool call ', el('code', {}, name), ' ' + call.id),
                   el('pre', { class: 'args' }, pretty(args)));
      // The tool message answering this call, folded here instead of standing alone.
      for (let j = i + 1; j < all.length; ++j) {
        if (!folded.has(j) && all[j].role === 'tool' && all[j].tool_call_id === call.id) {
          folded.add(j);
          d.append(el('div', { class: 'result' }, 'result', el('pre', {}, all[j].content)));
          break;
        }
      }
      div.append(d);
    }
    box.append(div);
  });
  // Prompts sent whose run has not committed them yet.
  for (const text of state.pending) {
    box.append(el('div', { class: 'msg user pending' }, el('div', { class: 'role' }, 'user (queued)'),
                  el('pre', { class: 'content' }, text)));
  }
  if (state.partial) {
    box.append(el('div', { class: 'msg assistant streaming', id: 'partial' },
                  el('div', { class: 'role' }, 'assistant (streaming)'),
                  el('pre', { class: 'content' }, state.partial)));
  }
  box.scrollTop = box.scrollHeight;
  $('undo').disabled = !state.thread || state.thread.batch === 0;
  $('clear').disabled = !state.thread;
}

function renderThreads() {
  const list = $('threads');
  list.replaceChildren();
  const roots = state.threads.filter((t) => !t.parent_id || !state.threads.some((p) => p.id === t.parent_id));
  const add = (t, depth) => {
    list.append(el('li', { class: (depth ? 'fork' : '') + (t.id === state.id ? ' current' : ''),
                           'data-id': t.id, title: t.id, onclick: () => open(t.id) },
                   (t.title || t.id) + ' (' + t.message_count + ')'));
    for (const c of state.threads.filter((x) => x.parent_id === t.id)) add(c, depth + 1);
  };
  roots.forEach((t) => add(t, 0));
  // Branches of the open thread: its parent and its forks.
  const b = $('branches');
  b.replaceChildren();
  if (!state.thread) return;
  if (state.thread.parent_id) {
    b.append('forked from ', el('button', { class: 'link branch parent', onclick: () => open(state.thread.parent_id) },
                                state.thread.parent_id));
  }
  const forks = state.threads.filter((t) => t.parent_id === state.id);
  if (forks.length) {
    b.append(' forks: ');
    for (const f of forks) b.append(el('button', { class: 'link branch fork-of', onclick: () => open(f.id) }, f.id));
  }
}

async function loadThreads() {
  try {
    state.threads = (await api('GET', '/v1/threads?limit=200')).data;
  } catch (e) { status(e.message); }
  renderThreads();
}

function setThread(t) {
  state.thread = t;
  state.messages = t.messages;
  state.known = t.storage_size;
  $('title').textContent = t.title || t.id;
}

function onEvent(type, e) {
  const data = JSON.parse(e.data);
  const p = data.payload || {};
  if (type === 'llm_stream_chunk') {
    state.partial += p.content || '';
  } else if (type === 'message_added') {
    const m = p.message;
    if (m && m.role === 'assistant') {
      if (state.partial) m.streamed = state.partial;
      state.partial = '';
    }
    if (m && m.role === 'user' && state.pending[0] === m.content) state.pending.shift();
    if (m && p.index >= state.known) {
      m.index = p.index;
      state.messages.push(m);
      state.known = p.index + 1;
    }
  } else if (type === 'run_completed' || type === 'run_cancelled') {
    state.partial = '';
    status(type === 'run_completed' ? 'done' : 'cancelled');
    loadThreads();
  } else if (type === 'llm_execution_failed' && !p.cancelled) {
    state.partial = '';
    status('failed: ' + (p.error || ''));
  } else if (type === 'run_queued' || type === 'run_started') {
    status(type === 'run_queued' ? 'queued' : 'working');
  } else if (type === 'tool_execution_request') {
    status('calling ' + p.tool_name);
  }
  state.after = data.seq;
  saveStream();
  renderMessages();
}

const kEventTypes = /*EVENT_TYPES*/[];  // every type of the vocabulary, filled in by the server

function connect() {
  if (state.source) state.source.close();
  let url = '/v1/threads/' + encodeURIComponent(state.id) + '/events?after=' + state.after;
  if (state.token) url += '&access_token=' + encodeURIComponent(state.token);
  const source = new EventSource(url);
  for (const type of kEventTypes) source.addEventListener(type, (e) => onEvent(type, e));
  // Any other type only moves the position on.
  source.onmessage = (e) => { state.after = Number(e.lastEventId) || state.after; saveStream(); };
  source.onerror = () => { if (source.readyState === EventSource.CLOSED) status('stream closed'); };
  state.source = source;
}

async function open(id) {
  if (state.source) { state.source.close(); state.source = null; }
  state.id = id;
  state.pending = [];
  if (location.hash !== '#t=' + encodeURIComponent(id)) history.replaceState(null, '', '#t=' + encodeURIComponent(id));
  const saved = JSON.parse(sessionStorage.getItem('parley.stream.' + id) || 'null');
  state.after = saved ? saved.after : 0;
  state.partial = saved ? saved.partial : '';
  try {
    setThread(await api('GET', '/v1/threads/' + encodeURIComponent(id)));
  } catch (e) { status(e.message); return; }
  $('input').disabled = false;
  $('send').disabled = false;
  renderMessages();
  renderThreads();
  connect();
}

async function fork(position) {
  try {
    const t = await api('POST', '/v1/threads/' + encodeURIComponent(state.id) + '/fork', { position });
    await loadThreads();
    await open(t.id);
  } catch (e) { status(e.message); }
}

async function operate(op) {
  try {
    setThread(await api('POST', '/v1/threads/' + encodeURIComponent(state.id) + '/operations', op));
    renderMessages();
  } catch (e) { status(e.message); }
}

$('new-thread').onclick = async () => {
  try {
    const t = await api('POST', '/v1/threads', {});
    await loadThreads();
    await open(t.id);
  } catch (e) { status(e.message); }
};
$('undo').onclick = () => operate({ operation: 'undo' });
$('clear').onclick = () => operate({ operation: 'clear' });
$('save-token').onclick = () => {
  state.token = $('token').value;
  sessionStorage.setItem('parley.token', state.token);
  $('token-box').style.display = 'none';
  loadThreads();
  if (state.id) open(state.id);
};
$('prompt').onsubmit = async (ev) => {
  ev.preventDefault();
  const input = $('input').value.trim();
  if (!input || !state.id) return;
  $('input').value = '';
  state.pending.push(input);  // before the run exists, so its message_added cannot come first
  renderMessages();
  try {
    await api('POST', '/v1/threads/' + encodeURIComponent(state.id) + '/runs', { input, policy: 'enqueue' });
  } catch (e) {
    state.pending.splice(state.pending.indexOf(input), 1);
    renderMessages();
    status(e.message);
  }
};
$('input').addEventListener('keydown', (ev) => {
  if (ev.key === 'Enter' && !ev.shiftKey) { ev.preventDefault(); $('prompt').requestSubmit(); }
});

(async () => {
  await loadThreads();
  const m = /^#t=(.+)$/.exec(location.hash);
  if (m) await open(decodeURIComponent(m[1]));
})();
</script>
</body>
</html>
)page";

}  // namespace

std::string_view chatPage() {
  // The stream's event names come from the one table (event_names.hpp), not a list of the page's.
  static const std::string page = [] {
    std::string names = "[";
    for (EventType type : allEventTypes()) {
      names += (names.size() > 1 ? ", '" : "'") + std::string(eventName(type)) + "'";
    }
    names += "]";
    std::string text(kPage);
    const std::string marker = "/*EVENT_TYPES*/[]";
    text.replace(text.find(marker), marker.size(), names);
    return text;
  }();
  return page;
}

}  // namespace parley::service
