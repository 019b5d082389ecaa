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
  #search { width: 100%; margin-top: 8px; font: inherit; padding: 4px 6px;
            border: 1px solid var(--line); border-radius: 6px; }
  #more-threads { display: none; }
  #more-threads.shown { display: inline-block; }
  #token-box { display: none; margin-bottom: 8px; }
  #token-box input { width: 100%; }
  .branches { font-size: 13px; color: var(--muted); }
  .msg .content { margin: 4px 0 0; overflow-wrap: anywhere; }
  .msg .content p { margin: 0 0 8px; }
  .msg .content p:last-child { margin-bottom: 0; }
  .msg .content code { font: 13px ui-monospace, monospace; background: #f0f0f3; padding: 0 3px;
                       border-radius: 3px; }
  .msg .content blockquote { margin: 4px 0; padding-left: 10px; border-left: 3px solid var(--line);
                             color: var(--muted); }
  .codeblock { position: relative; margin: 6px 0; }
  .codeblock pre { margin: 0; padding: 8px; background: #f5f5f7; border-radius: 6px;
                   overflow-x: auto; white-space: pre; font: 13px/1.4 ui-monospace, monospace; }
  .codeblock pre code { background: none; padding: 0; }
  .codeblock .copy { position: absolute; top: 4px; right: 4px; font-size: 12px; padding: 1px 6px; }
  .msg .meta { font-size: 12px; color: var(--muted); margin-top: 4px; }
  .msg .actions button.link { font-size: 12px; }
  #interrupt { display: none; margin: 0 16px 8px; padding: 8px 12px; border: 1px solid #e0b252;
               background: #fff8e6; border-radius: 8px; }
  #interrupt.shown { display: block; }
  #interrupt input { width: 60%; }
  #menu { display: none; }
  #stop { display: none; }
  #stop.shown { display: inline-block; }
  select#model { font: inherit; padding: 3px; }
  @media (max-width: 700px) {
    body { grid-template-columns: 1fr; }
    aside { display: none; position: fixed; z-index: 10; top: 0; bottom: 0; left: 0;
            width: min(85vw, 300px); background: var(--bg); box-shadow: 0 0 24px rgba(0,0,0,.25); }
    body.menu-open aside { display: block; }
    #menu { display: inline-block; }
    header { padding: 8px; }
    #messages { padding: 8px; }
    form#prompt { padding: 8px; }
  }
</style>
</head>
<body>
<aside>
  <div id="token-box"><label>Token <input id="token" type="password" autocomplete="off"></label>
    <button id="save-token">Use</button></div>
  <button id="new-thread">New thread</button>
  <button id="delete-thread" disabled title="Delete the open thread">Delete</button>
  <input id="search" type="search" placeholder="Search threads" autocomplete="off">
  <ul id="threads"></ul>
  <button id="more-threads" class="link">More</button>
</aside>
<main>
  <header>
    <button id="menu" title="Threads" aria-label="Threads">&#9776;</button>
    <h1 id="title">parley</h1>
    <button id="rename" class="link" disabled title="Rename the thread">rename</button>
    <span class="branches" id="branches"></span>
    <span style="flex:1"></span>
    <button id="clear" disabled title="Clear the context (a context operation)">Clear context</button>
    <button id="undo" disabled title="Undo the last context operation">Undo</button>
  </header>
  <div id="messages"></div>
  <div id="interrupt"><div id="interrupt-prompt"></div>
    <span id="interrupt-approval"><button id="approve">Approve</button> <button id="deny">Deny</button></span>
    <span id="interrupt-answer"><input id="answer" autocomplete="off"> <button id="send-answer">Answer</button></span></div>
  <div id="status"></div>
  <form id="prompt"><textarea id="input" placeholder="Ask something" disabled></textarea>
    <select id="model" title="The model (a profile of the workers)"></select>
    <button id="send" disabled>Send</button>
    <button id="stop" type="button" title="Stop the reply (cancels the run)">Stop</button></form>
</main>
<script>
'use strict';
const $ = (id) => document.getElementById(id);
const state = { token: sessionStorage.getItem('parley.token') || '', id: null, thread: null,
                messages: [], known: 0, partial: '', after: 0, source: null, threads: [],
                pending: [], run: null, waiting: null, shown: 50, more: false };
// The thread list: the server sorts (newest first, by the last turn), searches (title or id) and
// pages it (GET /v1/threads?order=newest&q=); 50 more per "More", up to the server's page cap.
const kThreadsShown = 50;
const kMaxThreadsShown = 1000;

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
  // The messages the run announced that the thread does not hold yet (its input, written to the
  // log before the model call): a reload mid-run shows them again.
  const uncommitted = state.messages.filter((m) => m.index >= state.stored);
  sessionStorage.setItem('parley.stream.' + state.id,
                         JSON.stringify({ after: state.after, partial: state.partial, uncommitted }));
}

// Markdown to DOM nodes, never to HTML: text only ever becomes text nodes, so no markup a model
// or a tool writes can run; only these constructs become elements: fenced code blocks (with a
// copy button), headings, lists, block quotes, paragraphs, and inline `code`, **bold**,
// *italic* and [links](http or https URLs only).
const kListItem = /^\s*(?:[-*+]|\d+[.)])\s+/;
function isBlockStart(line) {
  return /^\s*```/.test(line) || /^#{1,6}\s/.test(line) || kListItem.test(line) || /^>/.test(line);
}
function markdown(text) {
  const root = document.createElement('div');
  const lines = text.split('\n');
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    const fence = /^\s*```\s*([\w+#.-]*)\s*$/.exec(line);
    if (fence) {
      const code = [];
      for (++i; i < lines.length && !/^\s*```\s*$/.test(lines[i]); ++i) code.push(lines[i]);
      ++i;
      root.append(codeBlock(code.join('\n'), fence[1]));
      continue;
    }
    const heading = /^(#{1,6})\s+(.*)$/.exec(line);
    if (heading) {
      const h = document.createElement('h' + Math.min(heading[1].length + 2, 6));
      inline(h, heading[2]);
      root.append(h);
      ++i;
      continue;
    }
    if (kListItem.test(line)) {
      const list = document.createElement(/^\s*\d/.test(line) ? 'ol' : 'ul');
      for (; i < lines.length && kListItem.test(lines[i]); ++i) {
        const li = document.createElement('li');
        inline(li, lines[i].replace(kListItem, ''));
        list.append(li);
      }
      root.append(list);
      continue;
    }
    if (/^>/.test(line)) {
      const quote = [];
      while (i < lines.length && /^>/.test(lines[i])) quote.push(lines[i++].replace(/^>\s?/, ''));
      const q = document.createElement('blockquote');
      q.append(...markdown(quote.join('\n')).childNodes);
      root.append(q);
      continue;
    }
    if (!line.trim()) { ++i; continue; }
    const p = document.createElement('p');
    for (let first = true; i < lines.length && lines[i].trim() && (first || !isBlockStart(lines[i])); first = false) {
      if (!first) p.append(document.createElement('br'));
      inline(p, lines[i++]);
    }
    root.append(p);
  }
  return root;
}
function inline(parent, text) {
  const re = /(`+)([^`]+?)\1|\*\*([^*]+)\*\*|\*([^*\s][^*]*)\*|\[([^\]]+)\]\(([^)\s]+)\)/g;
  let last = 0;
  for (let m; (m = re.exec(text));) {
    if (m.index > last) parent.append(text.slice(last, m.index));
    if (m[1]) {
      parent.append(el('code', {}, m[2]));
    } else if (m[3] !== undefined || m[4] !== undefined) {
      const e = document.createElement(m[3] !== undefined ? 'strong' : 'em');
      inline(e, m[3] !== undefined ? m[3] : m[4]);
      parent.append(e);
    } else if (/^https?:\/\//i.test(m[6])) {
      parent.append(el('a', { href: m[6], rel: 'noopener noreferrer nofollow', target: '_blank' }, m[5]));
    } else {
      parent.append(m[0]);  // any other scheme (javascript:, data:) stays text
    }
    last = re.lastIndex;
  }
  if (last < text.length) parent.append(text.slice(last));
}
function codeBlock(code, lang) {
  const copy = el('button', { class: 'copy', type: 'button', title: 'Copy the code' }, 'copy');
  copy.onclick = async () => {
    try { await navigator.clipboard.writeText(code); copy.textContent = 'copied'; }
    catch { copy.textContent = 'copy failed'; }
    setTimeout(() => { copy.textContent = 'copy'; }, 1500);
  };
  return el('div', { class: 'codeblock' }, copy,
            el('pre', {}, el('code', lang ? { 'data-lang': lang } : {}, code)));
}
function content(text, role) {
  if (role !== 'assistant') return el('pre', { class: 'content' }, text);
  const box = markdown(text);
  box.className = 'content';
  return box;
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
    const actions = el('span', { class: 'actions' },
                       el('button', { class: 'link fork', title: 'Fork the thread after this message',
                                      onclick: () => fork(m.index + 1) }, 'fork here'));
    const text = typeof m.content === 'string' ? m.content : (m.content ? JSON.stringify(m.content) : '');
    if (role === 'user') {
      // Both make a fork before this message and send again: the thread itself is never rewritten.
      actions.append(el('button', { class: 'link edit', title: 'Edit this message (a fork)',
                                    onclick: () => edit(m, text) }, 'edit'));
    }
    if (role === 'assistant' && !(m.tool_calls || []).length) {
      const asked = lastUserBefore(i);
      if (asked) {
        actions.append(el('button', { class: 'link regenerate', title: 'Answer again (a fork)',
                                      onclick: () => resend(asked.index, asked.content) }, 'regenerate'));
      }
    }
    div.append(el('div', { class: 'role' }, el('span', {}, role), actions));
    if (text) div.append(content(text, role));
    if (m.usage) {
      const u = m.usage;
      div.append(el('div', { class: 'meta usage' }, (m.model ? m.model + ' · ' : '') +
                    u.prompt_tokens + ' in · ' + u.completion_tokens + ' out tokens' +
                    (m.cost && m.cost.usd !== null ? ' · ' + m.cost.text : '')));
    }
    for (const call of serverToolCalls(m)) {
      const d = el('details', { class: 'server-tool' },
                   el('summary', {}, 'provider tool ', el('code', {}, call.name), ' ' + serverToolSummary(call)),
                   el('pre', { class: 'args' }, JSON.stringify(call.input, null, 2)));
      if (call.result) d.append(el('div', { class: 'result' }, 'result', el('pre', {}, JSON.stringify(call.result, null, 2))));
      div.append(d);
    }
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
                  content(state.partial, 'assistant')));
  }
  box.scrollTop = box.scrollHeight;
  priceReplies();
  $('undo').disabled = !state.thread || state.thread.batch === 0;
  $('clear').disabled = !state.thread;
  $('delete-thread').disabled = !state.thread;
  $('stop').classList.toggle('shown', !!state.run);
  renderInterrupt();
}

// The cost of the replies not priced yet, by the service's price table (POST /v1/costs).
let pricing = false;
async function priceReplies() {
  const todo = state.messages.filter((m) => m.usage && m.model && m.cost === undefined).slice(0, 1000);
  if (!todo.length || pricing) return;
  pricing = true;
  try {
    const r = await api('POST', '/v1/costs', { replies: todo.map((m) => ({ model: m.model, usage: m.usage })) });
    todo.forEach((m, i) => { m.cost = r.costs[i]; });
  } catch (e) {
    todo.forEach((m) => { m.cost = null; });
  } finally {
    pricing = false;
  }
  renderMessages();
}

// Tools the provider ran (web search, code execution, ...), read from the content the reply kept
// as server_tools.hpp's serverToolCallsOf() reads it: Anthropic's server_tool_use and
// mcp_tool_use blocks with their *_tool_result blocks, Responses' *_call output items.
const kClientItems = ['function_call', 'custom_tool_call', 'local_shell_call', 'shell_call',
                      'apply_patch_call', 'computer_call'];
function serverToolCalls(m) {
  const calls = [];
  if (m.role !== 'assistant') return calls;
  for (const b of Array.isArray(m.anthropic_content) ? m.anthropic_content : []) {
    if (!b || typeof b !== 'object') continue;
    if (b.type === 'server_tool_use' || b.type === 'mcp_tool_use') {
      calls.push({ id: b.id, name: b.name, input: b.input || {}, result: null, status: '' });
    } else if (typeof b.type === 'string' && b.type !== 'tool_result' && b.type.endsWith('_tool_result')) {
      for (const c of calls) if (c.id === b.tool_use_id) c.result = b;
    }
  }
  for (const it of Array.isArray(m.response_output) ? m.response_output : []) {
    if (!it || typeof it.type !== 'string' || !it.type.endsWith('_call') || it.type.length <= 5 ||
        kClientItems.includes(it.type)) continue;
    const input = {};
    for (const [k, v] of Object.entries(it)) {
      if (!['id', 'type', 'status', 'result', 'output', 'outputs', 'results', 'error'].includes(k)) input[k] = v;
    }
    calls.push({ id: it.id, name: it.type.slice(0, -5), input, result: it, status: it.status || '' });
  }
  return calls;
}
// The one-line summary (history_export.hpp's serverToolSummary): the query, URL or code's first line.
function serverToolSummary(call) {
  const i = call.input || {};
  let what = '';
  for (const k of ['query', 'url', 'pattern', 'command', 'code', 'queries']) {
    if (i[k] !== undefined) { what = typeof i[k] === 'string' ? i[k] : JSON.stringify(i[k]); break; }
  }
  if (!what && i.action && typeof i.action === 'object') what = i.action.query || i.action.url || '';
  if (!what) what = Object.keys(i).length ? JSON.stringify(i) : '';
  if (what.includes('\n')) what = what.slice(0, what.indexOf('\n')) + ' ...';
  if (what.length > 100) what = what.slice(0, 100) + '...';
  if (call.status && call.status !== 'completed') what += ' (' + call.status + ')';
  return what;
}

function lastUserBefore(i) {
  for (let j = i - 1; j >= 0; --j) if (state.messages[j].role === 'user') return state.messages[j];
  return null;
}

// What the run waits for (a tool approval, a question), answered here.
function renderInterrupt() {
  const w = state.waiting;
  $('interrupt').classList.toggle('shown', !!w);
  if (!w) return;
  $('interrupt-prompt').textContent = w.prompt || ('The run waits for ' + (w.tool || 'an answer'));
  $('interrupt-approval').style.display = w.kind === 'approval' ? '' : 'none';
  $('interrupt-answer').style.display = w.kind === 'approval' ? 'none' : '';
}

async function respond(response) {
  const run = state.waiting && state.waiting.run;
  if (!run) return;
  try {
    await api('POST', '/v1/runs/' + encodeURIComponent(run) + '/respond', { response });
    state.waiting = null;
    renderInterrupt();
  } catch (e) { status(e.message); }
}

function renderThreads() {
  const list = $('threads');
  list.replaceChildren();
  const query = $('search').value.trim();
  const byId = new Map(state.threads.map((t) => [t.id, t]));
  const newest = (a, b) => (b.updated_at || '').localeCompare(a.updated_at || '');
  const children = new Map();
  for (const t of state.threads) {
    if (t.parent_id && byId.has(t.parent_id)) {
      if (!children.has(t.parent_id)) children.set(t.parent_id, []);
      children.get(t.parent_id).push(t);
    }
  }
  // A searched thread is shown on its own; else forks under their parent.
  const roots = state.threads.filter((t) => query || !t.parent_id || !byId.has(t.parent_id)).sort(newest);
  let count = 0;
  const add = (t, depth) => {
    if (count >= state.shown) return;
    ++count;
    list.append(el('li', { class: (depth ? 'fork' : '') + (t.id === state.id ? ' current' : ''),
                           'data-id': t.id, title: t.id, onclick: () => open(t.id) },
                   (t.title || t.id) + ' (' + t.message_count + ')'));
    if (!query) for (const c of (children.get(t.id) || []).sort(newest)) add(c, depth + 1);
  };
  roots.forEach((t) => add(t, 0));
  $('more-threads').classList.toggle('shown', state.more && state.shown < kMaxThreadsShown);
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
    const query = $('search').value.trim();
    const page = await api('GET', '/v1/threads?order=newest&limit=' + state.shown +
                                  (query ? '&q=' + encodeURIComponent(query) : ''));
    if (query !== $('search').value.trim()) return;  // typed on meanwhile: a newer load follows
    state.threads = page.data;
    state.more = page.has_more;
  } catch (e) { status(e.message); }
  renderThreads();
}

function setThread(t) {
  state.thread = t;
  state.messages = t.messages;
  state.known = t.storage_size;
  state.stored = t.storage_size;
  $('title').textContent = t.title || t.id;
  $('rename').disabled = false;
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
    state.run = null;
    state.waiting = null;
    status(type === 'run_completed' ? 'done' : 'cancelled');
    loadThreads();
  } else if (type === 'llm_execution_failed' && !p.cancelled) {
    state.partial = '';
    state.run = null;
    state.waiting = null;
    status('failed: ' + (p.error || ''));
  } else if (type === 'run_queued' || type === 'run_started') {
    state.run = data.run;
    status(type === 'run_queued' ? 'queued' : 'working');
  } else if (type === 'run_waiting') {
    state.waiting = Object.assign({ run: data.run }, p.wait || {});
    status('waiting for you');
  } else if (type === 'run_responded') {
    state.waiting = null;
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
  document.body.classList.remove('menu-open');
  if (state.source) { state.source.close(); state.source = null; }
  state.id = id;
  state.pending = [];
  state.run = null;
  state.waiting = null;
  if (location.hash !== '#t=' + encodeURIComponent(id)) history.replaceState(null, '', '#t=' + encodeURIComponent(id));
  const saved = JSON.parse(sessionStorage.getItem('parley.stream.' + id) || 'null');
  state.after = saved ? saved.after : 0;
  state.partial = saved ? saved.partial : '';
  try {
    setThread(await api('GET', '/v1/threads/' + encodeURIComponent(id)));
  } catch (e) { status(e.message); return; }
  for (const m of (saved && saved.uncommitted) || []) {
    if (m.index >= state.known) { state.messages.push(m); state.known = m.index + 1; }
  }
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

async function submit(id, input) {
  const body = { input, policy: 'enqueue' };
  if ($('model').value) body.profile = $('model').value;
  await api('POST', '/v1/threads/' + encodeURIComponent(id) + '/runs', body);
}

// A fork holding the messages before storage index `index`, then `text` sent on it.
async function resend(index, text) {
  try {
    const t = await api('POST', '/v1/threads/' + encodeURIComponent(state.id) + '/fork', { position: index });
    await loadThreads();
    await open(t.id);
    state.pending.push(text);
    renderMessages();
    await submit(t.id, text);
  } catch (e) { status(e.message); }
}

function edit(m, text) {
  const changed = prompt('Edit the message (the thread forks before it):', text);
  if (changed && changed.trim()) resend(m.index, changed.trim());
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
$('delete-thread').onclick = async () => {
  if (!state.id || !confirm('Delete this thread, its runs and its events?')) return;
  try {
    await api('DELETE', '/v1/threads/' + encodeURIComponent(state.id));
    if (state.source) { state.source.close(); state.source = null; }
    state.id = null;
    state.thread = null;
    state.messages = [];
    history.replaceState(null, '', '#');
    $('title').textContent = 'parley';
    $('input').disabled = true;
    $('send').disabled = true;
    renderMessages();
    await loadThreads();
  } catch (e) { status(e.message); }
};
$('menu').onclick = () => document.body.classList.toggle('menu-open');
let searchTimer = null;
$('search').oninput = () => {
  state.shown = kThreadsShown;
  clearTimeout(searchTimer);
  searchTimer = setTimeout(loadThreads, 150);
};
$('more-threads').onclick = () => { state.shown += kThreadsShown; loadThreads(); };
$('rename').onclick = async () => {
  const title = prompt('Rename the thread:', (state.thread && state.thread.title) || '');
  if (title === null || !state.id) return;
  try {
    const t = await api('PATCH', '/v1/threads/' + encodeURIComponent(state.id), { title: title.trim() });
    state.thread.title = t.title;
    $('title').textContent = t.title || t.id;
    await loadThreads();
  } catch (e) { status(e.message); }
};
$('stop').onclick = async () => {
  if (!state.run) return;
  try { await api('POST', '/v1/runs/' + encodeURIComponent(state.run) + '/cancel', {}); } catch (e) { status(e.message); }
};
$('approve').onclick = () => respond({ approved: true });
$('deny').onclick = () => respond({ approved: false });
$('send-answer').onclick = () => { if ($('answer').value.trim()) respond($('answer').value.trim()); };
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
    if (state.thread && !state.thread.title && !state.messages.length) {
      // An untitled thread takes its title from its first prompt.
      setThread(Object.assign(state.thread, await api('PATCH', '/v1/threads/' + encodeURIComponent(state.id),
                                                     { title_from: input }), { messages: state.messages }));
      loadThreads();
    }
    await submit(state.id, input);
  } catch (e) {
    state.pending.splice(state.pending.indexOf(input), 1);
    renderMessages();
    status(e.message);
  }
};
$('input').addEventListener('keydown', (ev) => {
  if (ev.key === 'Enter' && !ev.shiftKey) { ev.preventDefault(); $('prompt').requestSubmit(); }
});

async function loadModels() {
  try {
    const models = (await api('GET', '/v1/models')).data;
    $('model').replaceChildren(...models.map((m) => el('option', { value: m.id }, m.id)));
    $('model').style.display = models.length > 1 ? '' : 'none';
  } catch (e) { $('model').style.display = 'none'; }
}

// Back, forward and a link to #t=ID open that thread.
window.addEventListener('hashchange', () => {
  const m = /^#t=(.+)$/.exec(location.hash);
  if (m && decodeURIComponent(m[1]) !== state.id) open(decodeURIComponent(m[1]));
});

(async () => {
  await loadModels();
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
