// Dev-only pm2 apps, started by `scripts/dev` next to the production ecosystem
// (ecosystem.config.js, which runs the services). Never used in production.
//
//   pmw-sim       pmw-sim trading on the stack's anvil every block, plus its Gamma-compatible
//                 markets server (pmw-live's PMW_GAMMA_URL)
//   pmw-caddy     `caddy run` with the production Caddyfile, its addresses from the environment
//   pmw-webhooks  a local webhook receiver: verifies every delivery with the official
//                 standardwebhooks library (tools/python/.venv) and logs one JSON line each
//   pmw-discord   a local Discord-shaped receiver for the demo's chat endpoint: checks each
//                 execute-webhook request (POST /api/webhooks/<id>/<token>, JSON `content`) and
//                 logs the readable message
//   pmw-prometheus  Debian's Prometheus with the config scripts/dev writes in
//                 $PMW_DEV_DIR/prometheus (every service's metrics, deploy/prometheus rules)
//
// Everything comes from the environment of `pm2 start` (scripts/dev sets it): PMW_BIN_DIR,
// PMW_DEV_DIR and the PMW_DEV_* / PMW_*_PORT ports.
const path = require('path');

const root = path.resolve(__dirname, '..', '..');
const env = process.env;
const bin = env.PMW_BIN_DIR || path.join(root, 'target', 'debug');
const devDir = env.PMW_DEV_DIR || path.join(root, 'target', 'pmw-dev');
const get = (name, dflt) => env[name] || String(dflt);

const common = {
  interpreter: 'none',
  autorestart: true,
  exp_backoff_restart_delay: 200,
  min_uptime: 30000,
  max_restarts: 100000,
  kill_signal: 'SIGTERM',
  kill_timeout: 10000,
  merge_logs: true,
  time: true,
};

// The Discord-shaped receiver: 204 for a well-formed execute-webhook request, 400 otherwise (as
// Discord answers); each message is logged as its text, a line per line.
const discord = `
import json, os, re, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
port = int(os.environ["PMW_DEV_DISCORD_PORT"])
class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_POST(self):
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            if not re.fullmatch(r"/api/webhooks/[0-9]+/[A-Za-z0-9_-]+", self.path):
                raise ValueError("not an execute-webhook path")
            if not (self.headers.get("Content-Type") or "").startswith("application/json"):
                raise ValueError("not json")
            content = json.loads(raw)["content"]
            if not content or len(content) > 2000:
                raise ValueError("content missing or too long")
            sys.stdout.write("discord> " + content.replace("\\n", "\\n         ") + "\\n")
            sys.stdout.flush()
            self.send_response(204)
            self.end_headers()
        except Exception as e:
            body = str(e).encode()
            self.send_response(400)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
    def log_message(self, *a):
        pass
ThreadingHTTPServer(("127.0.0.1", port), H).serve_forever()
`;

// The receiver: POST anywhere, 204 when the signature verifies (401 otherwise, so pmw retries).
const receiver = `
import json, os, sys, threading, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from standardwebhooks import Webhook
port = int(os.environ["PMW_DEV_WEBHOOK_PORT"])
secret = os.environ.get("PMW_DEV_WEBHOOK_SECRET", "")
hook = Webhook(secret) if secret else None
lock = threading.Lock()
def emit(rec):
    with lock:
        sys.stdout.write(json.dumps(rec) + "\\n")
        sys.stdout.flush()
class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_POST(self):
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        rec = {"id": self.headers.get("webhook-id"), "ok": False}
        try:
            if hook is None:
                raise ValueError("no secret configured")
            body = hook.verify(raw, dict(self.headers.items()))
            t = body.get("trade") or {}
            rec.update(ok=True, type=body.get("type"), cursor=body.get("cursor"),
                       wallet=t.get("wallet"), side=t.get("side"), price=t.get("price"),
                       shares=t.get("shares"), ms_after_push=int(time.time() * 1000) - int(body.get("t_push_ms") or 0))
        except Exception as e:
            rec["error"] = "%s: %s" % (type(e).__name__, e)
        emit(rec)
        self.send_response(204 if rec["ok"] else 401)
        self.send_header("Content-Length", "0")
        self.end_headers()
    def log_message(self, *a):
        pass
srv = ThreadingHTTPServer(("127.0.0.1", port), H)
srv.daemon_threads = True
emit({"listening": "127.0.0.1:%d" % port, "verifying": bool(secret)})
srv.serve_forever()
`;

module.exports = {
  apps: [
    {
      ...common,
      name: 'pmw-sim',
      script: path.join(bin, 'pmw-sim'),
      args: [
        'run',
        '--demo-wallets', get('PMW_DEV_SIM_WALLETS', 6),
        '--matches-per-block', get('PMW_DEV_SIM_MATCHES_PER_BLOCK', 2),
        '--interval-ms', get('PMW_DEV_SIM_INTERVAL_MS', 0),
        '--markets-addr', `127.0.0.1:${get('PMW_DEV_MARKETS_PORT', 18090)}`,
        '--report', path.join(devDir, 'sim-report.jsonl'),
        // The pending tier (scripts/dev, PMW_DEV_PENDING): settle through the mempool.
        ...(env.PMW_DEV_SIM_CONFIG ? ['--config', env.PMW_DEV_SIM_CONFIG] : []),
      ],
    },
    {
      ...common,
      name: 'pmw-caddy',
      script: env.PMW_CADDY_BIN || '/usr/bin/caddy',
      args: ['run', '--adapter', 'caddyfile', '--config', path.join(root, 'caddy', 'Caddyfile')],
      env: {
        PMW_SITE: `http://127.0.0.1:${get('PMW_DEV_PORT', 8443)}`,
        PMW_PUSH_A: `127.0.0.1:${get('PMW_PUSH_A_PORT', 18081)}`,
        PMW_PUSH_B: `127.0.0.1:${get('PMW_PUSH_B_PORT', 18091)}`,
        PMW_API: `127.0.0.1:${get('PMW_API_PORT', 18080)}`,
        PMW_API_B: `127.0.0.1:${get('PMW_API_B_PORT', 18088)}`,
        PMW_STATS: `127.0.0.1:${get('PMW_STATS_PORT', 18082)}`,
        PMW_CADDY_ADMIN: `127.0.0.1:${get('PMW_DEV_CADDY_ADMIN_PORT', 18019)}`,
        // Caddy's own state (autosave.json, certificates) stays in the dev dir.
        XDG_DATA_HOME: path.join(devDir, 'caddy', 'data'),
        XDG_CONFIG_HOME: path.join(devDir, 'caddy', 'config'),
      },
    },
    {
      ...common,
      name: 'pmw-prometheus',
      script: env.PMW_PROMETHEUS_BIN || '/usr/bin/prometheus',
      args: [
        `--config.file=${path.join(devDir, 'prometheus', 'prometheus.yml')}`,
        `--storage.tsdb.path=${path.join(devDir, 'prometheus', 'data')}`,
        `--web.listen-address=127.0.0.1:${get('PMW_DEV_PROMETHEUS_PORT', 18190)}`,
        '--storage.tsdb.retention.time=2d',
      ],
    },
    {
      ...common,
      name: 'pmw-webhooks',
      script: path.join(root, 'tools', 'python', '.venv', 'bin', 'python'),
      args: ['-u', '-c', receiver],
      env: { PMW_DEV_WEBHOOK_PORT: get('PMW_DEV_WEBHOOK_PORT', 18099) },
    },
    {
      ...common,
      name: 'pmw-discord',
      script: path.join(root, 'tools', 'python', '.venv', 'bin', 'python'),
      args: ['-u', '-c', discord],
      env: { PMW_DEV_DISCORD_PORT: get('PMW_DEV_DISCORD_PORT', 18098) },
    },
  ],
};
