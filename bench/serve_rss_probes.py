#!/usr/bin/env python3
# Usage: bench/serve_rss_probes.py BUILD/apps/parley/parley (docs/service.md, "Measured").
# RSS probes of `parley serve`: header flood, chunked flood, slow heads, 150 demo runs of 20 KB.
import json, os, socket, subprocess, sys, tempfile, time, urllib.request
binary = sys.argv[1]
d = tempfile.mkdtemp()
p = subprocess.Popen([binary, 'serve', '--db', os.path.join(d, 'rss.db'), '--port', '0', '--workers', '1'],
                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
base = p.stdout.readline().strip()
host, port = base.split('//')[1].split(':')
def rss():
    for line in open('/proc/%d/status' % p.pid):
        if line.startswith('VmRSS'): return int(line.split()[1]) // 1024
def call(method, path, body=None):
    req = urllib.request.Request(base + path, method=method, data=None if body is None else json.dumps(body).encode(),
                                 headers={'Content-Type': 'application/json'})
    try:
        with urllib.request.urlopen(req) as r: return r.status, json.loads(r.read() or b'null')
    except urllib.error.HTTPError as e: return e.code, None
print('start: RSS %d MB' % rss())
# 200 000 headers (20 MB) in one request.
s = socket.create_connection((host, int(port)))
head = 'GET /v1/threads HTTP/1.1\r\nHost: %s:%s\r\n' % (host, port)
try:
    s.sendall(head.encode())
    chunk = ''.join('X-H%d: %s\r\n' % (i, 'v' * 90) for i in range(2000)).encode()
    for _ in range(100): s.sendall(chunk)
except OSError as e: pass
ans = s.recv(100); s.close()
print('200 000 headers: answered %r; RSS %d MB' % (ans[:12], rss()))
# A 64 MiB chunked body.
s = socket.create_connection((host, int(port)))
s.sendall(('POST /v1/threads HTTP/1.1\r\nHost: %s:%s\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n' % (host, port)).encode())
try:
    piece = b'100000\r\n' + b'x' * 0x100000 + b'\r\n'
    for _ in range(64): s.sendall(piece)
except OSError: pass
ans = s.recv(100); s.close()
print('64 MiB chunked body: answered %r; RSS %d MB' % (ans[:12], rss()))
# 1 100 slow heads, then a request.
slow = []
for i in range(1100):
    c = socket.create_connection((host, int(port))); c.sendall(b'GET / HTTP/1.1\r\nHost: x'); slow.append(c)
t0 = time.time(); st, _ = call('GET', '/healthz'); t1 = time.time()
print('1 100 slow heads: /healthz %d in %.3f s; RSS %d MB' % (st, t1 - t0, rss()))
for c in slow: c.close()
# 150 runs of 20 KB through the demo agent, one after the other on one thread.
text = 'word ' * 4000
for i in range(150):
    st, run = call('POST', '/v1/threads/mem/runs', {'input': text, 'id': 'r%d' % i})
    assert st == 202, st
    while True:
        st, r = call('GET', '/v1/runs/r%d' % i)
        if r['status'] in ('completed', 'failed', 'cancelled'): break
        time.sleep(0.02)
print('150 demo runs of 20 KB: last %s; RSS %d MB' % (r['status'], rss()))
p.terminate(); p.wait()
