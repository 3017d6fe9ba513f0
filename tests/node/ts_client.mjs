// Clients on the official TypeScript SDK (npm @modelcontextprotocol/sdk), and a few raw
// requests where a client misbehaves on purpose, driving tests/node/ts_server.mjs through
// a proxy. Every HTTP request any of them makes is written to the ground truth (one JSON
// line each: step, client, method, JSON-RPC method, Origin, session sent or issued,
// Last-Event-ID, status, content type), which tests/test_e2e_typescript.py holds
// replaygate's reading of the proxy's log against.
//
//   node ts_client.mjs --url http://127.0.0.1:8080/mcp --truth truth.jsonl --steps all|STEP,STEP...
//
// Steps: normal call; a stream cut by the client and resumed by the SDK; a blind re-send
// of a write; DELETE and reuse (404), then a re-initialize; DELETE and reuse, never
// re-initialized; the same with clients that share `User-Agent: node`; a session expired
// by the server; requests with a foreign Origin; a cursor-less re-open storm.
import { appendFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

const { values: opt } = parseArgs({
  options: {
    url: { type: 'string' },
    truth: { type: 'string' },
    steps: { type: 'string', default: 'all' },
    'idle-ms': { type: 'string', default: '1500' },
  },
});
const URL_ = new URL(opt.url);
const ALLOWED = 'http://localhost:6274';
const EVIL = 'https://evil.example';
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// A fetch that writes each request it makes to the ground truth. `who.ua` undefined
// keeps Node's own `User-Agent: node`.
function recording(step, client, who = {}) {
  return async (url, init = {}) => {
    const headers = new Headers(init.headers);
    if (who.ua) headers.set('user-agent', who.ua);
    if (who.origin) headers.set('origin', who.origin);
    let rpc = {};
    try {
      rpc = JSON.parse(init.body ?? 'null') ?? {};
    } catch {}
    const row = {
      step,
      client,
      method: init.method ?? 'GET',
      rpc_method: rpc.method ?? null,
      rpc_id: rpc.id ?? null,
      origin: headers.get('origin'),
      user_agent: headers.get('user-agent') ?? 'node',
      session: headers.get('mcp-session-id'),
      last_event_id: headers.get('last-event-id'),
      t0: Date.now(),
    };
    try {
      let res = await fetch(url, { ...init, headers });
      row.status = res.status;
      row.content_type = res.headers.get('content-type');
      row.issued_session = res.headers.get('mcp-session-id');
      if (row.method === 'GET') who.streaming = true;
      if (who.cut && row.rpc_method === 'tools/call') {
        res = cutAfter(res, who.cut);
        who.cut = 0;
        row.cut = true;
      }
      return res;
    } catch (e) {
      row.error = String(e);
      throw e;
    } finally {
      row.t1 = Date.now();
      appendFileSync(opt.truth, JSON.stringify(row) + '\n');
    }
  };
}

// The response, cut (the connection dropped) after `events` SSE events have arrived.
function cutAfter(res, events) {
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  let text = '';
  const body = new ReadableStream({
    async pull(ctrl) {
      const { value, done } = await reader.read();
      if (done) return ctrl.close();
      text += decoder.decode(value, { stream: true });
      ctrl.enqueue(value);
      if (text.split('\n\n').length - 1 >= events) {
        await reader.cancel();
        ctrl.error(new TypeError('terminated'));
      }
    },
  });
  return new Response(body, { status: res.status, headers: res.headers });
}

async function connect(step, name, who = {}) {
  const transport = new StreamableHTTPClientTransport(URL_, {
    fetch: recording(step, name, who),
    reconnectionOptions: {
      initialReconnectionDelay: 200,
      maxReconnectionDelay: 1000,
      reconnectionDelayGrowFactor: 1.5,
      maxRetries: who.retries ?? 2,
    },
  });
  const client = new Client({ name: `replaygate-e2e-${name}`, version: '1.0.0' });
  client.onerror = () => {};
  await client.connect(transport);
  // The SDK opens its standalone GET stream after initialize: wait for its answer, so
  // that closing the client does not abort a request still on its way.
  for (let i = 0; i < 100 && !who.streaming; i++) await sleep(10);
  return { client, transport, who };
}

// A raw request through the recording fetch; the body read to its end, or cancelled
// after `events` SSE events.
async function raw(step, name, who, { method = 'POST', body, session, headers = {}, events }) {
  const h = { accept: 'application/json, text/event-stream', ...headers };
  if (body) h['content-type'] = 'application/json';
  if (session) {
    h['mcp-session-id'] = session;
    h['mcp-protocol-version'] = '2025-11-25';
  }
  const res = await recording(step, name, who)(URL_, {
    method,
    headers: h,
    body: body && JSON.stringify(body),
  });
  if (events === undefined) {
    await res.text();
  } else {
    const reader = res.body.getReader();
    let text = '';
    while (text.split('\n\n').length - 1 < events) {
      const { value, done } = await reader.read();
      if (done) break;
      text += new TextDecoder().decode(value);
    }
    await reader.cancel();
  }
  return res.status;
}

const call = (c, name, args) => c.client.callTool({ name, arguments: args });
const ua = (name) => ({ ua: `replaygate-e2e/${name}`, origin: ALLOWED });
const INIT = {
  jsonrpc: '2.0',
  id: 0,
  method: 'initialize',
  params: { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 'evil', version: '1' } },
};

const steps = {
  async normal() {
    const a = await connect('normal', 'a', ua('a'));
    await call(a, 'count', { n: 2 });
    await a.client.close();
  },
  async cut_resume() {
    // Behind Caddy the server may learn of the cut only after the first attempts to
    // resume (409: the stream still has a connection), so this client tries longer.
    const b = await connect('cut_resume', 'b', { ...ua('b'), retries: 10 });
    b.who.cut = 3; // the priming event and two messages, then the connection drops
    const res = await call(b, 'count', { n: 6 });
    if (!JSON.stringify(res).includes('counted to 6')) throw new Error(`no result after resume: ${JSON.stringify(res)}`);
    await b.client.close();
  },
  async blind_resend() {
    const c = await connect('blind_resend', 'c', ua('c'));
    const session = c.transport.sessionId;
    const body = (id) => ({
      jsonrpc: '2.0',
      id,
      method: 'tools/call',
      params: { name: 'create_ticket', arguments: { title: 'printer on fire' } },
    });
    await raw('blind_resend', 'c', c.who, { body: body(100), session, events: 2 });
    await raw('blind_resend', 'c', c.who, { body: body(101), session });
    await c.client.close();
  },
  async delete_reuse() {
    const d = await connect('delete_reuse', 'd', ua('d'));
    await call(d, 'count', { n: 1 });
    const dead = d.transport.sessionId;
    await d.transport.terminateSession();
    await d.client.close();
    await raw('delete_reuse', 'd', d.who, { body: { jsonrpc: '2.0', id: 9, method: 'ping' }, session: dead });
    const again = await connect('delete_reuse', 'd', ua('d'));
    await call(again, 'count', { n: 1 });
    await again.client.close();
  },
  async never_reinit() {
    const e = await connect('never_reinit', 'e', ua('e'));
    const dead = e.transport.sessionId;
    await e.transport.terminateSession();
    await e.client.close();
    await raw('never_reinit', 'e', e.who, { body: { jsonrpc: '2.0', id: 9, method: 'ping' }, session: dead });
  },
  async shared_agent() {
    // Three clients with Node's own User-Agent: which of them re-initialized after f1's
    // 404 cannot be told from a proxy log.
    const f = [];
    for (const name of ['f1', 'f2', 'f3']) f.push(await connect('shared_agent', name, { origin: ALLOWED }));
    const dead = f[0].transport.sessionId;
    await f[0].transport.terminateSession();
    await f[0].client.close();
    await raw('shared_agent', 'f1', { origin: ALLOWED }, { body: { jsonrpc: '2.0', id: 9, method: 'ping' }, session: dead });
    const f4 = await connect('shared_agent', 'f4', { origin: ALLOWED });
    for (const c of [...f.slice(1), f4]) await c.client.close();
  },
  async expiry() {
    // The server forgets the idle session; the SDK's standalone GET is cut with it and
    // re-opened (404), the next call fails (404), and the client initializes again.
    const g = await connect('expiry', 'g', ua('g'));
    await sleep(Number(opt['idle-ms']) + 1500);
    try {
      await call(g, 'count', { n: 1 });
      throw new Error('the expired session still answered');
    } catch (err) {
      if (![404, 400].includes(err.code)) throw err; // the server's dead-session status
    }
    await g.client.close();
    const again = await connect('expiry', 'g', ua('g'));
    await call(again, 'count', { n: 1 });
    await again.client.close();
  },
  async origins() {
    const evil = { ua: 'replaygate-e2e/evil', origin: EVIL };
    const h = await connect('origins', 'h', ua('h'));
    const live = h.transport.sessionId;
    const ping = { jsonrpc: '2.0', id: 7, method: 'ping' };
    await raw('origins', 'evil', evil, { body: INIT });
    await raw('origins', 'evil', evil, { body: ping, session: '00000000-0000-4000-8000-000000000000' });
    await raw('origins', 'evil', evil, { body: ping });
    await raw('origins', 'evil', evil, {
      method: 'OPTIONS',
      headers: { 'access-control-request-method': 'POST', 'access-control-request-headers': 'content-type' },
    });
    await raw('origins', 'evil', evil, { body: ping, session: live });
    await call(h, 'count', { n: 1 });
    await h.client.close();
  },
  async storm() {
    // A client that re-opens its standalone GET stream without Last-Event-ID as fast as
    // it can (the stream has no priming event, so it never has a cursor).
    const s = await connect('storm', 's', ua('s'));
    const session = s.transport.sessionId;
    await s.client.close();
    for (let i = 0; i < 80; i++) {
      await raw('storm', 's', s.who, { method: 'GET', session, events: 0 });
    }
  },
};

const chosen = opt.steps === 'all' ? Object.keys(steps) : opt.steps.split(',');
// The expiry step idles: it runs alongside the others.
const idle = chosen.includes('expiry') ? steps.expiry() : Promise.resolve();
for (const name of chosen.filter((k) => k !== 'expiry')) await steps[name]();
await idle;
