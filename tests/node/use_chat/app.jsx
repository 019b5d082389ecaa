// A minimal chat page on the AI SDK's useChat (@ai-sdk/react), as an application would write it
// against `parley serve`'s UI message stream (docs/service.md, "UI streams"): the thread is the
// chat id, its history is read once from GET /v1/threads/{id} (and a run's under way), a stream under way is resumed
// (resume: true), and a tool call that needs approval is approved with a button. Bundled by
// esbuild at test time (use_chat.mjs); no CDN.
import React, { useEffect, useState } from 'react';
import { createRoot } from 'react-dom/client';
import { useChat } from '@ai-sdk/react';
import { DefaultChatTransport, lastAssistantMessageIsCompleteWithApprovalResponses } from 'ai';

const params = new URLSearchParams(location.search);
const base = params.get('base');
const chatId = params.get('chat');

const text = (id, role, words) => ({ id, role, parts: [{ type: 'text', text: words }] });
const get = async (path) => {
  const res = await fetch(`${base}${path}`);
  if (!res.ok) throw new Error(`${path}: HTTP ${res.status}`);
  return res.json();
};

// The thread's visible messages as UIMessages (the text of the user's and the model's), then
// the input of a run still under way: a turn is stored when its run ends, so a reload in the
// middle of a reply finds its prompt there (GET /v1/runs/{id}), and the reply by resuming.
async function history() {
  const thread = await fetch(`${base}/v1/threads/${encodeURIComponent(chatId)}`);
  if (thread.status === 404) return [];
  if (!thread.ok) throw new Error(`history: HTTP ${thread.status}`);
  const out = (await thread.json()).messages
    .filter((m) => (m.role === 'user' || m.role === 'assistant') && typeof m.content === 'string' && m.content)
    .map((m) => text(`h-${m.index}`, m.role, m.content));
  const runs = await get(`/v1/threads/${encodeURIComponent(chatId)}/runs`);
  for (const run of runs.data.filter((r) => ['queued', 'running', 'waiting'].includes(r.status))) {
    const full = await get(`/v1/runs/${run.run}`);
    full.input.forEach((m, i) => {
      if (m.role === 'user' && typeof m.content === 'string') out.push(text(`in-${run.run}-${i}`, 'user', m.content));
    });
  }
  return out;
}

function Part({ part, approve }) {
  if (part.type === 'text') return <span className="text">{part.text}</span>;
  if (!part.type.startsWith('tool-')) return null;
  return (
    <div className="tool" data-name={part.type.slice(5)} data-state={part.state}>
      <code>{part.type.slice(5)}</code> <span className="input">{JSON.stringify(part.input)}</span>
      {part.state === 'approval-requested' && (
        <button className="approve" onClick={() => approve({ id: part.approval.id, approved: true })}>
          Approve
        </button>
      )}
      {part.state === 'output-available' && <pre className="output">{JSON.stringify(part.output)}</pre>}
    </div>
  );
}

function Chat({ initial }) {
  const [error, setError] = useState('');
  const { messages, sendMessage, status, addToolApprovalResponse } = useChat({
    id: chatId,
    messages: initial,
    resume: true,
    transport: new DefaultChatTransport({ api: `${base}/v1/ui/chat` }),
    sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses,
    onError: (e) => setError(String(e && e.message ? e.message : e)),
  });
  const [input, setInput] = useState('');
  return (
    <main>
      <div id="status" data-status={status}>{status}</div>
      {error && <div id="error">{error}</div>}
      <div id="messages">
        {messages.map((m) => (
          <div key={m.id} className={`msg ${m.role}`} data-id={m.id}>
            {m.parts.map((p, i) => <Part key={i} part={p} approve={addToolApprovalResponse} />)}
          </div>
        ))}
      </div>
      <form
        onSubmit={(e) => {
          e.preventDefault();
          if (!input.trim()) return;
          sendMessage({ text: input });
          setInput('');
        }}
      >
        <input id="input" value={input} onChange={(e) => setInput(e.target.value)} />
        <button id="send" type="submit" disabled={status !== 'ready'}>Send</button>
      </form>
    </main>
  );
}

function App() {
  const [initial, setInitial] = useState(null);
  const [failed, setFailed] = useState('');
  useEffect(() => {
    history().then(setInitial, (e) => setFailed(e.message));
  }, []);
  if (failed) return <div id="error">{failed}</div>;
  if (!initial) return <div id="loading">loading</div>;
  return <Chat initial={initial} />;
}

createRoot(document.getElementById('root')).render(<App />);
