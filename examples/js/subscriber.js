// A pmw subscriber in JavaScript (Node 20): live trades over the WebSocket, resumed after a
// disconnect, and signed webhooks verified with the official Standard Webhooks library.
//
//   npm install ws standardwebhooks
//   PMW_WS_URL=wss://pmw.example.com/v1/ws PMW_API_KEY=pmw_... node subscriber.js ws
//   PMW_WEBHOOK_SECRET=whsec_... node subscriber.js webhooks 8000
//
// Every trade (and retract) is printed as one JSON line. The WebSocket client stores the
// `resume` position of each trade frame and heartbeat in PMW_RESUME_FILE and reconnects with
// `?since=<resume>`, so nothing is missed or repeated across reconnects and restarts.
// PMW_EXIT_AFTER=n stops after n messages (used by the tests).

const fs = require("fs");
const http = require("http");
const WebSocket = require("ws");
const { Webhook } = require("standardwebhooks");

const EXIT_AFTER = Number(process.env.PMW_EXIT_AFTER || 0);

function emit(message) {
  process.stdout.write(JSON.stringify(message) + "\n");
}

function subscribe() {
  const url = process.env.PMW_WS_URL;
  const key = process.env.PMW_API_KEY;
  const resumeFile = process.env.PMW_RESUME_FILE || ".pmw-resume";
  let seen = 0;
  // Set once the limit is reached: frames already in the socket's buffer still fire "message"
  // while the process exits, and must neither print nor move the resume point.
  let done = false;
  const connect = () => {
    const since = fs.existsSync(resumeFile) ? fs.readFileSync(resumeFile, "utf8").trim() : "";
    const target = since ? `${url}?since=${encodeURIComponent(since)}` : url;
    const ws = new WebSocket(target, { headers: { Authorization: `Bearer ${key}` } });
    ws.on("message", (raw) => {
      if (done) return;
      const frame = JSON.parse(raw);
      if (frame.type === "hello") console.error(`connected at ${frame.resume}`);
      if (frame.type === "trade" || frame.type === "retract") {
        emit(frame);
        seen += 1;
      } else if (frame.type === "resync") {
        // Too far behind for the WebSocket: page GET /v1/trades?after=<after>.
        emit(frame);
      }
      if (frame.type === "trade" || frame.type === "heartbeat") {
        fs.writeFileSync(resumeFile, frame.resume);
      }
      if (EXIT_AFTER && seen >= EXIT_AFTER) {
        done = true;
        ws.removeAllListeners("close");
        ws.terminate();
        process.stdout.write("", () => process.exit(0));
      }
    });
    ws.on("error", (e) => console.error(`websocket error: ${e.message}`));
    ws.on("close", (code) => {
      console.error(`disconnected (${code}); reconnecting`);
      setTimeout(connect, 1000);
    });
  };
  connect();
}

function receive(port) {
  const hook = new Webhook(process.env.PMW_WEBHOOK_SECRET);
  let seen = 0;
  const server = http.createServer((req, res) => {
    const chunks = [];
    req.on("data", (c) => chunks.push(c));
    req.on("end", () => {
      if (EXIT_AFTER && seen >= EXIT_AFTER) {
        // Exiting: not acknowledged, so pmw retries it (at least once).
        res.writeHead(503).end();
        return;
      }
      let message;
      try {
        message = hook.verify(Buffer.concat(chunks).toString("utf8"), req.headers);
      } catch (e) {
        // A forged, altered or stale request.
        console.error(`rejected: ${e.message}`);
        res.writeHead(400).end();
        return;
      }
      res.writeHead(204).end();
      emit(message);
      seen += 1;
      if (EXIT_AFTER && seen >= EXIT_AFTER) process.stdout.write("", () => process.exit(0));
    });
  });
  server.listen(port, "127.0.0.1");
}

if (process.argv[2] === "ws") subscribe();
else if (process.argv[2] === "webhooks") receive(Number(process.argv[3]));
else {
  console.error("usage: node subscriber.js ws | webhooks PORT");
  process.exit(2);
}
