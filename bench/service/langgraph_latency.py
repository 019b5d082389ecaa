#!/usr/bin/env python3
# Usage: bench/service/langgraph_latency.py BUILD/apps/parley/parley [RUNS] (docs/service.md,
# "Measured"). Create + stream + complete through the LangGraph routes (POST
# /threads/{id}/runs/stream until `end`) and through the native ones (POST /v1/threads/{id}/runs,
# then GET /v1/threads/{id}/events until the run's terminal event), against `parley serve
# --workers 1` and its built-in zero-latency mock; p50 and p90 of each, in milliseconds.
import http.client, json, os, statistics, subprocess, sys, tempfile, time
binary = sys.argv[1]
runs = int(sys.argv[2]) if len(sys.argv) > 2 else 100
d = tempfile.mkdtemp()
p = subprocess.Popen([binary, 'serve', '--db', os.path.join(d, 'bench.db'), '--port', '0',
                      '--workers', '1'], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
base = p.stdout.readline().strip()
host, port = base.split('//')[1].split(':')
JSON = {'Content-Type': 'application/json'}

def read_until(resp, marker):
    buf = b''
    while marker not in buf:
        chunk = resp.read1(65536)
        if not chunk: raise RuntimeError('the stream ended early: %r' % buf[-300:])
        buf += chunk
    return buf

def langgraph(i):
    c = http.client.HTTPConnection(host, int(port))
    t0 = time.perf_counter()
    c.request('POST', '/threads/lg%d/runs/stream' % i, json.dumps({
        'assistant_id': 'agent', 'if_not_exists': 'create', 'stream_mode': ['messages-tuple'],
        'input': {'messages': [{'role': 'user', 'content': 'hello %d' % i}]}}), JSON)
    read_until(c.getresponse(), b'event: end')
    t = time.perf_counter() - t0
    c.close()
    return t

def native(i):
    c = http.client.HTTPConnection(host, int(port))
    t0 = time.perf_counter()
    c.request('POST', '/v1/threads/nv%d/runs' % i, json.dumps({'input': 'hello %d' % i}), JSON)
    c.getresponse().read()
    c.request('GET', '/v1/threads/nv%d/events' % i)
    read_until(c.getresponse(), b'event: llm_execution_completed')
    t = time.perf_counter() - t0
    c.close()
    return t

for name, f in (('native', native), ('langgraph', langgraph)):
    for i in range(5): f(10_000 + i)  # warm-up
    ts = sorted(f(i) * 1000 for i in range(runs))
    print('%-9s create + stream + complete, %d runs: p50 %.1f ms, p90 %.1f ms'
          % (name, runs, statistics.median(ts), ts[int(len(ts) * 0.9)]))
p.terminate(); p.wait()
