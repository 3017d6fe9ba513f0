// An MCP server on the official TypeScript SDK (npm @modelcontextprotocol/sdk), as a
// TypeScript shop runs one: Express, one StreamableHTTPServerTransport per session kept
// in a map, an in-memory event store for resumption, idle sessions expired by the server.
// tests/test_e2e_typescript.py runs it behind Caddy and nginx.
//
//   node ts_server.mjs --port 8000 [--protect on|off] [--dead-status 404] [--idle-ms 1500]
//
// --protect on: the transport's DNS-rebinding protection with a loopback allow-list (it
// answers a foreign Origin 403; the routing below answers first for a request whose
// session is unknown or missing). --dead-status: what an unknown or expired session gets
// (the SDK's examples up to 1.24 answer 400, later ones 404).
import { randomUUID } from 'node:crypto';
import { parseArgs } from 'node:util';
import express from 'express';
import { z } from 'zod';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { isInitializeRequest } from '@modelcontextprotocol/sdk/types.js';

const { values: opt } = parseArgs({
  options: {
    port: { type: 'string' },
    protect: { type: 'string', default: 'on' },
    'dead-status': { type: 'string', default: '404' },
    'idle-ms': { type: 'string', default: '1500' },
  },
});
const DEAD = Number(opt['dead-status']);
const IDLE_MS = Number(opt['idle-ms']);
// The transport compares Origin exactly: the local web client's origin (MCP Inspector's).
const ALLOWED = ['http://localhost:6274', 'http://127.0.0.1:6274'];

// Events by id, in order; a replay sends what its stream stored after the cursor.
class MemoryStore {
  constructor() {
    this.events = new Map();
    this.next = 0;
  }
  async storeEvent(streamId, message) {
    const id = `${streamId}.${++this.next}`;
    this.events.set(id, { streamId, message });
    return id;
  }
  async getStreamIdForEventId(eventId) {
    return this.events.get(eventId)?.streamId;
  }
  async replayEventsAfter(lastEventId, { send }) {
    const from = this.events.get(lastEventId);
    if (!from) return '';
    let after = false;
    for (const [id, { streamId, message }] of this.events) {
      if (after && streamId === from.streamId && message && Object.keys(message).length) {
        await send(id, message);
      }
      if (id === lastEventId) after = true;
    }
    return from.streamId;
  }
}

let tickets = 0;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function mcpServer() {
  const server = new McpServer(
    { name: 'replaygate-ts-e2e', version: '1.0.0' },
    { capabilities: { logging: {} } },
  );
  server.registerTool(
    'count',
    {
      description: 'Logs 1..n, one every 150 ms, then answers.',
      inputSchema: { n: z.number().int() },
      annotations: { readOnlyHint: true },
    },
    async ({ n }, extra) => {
      for (let i = 1; i <= n; i++) {
        await extra.sendNotification({
          method: 'notifications/message',
          params: { level: 'info', data: String(i) },
        });
        await sleep(150);
      }
      return { content: [{ type: 'text', text: `counted to ${n}` }] };
    },
  );
  server.registerTool(
    'create_ticket',
    {
      description: 'A write: creates a ticket after 600 ms.',
      inputSchema: { title: z.string() },
    },
    async ({ title }, extra) => {
      await extra.sendNotification({
        method: 'notifications/message',
        params: { level: 'info', data: 'creating' },
      });
      await sleep(600);
      return { content: [{ type: 'text', text: `ticket ${++tickets}: ${title}` }] };
    },
  );
  return server;
}

const sessions = new Map(); // id -> { transport, seen }
const app = express();
app.use(express.json());

async function handle(req, res) {
  const id = req.get('mcp-session-id');
  const known = id && sessions.get(id);
  if (known) {
    known.seen = Date.now();
    res.on('close', () => (known.seen = Date.now()));
    await known.transport.handleRequest(req, res, req.body);
    return;
  }
  if (id) {
    res.status(DEAD).json({ jsonrpc: '2.0', error: { code: -32001, message: 'Session not found' }, id: null });
    return;
  }
  if (req.method !== 'POST' || !isInitializeRequest(req.body)) {
    res.status(400).json({ jsonrpc: '2.0', error: { code: -32000, message: 'No valid session id' }, id: null });
    return;
  }
  const transport = new StreamableHTTPServerTransport({
    sessionIdGenerator: () => randomUUID(),
    eventStore: new MemoryStore(),
    retryInterval: 300,
    enableDnsRebindingProtection: opt.protect === 'on',
    allowedOrigins: ALLOWED,
    onsessioninitialized: (sid) => {
      const session = { transport, seen: Date.now() };
      sessions.set(sid, session);
      res.on('close', () => (session.seen = Date.now()));
    },
  });
  transport.onclose = () => transport.sessionId && sessions.delete(transport.sessionId);
  await mcpServer().connect(transport);
  await transport.handleRequest(req, res, req.body);
}
// Routes by method, as the SDK's examples have them: Express itself answers an OPTIONS
// (a CORS preflight) with 200 and the methods it routes.
app.post('/mcp', handle);
app.get('/mcp', handle);
app.delete('/mcp', handle);

// The server forgets a session IDLE_MS after its last request began or ended.
setInterval(() => {
  const now = Date.now();
  for (const [sid, s] of sessions) {
    if (now - s.seen > IDLE_MS) {
      sessions.delete(sid);
      s.transport.close();
    }
  }
}, 100);

app.listen(Number(opt.port), '127.0.0.1');
