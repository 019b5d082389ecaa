// The peer of bench/mcp_bench.cpp: the official TypeScript SDK client (@modelcontextprotocol/sdk,
// pinned in tests/node/mcp/package-lock.json) making the same tools/call (`echo`) against
// server-everything, over stdio (its own child) and over Streamable HTTP (the same server as
// parley's). Prints one JSON line per transport: {"transport", "us_per_call", "calls"}.
//   node sdk_bench.mjs NODE EVERYTHING_JS URL [SECONDS]
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

const [node, everything, url, secondsArg] = process.argv.slice(2);
const seconds = Number(secondsArg ?? 2);

async function measure(transportName, transport) {
  const client = new Client({ name: 'parley-bench-peer', version: '1.0.0' });
  await client.connect(transport);
  const args = { name: 'echo', arguments: { message: 'ping' } };
  for (let i = 0; i < 50; i++) await client.callTool(args);  // warm-up, as parley's
  let calls = 0;
  const t0 = performance.now();
  while (performance.now() - t0 < seconds * 1000) {
    const result = await client.callTool(args);
    if (result.isError) throw new Error('echo failed');
    calls++;
  }
  const us = ((performance.now() - t0) * 1000) / calls;
  await client.close();
  console.log(JSON.stringify({ transport: transportName, us_per_call: us, calls }));
}

await measure('stdio', new StdioClientTransport({ command: node, args: [everything, 'stdio'], stderr: 'ignore' }));
await measure('http', new StreamableHTTPClientTransport(new URL(url)));
