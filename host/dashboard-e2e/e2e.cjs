// The dashboard end to end, in headless Chromium (playwright-core): run by scripts/dashboard-e2e,
// which starts a host serving the web index (and one binding that fails) on 127.0.0.1 with a
// token, and passes what this needs in the environment:
//
//   DASH_URL      the host's base URL            DASH_TOKEN   its token
//   DASH_BIN      the `percolator` binary        DASH_DIR     the sandbox (p.toml, crawl, …)
//   DASH_SHOTS    where screenshots go           CHROMIUM     the browser's executable
//
// The story: the page asks for the token (a wrong one is refused), shows the pipeline's graph;
// a crawl is loaded and the backlog rises and drains on the page, and a tab opened after it
// starts its charts from the host's samples; a binding without the right to
// write fails and its dead letter appears; a broken configuration is rejected and the page says
// why; the fixed one is loaded, and Retry on the page runs the dead letter again, which now
// succeeds; failures long ago are not red on the graph, those of the last minute are. Every
// request the page makes goes to the host, none carries the token in its URL,
// and the page throws no error. Exits non-zero on any failure.
'use strict';

const fs = require('fs');
const path = require('path');
const { spawn } = require('child_process');
const { chromium } = require('playwright-core');

const env = (name) => {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set (run scripts/dashboard-e2e)`);
  return v;
};
const URL_ = env('DASH_URL');
const TOKEN = env('DASH_TOKEN');
const BIN = env('DASH_BIN');
const DIR = env('DASH_DIR');
const SHOTS = env('DASH_SHOTS');
const CHROMIUM = env('CHROMIUM');
const CONFIG = path.join(DIR, 'p.toml');
/** The whole run gives up after this long. */
const DEADLINE_MS = 150_000;
const started = Date.now();

const log = (msg) => console.log(`dashboard-e2e: [${((Date.now() - started) / 1000).toFixed(1)} s] ${msg}`);

function check(cond, msg) {
  if (!cond) throw new Error(`check failed: ${msg}`);
}

/** Runs the command line against the host; resolves with its stdout, rejects on failure. */
function percolator(args) {
  return new Promise((resolve, reject) => {
    const child = spawn(BIN, args, {
      cwd: DIR,
      env: { ...process.env, PERCOLATOR_CONFIG: CONFIG, PERCOLATOR_TOKEN: TOKEN },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    let err = '';
    child.stdout.on('data', (d) => (out += d));
    child.stderr.on('data', (d) => (err += d));
    child.on('error', reject);
    child.on('close', (code) => (code === 0 ? resolve(out) : reject(new Error(`percolator ${args.join(' ')}: exit ${code}: ${err}`))));
  });
}

/** Replaces the configuration in one step (the host's watcher sees a rename onto p.toml). */
function installConfig(name) {
  const tmp = path.join(DIR, `.p.toml.${process.pid}`);
  fs.copyFileSync(path.join(DIR, name), tmp);
  fs.renameSync(tmp, CONFIG);
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function shot(page, name, fullPage = true) {
  const file = path.join(SHOTS, `${name}.png`);
  await page.screenshot({ path: file, fullPage });
  log(`screenshot ${path.relative(process.cwd(), file)}`);
}

/** The number a tile shows (`1,234+` → 1234). */
async function tileNumber(page, id) {
  const text = await page.locator(`#${id}`).textContent();
  const n = Number(String(text).replace(/[^0-9.]/g, ''));
  return Number.isFinite(n) ? n : NaN;
}

async function main() {
  fs.mkdirSync(SHOTS, { recursive: true });
  const origin = new URL(URL_).origin;
  const browser = await chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    // Root in a container: Chromium's sandbox needs user namespaces it may not have.
    args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'],
  });
  const problems = [];
  try {
    const context = await browser.newContext({ viewport: { width: 1400, height: 900 }, deviceScaleFactor: 1 });
    const page = await context.newPage();
    page.setDefaultTimeout(20_000);
    const requests = [];
    page.on('request', (r) => requests.push({ url: r.url(), method: r.method(), auth: r.headers().authorization || null }));
    page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
    page.on('console', (m) => {
      // A 401 before the token is given is expected; anything else the console calls an error is not
      // (a refused script or style would say so here).
      if (m.type() === 'error' && !/status of 401/.test(m.text())) problems.push(`console error: ${m.text()}`);
    });

    // The page, and its question for the token.
    log(`opening ${URL_}/`);
    const answer = await page.goto(`${URL_}/`);
    check(answer.status() === 200, `GET / answered ${answer.status()}`);
    check(/default-src 'none'/.test(answer.headers()['content-security-policy'] || ''), 'the page has a CSP');
    await page.locator('#login').waitFor({ state: 'visible' });
    await shot(page, '01-login', false);
    await page.fill('#token', 'not-the-token');
    await page.click('#login-submit');
    await page.locator('#login-error').waitFor({ state: 'visible' });
    check(/wrong token/.test(await page.locator('#login-error').textContent()), 'a wrong token is refused');
    await page.fill('#token', TOKEN);
    await page.click('#login-submit');
    await page.locator('#login').waitFor({ state: 'hidden' });
    await page.waitForFunction(() => /^live/.test(document.getElementById('live-text').textContent));
    log('logged in; the page is live');

    // The graph: every binding of the configuration is an edge label; the weak ones dashed.
    const bindings = [
      'document-processor',
      'clustering-hash',
      'clustering-pagerank',
      'link-inversion',
      'link-forwarding',
      'link-forwarding-canonical',
      'exporter',
      'alerts-upper',
    ];
    for (const b of bindings) await page.locator(`#graph g.label[data-binding="${b}"]`).waitFor();
    for (const b of ['link-forwarding', 'exporter']) {
      check((await page.locator(`#graph path.edge.weak[data-binding="${b}"]`).count()) > 0, `${b} is drawn dashed (weak)`);
    }
    check((await page.locator('#graph path.edge.strong[data-binding="document-processor"]').count()) >= 3, 'document-processor: an edge in and its writes out');
    check((await page.locator('#graph g.node[data-column="pages/raw:html"]').count()) === 1, 'pages/raw:html is a node');
    check((await page.locator('#registry-body tr').count()) === bindings.length, 'the registry lists every binding');
    check((await page.locator('#registry-body .no').count()) === 0, 'this host runs every registered binding');

    // A crawl: the backlog rises, then drains, on the page (watched five times a second).
    log('loading the crawl');
    const load = percolator(['load', 'pages', path.join(DIR, 'crawl.jsonl'), '--key', 'url']);
    let loadedAt = null;
    let loadError = null;
    load.then(
      () => (loadedAt = Date.now()),
      (e) => (loadError = e),
    );
    let peak = 0;
    let active = 0;
    let shotTaken = false;
    for (;;) {
      if (loadError) throw loadError;
      const n = await tileNumber(page, 'v-backlog');
      peak = Math.max(peak, n);
      active = Math.max(active, await page.locator('#graph g.label.active').count());
      // The picture of the backlog: once it has fallen a little from its peak (the edges busy).
      if (!shotTaken && peak > 0 && n > 0 && n < peak * 0.8 && active > 0) {
        await shot(page, '02-backlog');
        // The README's picture, during the demo: the web index loading, down to the freshness
        // histograms and the hosts.
        const below = await page.locator('#hosts-card').boundingBox();
        const file = path.join(SHOTS, 'dashboard.png');
        await page.screenshot({ path: file, fullPage: true, clip: { x: 0, y: 0, width: 1400, height: Math.ceil(below.y + below.height + 14) } });
        log(`screenshot ${path.relative(process.cwd(), file)}`);
        shotTaken = true;
      }
      if (loadedAt !== null && peak > 0 && n === 0) break;
      check(loadedAt === null || Date.now() - loadedAt < 90_000, 'the backlog drains within 90 s of the load');
      await sleep(200);
    }
    await load;
    log(`the page showed the backlog rise to ${peak} and drain (${((Date.now() - loadedAt) / 1000).toFixed(1)} s after the load)`);
    check(active > 0, 'edges were drawn as running');
    check(shotTaken, 'the page was seen with the backlog draining (the README picture)');
    check((await page.locator('#chart-backlog path.series').count()) === 1, 'the backlog chart has its line');
    check((await page.locator('#chart-throughput path.series[data-series="runs"]').count()) === 1, 'the throughput chart has runs/s');
    const maxRuns = await page.locator('#bindings-body tr[data-binding="document-processor"] td').nth(3).textContent();
    check(Number(maxRuns.replace(/,/g, '')) > 0, 'document-processor ran');
    // Freshness: the histogram has bars for the bindings that ran, and the table its median.
    await page.locator('#chart-freshness rect.fbar[data-binding="document-processor"]').first().waitFor({ state: 'attached' });
    const fresh = await page.locator('#bindings-body tr[data-binding="document-processor"] td[data-fresh="p50"]').textContent();
    check(fresh !== '–' && fresh !== '', `document-processor's median freshness is shown (${fresh})`);
    // The same histogram as /metrics: the page's bars sum to the exported count.
    const metrics = await (await fetch(`${URL_}/metrics`, { headers: { authorization: `Bearer ${TOKEN}` } })).text();
    const exported = Number((metrics.match(/^percolator_observer_freshness_seconds_count\{observer="document-processor"\} (\d+)$/m) || [])[1]);
    const drawn = await page.locator('#chart-freshness rect.fbar[data-binding="document-processor"] title').allTextContents();
    const onPage = drawn.reduce((a, t) => a + Number(t.match(/: ([\d,]+) runs/)[1].replace(/,/g, '')), 0);
    check(exported > 0 && onPage === exported, `the freshness bars hold the runs /metrics counts (${onPage} of ${exported})`);
    // The store and the hosts: this host scans the one notify bucket of a redb store.
    const size = await page.locator('#v-size').textContent();
    check(/\d+(\.\d)? (B|KiB|MiB|GiB)$/.test(size), `the store's size on disk (${size})`);
    check(/^\d/.test(await page.locator('#v-oracle').textContent()), 'the oracle rate');
    const hosts = await page.locator('#hosts-body tr').allTextContents();
    check(hosts.length === 1 && /this host/.test(hosts[0]) && /1 of 1/.test(hosts[0]), `one host with every bucket (${hosts})`);
    // Hot rows: the card lists what /v1/hot-rows answers (the crawl's hub rows may conflict, or
    // nothing did), and a binding's runs are its committed (OK), lost and failed ones.
    const hotApi = await (await fetch(`${URL_}/v1/hot-rows`, {
      method: 'POST',
      headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
      body: JSON.stringify({ minutes: 5, limit: 10 }),
    })).json();
    await sleep(1200);
    const hotRows = await page.locator('#hot-body tr').count();
    const hotEmpty = await page.locator('#hot-empty').isVisible();
    check(
      hotApi.rows.length === 0 ? hotEmpty && hotRows === 0 : !hotEmpty && hotRows > 0,
      `the hot-rows card matches the API (${hotRows} rows shown, ${hotApi.rows.length} answered)`,
    );
    const dp = await page.locator('#bindings-body tr[data-binding="document-processor"] td').allTextContents();
    const num = (t) => Number(t.replace(/,/g, ''));
    check(
      num(dp[3]) === num(dp[4]) + num(dp[5]) + num(dp[6]) && num(dp[4]) > 0,
      `document-processor: runs = OK (committed) + lost + failed (${dp.slice(3, 7)})`,
    );
    await sleep(300);
    await shot(page, '03-drained');

    // A tab opened now starts its charts from the host's samples (the crawl's backlog is in
    // them), not empty.
    log("a second tab: its charts start from the host's samples");
    // The host samples once a second from its start: a fast drain can leave fewer than ten
    // samples by now (9 on a clean-clone run), so wait for ten before opening the tab.
    const hostSamples = async () =>
      (await (await fetch(`${URL_}/v1/samples`, { headers: { authorization: `Bearer ${TOKEN}` } })).json()).samples.length;
    for (let waited = 0; (await hostSamples()) < 10; waited += 250) {
      check(waited < 15_000, 'the host holds ten samples within 15 s');
      await sleep(250);
    }
    const late = await context.newPage();
    late.on('pageerror', (e) => problems.push(`page error (second tab): ${e.message}`));
    await late.addInitScript((t) => sessionStorage.setItem('percolator.token', t), TOKEN);
    await late.goto(`${URL_}/`);
    await late.waitForFunction(() => /^live/.test(document.getElementById('live-text').textContent));
    const points = ((await late.locator('#chart-backlog path.series').getAttribute('d')).match(/[ML]/g) || []).length;
    const latePeak = Number(((await late.locator('#s-backlog').textContent()).match(/peak ([\d,]+)/) || [])[1].replace(/,/g, ''));
    check(points >= 10 && latePeak > 0, `a new tab's backlog chart starts from the host's samples (${points} points, peak ${latePeak})`);
    await late.close();

    // A failing binding: its dead letter appears with its reason.
    log('loading a row that alerts-upper cannot process (it may not write)');
    await percolator(['load', 'alerts', path.join(DIR, 'alerts.jsonl')]);
    const row = page.locator('#dead-body tr').first();
    await row.waitFor({ timeout: 30_000 });
    const cells = await row.locator('td').allTextContents();
    log(`dead letter: ${cells.slice(0, 5).join(' | ')}`);
    check(cells[0] === 'alerts/a1/raw:text', `the dead letter's cell (${cells[0]})`);
    check(cells[1] === 'alerts-upper', `the dead letter's observer (${cells[1]})`);
    check(cells[2] === '1', `one attempt (${cells[2]})`);
    check(/derived:upper/.test(cells[3]), `the reason names the column it may not write (${cells[3]})`);
    await page.locator('#graph path.edge.failing[data-binding="alerts-upper"]').first().waitFor({ state: 'attached' });
    await shot(page, '04-dead-letter');

    // A second one, discarded from the page (two clicks: the button asks once more).
    log('a second dead letter, discarded from the page');
    await percolator(['load', 'alerts', path.join(DIR, 'alerts2.jsonl')]);
    const second = page.locator('#dead-body tr').nth(1);
    await second.waitFor({ timeout: 30_000 });
    check((await second.locator('td').first().textContent()) === 'alerts/a2/raw:text', 'the second dead letter is a2');
    await second.locator('button.discard').click();
    check((await second.locator('button.discard').textContent()) === 'Discard for good?', 'Discard asks once more');
    await second.locator('button.discard').click();
    await page.waitForFunction(() => document.querySelectorAll('#dead-body tr').length === 1, null, { timeout: 30_000 });
    const left = JSON.parse(await percolator(['dead-letters', '--json']));
    check(left.length === 1 && left[0].cell === 'alerts/a1/raw:text', `only a1's dead letter is left (${left.map((d) => d.cell)})`);

    // A broken configuration: rejected, and the page says why; generation 1 keeps serving.
    log('installing a broken configuration');
    installConfig('p-broken.toml');
    await page.locator('#reload-error').waitFor({ timeout: 30_000 });
    const why = await page.locator('#reload-error').textContent();
    check(/missing\.wasm/.test(why), `the reload error names the missing component: ${why}`);
    check((await page.locator('#v-generation').textContent()) === '1', 'still generation 1');
    await shot(page, '05-reload-rejected');

    // The fix, then Retry from the page.
    log('installing the fixed configuration (alerts-upper may write derived:upper)');
    installConfig('p-fixed.toml');
    await page.waitForFunction(() => document.getElementById('v-generation').textContent === '2', null, { timeout: 30_000 });
    await page.locator('#reload-error').waitFor({ state: 'detached' });
    log('generation 2 is loaded; clicking Retry');
    await row.locator('button.retry').click();
    await page.locator('#dead-empty').waitFor({ state: 'visible', timeout: 30_000 });
    // The retried notification is pending now: its run, and no dead letter after it.
    await percolator(['wait', '--timeout', '60']);
    const upper = await percolator(['get', 'alerts', 'a1', 'derived:upper']);
    check(upper.trim() === 'HELLO', `the retried run wrote derived:upper (${upper.trim()})`);
    check((await tileNumber(page, 'v-dead')) === 0, 'no dead letter left on the page');
    await sleep(1200);
    await shot(page, '06-retried');

    // What one host cannot show by itself (the registry is shared only on a shared backend), and
    // a cycle in the graph: the real status with a registered binding this host lacks and a
    // binding that writes back into the pipeline's first column.
    log('a status with a binding this host lacks and a cycle (answers rewritten in the browser)');
    let rewriting = true;
    await page.route('**/v1/status', async (route) => {
      try {
        await rewrite(route);
      } catch (e) {
        // A poll in flight when the route is dropped below may have gone on unrewritten
        // ("Route is already handled!"); one that fails while the route is on is a failure.
        if (rewriting) throw e;
      }
    });
    async function rewrite(route) {
      const answer = await route.fetch();
      const status = await answer.json();
      status.store.registered.push({ name: 'spell-check', table: 'pages', column: 'doc:text', kind: 'strong' });
      const loop = { ...status.host.bindings[0], name: 'loop-back', table: 'pages', column: 'export:terms', writes: ['pages/raw:html'] };
      status.host.bindings.push(loop);
      // Failures long ago are counted, not red; failures in the last minute are red.
      for (const b of status.host.bindings) {
        if (b.name === 'document-processor') Object.assign(b, { failures: 7, failures_last_minute: 0 });
        if (b.name === 'link-inversion') Object.assign(b, { failures: 3, failures_last_minute: 2 });
      }
      await route.fulfill({ response: answer, json: status });
    }
    await page.locator('#lacking').waitFor();
    check(/spell-check/.test(await page.locator('#lacking').textContent()), 'the banner names the binding this host lacks');
    await page.locator('#graph g.label.ghost[data-binding="spell-check"]').waitFor();
    await page.locator('#graph g.label[data-binding="loop-back"]').waitFor();
    check((await page.locator('#registry-body tr[data-binding="spell-check"] .no').textContent()) === 'no component here', 'the registry table says so');
    check((await page.locator('#registry-body tr[data-binding="loop-back"] .no').textContent()) === 'loaded here, not in the registry', 'and the other way round');
    const old = page.locator('#graph g.label[data-binding="document-processor"]');
    await page.waitForFunction(() => /7 failed/.test(document.querySelector('#graph g.label[data-binding="document-processor"]').textContent));
    check((await old.locator('tspan.bad').count()) === 0, 'failures long ago are not red on the graph');
    check((await page.locator('#graph path.edge.failing[data-binding="document-processor"]').count()) === 0, 'nor its edges');
    check((await page.locator('#graph g.label[data-binding="link-inversion"] tspan.bad').count()) === 1, 'failures in the last minute are red');
    check((await page.locator('#graph path.edge.failing[data-binding="link-inversion"]').count()) > 0, 'and so are its edges');
    await shot(page, '07-registry-and-cycle');
    // Waits for a rewrite still in flight: dropping the route under it lets the request go on
    // unrewritten, and the handler's fulfill then fails (a clean-clone CI failed so, once).
    rewriting = false;
    await page.unrouteAll({ behavior: 'wait' });

    // What the page sent: only to the host, the token never in a URL, in the header.
    const foreign = requests.filter((r) => new URL(r.url).origin !== origin && !r.url.startsWith('data:'));
    check(foreign.length === 0, `requests to other origins: ${foreign.map((r) => r.url).join(', ')}`);
    check(!requests.some((r) => r.url.includes(TOKEN)), 'the token is in no URL');
    check(requests.some((r) => r.auth === `Bearer ${TOKEN}`), 'the token is sent in the Authorization header');
    check(requests.some((r) => r.method === 'POST' && r.url.endsWith('/v1/dead-letters/retry')), 'Retry called the retry API');
    check(requests.some((r) => r.method === 'POST' && r.url.endsWith('/v1/dead-letters/discard')), 'Discard called the discard API');
    log(`${requests.length} requests, all to ${origin}`);
  } finally {
    await browser.close();
  }
  if (problems.length) throw new Error(`the page reported problems:\n  ${problems.join('\n  ')}`);
}

const timer = setTimeout(() => {
  console.error(`dashboard-e2e: error: the run took longer than ${DEADLINE_MS / 1000} s`);
  process.exit(1);
}, DEADLINE_MS);

main().then(
  () => {
    clearTimeout(timer);
    log('passed');
  },
  (e) => {
    clearTimeout(timer);
    console.error(`dashboard-e2e: error: ${e.stack || e}`);
    process.exit(1);
  },
);
