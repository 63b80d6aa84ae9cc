// Load the dashboard in headless Chromium (Debian's /usr/bin/chromium) driven by playwright-core,
// record every request, console error and page error, read the headline figures, the
// availability cards, the webhook rows and the audit's figures as shown, compare them with
// /latency.json, count the charts and save a full-page screenshot.
//
// usage: PMW_NODE_MODULES=<tools/node/node_modules> node check.cjs <page-url> <screenshot.png>
// Prints one JSON report on stdout; the Rust test (tests/browser.rs) asserts on it.
'use strict';

const fs = require('fs');
const os = require('os');
const path = require('path');

const modules = process.env.PMW_NODE_MODULES;
if (!modules) {
  console.error('PMW_NODE_MODULES is not set');
  process.exit(2);
}
const { chromium } = require(path.join(modules, 'playwright-core'));

const LOCAL_HOSTS = new Set(['127.0.0.1', 'localhost', '[::1]']);

function isLocal(u) {
  try {
    const url = new URL(u);
    return (url.protocol === 'http:' || url.protocol === 'https:') && LOCAL_HOSTS.has(url.hostname);
  } catch (e) {
    return false;
  }
}

function expectedText(p50) {
  return p50 === null || p50 === undefined ? 'no data' : `${p50} ms`;
}

async function main() {
  const [url, shot] = process.argv.slice(2);
  if (!url || !shot) {
    console.error('usage: node check.cjs <page-url> <screenshot.png>');
    process.exit(2);
  }
  const userDataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'pmw-chromium-'));
  const report = {
    status: null,
    requests: [],
    blocked: [],
    failed: [],
    console_errors: [],
    page_errors: [],
    headline: [],
    json_figures: null,
    mismatches: [],
    audit_now: null,
    audit: [],
    availability: [],
    webhook_stages: [],
    svg_count: 0,
    svg_visible: 0,
    title: null,
    screenshot: shot,
  };
  let ctx;
  try {
    ctx = await chromium.launchPersistentContext(userDataDir, {
      executablePath: process.env.PMW_CHROMIUM || '/usr/bin/chromium',
      headless: true,
      chromiumSandbox: false,
      args: [
        '--headless',
        '--no-sandbox',
        '--disable-gpu',
        '--disable-quic',
        '--no-first-run',
        '--disable-background-networking',
        '--disable-component-update',
        '--disable-sync',
      ],
      viewport: { width: 1200, height: 900 },
      timeout: 60000,
    });
    // Anything that is not this machine is recorded and never sent.
    await ctx.route('**/*', (route) => {
      const u = route.request().url();
      if (isLocal(u) || u.startsWith('data:')) {
        return route.continue();
      }
      report.blocked.push(u);
      return route.abort();
    });
    ctx.on('request', (r) => report.requests.push(r.url()));
    ctx.on('requestfailed', (r) => report.failed.push(`${r.url()}: ${r.failure() && r.failure().errorText}`));
    const page = ctx.pages()[0] || (await ctx.newPage());
    page.on('console', (m) => {
      if (m.type() === 'error') report.console_errors.push(m.text());
    });
    page.on('pageerror', (e) => report.page_errors.push(String(e)));

    const resp = await page.goto(url, { waitUntil: 'load', timeout: 30000 });
    report.status = resp.status();
    report.title = await page.title();
    const cards = page.locator('.headline-value');
    const n = await cards.count();
    for (let i = 0; i < n; i++) {
      const card = cards.nth(i);
      report.headline.push({
        window: await card.getAttribute('data-window'),
        p50_attr: await card.getAttribute('data-p50-ms'),
        text: (await card.innerText()).trim(),
        visible: await card.isVisible(),
      });
    }
    const now = page.locator('#audit-now');
    report.audit_now = {
      block: await now.getAttribute('data-audited-block'),
      text: (await now.innerText()).trim(),
      visible: await now.isVisible(),
    };
    const audits = page.locator('.audit-window');
    for (let i = 0; i < (await audits.count()); i++) {
      const card = audits.nth(i);
      report.audit.push({
        window: await card.getAttribute('data-window'),
        fills_checked: await card.getAttribute('data-fills-checked'),
        missing: await card.getAttribute('data-missing'),
        extra: await card.getAttribute('data-extra'),
        text: (await card.locator('.audit-figures').innerText()).trim(),
        visible: await card.isVisible(),
      });
    }
    const avail = page.locator('.avail-window');
    for (let i = 0; i < (await avail.count()); i++) {
      const card = avail.nth(i);
      const parts = {};
      for (const name of ['push', 'ingest']) {
        const p = card.locator(`.avail-part[data-part="${name}"]`);
        if ((await p.count()) === 0) continue;
        parts[name] = {
          share_attr: await p.getAttribute('data-available-share'),
          gap_attr: await p.getAttribute('data-longest-gap-ms'),
          share: (await p.locator('.share').innerText()).trim(),
          gap: (await p.locator('.gap').innerText()).trim(),
          text: (await p.innerText()).trim(),
          visible: await p.isVisible(),
        };
      }
      report.availability.push({
        window: await card.getAttribute('data-window'),
        unknown_s: await card.getAttribute('data-unknown-s'),
        unknown: (await card.locator('.unknown').innerText()).trim(),
        visible: await card.isVisible(),
        parts,
      });
    }
    for (const stage of ['detect_push_webhook_first', 'detect_push_webhook']) {
      const rows = page.locator(`tr[data-stage="${stage}"]`);
      for (let i = 0; i < (await rows.count()); i++) {
        const row = rows.nth(i);
        const cells = row.locator('td');
        report.webhook_stages.push({
          stage,
          window: await row.locator('xpath=..').getAttribute('data-window'),
          label: (await cells.nth(0).innerText()).trim(),
          p50: (await cells.nth(1).innerText()).trim(),
          p99: (await cells.nth(3).innerText()).trim(),
          count: (await cells.nth(4).innerText()).trim(),
          visible: await row.isVisible(),
        });
      }
    }
    const svgs = page.locator('figure svg');
    report.svg_count = await svgs.count();
    for (let i = 0; i < report.svg_count; i++) {
      if (await svgs.nth(i).isVisible()) report.svg_visible += 1;
    }
    await page.screenshot({ path: shot, fullPage: true });
    const finalCells = [];
    const finalRows = page.locator('tr[data-stage="detect_final"]');
    for (let i = 0; i < (await finalRows.count()); i++) {
      const row = finalRows.nth(i);
      finalCells.push({
        window: await row.locator('xpath=..').getAttribute('data-window'),
        shown: (await row.locator('td').nth(1).innerText()).trim(),
      });
    }

    // The JSON, fetched by the same browser, must say what the page shows.
    const jsonUrl = new URL('/latency.json', url).href;
    const jr = await page.goto(jsonUrl, { timeout: 30000 });
    const json = JSON.parse(await jr.text());
    report.json_figures = json.headline.figures;
    // The `final` stage's p50 in each window's table row, against the JSON.
    report.final_stage = finalCells.map((c) => {
      const w = json.windows.find((x) => x.window === c.window);
      return { ...c, json: w ? w.stages.detect_final.p50_ms : undefined };
    });
    report.json_audit = json.audit;
    // Every availability card and webhook row against the JSON it was rendered from.
    for (const card of report.availability) {
      const w = json.availability.windows.find((x) => x.window === card.window);
      for (const name of ['push', 'ingest']) {
        const shown = card.parts[name];
        const want = w && w[name];
        if (!shown || !want || Number(shown.share_attr) !== want.available_share ||
            Number(shown.gap_attr) !== want.longest_gap_ms || !shown.visible) {
          report.mismatches.push({ availability: card.window, part: name, json: want, shown });
        }
      }
    }
    for (const row of report.webhook_stages) {
      const w = json.windows.find((x) => x.window === row.window);
      const want = w && w.stages[row.stage];
      if (!want || row.p50 !== expectedText(want.p50_ms) || row.count !== String(want.count)) {
        report.mismatches.push({ stage: row.stage, window: row.window, json: want, shown: row });
      }
    }
    for (const f of json.headline.figures) {
      const shown = report.headline.find((h) => h.window === f.window);
      if (!shown || shown.text !== expectedText(f.p50_ms) || !shown.visible) {
        report.mismatches.push({ window: f.window, json: f.p50_ms, shown: shown || null });
      }
    }
  } finally {
    if (ctx) await ctx.close();
    fs.rmSync(userDataDir, { recursive: true, force: true });
  }
  process.stdout.write(JSON.stringify(report) + '\n');
}

main().catch((e) => {
  console.error(e && e.stack ? e.stack : String(e));
  process.exit(1);
});
