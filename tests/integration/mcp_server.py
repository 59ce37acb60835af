"""A small MCP server for cordon's integration tests: the Streamable HTTP transport of the
Model Context Protocol (JSON-RPC 2.0 over HTTP/1.1), standard library only.

One endpoint, /mcp:
- POST: one JSON-RPC message or a batch (a JSON array). Requests are answered, notifications
  and client responses are not: a POST that holds no request is answered 202 with no body.
  Methods: initialize (protocolVersion "2025-06-18", an Mcp-Session-Id header), ping,
  tools/list, tools/call (echoes the call's arguments as JSON text), resources/list; any
  other method gets error -32601. A body that is not JSON: 400 with error -32700; a
  message that is not JSON-RPC 2.0: error -32600.
- GET with Accept: text/event-stream: an SSE stream that carries one notification and ends.
  Without that Accept: 405.
- DELETE: 200 (the client ends its MCP session).

How an answer is written is set per server, at run time (set_options):
- mode "json": Content-Type application/json, Content-Length, keep-alive. A batch's answers
  are a JSON array.
- mode "sse": Content-Type text/event-stream, each JSON-RPC response as its own event
  `event: message\\ndata: <json>\\n\\n`. sse_framing "chunked" (default; keep-alive, as the
  official TypeScript SDK's server answers) or "close" (no length: the body ends when the
  server closes, `Connection: close`).
- split=N writes every body N bytes at a time, each piece flushed (in its own chunk when
  chunked) with split_delay seconds between pieces: an event arrives across many reads.
- preamble=True (SSE): a comment line (": keepalive") and an unrelated notification event
  (notifications/message) before the responses.
- pretty=True: JSON indented over several lines (in SSE, one `data:` line per line);
  crlf=True: SSE lines end in CRLF; event_ids=True: SSE events carry `id:` lines.

Every request is recorded (method, path, headers, body bytes, parsed JSON) in .requests, a
list the test reads directly under .lock (or through the helpers below), so a test can
assert that a refused call never reached the server. define_tool() changes a tool's
definition at run time (a "rug pull"); reset() restores the defaults.

Works over plain HTTP and over HTTPS (tls=(cert, key)).

Standalone: python3 mcp_server.py --port N [--tls CERT KEY] [--mode sse] [--split N] ...
(prints "listening on URL", serves until SIGINT or SIGTERM).
"""

import argparse
import copy
import http.server
import json
import signal
import socket
import socketserver
import ssl
import sys
import threading
import time
import uuid

PROTOCOL_VERSION = "2025-06-18"
SERVER_INFO = {"name": "cordon-it-mcp", "version": "1.0.0"}
LOOPBACK = "127.0.0.1"
MAX_BODY = 64 * 1024 * 1024  # what the server itself reads at most

DEFAULT_TOOLS = [
    {
        "name": "search",
        "title": "Web search",
        "description": "Searches the web and returns the top results for a query.",
        "inputSchema": {
            "type": "object",
            "properties": {"q": {"type": "string", "description": "the query"},
                           "limit": {"type": "integer", "minimum": 1, "maximum": 50}},
            "required": ["q"],
        },
        "annotations": {"readOnlyHint": True, "openWorldHint": True},
    },
    {
        "name": "fetch_page",
        "title": "Fetch a page",
        "description": "Fetches one web page and returns its text.",
        "inputSchema": {
            "type": "object",
            "properties": {"url": {"type": "string", "format": "uri"}},
            "required": ["url"],
        },
        "annotations": {"readOnlyHint": True},
    },
    {
        "name": "delete_repo",
        "title": "Delete a repository",
        "description": "Deletes a repository and all of its history. Cannot be undone.",
        "inputSchema": {
            "type": "object",
            "properties": {"repo": {"type": "string"}},
            "required": ["repo"],
        },
        "annotations": {"destructiveHint": True},
    },
]

DEFAULT_OPTIONS = {
    "mode": "json",            # "json" or "sse"
    "sse_framing": "chunked",  # "chunked" or "close"
    "split": None,             # None, or write bodies this many bytes at a time
    "split_delay": 0.003,      # seconds between two pieces
    "preamble": False,         # SSE: a comment and a notification event before the answers
    "pretty": False,           # JSON over several lines (SSE: several data: lines)
    "crlf": False,             # SSE lines end in CRLF
    "event_ids": False,        # SSE events carry id: lines
}

RESOURCES = [{"uri": "file:///project/README.md", "name": "README.md",
              "mimeType": "text/markdown"}]
PREAMBLE_NOTE = {"jsonrpc": "2.0", "method": "notifications/message",
                 "params": {"level": "info", "logger": "it", "data": "working on it"}}
STREAM_NOTE = {"jsonrpc": "2.0", "method": "notifications/message",
               "params": {"level": "info", "logger": "it", "data": "stream open"}}


def _error(id_, code, message, data=None):
    err = {"code": code, "message": message}
    if data is not None:
        err["data"] = data
    return {"jsonrpc": "2.0", "id": id_, "error": err}


def _result(id_, result):
    return {"jsonrpc": "2.0", "id": id_, "result": result}


def _dumps(obj, pretty):
    if pretty:
        return json.dumps(obj, indent=2, ensure_ascii=False)
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "cordon-it-mcp/1"
    timeout = 30  # an idle kept-alive connection ends after this

    def log_message(self, fmt, *args):
        if self.server.mcp.verbose:
            sys.stderr.write("mcp_server: " + (fmt % args) + "\n")

    def setup(self):
        super().setup()
        try:
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass

    # reading -----------------------------------------------------------------------

    def _read_body(self):
        """The request body (Content-Length or chunked), or raises ValueError."""
        te = self.headers.get("Transfer-Encoding")
        if te is not None:
            if te.strip().lower() != "chunked":
                raise ValueError(f"unsupported Transfer-Encoding {te!r}")
            out = bytearray()
            for _ in range(1_000_000):
                line = self.rfile.readline(1024)
                if not line:
                    raise ValueError("EOF in a chunked body")
                size = int(line.split(b";")[0].strip(), 16)
                if size == 0:
                    for _ in range(100):  # trailers, up to the blank line
                        if self.rfile.readline(8192) in (b"\r\n", b"\n", b""):
                            break
                    return bytes(out)
                if len(out) + size > MAX_BODY:
                    raise ValueError("body too large")
                chunk = self.rfile.read(size)
                if len(chunk) != size:
                    raise ValueError("EOF in a chunk")
                out.extend(chunk)
                self.rfile.readline(16)
            raise ValueError("too many chunks")
        n = int(self.headers.get("Content-Length") or 0)
        if n < 0 or n > MAX_BODY:
            raise ValueError("bad Content-Length")
        body = self.rfile.read(n) if n else b""
        if len(body) != n:
            raise ValueError("EOF in the body")
        return body

    def _record(self, body=b"", error=None):
        try:
            parsed = json.loads(body) if body else None
        except ValueError:
            parsed = None
        rec = {"method": self.command, "path": self.path,
               "headers": list(self.headers.items()), "body": body, "json": parsed,
               "error": error, "conn": id(self.connection), "time": time.monotonic()}
        self.server.mcp._add_request(rec)
        return rec

    # writing -----------------------------------------------------------------------

    def _write_raw(self, data, opts, chunked):
        """Writes body bytes, in pieces of opts["split"] bytes when set (each its own chunk
        when chunked), flushing each."""
        size = opts["split"] or len(data) or 1
        for i in range(0, len(data), size):
            piece = data[i:i + size]
            if chunked:
                piece = b"%x\r\n" % len(piece) + piece + b"\r\n"
            self.wfile.write(piece)
            self.wfile.flush()
            if opts["split"] and i + size < len(data):
                time.sleep(opts["split_delay"])

    def _send_json(self, status, obj, opts, extra=()):
        body = _dumps(obj, opts["pretty"]).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for k, v in extra:
            self.send_header(k, v)
        self.end_headers()
        self._write_raw(body, opts, chunked=False)

    def _sse_event(self, msg, opts):
        eol = "\r\n" if opts["crlf"] else "\n"
        lines = []
        if opts["event_ids"]:
            lines.append(f"id: {self.server.mcp._next_event_id()}")
        lines.append("event: message")
        lines += ["data: " + ln for ln in _dumps(msg, opts["pretty"]).split("\n")]
        return (eol.join(lines) + eol + eol).encode()

    def _send_sse(self, messages, opts, extra=(), preamble=None):
        chunked = opts["sse_framing"] == "chunked"
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        if chunked:
            self.send_header("Transfer-Encoding", "chunked")
        else:
            self.send_header("Connection", "close")
            self.close_connection = True
        for k, v in extra:
            self.send_header(k, v)
        self.end_headers()
        eol = "\r\n" if opts["crlf"] else "\n"
        if opts["preamble"] if preamble is None else preamble:
            self._write_raw((": keepalive" + eol + eol).encode(), opts, chunked)
            self._write_raw(self._sse_event(PREAMBLE_NOTE, opts), opts, chunked)
        for msg in messages:
            self._write_raw(self._sse_event(msg, opts), opts, chunked)
        if chunked:
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()

    # methods -----------------------------------------------------------------------

    def do_POST(self):
        mcp = self.server.mcp
        opts = mcp.options()
        if self.path.split("?", 1)[0] != "/mcp":
            self._record()
            self._send_json(404, {"error": "not found"}, opts)
            return
        try:
            body = self._read_body()
        except ValueError as e:
            self._record(error=str(e))
            self.close_connection = True
            self._send_json(400, _error(None, -32700, f"unreadable body: {e}"), opts,
                            [("Connection", "close")])
            return
        self._record(body)
        try:
            msg = json.loads(body)
        except ValueError:
            self._send_json(400, _error(None, -32700, "Parse error"), opts)
            return
        batch = isinstance(msg, list)
        if batch and not msg:
            self._send_json(400, _error(None, -32600, "Invalid Request: empty batch"), opts)
            return
        answers, extra = [], []
        for m in (msg if batch else [msg]):
            a, session = mcp._answer(m)
            if a is not None:
                answers.append(a)
            if session is not None:
                extra.append(("Mcp-Session-Id", session))
        if not answers:
            self.send_response(202)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if opts["mode"] == "sse":
            self._send_sse(answers, opts, extra)
        else:
            self._send_json(200, answers if batch else answers[0], opts, extra)

    def do_GET(self):
        opts = self.server.mcp.options()
        self._record()
        if self.path.split("?", 1)[0] != "/mcp":
            self._send_json(404, {"error": "not found"}, opts)
            return
        if "text/event-stream" not in self.headers.get("Accept", ""):
            self._send_json(405, {"error": "GET needs Accept: text/event-stream"}, opts,
                            [("Allow", "GET, POST, DELETE")])
            return
        self._send_sse([STREAM_NOTE], opts, preamble=False)

    def do_DELETE(self):
        opts = self.server.mcp.options()
        try:
            body = self._read_body()
        except ValueError:
            body = b""
        self._record(body)
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _not_allowed(self):
        self._record()
        self.send_response(405)
        self.send_header("Allow", "GET, POST, DELETE")
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_PUT = do_PATCH = do_HEAD = do_OPTIONS = _not_allowed


class _Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def finish_request(self, request, client_address):
        # Runs in the connection's own thread: the TLS handshake too, never in the accept
        # loop.
        if self.ctx is None:
            self.RequestHandlerClass(request, client_address, self)
            return
        request.settimeout(10)
        try:
            tls = self.ctx.wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError):
            return
        try:
            self.RequestHandlerClass(tls, client_address, self)
        finally:
            try:
                tls.close()
            except OSError:
                pass

    def handle_error(self, request, client_address):  # clients that vanish: quiet
        pass


class MCPServer:
    """The MCP server on host:port (port 0: an ephemeral one), plain HTTP or, with
    tls=(cert, key), HTTPS. Starts serving at once (a daemon thread); stop() ends it."""

    def __init__(self, port=0, host=LOOPBACK, tls=None, tools=None, verbose=False, **options):
        self.lock = threading.Lock()
        self.requests = []  # every request received, oldest first (read under .lock)
        self.sessions = []  # every Mcp-Session-Id handed out
        self.verbose = verbose
        self._default_tools = copy.deepcopy(tools if tools is not None else DEFAULT_TOOLS)
        self._tools = copy.deepcopy(self._default_tools)
        self._options = dict(DEFAULT_OPTIONS)
        self._event_id = 0
        self.set_options(**options)
        self.server = _Server((host, port), _Handler)
        self.server.mcp = self
        self.server.ctx = None
        if tls is not None:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(*tls)
            ctx.set_alpn_protocols(["http/1.1"])
            self.server.ctx = ctx
        self.tls = tls is not None
        self.host = host
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever,
                                       kwargs={"poll_interval": 0.1}, daemon=True)
        self.thread.start()

    def url(self, host=None):
        scheme = "https" if self.tls else "http"
        return f"{scheme}://{host or self.host}:{self.port}/mcp"

    # run-time behaviour -----------------------------------------------------------

    def set_options(self, **kw):
        """Changes how answers are written from the next request on (see the module doc)."""
        for k, v in kw.items():
            if k not in DEFAULT_OPTIONS:
                raise ValueError(f"unknown option {k!r}")
            if k == "mode" and v not in ("json", "sse"):
                raise ValueError(f"mode must be json or sse, not {v!r}")
            if k == "sse_framing" and v not in ("chunked", "close"):
                raise ValueError(f"sse_framing must be chunked or close, not {v!r}")
            if k == "split" and v is not None and (not isinstance(v, int) or v < 1):
                raise ValueError("split must be None or a positive int")
        with self.lock:
            self._options.update(kw)

    def options(self):
        with self.lock:
            return dict(self._options)

    def tools(self):
        """The current tool definitions (a copy)."""
        with self.lock:
            return copy.deepcopy(self._tools)

    def tool(self, name):
        return next((t for t in self.tools() if t["name"] == name), None)

    def define_tool(self, name, description=None, input_schema=None, **fields):
        """Changes tool `name` (or adds it): its description, its inputSchema, any other
        field. What the next tools/list answers."""
        with self.lock:
            t = next((t for t in self._tools if t["name"] == name), None)
            if t is None:
                t = {"name": name, "description": "",
                     "inputSchema": {"type": "object", "properties": {}}}
                self._tools.append(t)
            if description is not None:
                t["description"] = description
            if input_schema is not None:
                t["inputSchema"] = copy.deepcopy(input_schema)
            t.update(copy.deepcopy(fields))

    def set_tools(self, tools):
        with self.lock:
            self._tools = copy.deepcopy(tools)

    def reset(self):
        """The default tools and answer options again (records are kept)."""
        with self.lock:
            self._tools = copy.deepcopy(self._default_tools)
            self._options = dict(DEFAULT_OPTIONS)

    # what was received ----------------------------------------------------------------

    def _add_request(self, rec):
        with self.lock:
            self.requests.append(rec)

    def snapshot(self):
        """How many requests so far (for requests_since)."""
        with self.lock:
            return len(self.requests)

    def requests_since(self, n=0):
        with self.lock:
            return list(self.requests[n:])

    def find(self, marker):
        """The requests whose body (or path) holds `marker` (str or bytes)."""
        m = marker.encode() if isinstance(marker, str) else marker
        with self.lock:
            return [r for r in self.requests if m in r["body"] or m in r["path"].encode()]

    def messages(self, method=None, since=0):
        """Every JSON-RPC message received in POST bodies (batches flattened), oldest first;
        only those of `method` when given."""
        out = []
        for r in self.requests_since(since):
            if r["method"] != "POST":
                continue
            js = r["json"]
            for m in (js if isinstance(js, list) else [js]):
                if isinstance(m, dict) and (method is None or m.get("method") == method):
                    out.append(m)
        return out

    def _next_event_id(self):
        with self.lock:
            self._event_id += 1
            return self._event_id

    # JSON-RPC -----------------------------------------------------------------------

    def _answer(self, m):
        """(answer or None, new session id or None) for one message."""
        if not isinstance(m, dict) or m.get("jsonrpc") != "2.0":
            return _error(m.get("id") if isinstance(m, dict) else None, -32600,
                          "Invalid Request"), None
        if "method" not in m:
            return None, None  # a response from the client (to a request of ours)
        if "id" not in m:
            return None, None  # a notification
        id_, method, params = m["id"], m["method"], m.get("params") or {}
        if method == "initialize":
            session = uuid.uuid4().hex
            with self.lock:
                self.sessions.append(session)
            return _result(id_, {
                "protocolVersion": PROTOCOL_VERSION,
                "capabilities": {"tools": {"listChanged": True}, "resources": {}},
                "serverInfo": SERVER_INFO,
                "instructions": "A test server for cordon's integration tests."}), session
        if method == "ping":
            return _result(id_, {}), None
        if method == "tools/list":
            return _result(id_, {"tools": self.tools(),
                                 "_meta": {"it/served-by": "mcp_server.py"}}), None
        if method == "tools/call":
            name = params.get("name") if isinstance(params, dict) else None
            if self.tool(name) is None:
                return _error(id_, -32602, f"Unknown tool: {name}"), None
            args = params.get("arguments", {})
            text = json.dumps(args, separators=(",", ":"), ensure_ascii=False)
            return _result(id_, {"content": [{"type": "text", "text": text}],
                                 "isError": False}), None
        if method == "resources/list":
            return _result(id_, {"resources": copy.deepcopy(RESOURCES)}), None
        return _error(id_, -32601, f"Method not found: {method}"), None

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


def main(argv=None):
    ap = argparse.ArgumentParser(description="A small MCP server (Streamable HTTP) for tests.")
    ap.add_argument("--host", default=LOOPBACK)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--tls", nargs=2, metavar=("CERT", "KEY"))
    ap.add_argument("--mode", choices=("json", "sse"), default="json")
    ap.add_argument("--sse-framing", choices=("chunked", "close"), default="chunked")
    ap.add_argument("--split", type=int, help="write bodies N bytes at a time")
    ap.add_argument("--split-delay", type=float, default=DEFAULT_OPTIONS["split_delay"])
    ap.add_argument("--preamble", action="store_true")
    ap.add_argument("--pretty", action="store_true")
    ap.add_argument("--crlf", action="store_true")
    ap.add_argument("--event-ids", action="store_true")
    ap.add_argument("-v", "--verbose", action="store_true", help="log each request")
    a = ap.parse_args(argv)
    srv = MCPServer(port=a.port, host=a.host, tls=tuple(a.tls) if a.tls else None,
                    verbose=a.verbose, mode=a.mode, sse_framing=a.sse_framing,
                    split=a.split, split_delay=a.split_delay, preamble=a.preamble,
                    pretty=a.pretty, crlf=a.crlf, event_ids=a.event_ids)
    print(f"listening on {srv.url()}", flush=True)
    done = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: done.set())
    while not done.wait(0.5):
        pass
    srv.stop()
    print(f"stopped after {srv.snapshot()} requests", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
