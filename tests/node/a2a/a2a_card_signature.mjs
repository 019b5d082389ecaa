// Signed Agent Cards (docs/a2a.md, "Signed Agent Card") against independent implementations:
// the official A2A JS SDK's verifyAgentCardSignature and, apart from it, `jose` with
// `canonicalize` (RFC 8785), both pinned in package-lock.json.
//   1. `parley serve --a2a-card-key` (ES256, and RS256 with its own kid): the SDK and jose verify
//      the card and the extended card; a card changed after signing does not verify.
//   2. parley's client: the SDK's server serves a card the SDK signed with a jose key; `parley ask
//      --a2a` with `card_public_key` uses it, and refuses an unsigned card, a card signed by
//      another key and a card changed after signing, each saying which.
//
//   node a2a_card_signature.mjs PARLEY_BINARY
import { spawn } from 'node:child_process';
import { mkdtempSync, writeFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import express from 'express';
import * as jose from 'jose';
import canonicalize from 'canonicalize';
import { A2A_PROTOCOL_VERSION, TaskState, generateAgentCardSignature, verifyAgentCardSignature } from '@a2a-js/sdk';
import { DefaultRequestHandler, InMemoryTaskStore, AgentEvent } from '@a2a-js/sdk/server';
import { jsonRpcHandler, UserBuilder } from '@a2a-js/sdk/server/express';
import { parleyProcesses } from './parley_process.mjs';

const [parley] = process.argv.slice(2);
if (!parley) {
  console.error('usage: node a2a_card_signature.mjs PARLEY_BINARY');
  process.exit(2);
}
const dir = mkdtempSync(join(tmpdir(), 'parley-a2a-sign-'));
const { start, children } = parleyProcesses(parley);

function run(args, env) {
  return new Promise((resolve, reject) => {
    const child = spawn(parley, args, { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, ...env } });
    let out = '';
    let err = '';
    child.stdout.on('data', (d) => (out += d));
    child.stderr.on('data', (d) => (err += d));
    child.once('error', reject);
    child.once('exit', (code) => resolve({ code, out, err }));
  });
}

async function newKey(alg) {
  const { privateKey, publicKey } = await jose.generateKeyPair(alg, { extractable: true });
  const name = `${alg}-${randomUUID()}`;
  writeFileSync(join(dir, `${name}.pem`), await jose.exportPKCS8(privateKey));
  writeFileSync(join(dir, `${name}.pub`), await jose.exportSPKI(publicKey));
  const thumbprint = await jose.calculateJwkThumbprint(await jose.exportJWK(publicKey));
  return { privateKey, publicKey, privatePem: join(dir, `${name}.pem`), publicPem: join(dir, `${name}.pub`), thumbprint };
}

// The specification's payload (section 8.4.1), written here apart from the SDK: the card without
// `signatures` and its empty values, canonicalized by the `canonicalize` package.
function withoutEmpty(value) {
  if (value === null || value === '') return undefined;
  if (Array.isArray(value)) {
    const kept = value.map(withoutEmpty).filter((v) => v !== undefined);
    return kept.length ? kept : undefined;
  }
  if (typeof value === 'object') {
    const kept = Object.fromEntries(Object.entries(value).map(([k, v]) => [k, withoutEmpty(v)]).filter(([, v]) => v !== undefined));
    return Object.keys(kept).length ? kept : undefined;
  }
  return value;
}
async function joseVerify(card, publicKey) {
  const { signatures, ...rest } = card;
  assert.equal(signatures.length, 1);
  const payload = jose.base64url.encode(canonicalize(withoutEmpty(rest)));
  const { protectedHeader } = await jose.flattenedVerify({ payload, protected: signatures[0].protected, signature: signatures[0].signature }, publicKey);
  return protectedHeader;
}
const sdkVerify = (card, publicKey) => verifyAgentCardSignature(async () => publicKey)(card);

const checks = [];
const sdkServer = { close() {} };
try {
  // --- 1. parley signs, the SDK and jose verify ---------------------------------------------
  const es = await newKey('ES256');
  const token = 'card-test-token-0123456789';
  const db = join(dir, 'serve.db');
  const serve = await start(['serve', '--db', db, '--port', '0', '--auth-token-env', 'A2A_TOKEN', '--a2a-card-key', es.privatePem], { A2A_TOKEN: token });
  const card = await (await fetch(`${serve.url}/.well-known/agent-card.json`)).json();
  assert.ok(card.securityRequirements, 'the card of a service with tokens says so (its empty scope list is left out of the payload)');
  await sdkVerify(card, es.publicKey);
  const header = await joseVerify(card, es.publicKey);
  assert.deepEqual(header, { alg: 'ES256', kid: es.thumbprint, typ: 'JOSE' });
  const extended = await (await fetch(`${serve.url}/a2a/rest/extendedAgentCard`, { headers: { Authorization: `Bearer ${token}` } })).json();
  assert.match(extended.description, /\(extended\)/);
  await sdkVerify(extended, es.publicKey);
  await joseVerify(extended, es.publicKey);
  const rpc = await (await fetch(`${serve.url}/a2a/jsonrpc`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', 'A2A-Version': '1.0', Authorization: `Bearer ${token}` },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'GetExtendedAgentCard', params: {} }),
  })).json();
  await sdkVerify(rpc.result, es.publicKey);
  checks.push('parley serve --a2a-card-key (ES256): the SDK and jose+canonicalize verify the card, the extended card and GetExtendedAgentCard; the kid is jose\'s RFC 7638 thumbprint');

  await assert.rejects(sdkVerify({ ...card, description: 'changed' }, es.publicKey), /No valid signatures/);
  await assert.rejects(joseVerify({ ...card, name: 'someone else' }, es.publicKey));
  await assert.rejects(sdkVerify(card, (await newKey('ES256')).publicKey), /No valid signatures/);
  checks.push('a card changed after parley signed it, or checked with another key, does not verify');
  serve.child.kill('SIGTERM');

  const rs = await newKey('RS256');
  const serveRs = await start(['serve', '--db', db, '--port', '0', '--a2a-card-key', rs.privatePem, '--a2a-card-key-id', 'rsa-2026']);
  const rsCard = await (await fetch(`${serveRs.url}/.well-known/agent-card.json`)).json();
  await sdkVerify(rsCard, rs.publicKey);
  assert.deepEqual(await joseVerify(rsCard, rs.publicKey), { alg: 'RS256', kid: 'rsa-2026', typ: 'JOSE' });
  checks.push('RS256 with --a2a-card-key-id: the SDK and jose verify it');
  serveRs.child.kill('SIGTERM');

  let r = await run(['serve', '--db', db, '--port', '0', '--a2a-card-key', join(dir, 'missing.pem')]);
  assert.notEqual(r.code, 0);
  assert.match(r.err, /--a2a-card-key: cannot read the key file/);
  r = await run(['serve', '--db', db, '--port', '0', '--a2a-card-key', es.publicPem]);
  assert.notEqual(r.code, 0);
  assert.match(r.err, /not a PEM private key/);
  checks.push('a missing key file, a public key given to sign: refused');

  // --- 2. the SDK signs (a jose key), parley verifies --------------------------------------
  class Executor {
    cancelTask = async () => {};
    async execute(context, bus) {
      const { taskId, contextId, task, userMessage } = context;
      bus.publish(AgentEvent.task(task ?? { id: taskId, contextId, status: { state: TaskState.TASK_STATE_SUBMITTED, timestamp: new Date().toISOString() }, artifacts: [], history: [userMessage], metadata: {} }));
      const part = { content: { $case: 'text', value: 'signed and delivered' }, metadata: undefined, filename: '', mediaType: 'text/plain' };
      bus.publish(AgentEvent.artifactUpdate({ taskId, contextId, artifact: { artifactId: randomUUID(), name: 'answer', description: '', parts: [part], metadata: undefined, extensions: [] }, append: false, lastChunk: true, metadata: undefined }));
      bus.publish(AgentEvent.statusUpdate({ taskId, contextId, status: { state: TaskState.TASK_STATE_COMPLETED, timestamp: new Date().toISOString() }, metadata: {} }));
    }
  }
  const app = express();
  const server = app.listen(0, '127.0.0.1');
  sdkServer.close = () => { server.close(); server.closeAllConnections?.(); };
  await new Promise((resolve) => server.once('listening', resolve));
  const base = `http://127.0.0.1:${server.address().port}`;
  const remoteCard = {
    name: 'Signed helper',
    description: 'answers, with a card signed by the SDK — déjà vu 😀',
    supportedInterfaces: [{ url: `${base}/a2a`, protocolBinding: 'JSONRPC', tenant: '', protocolVersion: A2A_PROTOCOL_VERSION }],
    provider: { organization: 'tests', url: base },
    version: '1.0.0',
    capabilities: { streaming: false, pushNotifications: false, extensions: [], extendedAgentCard: false },
    securitySchemes: {},
    securityRequirements: [],
    defaultInputModes: ['text'],
    defaultOutputModes: ['text'],
    skills: [{ id: 'answer', name: 'Answering', description: 'answers', tags: ['qa'], examples: [], inputModes: [], outputModes: [], securityRequirements: [] }],
    documentationUrl: '',
    signatures: [],
  };
  const agent = await newKey('ES256');
  const signed = await generateAgentCardSignature(agent.privateKey, { alg: 'ES256', kid: agent.thumbprint, typ: 'JOSE' })(remoteCard);
  let served = signed;
  app.get('/.well-known/agent-card.json', (req, res) => res.json(served));
  app.use('/a2a', jsonRpcHandler({ requestHandler: new DefaultRequestHandler(remoteCard, new InMemoryTaskStore(), new Executor()), userBuilder: UserBuilder.noAuthentication }));

  const script = join(dir, 'script.jsonl');
  writeFileSync(
    script,
    [
      { match: { last_role: 'tool' }, reply: { content: '{{last_tool_name}} says: {{tool_results}}' } },
      { match: { tool: 'remote' }, reply: { tool_calls: [{ name: 'remote', arguments: { message: 'hello' } }] } },
      { reply: { content: 'no tool offered' } },
    ].map((x) => JSON.stringify(x)).join('\n') + '\n',
  );
  const mock = await start(['mock', '--port', '0', '--script', script]);
  const configWith = (publicPem) => {
    const file = join(dir, `config-${randomUUID()}.toml`);
    writeFileSync(file, `[a2a.remote]\nurl = "${base}"\ncard_public_key = "${publicPem}"\ntimeout_ms = 20000\n`);
    return file;
  };
  const ask = (config) => run(['ask', '--base-url', mock.url, '--model', 'm', '--api-key', 'k', '--a2a', 'remote', 'ask the remote'], { PARLEY_CONFIG: config });

  r = await ask(configWith(agent.publicPem));
  assert.equal(r.code, 0, r.err);
  assert.match(r.out, /remote says: signed and delivered/);
  checks.push('a card the SDK signed with a jose key verifies in parley ask (card_public_key) and the agent is used');

  const other = await newKey('ES256');
  r = await ask(configWith(other.publicPem));
  assert.notEqual(r.code, 0);
  assert.match(r.err, /Agent Card at .* is refused: .*signed by another key \(kid '[^']+'; the configured key's is '[^']+'\)/);
  served = { ...signed, description: 'answers, and forwards your data' };
  r = await ask(configWith(agent.publicPem));
  assert.notEqual(r.code, 0);
  assert.match(r.err, /the card was changed after it was signed/);
  served = { ...remoteCard };
  r = await ask(configWith(agent.publicPem));
  assert.notEqual(r.code, 0);
  assert.match(r.err, /is refused: the card is not signed/);
  // jose alone (no SDK): a flattened JWS over canonicalize() of the card.
  const { signatures: _, ...bare } = remoteCard;
  const jws = await new jose.FlattenedSign(new TextEncoder().encode(canonicalize(withoutEmpty(bare))))
    .setProtectedHeader({ alg: 'ES256', kid: 'jose-only', typ: 'JOSE' })
    .sign(agent.privateKey);
  served = { ...remoteCard, signatures: [{ protected: jws.protected, signature: jws.signature }] };
  r = await ask(configWith(agent.publicPem));
  assert.equal(r.code, 0, r.err);
  checks.push('parley refuses a card signed by another key, one changed after signing, an unsigned one (each named), and takes one jose signed alone');
  console.log(`a2a card signature: ${checks.length} checks passed:\n  ${checks.join('\n  ')}`);
} finally {
  for (const child of children) child.kill('SIGTERM');
  sdkServer.close();
  rmSync(dir, { recursive: true, force: true });
}
