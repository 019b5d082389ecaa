#!/usr/bin/env python3
# Usage: bench/serve_idle_streams.py BUILD/apps/parley/parley N SECONDS (docs/service.md, "Measured").
# Idle-stream CPU probe: N threads, N followed event streams, CPU of `parley serve` over T s.
import json, os, socket, subprocess, sys, tempfile, time, urllib.request
binary, n, secs = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
d = tempfile.mkdtemp()
p = subprocess.Popen([binary, 'serve', '--db', os.path.join(d, 'idle.db'), '--port', '0'],
                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
base = p.stdout.readline().strip()
host, port = base.split('//')[1].split(':')
for i in range(n):
    req = urllib.request.Request(base + '/v1/threads', data=json.dumps({'id': 't%d' % i}).encode(),
                                 headers={'Content-Type': 'application/json'})
    urllib.request.urlopen(req).read()
socks = []
for i in range(n):
    s = socket.create_connection((host, int(port)))
    s.sendall(('GET /v1/threads/t%d/events HTTP/1.1\r\nHost: %s:%s\r\n\r\n' % (i, host, port)).encode())
    socks.append(s)
def metric(name):
    body = urllib.request.urlopen(base + '/metrics').read().decode()
    for line in body.splitlines():
        if line.startswith(name + ' '): return float(line.split()[1])
while metric('parley_stream_clients') < n: time.sleep(0.2)
time.sleep(2)
def cpu():
    f = open('/proc/%d/stat' % p.pid).read().split(')')[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf('SC_CLK_TCK')
def rss():
    for line in open('/proc/%d/status' % p.pid):
        if line.startswith('VmRSS'): return line.split()[1] + ' kB'
c0 = cpu(); t0 = time.time(); time.sleep(secs); c1 = cpu(); t1 = time.time()
print('%s: %d idle streams on %d threads: CPU %.2f s over %.1f s = %.1f %% of a core; RSS %s'
      % (binary, n, n, c1 - c0, t1 - t0, 100 * (c1 - c0) / (t1 - t0), rss()))
for s in socks: s.close()
p.terminate(); p.wait()
