#!/usr/bin/env python3
# Usage: bench/serve_protocols.py BUILD/apps/parley/parley [RUNS] [STREAMS] [SERVE_FLAG...]
# (docs/service.md, "Measured"; SERVE_FLAGs go to every `parley serve`, e.g. `--stream-threads 0`
# for a thread per stream). Against `parley serve --workers 1` and its zero-latency demo agent: submit (or
# create) + stream + complete, p50 and p90 over RUNS sequential requests through each protocol
# (the native routes, the LangGraph API on the default assistant and on a created one, Chat
# Completions, Responses, the AI SDK UI stream, AG-UI); then, against a service without workers
# (so every run stays queued and every stream open), the RSS of `parley serve` per open stream,
# over STREAMS streaming chat completions and STREAMS LangGraph run streams.
import http.client, json, os, socket, statistics, subprocess, sys, tempfile, time

binary = sys.argv[1]
runs = int(sys.argv[2]) if len(sys.argv) > 2 else 200
streams = int(sys.argv[3]) if len(sys.argv) > 3 else 300
extra = sys.argv[4:]


def serve(args):
    d = tempfile.mkdtemp()
    p = subprocess.Popen([binary, 'serve', '--db', os.path.join(d, 'bench.db'), '--port', '0'] + args + extra,
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    base = p.stdout.readline().strip()
    host, port = base.split('//')[1].split(':')
    return p, host, int(port)


def request(conn, method, path, body=None, headers=None):
    h = {'Content-Type': 'application/json'}
    h.update(headers or {})
    conn.request(method, path, body=json.dumps(body) if body is not None else None, headers=h)
    return conn.getresponse()


def read_until(resp, marker):
    data = b''
    while marker not in data:
        chunk = resp.read1(65536) if hasattr(resp, 'read1') else resp.read(1)
        if not chunk:
            break
        data += chunk
    resp.read()  # the rest (the end of the chunked body)
    return data


def native(conn, i):
    t = 'n%d' % i
    request(conn, 'POST', '/v1/threads/%s/runs' % t, {'input': 'hello', 'stream': True}).read()
    resp = request(conn, 'GET', '/v1/threads/%s/events?follow=true' % t)
    data = b''
    while b'llm_execution_' not in data:
        data += resp.read1(65536)
    conn.close()  # a followed stream does not end by itself


def langgraph(conn, i, assistant='agent'):
    resp = request(conn, 'POST', '/threads/g%s%d/runs/stream' % (assistant, i),
                   {'assistant_id': assistant, 'if_not_exists': 'create',
                    'input': {'messages': [{'role': 'user', 'content': 'hello'}]},
                    'stream_mode': ['messages-tuple']})
    read_until(resp, b'event: end')


def langgraph_assistant(conn, i):
    langgraph(conn, i, 'bench-assistant')


def chat(conn, i):
    resp = request(conn, 'POST', '/v1/chat/completions',
                   {'model': 'default', 'stream': True, 'messages': [{'role': 'user', 'content': 'hello'}]})
    read_until(resp, b'[DONE]')


def responses(conn, i):
    resp = request(conn, 'POST', '/v1/responses', {'model': 'default', 'stream': True, 'input': 'hello'})
    read_until(resp, b'response.completed')


def ui(conn, i):
    resp = request(conn, 'POST', '/v1/ui/chat', {'id': 'u%d' % i, 'messages': [
        {'id': 'm', 'role': 'user', 'parts': [{'type': 'text', 'text': 'hello'}]}]})
    read_until(resp, b'[DONE]')


def agui(conn, i):
    resp = request(conn, 'POST', '/v1/ag-ui', {'threadId': 'a%d' % i, 'runId': 'r%d' % i, 'tools': [],
                                               'context': [], 'state': {}, 'forwardedProps': {},
                                               'messages': [{'id': 'm', 'role': 'user', 'content': 'hello'}]})
    read_until(resp, b'RUN_FINISHED')


p, host, port = serve(['--workers', '1'])
setup = http.client.HTTPConnection(host, port)
request(setup, 'POST', '/assistants', {'assistant_id': 'bench-assistant', 'graph_id': 'agent',
                                       'config': {'configurable': {'system_prompt': 'Be brief.'}}}).read()
setup.close()
for name, f in [('native runs + events', native), ('LangGraph runs.stream', langgraph),
                ('LangGraph, made assistant', langgraph_assistant), ('chat.completions stream', chat),
                ('responses stream', responses), ('AI SDK UI stream', ui), ('AG-UI', agui)]:
    times = []
    for i in range(runs):
        conn = http.client.HTTPConnection(host, port)
        t0 = time.perf_counter()
        f(conn, i)
        times.append((time.perf_counter() - t0) * 1000)
        conn.close()
    times.sort()
    print('%-26s p50 %.1f ms, p90 %.1f ms (%d runs)' % (name, statistics.median(times),
                                                       times[int(len(times) * 0.9)], runs))
p.terminate(); p.wait()


def rss(pid):
    for line in open('/proc/%d/status' % pid):
        if line.startswith('VmRSS'):
            return int(line.split()[1])


def open_streams(label, path, body):
    p, host, port = serve([])
    time.sleep(0.5)
    before = rss(p.pid)
    socks = []
    for i in range(streams):
        text = json.dumps(body(i))
        s = socket.create_connection((host, port))
        s.sendall(('POST %s HTTP/1.1\r\nHost: %s:%d\r\nContent-Type: application/json\r\n'
                   'Content-Length: %d\r\n\r\n%s' % (path(i), host, port, len(text), text)).encode())
        socks.append(s)
    for s in socks:
        s.recv(4096)  # the headers and the first chunk: the stream is open
    time.sleep(1)
    after = rss(p.pid)
    print('open %s: %d, RSS %d -> %d kB, %.1f kB per stream'
          % (label, streams, before, after, (after - before) / streams))
    for s in socks:
        s.close()
    p.terminate(); p.wait()


open_streams('streaming chat completions', lambda i: '/v1/chat/completions',
             lambda i: {'model': 'default', 'stream': True, 'messages': [{'role': 'user', 'content': 'hi'}]})
open_streams('LangGraph run streams', lambda i: '/threads/s%d/runs/stream' % i,
             lambda i: {'assistant_id': 'agent', 'if_not_exists': 'create',
                        'input': {'messages': [{'role': 'user', 'content': 'hi'}]}})
