// The dashboard's script. It polls the host's API every second (`GET /v1/status`,
// `GET /v1/dead-letters`, `POST /v1/hot-rows`), keeps the last five minutes of samples in memory for the charts
// (starting from the host's own ring of samples, `GET /v1/samples`, so a new tab's charts are not empty), and
// draws everything with the DOM (text through `textContent`, never HTML: rows, errors and names
// come from the store). The token, when the host wants one, is asked for in a form, kept in
// this tab's sessionStorage and sent as `Authorization: Bearer`, never in a URL.
'use strict';

(() => {
  const TOKEN_KEY = 'percolator.token';
  const POLL_MS = 1000;
  const HISTORY_MS = 5 * 60 * 1000;
  /** Per-binding run rates are taken over this many seconds of samples. */
  const RATE_WINDOW_MS = 3000;
  /** The hot-rows card: cells with the most conflicts over this many minutes, at most HOT_ROWS. */
  const HOT_MINUTES = 5;
  const HOT_ROWS = 10;
  const SVG_NS = 'http://www.w3.org/2000/svg';

  const $ = (id) => document.getElementById(id);

  // ---- small DOM helpers --------------------------------------------------------------------

  function svgEl(tag, attrs, parent) {
    const e = document.createElementNS(SVG_NS, tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
    if (parent) parent.appendChild(e);
    return e;
  }

  function svgText(parent, x, y, cls, content) {
    const t = svgEl('text', { x, y, class: cls }, parent);
    t.textContent = content;
    return t;
  }

  function h(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === 'className') e.className = v;
      else if (k === 'title') e.title = v;
      else e.setAttribute(k, v);
    }
    for (const c of children) {
      if (c === null || c === undefined) continue;
      e.append(c instanceof Node ? c : String(c));
    }
    return e;
  }

  function setText(id, value) {
    const e = $(id);
    if (e.textContent !== value) e.textContent = value;
  }

  // ---- formatting ---------------------------------------------------------------------------

  function fmtInt(n) {
    return Number(n || 0).toLocaleString('en-US');
  }

  function fmtRate(x) {
    if (!Number.isFinite(x) || x <= 0) return '0';
    if (x >= 100) return x.toFixed(0);
    if (x >= 10) return x.toFixed(1);
    return x.toFixed(2).replace(/\.?0+$/, '') || '0';
  }

  function fmtMs(ms) {
    if (ms === null || ms === undefined || !Number.isFinite(ms)) return '–';
    if (ms < 1) return `${Math.round(ms * 1000)} µs`;
    if (ms < 10) return `${ms.toFixed(2)} ms`;
    if (ms < 1000) return `${ms.toFixed(1)} ms`;
    return `${(ms / 1000).toFixed(2)} s`;
  }

  function ago(iso) {
    if (!iso) return '–';
    const t = Date.parse(iso);
    if (!Number.isFinite(t)) return iso;
    const s = Math.max(0, Math.round((Date.now() - t) / 1000));
    if (s < 60) return `${s} s ago`;
    if (s < 3600) return `${Math.floor(s / 60)} min ago`;
    if (s < 86400) return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min ago`;
    return `${Math.floor(s / 86400)} d ago`;
  }

  function clock(t) {
    return new Date(t).toLocaleTimeString('en-GB', { hour12: false });
  }

  function plural(n, one, many) {
    return `${fmtInt(n)} ${n === 1 ? one : many || one + 's'}`;
  }

  // ---- the API ------------------------------------------------------------------------------

  class ApiError extends Error {
    constructor(status, message) {
      super(message);
      this.status = status;
    }
  }

  async function api(method, path, body) {
    const headers = { Accept: 'application/json' };
    const token = sessionStorage.getItem(TOKEN_KEY);
    if (token) headers.Authorization = `Bearer ${token}`;
    const init = { method, headers, cache: 'no-store', credentials: 'omit', redirect: 'error' };
    if (body !== undefined) {
      headers['Content-Type'] = 'application/json';
      init.body = JSON.stringify(body);
    }
    let r;
    try {
      r = await fetch(path, init);
    } catch (e) {
      throw new ApiError(0, `the host does not answer (${e.message})`);
    }
    let data = null;
    try {
      data = await r.json();
    } catch (_) {
      data = null;
    }
    if (!r.ok) throw new ApiError(r.status, data && data.error ? data.error : `HTTP ${r.status}`);
    return data;
  }

  // ---- state --------------------------------------------------------------------------------

  const state = {
    /**
     * Samples for the charts and the tiles: {t, backlog, commits, runs, conflicts} (rates per
     * second since the previous sample) and the counters themselves ({t, c: {commits, …}}).
     */
    history: [],
    /** The previous poll's counters: {t, commits, runs, conflicts}. */
    prev: null,
    /** Per binding: recent samples {t, runs}. */
    perBinding: new Map(),
    /** True once the charts were filled from the host's sample ring. */
    filled: false,
    version: null,
    timer: null,
    waitingForToken: false,
    /** Dead-letter ids being retried (their buttons stay disabled). */
    retrying: new Set(),
    deadRows: new Map(),
    lastOk: null,
  };

  function record(status) {
    const now = Date.now();
    const host = status.host;
    const m = (host && host.metrics) || {};
    const cur = {
      t: now,
      commits: m.commits || 0,
      runs: m.observer_runs || 0,
      conflicts: m.conflicts || 0,
      timestamps: m.oracle_timestamps || 0,
    };
    const sample = { t: now, backlog: status.store.pending_notifications, commits: null, runs: null, conflicts: null, c: cur };
    const prev = state.prev;
    if (prev && now - prev.t > 0 && now - prev.t < 10000) {
      const dt = (now - prev.t) / 1000;
      const perSec = (a, b) => Math.max(0, b - a) / dt;
      sample.commits = perSec(prev.commits, cur.commits);
      sample.runs = perSec(prev.runs, cur.runs);
      sample.conflicts = perSec(prev.conflicts, cur.conflicts);
    }
    state.prev = cur;
    state.history.push(sample);
    while (state.history.length && now - state.history[0].t > HISTORY_MS) state.history.shift();

    for (const b of (host && host.bindings) || []) {
      let e = state.perBinding.get(b.name);
      if (!e) {
        e = { samples: [] };
        state.perBinding.set(b.name, e);
      }
      e.samples.push({ t: now, runs: b.runs });
      while (e.samples.length > 1 && now - e.samples[0].t > RATE_WINDOW_MS) e.samples.shift();
    }
  }

  /**
   * The history from the host's sample ring (`GET /v1/samples`: one sample a second over its
   * last 5 minutes), placed on this tab's clock by the difference between the two clocks.
   */
  function fill(report) {
    const skew = Date.now() - report.now_unix_ms;
    const history = [];
    let prev = null;
    for (const s of report.samples) {
      const t = s.unix_ms + skew;
      const cur = { t, commits: s.commits, runs: s.observer_runs, conflicts: s.conflicts, timestamps: s.oracle_timestamps };
      const sample = { t, backlog: s.pending_notifications, commits: null, runs: null, conflicts: null, c: cur };
      if (prev && t - prev.t > 0 && t - prev.t < 10000) {
        const dt = (t - prev.t) / 1000;
        const perSec = (a, b) => Math.max(0, b - a) / dt;
        sample.commits = perSec(prev.commits, cur.commits);
        sample.runs = perSec(prev.runs, cur.runs);
        sample.conflicts = perSec(prev.conflicts, cur.conflicts);
      }
      if (Date.now() - t <= HISTORY_MS) history.push(sample);
      prev = cur;
    }
    state.history = history;
    state.prev = prev;
  }

  /** Counter `key` per second over the last RATE_WINDOW_MS of samples. */
  function rate(key) {
    const hist = state.history;
    if (hist.length < 2) return 0;
    const b = hist[hist.length - 1];
    let a = b;
    for (let i = hist.length - 2; i >= 0 && b.t - hist[i].t <= RATE_WINDOW_MS + 500; i--) a = hist[i];
    const dt = (b.t - a.t) / 1000;
    return dt > 0 ? Math.max(0, b.c[key] - a.c[key]) / dt : 0;
  }

  function bindingRate(name) {
    const e = state.perBinding.get(name);
    if (!e || e.samples.length < 2) return 0;
    const a = e.samples[0];
    const b = e.samples[e.samples.length - 1];
    const dt = (b.t - a.t) / 1000;
    return dt > 0 ? Math.max(0, b.runs - a.runs) / dt : 0;
  }

  /**
   * A binding fails now if a run failed in the last minute (the host counts them) or a dead
   * letter of it waits; its failures over the store's life (`failures`) do not make it red.
   */
  function bindingFailing(b, dead) {
    return (b.failures_last_minute || 0) > 0 || dead.some((d) => d.observer === b.name);
  }

  // ---- polling and the token ----------------------------------------------------------------

  function setLive(ok, message) {
    const live = $('live');
    live.classList.toggle('ok', ok);
    live.classList.toggle('down', !ok);
    setText('live-text', message);
  }

  function showLogin(message) {
    state.waitingForToken = true;
    const hadToken = sessionStorage.getItem(TOKEN_KEY) !== null;
    $('login').hidden = false;
    const err = $('login-error');
    err.hidden = !hadToken;
    err.textContent = hadToken ? `The host refused the token: ${message}` : '';
    $('token').value = '';
    $('token').focus();
    setLive(false, 'token needed');
  }

  function hideLogin() {
    state.waitingForToken = false;
    $('login').hidden = true;
    $('logout').hidden = sessionStorage.getItem(TOKEN_KEY) === null;
  }

  function schedule(ms) {
    clearTimeout(state.timer);
    state.timer = setTimeout(poll, ms);
  }

  async function poll() {
    clearTimeout(state.timer);
    try {
      const [status, dead, hot, samples] = await Promise.all([
        api('GET', '/v1/status'),
        api('GET', '/v1/dead-letters'),
        api('POST', '/v1/hot-rows', { minutes: HOT_MINUTES, limit: HOT_ROWS }),
        // Once: the host's last minutes, so that the charts do not start empty (a host without
        // the endpoint leaves them to fill as this tab polls).
        state.filled ? null : api('GET', '/v1/samples').catch((e) => (e.status === 401 ? Promise.reject(e) : null)),
      ]);
      if (state.version === null) {
        const health = await api('GET', '/v1/health');
        state.version = health.version;
      }
      hideLogin();
      state.lastOk = Date.now();
      if (!state.filled) {
        if (samples) fill(samples);
        state.filled = true;
      }
      record(status);
      render(status, dead);
      renderHotRows(hot);
      setLive(true, `live · ${clock(state.lastOk)}`);
    } catch (e) {
      if (e.status === 401) {
        showLogin(e.message);
        return; // polling resumes when a token is given
      }
      setLive(false, state.lastOk ? `no answer since ${clock(state.lastOk)}: ${e.message}` : e.message);
    }
    schedule(POLL_MS);
  }

  function setupLogin() {
    $('login-form').addEventListener('submit', (ev) => {
      ev.preventDefault();
      const token = $('token').value.trim();
      if (!token) return;
      sessionStorage.setItem(TOKEN_KEY, token);
      $('login').hidden = true;
      poll();
    });
    $('logout').addEventListener('click', () => {
      sessionStorage.removeItem(TOKEN_KEY);
      $('logout').hidden = true;
      poll();
    });
  }

  // ---- rendering ----------------------------------------------------------------------------

  function render(status, dead) {
    const host = status.host;
    const store = status.store;
    const m = (host && host.metrics) || {};
    const pending = store.pending_notifications;
    const pendingText = `${fmtInt(pending)}${store.pending_capped ? '+' : ''}`;

    document.title = pending > 0 ? `percolator · ${pendingText} pending` : 'percolator';
    const hostParts = [];
    if (host) hostParts.push(host.url, `pid ${host.pid}`, `up since ${clock(Date.parse(host.started_at))}`);
    hostParts.push(`store ${store.path}`);
    if (state.version) hostParts.push(`v${state.version}`);
    setText('hostline', hostParts.join(' · '));

    // Tiles.
    setText('v-backlog', pendingText);
    const peak = Math.max(0, ...state.history.map((s) => s.backlog));
    setText('s-backlog', `peak ${fmtInt(peak)} in 5 min`);
    $('tile-backlog').classList.toggle('hot', pending > 0);
    setText('v-commits', fmtRate(rate('commits')));
    setText('s-commits', `${fmtInt(m.commits)} in all`);
    setText('v-runs', fmtRate(rate('runs')));
    setText('s-runs', `${fmtInt(m.observer_runs)} in all`);
    setText('v-conflicts', fmtRate(rate('conflicts')));
    setText('s-conflicts', `${fmtInt(m.conflicts)} in all`);
    setText('v-dead', fmtInt(store.dead_letters));
    setText('s-dead', `${fmtInt(m.dead_letters)} dead-lettered in all`);
    $('tile-dead').classList.toggle('bad', store.dead_letters > 0);
    setText('v-size', store.size_bytes == null ? 'n/a' : fmtBytes(store.size_bytes));
    setText('s-size', `${fmtInt(store.versions_collected)} versions collected by GC`);
    setText('v-oracle', fmtRate(rate('timestamps')));
    setText('s-oracle', `${fmtInt(m.oracle_timestamps)} since the store opened`);
    setText('v-locks', fmtInt((m.rolled_forward || 0) + (m.rolled_back || 0)));
    setText('s-locks', `${fmtInt(m.rolled_forward)} rolled forward · ${fmtInt(m.rolled_back)} back`);
    if (host) {
      setText('v-generation', String(host.generation));
      setText(
        's-generation',
        host.last_error ? 'last reload rejected' : `${plural(host.bindings.length, 'binding')} · loaded ${ago(host.loaded_at)}`,
      );
    }

    renderBanners(status);
    renderGraph(status, dead);
    renderCharts();
    renderDeadLetters(dead);
    renderBindings(host, dead);
    renderSinks(host);
    renderFreshness(host);
    renderHosts(store);
    renderRegistry(status);
    renderCounters(m);
  }

  function renderBanners(status) {
    const box = $('banners');
    box.replaceChildren();
    const host = status.host;
    if (host && host.last_error) {
      box.append(
        h(
          'div',
          { className: 'banner bad', id: 'reload-error' },
          h('b', {}, `The last reload was rejected: generation ${host.generation} keeps serving the previous configuration.`),
          h('div', {}, 'Fix the configuration file or the observer it names; the host reloads it when it changes. The reason:'),
          h('div', { className: 'detail' }, host.last_error),
        ),
      );
    }
    for (const c of (host && host.compiling) || []) {
      box.append(
        h(
          'div',
          { className: 'banner warn', id: 'compiling' },
          h('b', {}, `Compiling ${c.wasm} for binding ${c.binding} (${(c.elapsed_ms / 1000).toFixed(1)} s so far).`),
          h('div', {}, `Generation ${host.generation} keeps serving until it is ready.`),
        ),
      );
    }
    if (status.config_error) {
      box.append(h('div', { className: 'banner bad' }, h('b', {}, 'The configuration does not load.'), h('div', { className: 'detail' }, status.config_error)));
    }
    if (!host) {
      box.append(h('div', { className: 'banner warn' }, h('b', {}, 'No host runs this store: nothing processes its notifications.')));
      return;
    }
    const here = new Set(host.bindings.map((b) => b.name));
    const lacking = (status.store.registered || []).filter((r) => !here.has(r.name));
    if (lacking.length) {
      box.append(
        h(
          'div',
          { className: 'banner warn', id: 'lacking' },
          h('b', {}, `This host has no component for ${plural(lacking.length, 'binding')} of the store's registry: ${lacking.map((r) => r.name).join(', ')}.`),
          h('div', {}, 'Writes still notify them; another host must run them, or their notifications wait.'),
        ),
      );
    }
  }

  // ---- the pipeline graph -------------------------------------------------------------------

  function parseRule(rule) {
    const i = rule.indexOf('/');
    if (i < 0) return null;
    const table = rule.slice(0, i);
    let column = rule.slice(i + 1);
    const prefix = column.endsWith('*');
    if (prefix) column = column.slice(0, -1);
    return { table, column, prefix };
  }

  function ruleMatches(r, table, column) {
    return r.table === table && (r.prefix ? column.startsWith(r.column) : r.column === column);
  }

  /**
   * The graph of a status: column nodes (observed columns, and written columns no binding
   * observes as sinks), one junction per binding (its label) with an edge from its observed
   * column and edges to every node its declared writes cover. Registered bindings this host
   * lacks are junctions without targets (their writes are not known here).
   */
  function graphOf(status) {
    const host = status.host;
    const bindings = ((host && host.bindings) || []).map((b) => ({ ...b, ghost: false }));
    const here = new Set(bindings.map((b) => b.name));
    for (const r of status.store.registered || []) {
      if (!here.has(r.name)) bindings.push({ name: r.name, table: r.table, column: r.column, kind: r.kind, writes: [], ghost: true });
    }
    const nodes = new Map();
    const order = [];
    const addNode = (key, props) => {
      if (!nodes.has(key)) {
        nodes.set(key, { key, succ: [], pred: [], ...props });
        order.push(key);
      }
      return nodes.get(key);
    };
    for (const b of bindings) addNode(`c:${b.table}/${b.column}`, { type: 'column', table: b.table, column: b.column, observed: true });
    const observedKeys = [...nodes.keys()];
    for (const b of bindings) {
      const jk = `b:${b.name}`;
      const src = `c:${b.table}/${b.column}`;
      addNode(jk, { type: 'binding', binding: b });
      nodes.get(src).succ.push(jk);
      nodes.get(jk).pred.push(src);
      const targets = [];
      for (const w of b.writes || []) {
        const r = parseRule(w);
        if (!r) continue;
        const hits = observedKeys.filter((k) => ruleMatches(r, nodes.get(k).table, nodes.get(k).column));
        if (hits.length) targets.push(...hits);
        else {
          const key = `c:${w}`;
          addNode(key, { type: 'column', table: r.table, column: r.column + (r.prefix ? '*' : ''), observed: false });
          targets.push(key);
        }
      }
      for (const t of new Set(targets)) {
        nodes.get(jk).succ.push(t);
        nodes.get(t).pred.push(jk);
      }
    }
    return { nodes, order };
  }

  /** Layers: longest path from the sources, cycles broken by a greedy order (Eades et al.). */
  function layer(g) {
    const { nodes, order } = g;
    const indeg = new Map(order.map((k) => [k, nodes.get(k).pred.filter((p) => p !== k).length]));
    const placed = new Set();
    const seq = [];
    while (seq.length < order.length) {
      let next = order.find((k) => !placed.has(k) && indeg.get(k) === 0);
      if (next === undefined) {
        // A cycle: take the column with the fewest unplaced predecessors (ties: first seen).
        // Every cycle passes through a column, and a binding then always follows its own
        // column, so that only edges out of bindings can point backwards.
        let best = Infinity;
        for (const k of order) {
          if (!placed.has(k) && nodes.get(k).type === 'column' && indeg.get(k) < best) [best, next] = [indeg.get(k), k];
        }
      }
      placed.add(next);
      seq.push(next);
      for (const s of nodes.get(next).succ) if (!placed.has(s) && s !== next) indeg.set(s, indeg.get(s) - 1);
    }
    const pos = new Map(seq.map((k, i) => [k, i]));
    for (const k of seq) {
      const n = nodes.get(k);
      n.layer = 0;
      for (const p of n.pred) if (pos.get(p) < pos.get(k)) n.layer = Math.max(n.layer, nodes.get(p).layer + 1);
      // Columns on even layers, bindings on odd ones.
      if (n.type === 'column' && n.layer % 2 === 1) n.layer += 1;
      if (n.type === 'binding' && n.layer % 2 === 0) n.layer += 1;
    }
    const layers = [];
    for (const k of order) {
      const n = nodes.get(k);
      (layers[n.layer] = layers[n.layer] || []).push(k);
    }
    for (let i = 0; i < layers.length; i++) layers[i] = layers[i] || [];
    // Order within layers: barycenter sweeps, down then up.
    const idx = new Map();
    const index = () => layers.forEach((l) => l.forEach((k, i) => idx.set(k, i - (l.length - 1) / 2)));
    index();
    const sweep = (ls, neighbours) => {
      for (const l of ls) {
        const bary = new Map(
          l.map((k) => {
            const ns = neighbours(nodes.get(k)).filter((x) => idx.has(x) && nodes.get(x).layer !== nodes.get(k).layer);
            return [k, ns.length ? ns.reduce((a, x) => a + idx.get(x), 0) / ns.length : idx.get(k)];
          }),
        );
        l.sort((a, b) => bary.get(a) - bary.get(b));
        l.forEach((k, i) => idx.set(k, i - (l.length - 1) / 2));
      }
    };
    for (let it = 0; it < 4; it++) {
      sweep(layers.slice(1), (n) => n.pred);
      sweep(layers.slice(0, -1).reverse(), (n) => n.succ);
    }
    sweep(layers.slice(1), (n) => n.pred);
    return layers;
  }

  const NODE_W = 150;
  const NODE_H = 38;
  const LABEL_W = 172;
  const LABEL_H = 50;
  const GAP_X = 24;
  const GAP_Y = 12;
  const MARGIN = 12;

  function place(g, layers) {
    const { nodes } = g;
    let x = MARGIN;
    layers.forEach((l, i) => {
      const w = i % 2 === 0 ? NODE_W : LABEL_W;
      for (const k of l) {
        const n = nodes.get(k);
        n.w = n.type === 'column' ? NODE_W : LABEL_W;
        n.h = n.type === 'column' ? NODE_H : LABEL_H;
        n.x = x + (w - n.w) / 2;
      }
      x += w + GAP_X;
    });
    const width = x - GAP_X + MARGIN;
    // Stack each layer, then pull nodes towards their neighbours, keeping the order.
    for (const l of layers) {
      let y = 0;
      for (const k of l) {
        const n = nodes.get(k);
        n.y = y + n.h / 2;
        y += n.h + GAP_Y;
      }
    }
    const pack = (l, desired) => {
      if (!l.length) return;
      const ns = l.map((k) => nodes.get(k));
      const want = ns.map(desired);
      const ys = [];
      ns.forEach((n, i) => {
        ys[i] = i === 0 ? want[i] : Math.max(want[i], ys[i - 1] + (ns[i - 1].h + n.h) / 2 + GAP_Y);
      });
      const shift = want.reduce((a, w, i) => a + (w - ys[i]), 0) / ns.length;
      ns.forEach((n, i) => (n.y = ys[i] + shift));
    };
    const mean = (ks, fallback) => (ks.length ? ks.reduce((a, k) => a + nodes.get(k).y, 0) / ks.length : fallback);
    const earlier = (n, ks) => ks.filter((k) => nodes.get(k).layer < n.layer);
    const later = (n, ks) => ks.filter((k) => nodes.get(k).layer > n.layer);
    for (let it = 0; it < 3; it++) {
      for (const l of layers) pack(l, (n) => mean(earlier(n, n.pred), n.y));
      for (const l of [...layers].reverse()) pack(l, (n) => (earlier(n, n.pred).length && n.type === 'binding' ? n.y : mean(later(n, n.succ), n.y)));
    }
    for (const l of layers) pack(l, (n) => (n.type === 'binding' ? mean(earlier(n, n.pred), n.y) : n.y));
    let top = Infinity;
    let bottom = -Infinity;
    for (const n of nodes.values()) {
      top = Math.min(top, n.y - n.h / 2);
      bottom = Math.max(bottom, n.y + n.h / 2);
    }
    const badgeRoom = 8;
    for (const n of nodes.values()) n.y += MARGIN + badgeRoom - top;
    return { width, height: bottom - top + 2 * MARGIN + badgeRoom };
  }

  /**
   * Text of at most `width` pixels: squeezed a little if it is a little too long, else cut
   * with an ellipsis (the element's title holds the whole text).
   */
  function fitText(t, width) {
    const full = t.textContent;
    let len = t.getComputedTextLength();
    if (len <= width) return t;
    // Squeezed (also a text with coloured parts, which is never cut).
    if (len <= width * 1.25 || t.childElementCount > 0) {
      t.setAttribute('textLength', String(width));
      t.setAttribute('lengthAdjust', 'spacingAndGlyphs');
      return t;
    }
    let n = full.length;
    while (n > 1 && len > width) {
      n -= 1;
      t.textContent = `${full.slice(0, n)}…`;
      len = t.getComputedTextLength();
    }
    return t;
  }

  /** Room on each side for the turns of backward edges. */
  const BACK_TURN = 40;

  /**
   * A forward edge is an S-curve; a backward one (a cycle) turns down to its own lane `lane`
   * below every node, runs back along it and turns up into its target.
   */
  function edgePath(x1, y1, x2, y2, lane) {
    if (x2 > x1 + 4) {
      const dx = (x2 - x1) / 2;
      return `M${x1},${y1} C${x1 + dx},${y1} ${x2 - dx},${y2} ${x2},${y2}`;
    }
    const t = BACK_TURN;
    return `M${x1},${y1} C${x1 + t},${y1} ${x1 + t},${lane} ${x1},${lane} L${x2},${lane} C${x2 - t},${lane} ${x2 - t},${y2} ${x2},${y2}`;
  }

  function renderGraph(status, dead) {
    const svg = $('graph');
    const g = graphOf(status);
    const layers = layer(g);
    const drawn = place(g, layers);
    // Backward edges (cycles) get a lane each below the nodes, and room for their turns.
    const nodes = [...g.nodes.values()];
    const back = nodes.filter((n) => n.type === 'binding').flatMap((n) => n.succ.filter((t) => g.nodes.get(t).x <= n.x).map((t) => `${n.key}>${t}`));
    const lanes = new Map(back.map((e, i) => [e, drawn.height + 6 + 10 * i]));
    const side = back.length ? BACK_TURN : 0;
    const width = drawn.width + 2 * side;
    const height = drawn.height + (back.length ? 10 * back.length + 8 : 0);
    svg.replaceChildren();
    svg.setAttribute('viewBox', `${-side} 0 ${width} ${height}`);
    svg.setAttribute('height', String(height));
    svg.setAttribute('width', String(width));
    // As wide as the card allows, never wider than drawn (the height follows the width).
    svg.style.maxWidth = `${width}px`;
    const edges = svgEl('g', {}, svg);
    const front = svgEl('g', {}, svg);
    const badges = svgEl('g', {}, svg);
    if (!g.nodes.size) {
      svgText(front, MARGIN, 24, 'table', 'No bindings are loaded.');
      return;
    }
    const backlogOf = new Map();
    for (const b of (status.host && status.host.bindings) || []) {
      const k = `c:${b.table}/${b.column}`;
      backlogOf.set(k, Math.max(backlogOf.get(k) || 0, b.backlog));
    }
    for (const n of g.nodes.values()) {
      if (n.type !== 'binding') continue;
      const b = n.binding;
      const runRate = b.ghost ? 0 : bindingRate(b.name);
      const failing = !b.ghost && bindingFailing(b, dead);
      const cls = ['edge', b.kind === 'weak' ? 'weak' : 'strong', b.ghost ? 'ghost' : '', runRate > 0 ? 'active' : '', failing ? 'failing' : '']
        .filter(Boolean)
        .join(' ');
      const arrowCls = ['arrow', runRate > 0 ? 'active' : '', failing ? 'failing' : ''].filter(Boolean).join(' ');
      for (const p of n.pred) {
        const s = g.nodes.get(p);
        svgEl('path', { d: edgePath(s.x + s.w, s.y, n.x, n.y), class: cls, 'data-binding': b.name }, edges);
      }
      for (const t of n.succ) {
        const d = g.nodes.get(t);
        const x2 = d.x - 1;
        svgEl('path', { d: edgePath(n.x + n.w, n.y, x2 - 6, d.y, lanes.get(`${n.key}>${t}`)), class: cls, 'data-binding': b.name }, edges);
        svgEl('path', { d: `M${x2 - 8},${d.y - 4.5} L${x2},${d.y} L${x2 - 8},${d.y + 4.5} Z`, class: arrowCls }, edges);
      }
      // The label: the binding's name and numbers.
      const lg = svgEl('g', { class: ['label', b.ghost ? 'ghost' : '', runRate > 0 ? 'active' : '', failing ? 'failing' : ''].join(' '), 'data-binding': b.name }, front);
      const title = svgEl('title', {}, lg);
      svgEl('rect', { x: n.x, y: n.y - n.h / 2, width: n.w, height: n.h, rx: 7 }, lg);
      fitText(svgText(lg, n.x + 9, n.y - n.h / 2 + 16, 'name', b.name), n.w - 18);
      if (b.ghost) {
        svgText(lg, n.x + 9, n.y - n.h / 2 + 31, 'ghosttext', 'in the store\u2019s registry,');
        svgText(lg, n.x + 9, n.y - n.h / 2 + 44, 'ghosttext', 'not run by this host');
        title.textContent = `${b.name} (${b.kind}) observes ${b.table}/${b.column}: registered in the store, no component on this host`;
        continue;
      }
      // Red only while it fails now: a failure fixed long ago stays counted, not red.
      const failedCls = failing ? 'stats bad' : 'stats';
      const t1 = svgText(lg, n.x + 9, n.y - n.h / 2 + 31, 'stats', `${fmtRate(runRate)} runs/s · `);
      const f = svgEl('tspan', { class: failedCls }, t1);
      f.textContent = `${fmtInt(b.failures)} failed`;
      fitText(t1, n.w - 18);
      // The percentiles are over the store's life like the counts (the host saves the
      // histogram with them); runs saved by a version that did not save it are in none.
      const untimed = b.p50_run_ms === null || b.p50_run_ms === undefined;
      const times = !untimed ? `p50 ${fmtMs(b.p50_run_ms)} · p99 ${fmtMs(b.p99_run_ms)}` : b.runs > 0 ? 'no run timed yet' : 'no runs yet';
      fitText(svgText(lg, n.x + 9, n.y - n.h / 2 + 44, 'stats', times), n.w - 18);
      title.textContent =
        `${b.name} (${b.kind}) observes ${b.table}/${b.column}\n` +
        `writes: ${(b.writes || []).join(', ') || 'nothing declared'}\n` +
        `component: ${b.wasm}, loaded ${ago(b.loaded_at)}\n` +
        `${fmtInt(b.runs)} runs over the store's life: ${fmtInt(b.committed)} committed, ${fmtInt(b.lost_to_conflict)} lost to a conflict, ` +
        `${fmtInt(b.failures)} failed (${fmtInt(b.failures_last_minute || 0)} in the last minute); mean ${fmtMs(b.mean_run_ms)}, ` +
        `p50 ${fmtMs(b.p50_run_ms)}, p90 ${fmtMs(b.p90_run_ms)}, p99 ${fmtMs(b.p99_run_ms)}`;
    }
    for (const n of g.nodes.values()) {
      if (n.type !== 'column') continue;
      const pending = backlogOf.get(n.key) || 0;
      const source = n.observed && !n.pred.length;
      const cls = ['node', source ? 'source' : '', n.observed ? '' : 'sink', pending > 0 ? 'pending' : ''].filter(Boolean).join(' ');
      const ng = svgEl('g', { class: cls, 'data-column': `${n.table}/${n.column}` }, front);
      svgEl('title', {}, ng).textContent = n.observed
        ? `${n.table}/${n.column}: observed${pending ? `, ${fmtInt(pending)} pending notifications` : ''}`
        : `${n.table}/${n.column}: written, observed by no binding`;
      svgEl('rect', { x: n.x, y: n.y - n.h / 2, width: n.w, height: n.h, rx: 5 }, ng);
      fitText(svgText(ng, n.x + 9, n.y - n.h / 2 + 14, 'table', n.table), n.w - 18);
      fitText(svgText(ng, n.x + 9, n.y - n.h / 2 + 30, 'column', n.column), n.w - 18);
      if (pending > 0) {
        const bg = svgEl('g', { class: 'badge', 'data-column': `${n.table}/${n.column}` }, badges);
        const rect = svgEl('rect', { y: n.y - n.h / 2 - 9, height: 17, rx: 8.5 }, bg);
        const t = svgText(bg, 0, n.y - n.h / 2 + 3.5, '', `${fmtInt(pending)} pending`);
        const bw = t.getComputedTextLength() + 12;
        const right = n.x + n.w + 6;
        rect.setAttribute('x', String(right - bw));
        rect.setAttribute('width', String(bw));
        t.setAttribute('x', String(right - bw + 6));
      }
    }
  }

  // ---- charts -------------------------------------------------------------------------------

  function niceCeil(x) {
    if (!(x > 0)) return 1;
    const p = 10 ** Math.floor(Math.log10(x));
    for (const m of [1, 2, 2.5, 5, 10]) if (x <= m * p) return m * p;
    return 10 * p;
  }

  function fmtAxis(v) {
    if (v >= 10000) return `${Math.round(v / 1000)}k`;
    if (v >= 1000) return `${(v / 1000).toFixed(1).replace(/\.0$/, '')}k`;
    return Number.isInteger(v) ? String(v) : v.toFixed(1);
  }

  function drawChart(svg, series, integral) {
    const W = Math.max(320, Math.round(svg.clientWidth || 600));
    const H = 180;
    svg.setAttribute('viewBox', `0 0 ${W} ${H}`);
    svg.replaceChildren();
    const L = 44;
    const R = 10;
    const T = 10;
    const B = 22;
    const pw = W - L - R;
    const ph = H - T - B;
    const now = Date.now();
    // The time since the first sample (at least a minute, at most HISTORY_MS).
    const first = state.history.length ? state.history[0].t : now;
    const span = Math.min(HISTORY_MS, Math.max(60000, now - first));
    let max = 0;
    for (const s of series) for (const p of state.history) if (p[s.key] !== null) max = Math.max(max, p[s.key]);
    const top = integral ? Math.max(4, niceCeil(max)) : Math.max(1, niceCeil(max));
    const X = (t) => L + (1 - (now - t) / span) * pw;
    const Y = (v) => T + ph - (v / top) * ph;
    for (let i = 0; i <= 4; i++) {
      const v = (top * i) / 4;
      svgEl('line', { x1: L, x2: W - R, y1: Y(v), y2: Y(v), class: 'grid' }, svg);
      svgText(svg, L - 6, Y(v) + 3.5, 'axis', fmtAxis(v)).setAttribute('text-anchor', 'end');
    }
    const step = [10000, 15000, 30000, 60000].find((s) => span / s <= 6) || 60000;
    for (let ago = 0; ago <= span + 1; ago += step) {
      const label = ago === 0 ? 'now' : ago % 60000 === 0 ? `\u2212${ago / 60000} min` : `\u2212${ago / 1000} s`;
      const t = svgText(svg, X(now - ago), H - 6, 'axis', label);
      t.setAttribute('text-anchor', ago === 0 ? 'end' : ago + step > span + 1 ? 'start' : 'middle');
    }
    for (const s of series) {
      let d = '';
      let area = '';
      let prevT = null;
      let runStart = null;
      let lastX = null;
      const closeArea = () => {
        if (runStart !== null) area += ` L${lastX},${Y(0)} L${runStart},${Y(0)} Z`;
      };
      for (const p of state.history) {
        const v = p[s.key];
        // No value (a host's sample without a backlog count, the first rate): the line goes
        // on to the next value, unless that is more than 5 s later.
        if (v === null || v === undefined) continue;
        const x = X(p.t).toFixed(1);
        const y = Y(v).toFixed(1);
        if (prevT === null || p.t - prevT > 5000) {
          closeArea();
          d += ` M${x},${y}`;
          area += ` M${x},${y}`;
          runStart = x;
        } else {
          d += ` L${x},${y}`;
          area += ` L${x},${y}`;
        }
        lastX = x;
        prevT = p.t;
      }
      closeArea();
      if (s.area && area) svgEl('path', { d: area.trim(), class: `area ${s.cls}` }, svg);
      if (d) svgEl('path', { d: d.trim(), class: `series ${s.cls}`, 'data-series': s.key }, svg);
    }
  }

  function legend(id, series, integral) {
    const box = $(id);
    box.replaceChildren();
    const last = state.history[state.history.length - 1] || {};
    for (const s of series) {
      const v = last[s.key];
      box.append(
        h(
          'span',
          {},
          h('span', { className: `sw ${s.cls}` }),
          `${s.name} `,
          h('b', {}, v === null || v === undefined ? '–' : integral ? fmtInt(v) : fmtRate(v)),
        ),
      );
    }
  }

  function renderCharts() {
    const backlog = [{ key: 'backlog', name: 'pending', cls: 'c-backlog', area: true }];
    drawChart($('chart-backlog'), backlog, true);
    legend('legend-backlog', backlog, true);
    const tput = [
      { key: 'commits', name: 'commits/s', cls: 'c-commits' },
      { key: 'runs', name: 'runs/s', cls: 'c-runs' },
      { key: 'conflicts', name: 'conflicts/s', cls: 'c-conflicts' },
    ];
    drawChart($('chart-throughput'), tput, false);
    legend('legend-throughput', tput, false);
  }

  // ---- dead letters -------------------------------------------------------------------------

  async function retry(body, button) {
    const err = $('dead-error');
    err.hidden = true;
    button.disabled = true;
    const label = button.textContent;
    button.textContent = 'Retrying…';
    if (body.id) state.retrying.add(body.id);
    try {
      const r = await api('POST', '/v1/dead-letters/retry', body);
      button.textContent = 'Retried';
      err.hidden = true;
      if (body.all) setTimeout(() => { button.disabled = false; button.textContent = label; }, 1500);
      else if (!r.retried.length) state.retrying.delete(body.id);
    } catch (e) {
      if (body.id) state.retrying.delete(body.id);
      button.disabled = false;
      button.textContent = label;
      err.textContent = `Retry failed: ${e.message}`;
      err.hidden = false;
      if (e.status === 401) showLogin(e.message);
    }
    schedule(150);
  }

  // Discard asks once more on the button itself (no dialog): the notification is gone for good.
  async function discard(id, button) {
    const err = $('dead-error');
    if (button.dataset.armed !== 'yes') {
      button.dataset.armed = 'yes';
      button.textContent = 'Discard for good?';
      setTimeout(() => {
        if (button.dataset.armed === 'yes' && !button.disabled) {
          button.dataset.armed = '';
          button.textContent = 'Discard';
        }
      }, 4000);
      return;
    }
    button.dataset.armed = '';
    button.disabled = true;
    button.textContent = 'Discarding…';
    try {
      await api('POST', '/v1/dead-letters/discard', { id });
      err.hidden = true;
    } catch (e) {
      button.disabled = false;
      button.textContent = 'Discard';
      err.textContent = `Discard failed: ${e.message}`;
      err.hidden = false;
      if (e.status === 401) showLogin(e.message);
    }
    schedule(150);
  }

  function renderDeadLetters(dead) {
    const body = $('dead-body');
    setText('dead-count', dead.length ? `(${fmtInt(dead.length)})` : '');
    $('dead-empty').hidden = dead.length > 0;
    $('dead-table').hidden = dead.length === 0;
    $('retry-all').hidden = dead.length < 2;
    const seen = new Set();
    for (const d of dead) {
      seen.add(d.id);
      let row = state.deadRows.get(d.id);
      if (!row) {
        const button = h('button', { type: 'button', className: 'retry', 'data-id': d.id }, 'Retry');
        button.addEventListener('click', () => retry({ id: d.id }, button));
        const drop = h('button', { type: 'button', className: 'discard', 'data-id': d.id, title: 'Remove this dead letter: its notification is not run again' }, 'Discard');
        drop.addEventListener('click', () => discard(d.id, drop));
        row = {
          tr: h('tr', { 'data-id': d.id }),
          cells: [h('td', { className: 'mono' }), h('td'), h('td', { className: 'num' }), h('td', { className: 'err' }), h('td'), h('td', { className: 'actions' }, button, drop)],
          button,
        };
        row.tr.append(...row.cells);
        state.deadRows.set(d.id, row);
      }
      row.cells[0].textContent = d.cell;
      row.cells[1].textContent = d.observer;
      row.cells[2].textContent = fmtInt(d.attempts);
      row.cells[3].textContent = d.error;
      row.cells[4].textContent = ago(d.time);
      row.cells[4].title = d.time;
      if (row.time !== d.time) {
        // Dead-lettered again (after a retry): retryable again.
        if (row.time !== undefined) state.retrying.delete(d.id);
        row.time = d.time;
      }
      if (!state.retrying.has(d.id) && row.button.textContent !== 'Retrying…') {
        row.button.disabled = false;
        row.button.textContent = 'Retry';
      }
    }
    for (const [id, row] of state.deadRows) {
      if (!seen.has(id)) {
        row.tr.remove();
        state.deadRows.delete(id);
        state.retrying.delete(id);
      }
    }
    // Keep the rows in the order of the list (oldest first, as the API gives them).
    dead.forEach((d, i) => {
      const tr = state.deadRows.get(d.id).tr;
      if (body.children[i] !== tr) body.insertBefore(tr, body.children[i] || null);
    });
  }

  // ---- tables -------------------------------------------------------------------------------

  function renderSinks(host) {
    const sinks = (host && host.sinks) || [];
    $('sinks-card').hidden = sinks.length === 0;
    const body = $('sinks-body');
    body.replaceChildren();
    for (const s of sinks) {
      let state = 'standby';
      if (s.owner) state = s.lag_secs == null ? 'starting' : s.lag_secs > 0 ? 'behind' : 'caught up';
      const parked = (s.dead_letters || []).length;
      const error = s.last_error ? `${s.last_error}${s.failures ? ` (${fmtInt(s.failures)} failed attempts)` : ''}` : '';
      body.append(
        h(
          'tr',
          { 'data-sink': s.name },
          h('td', {}, s.name, h('span', { className: 'tag' }, s.kind)),
          h('td', { className: 'mono', title: `${s.table}: ${s.columns.join(', ')}` }, s.destination),
          h('td', {}, h('span', { className: s.owner ? 'ok' : 'muted' }, state)),
          h('td', { className: 'num mono' }, s.position == null ? '–' : String(s.position)),
          h('td', { className: 'num' }, s.lag_secs == null ? '–' : `${s.lag_secs.toFixed(1)} s`),
          h('td', { className: 'num' }, fmtInt(s.delivered)),
          h('td', { className: 'num' }, s.delivered_per_sec.toFixed(1)),
          h('td', { className: error ? 'no' : '' }, error, parked ? ` · ${fmtInt(parked)} batches parked` : ''),
        ),
      );
    }
  }

  function renderBindings(host, dead) {
    const body = $('bindings-body');
    body.replaceChildren();
    for (const b of (host && host.bindings) || []) {
      const failing = bindingFailing(b, dead);
      body.append(
        h(
          'tr',
          { 'data-binding': b.name },
          h('td', {}, b.name, b.kind === 'weak' ? h('span', { className: 'tag' }, 'weak') : null),
          h('td', { className: 'mono', title: `writes: ${(b.writes || []).join(', ') || 'nothing declared'}` }, `${b.table}/${b.column}`),
          h('td', { className: 'num' }, `${fmtInt(b.backlog)}${b.backlog_capped ? '+' : ''}`),
          h('td', { className: 'num' }, fmtInt(b.runs)),
          h('td', { className: 'num' }, fmtInt(b.committed)),
          h('td', { className: `num${b.lost_to_conflict > 0 ? ' warn' : ''}` }, fmtInt(b.lost_to_conflict)),
          h('td', { className: `num${failing ? ' no' : ''}`, title: `${fmtInt(b.failures_last_minute || 0)} in the last minute` }, fmtInt(b.failures)),
          h('td', { className: 'num' }, fmtMs(b.mean_run_ms)),
          h('td', { className: 'num' }, fmtMs(b.p50_run_ms)),
          h('td', { className: 'num' }, fmtMs(b.p99_run_ms)),
          h('td', { className: 'num', 'data-fresh': 'p50' }, fmtMs(b.freshness_p50_ms)),
          h('td', { className: 'num' }, fmtMs(b.freshness_p99_ms)),
        ),
      );
    }
  }

  function renderHotRows(hot) {
    const rows = (hot && hot.rows) || [];
    const body = $('hot-body');
    body.replaceChildren();
    $('hot-empty').hidden = rows.length > 0;
    $('hot-table').hidden = rows.length === 0;
    for (const r of rows) {
      const bindings = r.observers.map((o) => `${o.observer} (${fmtInt(o.conflicts)})`).join(', ');
      body.append(
        h(
          'tr',
          { 'data-cell': r.cell },
          h('td', { className: 'mono', title: `row, hex: ${r.row_hex}` }, r.cell),
          h('td', { className: 'num' }, fmtInt(r.conflicts)),
          h('td', {}, bindings),
          h('td', { title: r.last_at }, ago(r.last_at)),
        ),
      );
    }
  }

  /** Per-bucket counts of a cumulative histogram (`/metrics`' buckets, the last is +Inf). */
  function bucketCounts(hist) {
    const c = (hist && hist.cumulative) || [];
    return c.map((n, i) => n - (i ? c[i - 1] : 0));
  }

  function fmtBound(secs) {
    if (secs < 1) return `${Math.round(secs * 1000 * 10) / 10}ms`;
    if (secs < 60) return `${Math.round(secs * 10) / 10}s`;
    return `${Math.round(secs / 6) / 10}m`;
  }

  /** The freshness histograms of the bindings with committed runs: one bar per bucket and binding. */
  function renderFreshness(host) {
    const svg = $('chart-freshness');
    const bindings = ((host && host.bindings) || []).filter((b) => b.freshness && (b.freshness.cumulative || []).some((n) => n > 0));
    $('freshness-empty').hidden = bindings.length > 0;
    svg.replaceChildren();
    const legend = $('legend-freshness');
    legend.replaceChildren();
    if (!bindings.length) return;
    const bounds = bindings[0].freshness.le_secs;
    const counts = bindings.map((b) => bucketCounts(b.freshness));
    // Show the buckets from the first to the last that holds a run.
    let lo = bounds.length;
    let hi = 0;
    for (const c of counts) {
      c.forEach((n, i) => {
        if (n > 0) {
          lo = Math.min(lo, i);
          hi = Math.max(hi, i);
        }
      });
    }
    lo = Math.max(0, lo - 1);
    hi = Math.min(bounds.length, hi + 1);
    const W = svg.clientWidth || 520;
    const H = svg.clientHeight || 200;
    svg.setAttribute('viewBox', `0 0 ${W} ${H}`);
    const L = 40;
    const B = 22;
    const T = 8;
    const pw = W - L - 8;
    const ph = H - T - B;
    const n = hi - lo + 1;
    const top = niceCeil(Math.max(1, ...counts.flatMap((c) => c.slice(lo, hi + 1))));
    for (let i = 0; i <= 4; i++) {
      const v = (top * i) / 4;
      const y = T + ph - (v / top) * ph;
      svgEl('line', { x1: L, y1: y, x2: L + pw, y2: y, class: 'grid' }, svg);
      svgText(svg, L - 4, y + 4, 'axis end', fmtAxis(v));
    }
    const slot = pw / n;
    const bar = Math.max(2, (slot - 4) / bindings.length);
    bindings.forEach((b, k) => {
      const cls = `f${k % 6}`;
      counts[k].slice(lo, hi + 1).forEach((v, j) => {
        if (!v) return;
        const hgt = (v / top) * ph;
        const x = L + j * slot + 2 + k * bar;
        const rect = svgEl('rect', { x, y: T + ph - hgt, width: bar - 1, height: hgt, class: `fbar ${cls}`, 'data-binding': b.name }, svg);
        const upper = lo + j < bounds.length ? `≤ ${fmtBound(bounds[lo + j])}` : `> ${fmtBound(bounds[bounds.length - 1])}`;
        svgEl('title', {}, rect).textContent = `${b.name}: ${fmtInt(v)} runs ${upper}`;
      });
      legend.append(
        h('span', {}, h('span', { className: `sw ${cls}` }), `${b.name} `, h('b', {}, `p50 ${fmtMs(b.freshness_p50_ms)} · p99 ${fmtMs(b.freshness_p99_ms)}`)),
      );
    });
    for (let j = 0; j < n; j++) {
      if (n > 8 && j % 2) continue;
      const i = lo + j;
      const label = i < bounds.length ? fmtBound(bounds[i]) : '+Inf';
      svgText(svg, L + j * slot + slot / 2, H - 6, 'axis mid', `≤${label}`);
    }
  }

  function fmtBytes(n) {
    const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
    let i = 0;
    let v = n;
    while (v >= 1024 && i < units.length - 1) {
      v /= 1024;
      i++;
    }
    return `${i ? v.toFixed(v < 10 ? 1 : 0) : v} ${units[i]}`;
  }

  /** The live workers and their share of the notify buckets. */
  function renderHosts(store) {
    const body = $('hosts-body');
    body.replaceChildren();
    const total = store.notify_buckets || 1;
    for (const w of store.workers || []) {
      const share = w.buckets / total;
      const fill = h('span', { className: 'share-fill' });
      // A style property, not a style attribute: the page's CSP allows no inline style.
      fill.style.width = `${Math.round(share * 100)}%`;
      body.append(
        h(
          'tr',
          { 'data-worker': String(w.id) },
          h('td', { className: 'mono' }, String(w.id), w.this ? h('span', { className: 'tag' }, 'this host') : null),
          h('td', {}, w.scanning ? h('span', { className: 'ok' }, 'scanning') : h('span', { className: 'muted' }, 'none')),
          h('td', { className: 'num' }, `${fmtInt(w.buckets)} of ${fmtInt(total)}`),
          h('td', {}, h('span', { className: 'share' }, fill), ` ${Math.round(share * 100)}%`),
        ),
      );
    }
    if (!body.children.length) body.append(h('tr', {}, h('td', { colspan: '4', className: 'empty' }, 'No live worker.')));
    const size = store.size_bytes == null ? 'size on disk not known for this backend' : `${fmtBytes(store.size_bytes)} on disk`;
    const live = (store.pins || []).filter((p) => !p.expired);
    const pins = live.length
      ? ` · ${fmtInt(live.length)} pinned snapshot${live.length === 1 ? '' : 's'} (oldest ${Math.min(...live.map((p) => p.ts))})`
      : '';
    setText('store-line', `${store.path}: ${size} · ${fmtInt(store.versions_collected)} versions collected by GC${pins}`);
  }

  function renderRegistry(status) {
    const body = $('registry-body');
    body.replaceChildren();
    const host = status.host;
    const here = new Set(((host && host.bindings) || []).map((b) => b.name));
    const registered = status.store.registered || [];
    const inRegistry = new Set(registered.map((r) => r.name));
    for (const r of registered) {
      const ok = here.has(r.name);
      body.append(
        h(
          'tr',
          { 'data-binding': r.name },
          h('td', {}, r.name, r.kind === 'weak' ? h('span', { className: 'tag' }, 'weak') : null),
          h('td', { className: 'mono' }, `${r.table}/${r.column}`),
          h('td', {}, ok ? h('span', { className: 'ok' }, 'runs here') : h('span', { className: 'no' }, 'no component here')),
        ),
      );
    }
    for (const b of (host && host.bindings) || []) {
      if (inRegistry.has(b.name)) continue;
      body.append(
        h(
          'tr',
          { 'data-binding': b.name },
          h('td', {}, b.name),
          h('td', { className: 'mono' }, `${b.table}/${b.column}`),
          h('td', {}, h('span', { className: 'no' }, 'loaded here, not in the registry')),
        ),
      );
    }
    if (!body.children.length) body.append(h('tr', {}, h('td', { colspan: '3', className: 'empty' }, 'The registry is empty.')));
  }

  const COUNTER_NAMES = {
    commits: 'commits',
    one_pc_commits: 'one-phase commits',
    conflicts: 'conflicts',
    rolled_forward: 'locks rolled forward',
    rolled_back: 'locks rolled back',
    lock_waits: 'waits on a lock',
    observer_runs: 'observer runs',
    observer_skips: 'observer skips',
    observer_failures: 'failed runs',
    observer_conflicts: 'runs lost to a conflict',
    dead_letters: 'dead-lettered',
    notifications_cleared: 'notifications cleared',
    teleports: 'scanner teleports',
    scanner_errors: 'scanner errors',
    backend_commits: 'backend commits',
    backend_ops: 'backend ops',
  };

  function renderCounters(m) {
    const box = $('counters');
    box.replaceChildren();
    for (const [name, value] of Object.entries(m)) {
      box.append(h('div', { className: 'counter', title: name, 'data-counter': name }, h('span', {}, COUNTER_NAMES[name] || name), h('span', {}, fmtInt(value))));
    }
  }

  // ---- start --------------------------------------------------------------------------------

  function start() {
    setupLogin();
    $('retry-all').addEventListener('click', (ev) => retry({ all: true }, ev.currentTarget));
    window.addEventListener('resize', () => {
      if (state.history.length) renderCharts();
    });
    poll();
  }

  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', start);
  else start();
})();
