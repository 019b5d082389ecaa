// A chat page on LangGraph's useStream (@langchain/langgraph-sdk/react) written the way
// LangGraph's Agent Chat UI uses it, at the versions its lock file pins (package.json): the
// server is checked with GET /info first, the graph's threads are listed by
// threads.search({metadata: {graph_id}}), each message is submitted with streamMode ["values"],
// streamSubgraphs and streamResumable, and the whole history is fetched (fetchStateHistory: true,
// so useStream sends the thread's latest checkpoint with every run). A tool approval is shown
// when the interrupt carries LangChain's human-in-the-loop request, and answered with
// command.resume {decisions: [...]} as Agent Chat UI does; a reply is regenerated and a message
// edited from the state before it, as its buttons do. Bundled by esbuild at test time
// (use_stream.mjs); no CDN.
import React, { useCallback, useEffect, useState } from 'react';
import { createRoot } from 'react-dom/client';
import { Client } from '@langchain/langgraph-sdk';
import { useStream } from '@langchain/langgraph-sdk/react';

const params = new URLSearchParams(location.search);
const apiUrl = params.get('apiUrl');
const apiKey = params.get('apiKey');
const assistantId = 'agent';

const textOf = (content) => (typeof content === 'string' ? content
  : (content || []).filter((c) => c.type === 'text').map((c) => c.text).join(''));

function isApprovalRequest(interrupt) {
  const value = interrupt && interrupt.value;
  return !!value && Array.isArray(value.action_requests) && value.action_requests.length > 0 &&
    Array.isArray(value.review_configs) && value.review_configs.length > 0;
}

function Chat({ threadId, setThreadId }) {
  const [threads, setThreads] = useState([]);
  const [input, setInput] = useState('');
  const listThreads = useCallback(async () => {
    const client = new Client({ apiUrl, apiKey });
    setThreads(await client.threads.search({ metadata: { graph_id: assistantId }, limit: 100 }));
  }, []);
  const stream = useStream({
    apiUrl,
    apiKey,
    assistantId,
    threadId,
    fetchStateHistory: true,
    onThreadId: setThreadId,
  });
  useEffect(() => {
    if (!stream.isLoading) listThreads().catch((e) => console.error(e));
  }, [stream.isLoading, threadId, listThreads]);

  const send = (e) => {
    e.preventDefault();
    if (!input.trim() || stream.isLoading) return;
    const human = { id: crypto.randomUUID(), type: 'human', content: [{ type: 'text', text: input }] };
    stream.submit({ messages: [human] }, {
      streamMode: ['values'],
      streamSubgraphs: true,
      streamResumable: true,
      optimisticValues: (prev) => ({ ...prev, messages: [...(prev.messages ?? []), human] }),
    });
    setInput('');
  };
  const decide = (decision) => stream.submit({}, { command: { resume: { decisions: [decision] } } });
  // As Agent Chat UI does: the state before a message (its first state's parent) is where a reply
  // is regenerated (no input) and a message of the user's edited (the new text).
  const parentOf = (m) => stream.getMessagesMetadata(m)?.firstSeenState?.parent_checkpoint;
  const again = { streamMode: ['values'], streamSubgraphs: true, streamResumable: true };
  const regenerate = (m) => stream.submit(undefined, { checkpoint: parentOf(m), ...again });
  const edit = (m) => {
    stream.submit({ messages: [{ type: 'human', content: input }] }, { checkpoint: parentOf(m), ...again });
    setInput('');
  };
  const interrupt = stream.interrupt;

  return (
    <main>
      <div id="status" data-loading={String(stream.isLoading)}>{stream.isLoading ? 'loading' : 'ready'}</div>
      {stream.error && <div id="error">{String(stream.error.message || stream.error)}</div>}
      <ul id="threads">
        {threads.map((t) => <li key={t.thread_id} data-id={t.thread_id}>{t.thread_id}</li>)}
      </ul>
      <div id="messages">
        {stream.messages.map((m) => (
          <div key={m.id} className={`msg ${m.type}`}>
            <span className="text">{textOf(m.content)}</span>
            {(m.tool_calls || []).map((c) => <code key={c.id} className="call">{c.name}</code>)}
            {m.type === 'ai' && <button className="regenerate" onClick={() => regenerate(m)}>Regenerate</button>}
            {m.type === 'human' && <button className="edit" onClick={() => edit(m)}>Edit</button>}
          </div>
        ))}
      </div>
      {interrupt && isApprovalRequest(interrupt) && (
        <div id="approval" data-tool={interrupt.value.action_requests[0].name}>
          <pre className="args">{JSON.stringify(interrupt.value.action_requests[0].args)}</pre>
          <button id="approve" onClick={() => decide({ type: 'approve' })}>Approve</button>
          <button id="reject" onClick={() => decide({ type: 'reject', message: 'not now' })}>Reject</button>
        </div>
      )}
      <form onSubmit={send}>
        <input id="input" value={input} onChange={(e) => setInput(e.target.value)} />
        <button id="send" type="submit">Send</button>
        <button id="stop" type="button" onClick={() => stream.stop()}>Stop</button>
      </form>
    </main>
  );
}

function App() {
  const [server, setServer] = useState('checking');
  const [threadId, setThreadIdState] = useState(params.get('threadId'));
  const setThreadId = (id) => {
    setThreadIdState(id);
    const url = new URL(location.href);
    url.searchParams.set('threadId', id);
    history.replaceState(null, '', url);
  };
  useEffect(() => {
    fetch(`${apiUrl}/info`, { headers: { 'X-Api-Key': apiKey } })
      .then((res) => setServer(res.ok ? 'ok' : `HTTP ${res.status}`), (e) => setServer(String(e)));
  }, []);
  return (
    <>
      <div id="server">{server}</div>
      <Chat threadId={threadId} setThreadId={setThreadId} />
    </>
  );
}

createRoot(document.getElementById('root')).render(<App />);
