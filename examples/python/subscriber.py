"""A pmw subscriber in Python: live trades over the WebSocket, resumed after a disconnect, and
signed webhooks verified with the official Standard Webhooks library.

    pip install websockets standardwebhooks
    PMW_WS_URL=wss://pmw.example.com/v1/ws PMW_API_KEY=pmw_... python subscriber.py ws
    PMW_WEBHOOK_SECRET=whsec_... python subscriber.py webhooks 8000

Every trade (and retract) is printed as one JSON line. The WebSocket client stores the `resume`
position of each trade frame and heartbeat in PMW_RESUME_FILE and reconnects with
`?since=<resume>`, so nothing is missed or repeated across reconnects and restarts.
PMW_EXIT_AFTER=n stops after n messages (used by the tests).
"""

import asyncio
import json
import os
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer

import websockets
from standardwebhooks import Webhook

EXIT_AFTER = int(os.environ.get("PMW_EXIT_AFTER", "0"))


def emit(message):
    print(json.dumps(message), flush=True)


async def subscribe():
    url = os.environ["PMW_WS_URL"]
    key = os.environ["PMW_API_KEY"]
    resume_file = os.environ.get("PMW_RESUME_FILE", ".pmw-resume")
    seen = 0
    while True:
        since = open(resume_file).read().strip() if os.path.exists(resume_file) else ""
        target = f"{url}?since={since}" if since else url
        try:
            async with websockets.connect(
                target, additional_headers={"Authorization": f"Bearer {key}"}
            ) as ws:
                async for raw in ws:
                    frame = json.loads(raw)
                    kind = frame["type"]
                    if kind == "hello":
                        print(f"connected at {frame['resume']}", file=sys.stderr, flush=True)
                    if kind in ("trade", "retract"):
                        emit(frame)
                        seen += 1
                    elif kind == "resync":
                        # Too far behind for the WebSocket: page GET /v1/trades?after=<after>.
                        emit(frame)
                    if kind in ("trade", "heartbeat"):
                        with open(resume_file, "w") as f:
                            f.write(frame["resume"])
                    if EXIT_AFTER and seen >= EXIT_AFTER:
                        return
        except (OSError, websockets.ConnectionClosed) as e:
            print(f"disconnected ({e}); reconnecting", file=sys.stderr, flush=True)
            await asyncio.sleep(1)


def receive(port):
    hook = Webhook(os.environ["PMW_WEBHOOK_SECRET"])
    state = {"seen": 0}

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            try:
                message = hook.verify(body, dict(self.headers))
            except Exception as e:  # a forged, altered or stale request
                print(f"rejected: {e}", file=sys.stderr, flush=True)
                self.send_response(400)
                self.end_headers()
                return
            self.send_response(204)
            self.end_headers()
            emit(message)
            state["seen"] += 1

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", port), Handler)
    while not (EXIT_AFTER and state["seen"] >= EXIT_AFTER):
        server.handle_request()


if __name__ == "__main__":
    if sys.argv[1:2] == ["ws"]:
        asyncio.run(subscribe())
    elif sys.argv[1:2] == ["webhooks"]:
        receive(int(sys.argv[2]))
    else:
        sys.exit("usage: subscriber.py ws | webhooks PORT")
