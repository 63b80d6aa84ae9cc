// pm2 ecosystem for pmw: the same file runs production hosts, `scripts/dev` and the drills.
//
// Restart policy (the services' contract; every exit path is mapped in docs/OPERATIONS.md,
// "Processes and supervision", and proven by tests/drills.rs on this file with pm2 7.0.4):
//   exit after `pm2 stop`/`restart`/`delete`
//                          -> never restarted: pm2 marks the app "stopping" before it signals
//                             it, and never restarts a stopping app, whatever the exit code
//   78 config/schema error -> stays stopped: a human must fix it (stop_exit_codes: [78]); pm2
//                             lists it as "waiting restart" with pid 0 and exit_code 78
//   75 lost infrastructure -> restarted at once (first delay 200 ms, exponential backoff x1.5
//                             up to 15 s, reset after 30 s of uptime)
//   a signal death (kill -9, the OOM killer, SIGSEGV, SIGABRT)
//                          -> restarted with the same backoff. pm2 reports a signal death as
//                             exit code 0 (God.js: `handleExit(clu, code || 0, signal)`), so 0
//                             must NOT be in stop_exit_codes: with [0, 78] a killed service
//                             stayed "waiting restart" forever (issue 21)
//   0 on its own (a SIGTERM/SIGINT that did not come from pm2)
//                          -> restarted, as systemd's Restart=always does
//   other (a bug)          -> restarted with the same backoff, so a crash loop does not hammer
//                             Postgres; it shows up in `pm2 ls` restarts.
// kill_timeout is longer than push's round deadline (PMW_PUSH_ROUND_DEADLINE_MS, 10 s) so a
// graceful stop finishes its round, releases the lock and closes sockets with 1012.
//
// Prometheus metrics, on private loopback ports (deploy/prometheus/prometheus.yml scrapes them):
// live 9461, push-a 9462, push-b 9463, stats 9464, live-b 9465, stats-b 9466
// (PMW_*_METRICS_PORT override them; pmw-api serves /metrics on its own port).
// Pairs (docs/OPERATIONS.md, "The live and stats pairs"): pmw-live/pmw-live-b and
// pmw-stats/pmw-stats-b wait on their writer lock as push-a/push-b do; the standby binds
// nothing until it leads (stats-b's dashboard port is PMW_STATS_B_PORT, 8092). The API holds
// no lock: pmw-api and pmw-api-b (PMW_API_B_PORT, 8090) both serve, Caddy uses the first
// that answers its health check (PMW_API, PMW_API_B).
// Edge mode (docs/OPERATIONS.md, "Edge mode"): PMW_EDGES=N adds pmw-edge-1..N, edge i listening
// on 8100 + i (PMW_EDGE_<i>_PORT), metrics on 9469 + i (PMW_EDGE_<i>_METRICS_PORT); push
// and the edges then need PMW_PUSH_NATS_URLS / PMW_EDGE_NATS_URLS (and Caddy PMW_WS_MODE=edge),
// and on the locked broker their identities and its CA: PMW_PUSH_NATS_USER / _PASSWORD / _CA,
// PMW_EDGE_NATS_USER / _PASSWORD / _CA (docs/OPERATIONS.md, "Broker security").
// Binaries come from PMW_BIN_DIR; database and chain settings from the environment of
// `pm2 start` (PMW_POSTGRES_URL, PMW_CLICKHOUSE_URL, …; see crates/core/src/config.rs).
const bin = process.env.PMW_BIN_DIR || '/usr/local/lib/pmw/bin';
const port = (name, dflt) => process.env[name] || String(dflt);

// PMW_ENV: production by default (refuses to start without PMW_SECRET_KEYS unless
// PMW_ALLOW_UNSEALED_SECRETS=true; crates/core/src/config.rs); scripts/dev exports development.
const deployment = { PMW_ENV: process.env.PMW_ENV || 'production' };

const common = {
  interpreter: 'none',
  autorestart: true,
  stop_exit_codes: [78],
  exp_backoff_restart_delay: 200,
  min_uptime: 30000,
  max_restarts: 100000,
  kill_signal: 'SIGTERM',
  kill_timeout: 20000,
  merge_logs: true,
  time: true,
};

const edges = Array.from({ length: Number(process.env.PMW_EDGES || 0) }, (_, k) => ({
  ...common,
  name: `pmw-edge-${k + 1}`,
  script: `${bin}/pmw-edge`,
  env: {
    ...deployment,
    PMW_INSTANCE: `edge-${k + 1}`,
    PMW_EDGE_LISTEN: `127.0.0.1:${port(`PMW_EDGE_${k + 1}_PORT`, 8101 + k)}`,
    PMW_EDGE_METRICS_ADDR: `127.0.0.1:${port(`PMW_EDGE_${k + 1}_METRICS_PORT`, 9470 + k)}`,
  },
}));

module.exports = {
  apps: [
    {
      ...common,
      name: 'pmw-live',
      script: `${bin}/pmw-live`,
      env: { ...deployment, PMW_INSTANCE: 'live', PMW_LIVE_METRICS_ADDR: `127.0.0.1:${port('PMW_LIVE_METRICS_PORT', 9461)}` },
    },
    {
      ...common,
      name: 'pmw-live-b',
      script: `${bin}/pmw-live`,
      env: { ...deployment, PMW_INSTANCE: 'live-b', PMW_LIVE_METRICS_ADDR: `127.0.0.1:${port('PMW_LIVE_B_METRICS_PORT', 9465)}` },
    },
    {
      ...common,
      name: 'pmw-push-a',
      script: `${bin}/pmw-push`,
      env: {
        ...deployment,
        PMW_INSTANCE: 'push-a',
        PMW_PUSH_LISTEN: `127.0.0.1:${port('PMW_PUSH_A_PORT', 8081)}`,
        PMW_PUSH_METRICS_ADDR: `127.0.0.1:${port('PMW_PUSH_A_METRICS_PORT', 9462)}`,
      },
    },
    {
      ...common,
      name: 'pmw-push-b',
      script: `${bin}/pmw-push`,
      env: {
        ...deployment,
        PMW_INSTANCE: 'push-b',
        PMW_PUSH_LISTEN: `127.0.0.1:${port('PMW_PUSH_B_PORT', 8091)}`,
        PMW_PUSH_METRICS_ADDR: `127.0.0.1:${port('PMW_PUSH_B_METRICS_PORT', 9463)}`,
      },
    },
    {
      ...common,
      name: 'pmw-api',
      script: `${bin}/pmw-api`,
      env: { ...deployment, PMW_INSTANCE: 'api', PMW_API_LISTEN: `127.0.0.1:${port('PMW_API_PORT', 8080)}` },
    },
    {
      ...common,
      name: 'pmw-api-b',
      script: `${bin}/pmw-api`,
      env: { ...deployment, PMW_INSTANCE: 'api-b', PMW_API_LISTEN: `127.0.0.1:${port('PMW_API_B_PORT', 8090)}` },
    },
    {
      ...common,
      name: 'pmw-stats',
      script: `${bin}/pmw-stats`,
      env: {
        ...deployment,
        PMW_INSTANCE: 'stats',
        PMW_STATS_LISTEN: `127.0.0.1:${port('PMW_STATS_PORT', 8082)}`,
        PMW_STATS_METRICS_ADDR: `127.0.0.1:${port('PMW_STATS_METRICS_PORT', 9464)}`,
      },
    },
    {
      ...common,
      name: 'pmw-stats-b',
      script: `${bin}/pmw-stats`,
      env: {
        ...deployment,
        PMW_INSTANCE: 'stats-b',
        PMW_STATS_LISTEN: `127.0.0.1:${port('PMW_STATS_B_PORT', 8092)}`,
        PMW_STATS_METRICS_ADDR: `127.0.0.1:${port('PMW_STATS_B_METRICS_PORT', 9466)}`,
      },
    },
    ...edges,
  ],
};
