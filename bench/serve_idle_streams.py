#!/usr/bin/env python3
# Usage: bench/serve_idle_streams.py BUILD/apps/parley/parley N SECONDS [PEER_N]
# (docs/service.md, "Measured").
#
# Idle streams of `parley serve` (SQLite, no worker): N native event streams
# (GET /v1/threads/{id}/events) on N threads, N LangGraph joinStreams (GET /threads/{id}/stream,
# each thread's run queued), and N native streams on one thread (the polls of the event log,
# which grow with the threads followed, aside), each in a process of its own. For each:
# the RSS per stream (RSS with the N streams open, less RSS with the threads made and no stream
# open, / N), the CPU `parley serve` spends over SECONDS with them idle, and whether they still
# get their events: one event is written to a sample of 100 threads (a run submitted: its
# run_queued; a LangGraph run cancelled: its stream's end) and each must arrive. The peer, in the
# same run: PEER_N native streams (default 1 000) with `--stream-threads 0`, a thread per stream
# as before the streams were parked; the ratio of the RSS per stream is printed.
#
# Needs as many open files as streams, twice (client and server): this script raises its own
# soft limit to the hard one (`ulimit -Hn`: 20 000 for 10 000 streams); `parley serve` raises its
# own.
import http.client, json, os, resource, select, socket, subprocess, sys, tempfile, time

binary, n, secs = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
peer_n = int(sys.argv[4]) if len(sys.argv) > 4 else 1000
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
if hard < max(n, peer_n) + 100:
    sys.exit('open files: the hard limit %d is below %d streams; raise it (ulimit -Hn)' % (hard, n))


class Serve:
    def __init__(self, streams, extra):
        self.dir = tempfile.mkdtemp()
        self.p = subprocess.Popen([binary, 'serve', '--db', os.path.join(self.dir, 'idle.db'), '--port', '0',
                                   '--max-streams', str(streams + 10), '--max-connections', str(streams + 100)]
                                  + extra, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        base = self.p.stdout.readline().strip()
        self.host, port = base.split('//')[1].split(':')
        self.port = int(port)
        self.conn = http.client.HTTPConnection(self.host, self.port)

    def call(self, method, path, body=None):
        for attempt in (0, 1):  # the server closes a keep-alive connection idle for 5 s
            try:
                self.conn.request(method, path, body=None if body is None else json.dumps(body),
                                  headers={'Content-Type': 'application/json'} if body is not None else {})
                r = self.conn.getresponse()
                break
            except (http.client.HTTPException, OSError):
                self.conn.close()
                self.conn = http.client.HTTPConnection(self.host, self.port)
                if attempt: raise
        data = r.read()
        return r.status, json.loads(data) if data and r.getheader('Content-Type', '').startswith('application/json') else data

    def metric(self, name):
        _, body = self.call('GET', '/metrics')
        for line in body.decode().splitlines():
            if line.startswith(name + ' '):
                return float(line.split()[1])

    def rss_kib(self):
        for line in open('/proc/%d/status' % self.p.pid):
            if line.startswith('VmRSS'):
                return int(line.split()[1])

    def threads(self):
        for line in open('/proc/%d/status' % self.p.pid):
            if line.startswith('Threads'):
                return int(line.split()[1])

    def cpu_s(self):
        f = open('/proc/%d/stat' % self.p.pid).read().split(')')[1].split()
        return (int(f[11]) + int(f[12])) / os.sysconf('SC_CLK_TCK')

    def stop(self):
        self.conn.close()
        self.p.terminate()
        self.p.wait()


def open_streams(s, paths):
    socks = []
    for path in paths:
        c = socket.create_connection((s.host, s.port))
        c.sendall(('GET %s HTTP/1.1\r\nHost: %s:%d\r\n\r\n' % (path, s.host, s.port)).encode())
        socks.append(c)
    deadline = time.time() + 300
    while s.metric('parley_stream_clients') < len(paths):
        if time.time() > deadline:
            sys.exit('the streams did not all open: %d of %d' % (s.metric('parley_stream_clients'), len(paths)))
        time.sleep(0.2)
    return socks


def arrived(socks, marker, timeout=30):
    """How many of `socks` receive `marker` (what they had before included) within `timeout`."""
    want = {c.fileno(): (c, b'') for c in socks}
    poller = select.poll()
    for fd in want:
        poller.register(fd, select.POLLIN)
    got = 0
    deadline = time.time() + timeout
    while want and time.time() < deadline:
        for fd, _ in poller.poll(max(0, int((deadline - time.time()) * 1000))):
            c, seen = want[fd]
            data = c.recv(65536)
            seen += data
            want[fd] = (c, seen)
            if marker in seen or not data:
                got += marker in seen
                poller.unregister(fd)
                del want[fd]
    return got


def measure(kind, count, extra, one_thread=False):
    s = Serve(count, extra)
    ids = ['t%d' % (0 if one_thread else i) for i in range(count)]
    runs = {}
    for i in sorted(set(ids)):
        if kind == 'native':
            assert s.call('POST', '/v1/threads', {'id': i})[0] == 201
        else:  # a LangGraph run, queued (no worker), that the thread's joinStream follows
            st, run = s.call('POST', '/threads/%s/runs' % i, {'assistant_id': 'agent', 'if_not_exists': 'create',
                                                            'input': {'messages': [{'role': 'user', 'content': 'hi'}]}})
            assert st == 200, (st, run)
            runs[i] = run['run_id']
    time.sleep(2)
    rss0, threads0 = s.rss_kib(), s.threads()
    paths = ['/v1/threads/%s/events' % i if kind == 'native' else '/threads/%s/stream' % i for i in ids]
    socks = open_streams(s, paths)
    time.sleep(2)
    rss1, threads1 = s.rss_kib(), s.threads()
    c0, t0 = s.cpu_s(), time.time()
    time.sleep(secs)
    c1, t1 = s.cpu_s(), time.time()
    sample = list(range(0, count, max(1, count // 100)))[:100]
    for k in sample[:1] if one_thread else sample:
        if kind == 'native':
            st, _ = s.call('POST', '/v1/threads/%s/runs' % ids[k], {'input': 'wake'})
            assert st == 202, st
        else:
            st, _ = s.call('POST', '/threads/%s/runs/%s/cancel' % (ids[k], runs[ids[k]]))
            assert st in (200, 202, 204), st
    got = arrived([socks[k] for k in sample], b'event: run_queued' if kind == 'native' else b'event: end')
    per = (rss1 - rss0) * 1024 / count
    print('%-9s %-17s %6d streams on %5d threads: RSS %6.1f MB -> %6.1f MB, %7.0f bytes (%5.1f KiB) per stream; threads %d -> %d; '
          'idle CPU %.2f s over %.1f s = %.2f %% of a core; an event written to %d thread(s): %d of %d sampled streams got it'
          % (kind, 'stream-threads %s' % (extra[1] if extra else '4'), count, len(set(ids)), rss0 / 1024, rss1 / 1024, per, per / 1024,
             threads0, threads1, c1 - c0, t1 - t0, 100 * (c1 - c0) / (t1 - t0),
             1 if one_thread else len(sample), got, len(sample)))
    sys.stdout.flush()
    for c in socks:
        c.close()
    s.stop()
    return per


print('load average: %.2f %.2f %.2f' % os.getloadavg())
native = measure('native', n, [])
measure('langgraph', n, [])
measure('native', n, [], one_thread=True)
peer = measure('native', peer_n, ['--stream-threads', '0'])
print('RSS per idle native stream: parked %.0f bytes, a thread per stream %.0f bytes: %.1fx less'
      % (native, peer, peer / native if native > 0 else float('inf')))
print('load average: %.2f %.2f %.2f' % os.getloadavg())
