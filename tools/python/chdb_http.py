#!/usr/bin/env python3
"""A current ClickHouse engine (chDB, embedded) behind the subset of ClickHouse's HTTP interface
that pmw's client (the Rust `clickhouse` crate over HTTP, RowBinary, no compression) uses.

pmw's tests point the production code at this server to prove the schema and every statement on
a current ClickHouse as well as on Debian's 18.16. What is served:

- POST/GET `/` with the statement in the body, or in the `query` URL parameter with the body as
  the INSERT's data (`INSERT INTO t(cols) FORMAT RowBinary` + RowBinary rows; chunked or not);
- the `database` parameter (the statement runs after `USE database`), `default_format` (the
  result's format; RowBinary for fetches), other parameters ignored;
- errors as HTTP 500 with ClickHouse's message and `X-ClickHouse-Exception-Code`;
- GET `/ping` -> `Ok.`.

The engine runs on one chDB session with a data directory; statements are serialised.
The first stdout line is JSON {"listening": port, "version": "<server version>"}; then one JSON
line {"query": "..."} per statement received, so a test can check which statements ran.
"""

import argparse
import json
import os
import re
import sys
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

os.environ.setdefault("TZ", "UTC")  # like the stack's server: nothing depends on it
from chdb import session as chdb_session  # noqa: E402

INSERT_RE = re.compile(
    r"^\s*INSERT\s+INTO\s+([A-Za-z0-9_.`]+)\s*\(([^)]*)\)\s*FORMAT\s+RowBinary\s*$",
    re.IGNORECASE | re.DOTALL,
)
IDENT_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
CODE_RE = re.compile(r"Code:\s*(\d+)")


class Engine:
    """One chDB session; every statement runs under the lock."""

    def __init__(self, path):
        self.path = path
        self.session = chdb_session.Session(path)
        self.lock = threading.Lock()
        self.version = self._query("SELECT version()", "TabSeparated").decode().strip()

    def _query(self, sql, fmt):
        res = self.session.query(sql, fmt)
        return res.bytes() if res is not None else b""

    def run(self, database, sql, fmt, data):
        with self.lock:
            self._query(f"USE {database}", "TabSeparated")
            if data is None:
                return self._query(sql, fmt)
            return self._insert(database, sql, data)

    def _insert(self, database, sql, data):
        m = INSERT_RE.match(sql)
        if not m:
            raise ValueError(f"only INSERT INTO t(cols) FORMAT RowBinary takes a body: {sql}")
        table = m.group(1).replace("`", "")
        cols = [c.strip().strip("`") for c in m.group(2).split(",")]
        for name in [table, *cols]:
            if not all(IDENT_RE.match(p) for p in name.split(".")):
                raise ValueError(f"unexpected identifier {name!r}")
        db, _, tbl = table.rpartition(".")
        db = db or database
        out = self._query(
            f"SELECT name, type FROM system.columns WHERE database = '{db}' AND table = '{tbl}'",
            "JSONCompact",
        )
        types = dict(json.loads(out)["data"]) if out else {}
        missing = [c for c in cols if c not in types]
        if missing:
            raise ValueError(f"Code: 16. DB::Exception: No such column {missing} in table {table}")
        structure = ", ".join(f"{c} {types[c]}" for c in cols)
        fd, path = tempfile.mkstemp(suffix=".rowbinary", dir=self.path)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            if not data:
                return b""
            self._query(
                f"INSERT INTO {table} ({', '.join(cols)}) "
                f"SELECT * FROM file('{path}', 'RowBinary', '{structure}')",
                "TabSeparated",
            )
        finally:
            os.unlink(path)
        return b""


def read_body(handler):
    if handler.headers.get("Transfer-Encoding", "").lower() == "chunked":
        parts = []
        while True:
            line = handler.rfile.readline().strip()
            size = int(line.split(b";")[0], 16)
            if size == 0:
                while handler.rfile.readline() not in (b"\r\n", b"\n", b""):
                    pass
                return b"".join(parts)
            parts.append(handler.rfile.read(size))
            handler.rfile.readline()
    n = int(handler.headers.get("Content-Length") or 0)
    return handler.rfile.read(n) if n else b""


def make_handler(engine, log):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def reply(self, status, body, headers=()):
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            for k, v in headers:
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(body)

        def handle_one(self):
            url = urlparse(self.path)
            if url.path == "/ping":
                return self.reply(200, b"Ok.\n")
            params = {k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
            body = read_body(self)
            if "query" in params:
                sql, data = params["query"], body
                if not data and not INSERT_RE.match(sql):
                    data = None
            else:
                sql, data = body.decode("utf-8"), None
            database = params.get("database", "default")
            if not IDENT_RE.match(database):
                return self.reply(400, b"bad database name")
            log(sql)
            fmt = params.get("default_format", "TabSeparated")
            try:
                out = engine.run(database, sql, fmt, data)
            except Exception as e:  # the engine's message, as ClickHouse's HTTP interface does
                msg = str(e)
                m = CODE_RE.search(msg)
                headers = [("X-ClickHouse-Exception-Code", m.group(1) if m else "1")]
                return self.reply(500, (msg + "\n").encode(), headers)
            self.reply(200, out, [("Content-Type", "application/octet-stream")])

        do_POST = handle_one
        do_GET = handle_one

    return Handler


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--data", required=True, help="chDB data directory")
    ap.add_argument("--max-seconds", type=float, default=0, help="exit after this long (0: never)")
    args = ap.parse_args()
    engine = Engine(args.data)
    out_lock = threading.Lock()

    def emit(obj):
        with out_lock:
            sys.stdout.write(json.dumps(obj) + "\n")
            sys.stdout.flush()

    server = ThreadingHTTPServer(("127.0.0.1", args.port), make_handler(engine, lambda q: emit({"query": q})))
    server.daemon_threads = True
    if args.max_seconds > 0:
        threading.Timer(args.max_seconds, server.shutdown).start()
    emit({"listening": server.server_address[1], "version": engine.version})
    server.serve_forever()


if __name__ == "__main__":
    main()
