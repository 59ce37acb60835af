// A real MCP client for cordon's integration tests: the official TypeScript SDK's Client over
// its StreamableHTTPClientTransport. It connects (initialize, notifications/initialized, the
// SDK's GET stream), lists the tools and calls each tool named with --call; it prints one JSON
// object on stdout:
//   {"protocolVersion", "serverInfo", "tools": [names], "calls": [{name, ok, result | error}],
//    "errors": [transport errors the SDK reported]}
// and exits 0 (a refused call is an "ok": false entry, not a failure); 1 when it could not
// connect or list.
//
// Usage: node mcp_client.mjs URL [--proxy http://SESSION:TOKEN@HOST:PORT]
//                                [--call NAME JSON-ARGUMENTS]... [--timeout-ms N]
// The SDK is loaded from $CORDON_MCP_SDK_DIR (default /opt/cordon-it/mcp-sdk), the directory
// given to `npm install --prefix DIR @modelcontextprotocol/sdk`.
//
// Node's fetch ignores HTTP_PROXY/HTTPS_PROXY (before Node 24's NODE_USE_ENV_PROXY), so with
// --proxy the transport gets a fetch of its own, on node's http, https and tls modules: an
// http:// URL goes to the proxy in absolute form (`POST http://host:port/mcp`) with
// Proxy-Authorization, as a forward proxy needs; an https:// URL through a CONNECT tunnel, TLS
// inside it verified against Node's roots plus NODE_EXTRA_CA_CERTS (cordon's CA). One
// connection per request (no keep-alive): a refused call may close it.
//
// The SDK opens a GET stream after notifications/initialized; the test server ends it after
// one event, and with reconnection off the SDK reports "Maximum reconnection attempts (0)
// exceeded." in "errors": expected, not a failure.

import { readFileSync } from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import { join } from 'node:path';
import tls from 'node:tls';
import { pathToFileURL } from 'node:url';

function usage(msg) {
  process.stderr.write(`mcp_client.mjs: ${msg}\nusage: node mcp_client.mjs URL [--proxy URL] ` +
                       '[--call NAME JSON]... [--timeout-ms N]\n');
  process.exit(2);
}

const argv = process.argv.slice(2);
let url = null;
let proxy = null;
let timeoutMs = 15000;
const calls = [];
for (let i = 0; i < argv.length; i++) {
  const a = argv[i];
  if (a === '--proxy') {
    proxy = argv[++i];
  } else if (a === '--call') {
    const name = argv[++i];
    const args = argv[++i];
    if (name === undefined || args === undefined) usage('--call needs NAME and JSON');
    calls.push({ name, arguments: JSON.parse(args) });
  } else if (a === '--timeout-ms') {
    timeoutMs = Number(argv[++i]);
  } else if (a.startsWith('--')) {
    usage(`unknown option ${a}`);
  } else if (url === null) {
    url = a;
  } else {
    usage('one URL only');
  }
}
if (url === null) usage('no URL');
if (proxy === '') proxy = null;

// The SDK, resolved from its install directory through its package's "exports" ("./*":
// {"import": "./dist/esm/*"}): ESM ignores NODE_PATH, and this script is not under DIR.
const sdkDir = process.env.CORDON_MCP_SDK_DIR || '/opt/cordon-it/mcp-sdk';
const pkgDir = join(sdkDir, 'node_modules', '@modelcontextprotocol', 'sdk');
function sdkModule(sub) {
  const pkg = JSON.parse(readFileSync(join(pkgDir, 'package.json'), 'utf8'));
  const pattern = pkg.exports?.['./*']?.import ?? './dist/esm/*';
  return import(pathToFileURL(join(pkgDir, pattern.replace('*', sub))).href);
}
const { Client } = await sdkModule('client/index.js');
const { StreamableHTTPClientTransport } = await sdkModule('client/streamableHttp.js');

// fetch through a forward proxy -------------------------------------------------------------

function once(req, body, signal) {
  return new Promise((resolve, reject) => {
    const abort = () => { req.destroy(new Error('aborted')); };
    if (signal) {
      if (signal.aborted) { abort(); }
      signal.addEventListener('abort', abort, { once: true });
    }
    req.on('response', (res) => {
      if (signal) {
        signal.addEventListener('abort', () => res.destroy(), { once: true });
      }
      resolve(res);
    });
    req.on('error', reject);
    req.setTimeout(timeoutMs, () => req.destroy(new Error('timeout')));
    req.end(body ?? undefined);
  });
}

function tunnel(p, auth, host, port, signal) {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: p.hostname, port: Number(p.port || 80), method: 'CONNECT',
                               path: `${host}:${port}`, agent: false,
                               headers: { Host: `${host}:${port}`,
                                          'Proxy-Authorization': auth } });
    if (signal) signal.addEventListener('abort', () => req.destroy(), { once: true });
    req.on('connect', (res, socket) => {
      if (res.statusCode !== 200) {
        socket.destroy();
        reject(new Error(`CONNECT ${host}:${port}: ${res.statusCode}`));
        return;
      }
      resolve(socket);
    });
    req.on('error', reject);
    req.setTimeout(timeoutMs, () => req.destroy(new Error('CONNECT timeout')));
    req.end();
  });
}

// The answer's body as a web stream, closed once: Node 18's Readable.toWeb closes it on 'end'
// and again on 'close' ("Invalid state: Controller is already closed", Debian 12's node).
function webBody(res) {
  let done = false;
  return new ReadableStream({
    start(controller) {
      res.on('data', (chunk) => { if (!done) controller.enqueue(new Uint8Array(chunk)); });
      const finish = () => { if (!done) { done = true; controller.close(); } };
      res.on('end', finish);
      res.on('close', finish);
      res.on('error', (e) => { if (!done) { done = true; controller.error(e); } });
    },
    cancel() {
      done = true;
      res.destroy();
    },
  });
}

function proxyFetch(proxyUrl) {
  const p = new URL(proxyUrl);
  const auth = 'Basic ' + Buffer.from(`${decodeURIComponent(p.username)}:` +
                                      `${decodeURIComponent(p.password)}`).toString('base64');
  return async function fetchViaProxy(input, init = {}) {
    const target = new URL(input instanceof Request ? input.url : String(input));
    const method = (init.method || 'GET').toUpperCase();
    const headers = {};
    new Headers(init.headers || {}).forEach((v, k) => { headers[k] = v; });
    let body = null;
    if (init.body != null) {
      body = Buffer.from(typeof init.body === 'string'
        ? init.body : await new Response(init.body).arrayBuffer());
      headers['content-length'] = String(body.length);
    }
    headers.host = target.host;
    headers.connection = 'close';
    let res;
    if (target.protocol === 'http:') {
      headers['proxy-authorization'] = auth;
      res = await once(http.request({ host: p.hostname, port: Number(p.port || 80), method,
                                      path: target.href, headers, agent: false }),
                       body, init.signal);
    } else if (target.protocol === 'https:') {
      const port = Number(target.port || 443);
      const raw = await tunnel(p, auth, target.hostname, port, init.signal);
      const socket = tls.connect({ socket: raw, servername: target.hostname,
                                   ALPNProtocols: ['http/1.1'] });
      // No agent: with one (even agent: false) Node ignores createConnection.
      res = await once(https.request({ host: target.hostname, port, method,
                                       path: target.pathname + target.search, headers,
                                       createConnection: () => socket }),
                       body, init.signal);
    } else {
      throw new TypeError(`unsupported URL ${target.href}`);
    }
    const out = new Headers();
    for (let i = 0; i + 1 < res.rawHeaders.length; i += 2) {
      out.append(res.rawHeaders[i], res.rawHeaders[i + 1]);
    }
    const noBody = method === 'HEAD' || [101, 204, 205, 304].includes(res.statusCode);
    if (noBody) res.resume();
    return new Response(noBody ? null : webBody(res),
                        { status: res.statusCode, statusText: res.statusMessage, headers: out });
  };
}

// the client --------------------------------------------------------------------------------

const errors = [];
const transport = new StreamableHTTPClientTransport(new URL(url), {
  ...(proxy ? { fetch: proxyFetch(proxy) } : {}),
  reconnectionOptions: { maxRetries: 0, initialReconnectionDelay: 1000,
                         maxReconnectionDelay: 1000, reconnectionDelayGrowFactor: 1 },
});
const client = new Client({ name: 'cordon-it-sdk-client', version: '1.0.0' });
client.onerror = (e) => { errors.push(String(e?.message ?? e)); };

const out = { protocolVersion: null, serverInfo: null, tools: null, calls: [], errors };
const timer = setTimeout(() => {
  out.errors.push(`timed out after ${timeoutMs} ms`);
  process.stdout.write(JSON.stringify(out) + '\n');
  process.exit(1);
}, timeoutMs + 5000);

let status = 0;
try {
  await client.connect(transport, { timeout: timeoutMs });
  out.protocolVersion = transport.protocolVersion ?? null;
  out.serverInfo = client.getServerVersion() ?? null;
  const listed = await client.listTools(undefined, { timeout: timeoutMs });
  out.tools = listed.tools.map((t) => t.name);
  for (const c of calls) {
    try {
      const result = await client.callTool({ name: c.name, arguments: c.arguments }, undefined,
                                           { timeout: timeoutMs });
      out.calls.push({ name: c.name, ok: true, result });
    } catch (e) {
      out.calls.push({ name: c.name, ok: false,
                       error: { code: e?.code ?? null, message: String(e?.message ?? e),
                                data: e?.data ?? null } });
    }
  }
} catch (e) {
  errors.push(`fatal: ${e?.message ?? e}`);
  status = 1;
} finally {
  try { await client.close(); } catch (e) { errors.push(`close: ${e?.message ?? e}`); }
}
clearTimeout(timer);
process.stdout.write(JSON.stringify(out) + '\n');
process.exit(status);
