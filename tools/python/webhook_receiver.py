#!/usr/bin/env python3
"""Independent webhook receiver: verifies every request with the official `standardwebhooks`
library (not pmw's signer) and reports each verdict as one JSON line on stdout.

    webhook_receiver.py --secret whsec_... [--status 204] [--max-seconds 300]

First line: {"listening": <port>} (bound on 127.0.0.1, port chosen by the OS).
Then per request: {"id", "timestamp", "signatures", "ok", "error", "body", "user_agent"}.
Exits when stdin closes or after --max-seconds, whichever comes first.
"""

import argparse
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from standardwebhooks import Webhook, WebhookVerificationError

_out_lock = threading.Lock()


def emit(record):
    with _out_lock:
        sys.stdout.write(json.dumps(record, sort_keys=True) + "\n")
        sys.stdout.flush()


def make_handler(webhook, status):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self):  # noqa: N802 (http.server naming)
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length)
            headers = {k: v for k, v in self.headers.items()}
            record = {
                "id": self.headers.get("webhook-id"),
                "timestamp": self.headers.get("webhook-timestamp"),
                "signatures": self.headers.get("webhook-signature"),
                "user_agent": self.headers.get("user-agent"),
                "content_type": self.headers.get("content-type"),
            }
            try:
                record["body"] = webhook.verify(raw, headers)
                record["ok"] = True
                record["error"] = None
            except WebhookVerificationError as e:
                record["ok"] = False
                record["error"] = str(e)
                record["body"] = None
            except Exception as e:  # malformed input: a verdict, not a crash
                record["ok"] = False
                record["error"] = "%s: %s" % (type(e).__name__, e)
                record["body"] = None
            emit(record)
            self.send_response(status if record["ok"] else 401)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, fmt, *args):  # keep stdout for verdicts only
            pass

    return Handler


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--secret", required=True, help="whsec_... secret to verify with")
    p.add_argument("--status", type=int, default=204, help="status for verified requests")
    p.add_argument("--max-seconds", type=float, default=300.0)
    args = p.parse_args()

    server = ThreadingHTTPServer(("127.0.0.1", 0), make_handler(Webhook(args.secret), args.status))
    server.daemon_threads = True
    emit({"listening": server.server_address[1]})
    threading.Thread(target=server.serve_forever, daemon=True).start()

    done = threading.Event()

    def watch_stdin():
        try:
            sys.stdin.read()
        finally:
            done.set()

    threading.Thread(target=watch_stdin, daemon=True).start()
    done.wait(args.max_seconds)
    server.shutdown()


if __name__ == "__main__":
    main()
