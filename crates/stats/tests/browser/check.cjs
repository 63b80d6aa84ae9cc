// Load the dashboard in headless Chromium (Debian's /usr/bin/chromium) driven by playwright-core,
// record every request, console error and page error, read the headline figures, the
// availability cards (over the time measured, with the share measured), the daily bars and
// their table, the incidents, the webhook rows and the audit's figures as shown, compare them
// with /latency.json, count the charts and save a full-page screenshot; then load the page at
// phone width (390 px), record whether it fits and save a second screenshot.
//
// usage: PMW_NODE_MODULES=<tools/node/node_modules> node check.cjs <page-url> <screenshot.png>
//        [<phone-screenshot.png>]
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
  const [url, shot, phoneShot] = process.argv.slice(2);
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
    days: [],
    day_table: [],
    incidents: [],
    no_incidents: null,
    phone: null,
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
    page.setDefaultTimeout(5000);

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
    if ((await now.count()) > 0) report.audit_now = {
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
          window_share: (await p.locator('.window-share').count()) > 0
            ? (await p.locator('.window-share').innerText()).trim() : null,
          gap_attr: await p.getAttribute('data-longest-gap-ms'),
          share: (await p.locator('.share').innerText()).trim(),
          gap: (await p.locator('.gap').innerText()).trim(),
          text: (await p.innerText()).trim(),
          visible: await p.isVisible(),
        };
      }
      const measured = card.locator('.measured');
      const partial = card.locator('.avail-partial');
      report.availability.push({
        window: await card.getAttribute('data-window'),
        coverage: await card.getAttribute('data-coverage'),
        measured: (await measured.count()) > 0 ? (await measured.innerText()).trim() : null,
        measured_visible: (await measured.count()) > 0 && (await measured.isVisible()),
        partial: (await partial.count()) > 0 ? (await partial.innerText()).trim() : null,
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
    // The daily bars: every bar with something measured, with its tooltip; and the table.
    const rows = page.locator('svg.day-bars');
    for (let i = 0; i < (await rows.count()); i++) {
      const row = rows.nth(i);
      const bars = row.locator('rect.day-bar');
      const n = await bars.count();
      const measured = [];
      for (let j = 0; j < n; j++) {
        const b = bars.nth(j);
        const lvl = await b.getAttribute('data-level');
        if (lvl === 'none') continue;
        measured.push({
          day: await b.getAttribute('data-day'),
          level: lvl,
          fill: await b.getAttribute('fill'),
          title: (await b.locator('title').textContent()).trim(),
        });
      }
      report.days.push({
        part: await row.getAttribute('data-part'),
        bars: n,
        visible: await row.isVisible(),
        label: await row.getAttribute('aria-label'),
        measured,
      });
    }
    const dayRows = page.locator('table.day-table tbody tr');
    for (let i = 0; i < (await dayRows.count()); i++) {
      const r = dayRows.nth(i);
      const text = (await r.textContent()).trim();
      if (text.includes('available over')) {
        report.day_table.push({ day: await r.getAttribute('data-day'), text });
      }
    }
    const incs = page.locator('li.incident');
    for (let i = 0; i < (await incs.count()); i++) {
      const li = incs.nth(i);
      report.incidents.push({
        start_ms: await li.getAttribute('data-start-ms'),
        open: await li.getAttribute('data-open'),
        late: await li.getAttribute('data-late'),
        causes: await li.getAttribute('data-causes'),
        state: (await li.locator('.inc-state').innerText()).trim(),
        length: (await li.locator('.inc-length').innerText()).trim(),
        late_text: (await li.locator('.inc-late').innerText()).trim(),
        cause: (await li.locator('.inc-cause').innerText()).trim(),
        text: (await li.innerText()).trim(),
        visible: await li.isVisible(),
      });
    }
    const noInc = page.locator('#no-incidents');
    if ((await noInc.count()) > 0) report.no_incidents = (await noInc.innerText()).trim();
    const svgs = page.locator('figure svg');
    report.svg_count = await svgs.count();
    for (let i = 0; i < report.svg_count; i++) {
      if (await svgs.nth(i).isVisible()) report.svg_visible += 1;
    }
    await page.screenshot({ path: shot, fullPage: true });
    // The availability section alone (the README's picture of the status page).
    await page.locator('#availability').screenshot({ path: shot.replace(/\.png$/, '-availability.png') });
    const finalCells = [];
    const finalRows = page.locator('tr[data-stage="detect_final"]');
    for (let i = 0; i < (await finalRows.count()); i++) {
      const row = finalRows.nth(i);
      finalCells.push({
        window: await row.locator('xpath=..').getAttribute('data-window'),
        shown: (await row.locator('td').nth(1).innerText()).trim(),
      });
    }

    // At phone width: nothing wider than the screen, the headline, bars and incidents visible.
    if (phoneShot) {
      await page.setViewportSize({ width: 390, height: 844 });
      await page.reload({ waitUntil: 'load' });
      const visible = async (sel) => (await page.locator(sel).count()) > 0 &&
        (await page.locator(sel).first().isVisible());
      const box = async (sel) => (await page.locator(sel).count()) > 0
        ? await page.locator(sel).first().boundingBox() : null;
      report.phone = {
        width: await page.evaluate(() => window.innerWidth),
        scroll_width: await page.evaluate(() => document.documentElement.scrollWidth),
        headline_visible: await visible('.avail-window .avail-part .share'),
        measured_visible: await visible('.avail-window .measured'),
        bars_visible: await visible('svg.day-bars'),
        bars_box: await box('svg.day-bars'),
        incident_visible: await visible('li.incident'),
      };
      await page.screenshot({ path: phoneShot, fullPage: true });
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
        if (!shown || !want || Number(shown.share_attr) !== want.available_share_of_measured ||
            Number(shown.gap_attr) !== want.longest_gap_ms || !shown.visible) {
          report.mismatches.push({ availability: card.window, part: name, json: want, shown });
        }
      }
    }
    const jdays = json.availability.days || [];
    for (const row of report.days) {
      const want = jdays.filter((d) => d[row.part] && d[row.part].level !== 'none');
      if (row.bars !== jdays.length || row.measured.length !== want.length ||
          row.measured.some((b, k) => b.day !== want[k].day || b.level !== want[k][row.part].level)) {
        report.mismatches.push({ days: row.part, json: want, shown: row.measured });
      }
    }
    const jinc = json.availability.incidents || [];
    if (jinc.length !== report.incidents.length ||
        jinc.some((x, k) => String(x.start_ms) !== report.incidents[k].start_ms)) {
      report.mismatches.push({ incidents: jinc, shown: report.incidents });
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
