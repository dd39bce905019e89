// The dashboard page: one self-contained HTML document (inline CSS and vanilla JS drawing inline
// SVG), no external requests, so it works offline and behind any proxy. Kept as a TS module
// rather than an .html file so that it ships in dist/ with a plain `tsc` build.
//
// Test hooks: data-testid="jobs-table" (rows tr[data-job=NAME], ratio cell data-testid="ratio"
// with data-level ok|warning|danger), data-testid="timeline-NAME" (an <svg>; runs
// data-kind="run" data-outcome=..., overruns data-kind="overrun", skips data-kind="skip",
// missed slots data-kind="missed"), data-testid="interval-NAME" (the interval grid and ruler),
// data-testid="last-updated" (data-updated-at=ISO after each successful refresh).
import { createHash } from 'node:crypto';

const STYLE = String.raw`
:root {
  --bg: #f5f6f8; --card: #ffffff; --ink: #1d2433; --muted: #667085; --line: #e4e7ec; --soft: #f9fafb;
  --ok: #1f9d55; --fail: #d93f3f; --lost: #ee8a1a; --aborted: #98a2b3; --run: #2f6fde; --skip: #e0a100; --warn-bg: #fff6dc; --danger-bg: #fde8e8;
}
* { box-sizing: border-box; }
html, body { margin: 0; background: var(--bg); color: var(--ink); }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; }
code, .mono { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, "Liberation Mono", monospace; font-size: 12.5px; }
header.top { display: flex; align-items: center; gap: 24px; padding: 14px 28px; background: var(--card); border-bottom: 1px solid var(--line); }
.brand { font-weight: 650; font-size: 17px; letter-spacing: -0.01em; display: flex; align-items: center; gap: 8px; }
.brand .mark { width: 14px; height: 14px; border-radius: 3px; background: linear-gradient(135deg, #2f6fde, #1f9d55); display: inline-block; }
.brand .sub { color: var(--muted); font-weight: 500; }
.summary { color: var(--muted); flex: 1; }
.summary b { color: var(--ink); font-weight: 600; }
.summary .warn { color: #9a6700; }
.summary .danger { color: var(--fail); }
.status { display: flex; align-items: center; gap: 8px; color: var(--muted); font-size: 13px; white-space: nowrap; }
.dot { width: 8px; height: 8px; border-radius: 50%; background: var(--aborted); display: inline-block; }
.dot.ok { background: var(--ok); }
.dot.error { background: var(--fail); }
.badge { border: 1px solid var(--line); border-radius: 999px; padding: 1px 8px; font-size: 12px; color: var(--muted); }
.banner { margin: 16px 28px 0; padding: 10px 14px; border-radius: 8px; background: var(--danger-bg); color: #8a1f1f; border: 1px solid #f5c2c2; }
main { padding: 20px 28px 8px; display: grid; gap: 20px; }
.card { background: var(--card); border: 1px solid var(--line); border-radius: 10px; padding: 16px 18px; box-shadow: 0 1px 2px rgba(16, 24, 40, 0.04); }
.card-head { display: flex; align-items: center; gap: 12px; margin-bottom: 10px; }
.card-head h2 { font-size: 15px; margin: 0; font-weight: 650; }
.card-head .hint { color: var(--muted); font-size: 12.5px; }
.card-head .spacer { flex: 1; }
table.jobs { width: 100%; border-collapse: collapse; }
table.jobs th { text-align: left; font-weight: 600; font-size: 12px; color: var(--muted); padding: 6px 8px; border-bottom: 1px solid var(--line); white-space: nowrap; }
table.jobs td { padding: 8px 8px; border-bottom: 1px solid var(--line); vertical-align: middle; }
table.jobs tr:last-child td { border-bottom: none; }
table.jobs tbody tr:hover td { background: var(--soft); }
table.jobs .num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
.job-name { font-weight: 600; }
.nowrap { white-space: nowrap; }
.table-wrap { overflow-x: auto; }
.sched { color: var(--ink); }
.small { color: var(--muted); font-size: 12px; }
.pill { display: inline-flex; align-items: center; gap: 6px; padding: 2px 9px; border-radius: 999px; font-size: 12px; font-weight: 550; white-space: nowrap; }
.pill::before { content: ""; width: 7px; height: 7px; border-radius: 50%; background: currentColor; }
.pill.running { color: var(--run); background: #e8f0fd; }
.pill.idle { color: #667085; background: #f0f1f4; }
.pill.expired { color: #b25e00; background: #fff0dd; }
.pill.succeeded { color: #177a42; background: #e3f5ea; }
.pill.failed { color: #b42323; background: #fde8e8; }
.pill.lost { color: #b25e00; background: #fff0dd; }
.pill.aborted { color: #555e6e; background: #eef0f3; }
.pill.none { color: var(--muted); background: #f0f1f4; }
.ratio { white-space: nowrap; }
.ratio .meter { display: inline-block; vertical-align: middle; width: 64px; height: 8px; border-radius: 4px; background: #eef0f3; position: relative; overflow: hidden; margin-right: 8px; }
.ratio .meter .fill { position: absolute; left: 0; top: 0; bottom: 0; background: var(--ok); border-radius: 4px; }
.ratio .meter .mark { position: absolute; top: 0; bottom: 0; width: 1px; background: rgba(0, 0, 0, 0.35); }
.ratio .value { font-variant-numeric: tabular-nums; font-weight: 600; }
td.ratio.warning { background: var(--warn-bg); }
td.ratio.warning .fill { background: var(--skip); }
td.ratio.warning .value { color: #9a6700; }
td.ratio.danger { background: var(--danger-bg); }
td.ratio.danger .fill { background: var(--fail); }
td.ratio.danger .value { color: var(--fail); }
tr:hover td.ratio.warning { background: #fff0c7; }
tr:hover td.ratio.danger { background: #fbdcdc; }
.count-hot { color: #9a6700; font-weight: 600; }
.count-bad { color: var(--fail); font-weight: 600; }
.empty { color: var(--muted); padding: 14px 4px; margin: 0; }
.range { display: inline-flex; border: 1px solid var(--line); border-radius: 8px; overflow: hidden; }
.range button { font: inherit; font-size: 13px; border: none; background: var(--card); color: var(--ink); padding: 4px 12px; cursor: pointer; border-left: 1px solid var(--line); }
.range button:first-child { border-left: none; }
.range button[aria-pressed="true"] { background: var(--ink); color: #fff; }
.range button:focus-visible { outline: 2px solid var(--run); outline-offset: -2px; }
.legend { display: flex; flex-wrap: wrap; gap: 6px 16px; color: var(--muted); font-size: 12px; margin: 2px 0 10px; }
.legend span { display: inline-flex; align-items: center; gap: 6px; }
.legend svg { display: block; }
.timelines { display: grid; gap: 0; }
.lane-row { display: grid; grid-template-columns: 190px 1fr; align-items: stretch; border-top: 1px solid var(--line); }
.lane-row.axis { border-top: none; }
.lane-label { padding: 8px 12px 6px 2px; min-width: 0; }
.lane-label .job-name { overflow: hidden; text-overflow: ellipsis; white-space: nowrap; display: block; }
.lane-label .small { overflow: hidden; text-overflow: ellipsis; white-space: nowrap; display: block; }
.lane-chart { min-width: 0; padding: 4px 0; }
.lane-chart svg, .axis svg { display: block; overflow: visible; }
svg text { font: 11px system-ui, -apple-system, "Segoe UI", Roboto, Arial, sans-serif; fill: #667085; }
svg .run:hover, svg .skip:hover, svg .missed:hover { stroke: #1d2433; stroke-width: 1.2; }
.notice { color: #9a6700; font-size: 12px; margin-top: 8px; }
footer { padding: 8px 28px 24px; color: var(--muted); font-size: 12px; }
footer a { color: var(--muted); }
.defs { position: absolute; width: 0; height: 0; }
`;

const SCRIPT = String.raw`
(function () {
  'use strict';
  var SVG = 'http://www.w3.org/2000/svg';
  var REFRESH_MS = Number(document.body.getAttribute('data-refresh-ms')) || 5000;
  var RANGES = [1, 6, 24];
  var COLORS = { succeeded: '#1f9d55', failed: '#d93f3f', lost: 'url(#lh-stripes-lost)', aborted: '#98a2b3', running: '#2f6fde' };
  var LABEL_W = 190;
  var state = { hours: initialHours(), jobs: null, history: null, updatedAt: null, error: null };
  var seq = 0;
  var timer = null;

  function initialHours() {
    var h = Number(new URLSearchParams(location.search).get('hours'));
    return RANGES.indexOf(h) >= 0 ? h : 1;
  }

  // ---- small DOM helpers (text only through textContent: job names and errors are data) ----
  function el(tag, attrs, children) {
    var node = document.createElement(tag);
    setAttrs(node, attrs);
    append(node, children);
    return node;
  }
  function sv(tag, attrs, children) {
    var node = document.createElementNS(SVG, tag);
    setAttrs(node, attrs);
    append(node, children);
    return node;
  }
  function setAttrs(node, attrs) {
    if (!attrs) return;
    Object.keys(attrs).forEach(function (k) {
      var v = attrs[k];
      if (v === null || v === undefined || v === false) return;
      if (k === 'text') node.textContent = String(v);
      else node.setAttribute(k, String(v));
    });
  }
  function append(node, children) {
    if (children === null || children === undefined) return;
    if (!Array.isArray(children)) children = [children];
    children.forEach(function (c) {
      if (c === null || c === undefined || c === false) return;
      node.appendChild(typeof c === 'string' || typeof c === 'number' ? document.createTextNode(String(c)) : c);
    });
  }
  function tip(text) { return sv('title', { text: text }); }

  // ---- formatting ----
  function pad(n) { return n < 10 ? '0' + n : String(n); }
  function fmtClock(t) { var d = new Date(t); return pad(d.getHours()) + ':' + pad(d.getMinutes()) + ':' + pad(d.getSeconds()); }
  function fmtShort(t) { var d = new Date(t); return pad(d.getHours()) + ':' + pad(d.getMinutes()); }
  function fmtDateTime(t) { var d = new Date(t); return d.getFullYear() + '-' + pad(d.getMonth() + 1) + '-' + pad(d.getDate()) + ' ' + fmtClock(t); }
  function fmtSeconds(s) {
    if (s === null || s === undefined || !isFinite(s)) return '–';
    if (s < 1) return (Math.round(s * 1000)) + ' ms';
    if (s < 10) return s.toFixed(1) + 's';
    if (s < 60) return Math.round(s) + 's';
    if (s < 3600) { var m = Math.floor(s / 60); return m + 'm ' + pad(Math.round(s - m * 60) % 60) + 's'; }
    if (s < 86400) { var h = Math.floor(s / 3600); return h + 'h ' + pad(Math.floor((s - h * 3600) / 60)) + 'm'; }
    var d = Math.floor(s / 86400); return d + 'd ' + Math.floor((s - d * 86400) / 3600) + 'h';
  }
  function fmtInterval(ms) {
    if (!ms) return '–';
    var units = [[86400000, 'd'], [3600000, 'h'], [60000, 'm'], [1000, 's']];
    for (var i = 0; i < units.length; i++) if (ms % units[i][0] === 0) return (ms / units[i][0]) + units[i][1];
    return fmtSeconds(ms / 1000);
  }
  function pct(r) { return Math.round(r * 100) + '%'; }
  function time(v) { return v ? Date.parse(v) : null; }

  // ---- data ----
  function getJson(url) {
    return fetch(url, { cache: 'no-store', headers: { accept: 'application/json' } }).then(function (res) {
      return res.text().then(function (body) {
        var data = null;
        try { data = JSON.parse(body); } catch (e) { data = null; }
        if (!res.ok) throw new Error((data && data.error) || ('HTTP ' + res.status + ' from ' + url));
        if (data === null) throw new Error('not JSON from ' + url);
        return data;
      });
    });
  }

  function refresh() {
    clearTimeout(timer);
    var mine = ++seq;
    var hours = state.hours;
    Promise.all([getJson('api/jobs'), getJson('api/history?hours=' + hours)]).then(function (r) {
      if (mine !== seq) return;
      state.jobs = r[0]; state.history = r[1]; state.updatedAt = new Date(); state.error = null;
      render();
    }, function (error) {
      if (mine !== seq) return;
      state.error = error;
      renderStatus();
    }).then(function () {
      if (mine === seq) timer = setTimeout(tick, REFRESH_MS);
    });
  }
  function tick() {
    if (document.hidden) { timer = setTimeout(tick, REFRESH_MS); return; }
    refresh();
  }
  document.addEventListener('visibilitychange', function () { if (!document.hidden) refresh(); });

  // ---- header and status ----
  function renderStatus() {
    var dot = document.getElementById('status-dot');
    var stamp = document.getElementById('updated');
    var banner = document.getElementById('error');
    if (state.updatedAt) {
      stamp.textContent = 'Updated ' + fmtClock(state.updatedAt) + ' · every ' + fmtSeconds(REFRESH_MS / 1000);
      stamp.setAttribute('data-updated-at', state.updatedAt.toISOString());
    }
    if (state.error) {
      dot.className = 'dot error';
      banner.hidden = false;
      banner.textContent = 'Cannot load data: ' + state.error.message + '. Retrying every ' + fmtSeconds(REFRESH_MS / 1000) +
        (state.updatedAt ? '; showing data from ' + fmtClock(state.updatedAt) + '.' : '.');
    } else {
      dot.className = 'dot ok';
      banner.hidden = true;
    }
  }

  function renderSummary(jobs, warnAt) {
    var running = 0, creeping = 0, over = 0, failed = 0;
    jobs.forEach(function (j) {
      if (j.state === 'running') running++;
      if (j.p95IntervalRatio !== null && j.p95IntervalRatio >= 1) over++;
      else if (j.p95IntervalRatio !== null && j.p95IntervalRatio >= warnAt) creeping++;
      if (j.lastRun && j.lastRun.outcome === 'failed') failed++;
    });
    var box = document.getElementById('summary');
    box.textContent = '';
    var parts = [[jobs.length, jobs.length === 1 ? ' job' : ' jobs', ''], [running, ' running', '']];
    if (creeping) parts.push([creeping, ' near their interval', 'warn']);
    if (over) parts.push([over, ' over their interval', 'danger']);
    if (failed) parts.push([failed, ' last run failed', 'danger']);
    parts.forEach(function (p, i) {
      if (i) append(box, ' · ');
      append(box, el('span', { class: p[2] || null }, [el('b', { text: p[0] }), p[1]]));
    });
  }

  // ---- jobs table ----
  function renderTable(data) {
    var body = document.getElementById('jobs-body');
    var now = time(data.now);
    var warnAt = data.warningRatio;
    body.textContent = '';
    document.getElementById('no-jobs').hidden = data.jobs.length > 0;
    data.jobs.forEach(function (j) {
      var ratio = j.p95IntervalRatio;
      var level = ratio === null ? 'none' : ratio >= 1 ? 'danger' : ratio >= warnAt ? 'warning' : 'ok';
      var tr = el('tr', { 'data-job': j.job, 'data-state': j.state, 'data-level': level });

      append(tr, el('td', null, el('span', { class: 'job-name', text: j.job })));

      append(tr, el('td', { title: 'interval ' + fmtInterval(j.intervalMs) + ', lease ttl ' + fmtInterval(j.ttlMs) + ', overlap ' + j.overlap + ', catch-up ' + j.catchUp }, [
        el('div', { class: 'sched mono nowrap', text: j.schedule }),
        el('div', { class: 'small', text: 'every ' + fmtInterval(j.intervalMs) + (j.timezone ? ' · ' + j.timezone : '') + ' · ' + j.overlap }),
      ]));

      var stateTitle = j.state === 'expired' ? 'the lease expired without a release: its holder is gone or stalled' : j.state === 'running' ? 'a run holds the lease (fence ' + j.fence + ')' : 'no one holds the lease';
      append(tr, el('td', null, el('span', { class: 'pill ' + j.state, title: stateTitle, text: j.state })));
      append(tr, el('td', { class: 'mono nowrap', title: j.holder ? 'fence ' + j.fence : null, text: j.holder || '–' }));
      append(tr, el('td', { class: 'num', text: j.leaseAgeSeconds === null ? '–' : fmtSeconds(j.leaseAgeSeconds) }));

      var last = j.lastRun;
      var lastCell = el('td', { class: 'nowrap' });
      if (last) {
        var lastTitle = 'slot ' + fmtDateTime(time(last.slot)) + '\nstarted ' + fmtDateTime(time(last.startedAt)) +
          (last.finishedAt ? '\nfinished ' + fmtDateTime(time(last.finishedAt)) : '') + (last.error ? '\n' + last.error : '');
        append(lastCell, [
          el('span', { class: 'pill ' + last.outcome, title: lastTitle, text: last.outcome }),
          el('div', { class: 'small', text: (last.finishedAt ? 'started ' : 'since ') + fmtSeconds((now - time(last.startedAt)) / 1000) + ' ago' }),
        ]);
        if (last.error) append(lastCell, el('div', { class: 'small', title: last.error, text: last.error.length > 48 ? last.error.slice(0, 47) + '…' : last.error }));
      } else {
        append(lastCell, el('span', { class: 'pill none', text: 'never ran' }));
      }
      append(tr, lastCell);

      append(tr, el('td', { class: 'num', title: j.runs24h + ' finished runs in 24 h (' + j.failed24h + ' failed, ' + j.lost24h + ' lost)' },
        j.p50Seconds === null ? '–' : fmtSeconds(j.p50Seconds) + ' / ' + fmtSeconds(j.p95Seconds)));

      var ratioCell = el('td', { class: 'ratio ' + level, 'data-testid': 'ratio', 'data-level': level,
        title: j.warning || (ratio === null ? 'no finished runs in 24 h' : 'p95 duration is ' + pct(ratio) + ' of the ' + fmtInterval(j.intervalMs) + ' interval') });
      if (ratio === null) {
        append(ratioCell, el('span', { class: 'small', text: '–' }));
      } else {
        var meter = el('span', { class: 'meter' });
        var fill = el('span', { class: 'fill' });
        fill.style.width = Math.min(100, ratio * 100) + '%';
        var mark = el('span', { class: 'mark' });
        mark.style.left = (warnAt * 100) + '%';
        append(meter, [fill, mark]);
        append(ratioCell, [meter, el('span', { class: 'value', text: pct(ratio) })]);
      }
      append(tr, ratioCell);

      var attempts = j.runs24h + j.skips24h;
      var rate = attempts ? j.skips24h / attempts : 0;
      append(tr, el('td', { class: 'num', title: j.skips24h + ' skipped of ' + attempts + ' slots in 24 h' },
        el('span', { class: j.skips24h ? 'count-hot' : null, text: j.skips24h ? j.skips24h + ' · ' + pct(rate) : '0' })));
      append(tr, el('td', { class: 'num' }, el('span', { class: j.missed24h ? 'count-bad' : null, text: j.missed24h })));
      body.appendChild(tr);
    });
  }

  // ---- timelines ----
  function axisStep(spanMs, width) {
    var steps = [60e3, 120e3, 300e3, 600e3, 900e3, 1800e3, 3600e3, 7200e3, 10800e3, 21600e3, 43200e3, 86400e3];
    for (var i = 0; i < steps.length; i++) if (steps[i] / spanMs * width >= 80) return steps[i];
    return steps[steps.length - 1];
  }
  function alignedTicks(from, to, step) {
    var off = -new Date(from).getTimezoneOffset() * 60000;
    var t = Math.ceil((from + off) / step) * step - off;
    var out = [];
    for (; t <= to; t += step) out.push(t);
    return out;
  }

  function renderTimelines(jobsData, hist) {
    var box = document.getElementById('timelines');
    var now = time(hist.now), from = time(hist.since);
    var width = Math.max(300, box.clientWidth - LABEL_W);
    var plotW = width - 8;
    var x = function (t) { return Math.max(0, Math.min(plotW, (t - from) / (now - from) * plotW)); };
    var pxPerMs = plotW / (now - from);
    box.textContent = '';

    // axis
    var step = axisStep(now - from, plotW);
    var axis = sv('svg', { width: width, height: 22, 'data-testid': 'timeline-axis' });
    alignedTicks(from, now, step).forEach(function (t) {
      var px = x(t);
      if (px > plotW - 40) return;
      append(axis, [sv('line', { x1: px, x2: px, y1: 16, y2: 22, stroke: '#c8ced8' }), sv('text', { x: px, y: 12, 'text-anchor': 'middle', text: fmtShort(t) })]);
    });
    append(axis, sv('text', { x: plotW, y: 12, 'text-anchor': 'end', fill: '#1d2433', text: 'now ' + fmtShort(now) }));
    append(axis, sv('line', { x1: 0, x2: plotW, y1: 21.5, y2: 21.5, stroke: '#e4e7ec' }));
    box.appendChild(el('div', { class: 'lane-row axis' }, [el('div'), el('div', { class: 'axis' }, axis)]));

    var byJob = {};
    function bucket(name) { return byJob[name] || (byJob[name] = { runs: [], skips: [], missed: [] }); }
    hist.runs.forEach(function (r) { bucket(r.job).runs.push(r); });
    hist.skips.forEach(function (s) { bucket(s.job).skips.push(s); });
    hist.missed.forEach(function (m) { bucket(m.job).missed.push(m); });

    jobsData.jobs.forEach(function (j) {
      var data = bucket(j.job);
      var interval = j.intervalMs || 0;

      // stack overlapping runs (overlap 'allow', or a replaced run still finishing) into sub-lanes
      var lanesEnd = [];
      var runs = data.runs.map(function (r) {
        var start = time(r.startedAt), end = r.finishedAt ? time(r.finishedAt) : now;
        var lane = 0;
        while (lane < lanesEnd.length && lanesEnd[lane] > start) lane++;
        if (lane > 3) lane = 3;
        lanesEnd[lane] = Math.max(lanesEnd[lane] || 0, end);
        return { r: r, start: start, end: end, lane: lane };
      });
      var lanes = Math.max(1, lanesEnd.length);
      var MARK_H = 14, LANE_H = 18, GAP = 3, RULER_H = 14;
      var bandTop = MARK_H, bandH = lanes * LANE_H + (lanes - 1) * GAP;
      var height = bandTop + bandH + RULER_H;
      var svg = sv('svg', { width: width, height: height, 'data-testid': 'timeline-' + j.job, 'data-job': j.job, role: 'img',
        'aria-label': 'timeline of ' + j.job });
      append(svg, sv('rect', { x: 0, y: bandTop - 2, width: plotW, height: bandH + 4, fill: '#f8f9fb', rx: 3 }));

      // the interval: a tick at every slot position (when they are far enough apart to read), and a ruler
      var ig = sv('g', { 'data-testid': 'interval-' + j.job, 'data-interval-ms': interval });
      if (interval > 0) {
        var intervalPx = interval * pxPerMs;
        var anchor = time(j.lastSlot) || (runs.length ? time(runs[runs.length - 1].r.slot) : 0);
        if (intervalPx >= 5) {
          var first = anchor - Math.floor((anchor - from) / interval) * interval;
          for (var t = first; t <= now; t += interval) {
            var px = x(t);
            append(ig, sv('line', { x1: px, x2: px, y1: bandTop - 2, y2: bandTop + bandH + 2, stroke: '#d3d9e3', 'stroke-dasharray': '2 2' }));
          }
        }
        var rw = Math.max(2, Math.min(plotW / 2, intervalPx));
        var ry = bandTop + bandH + 8;
        var rx = plotW - rw;
        append(ig, sv('g', { class: 'ruler' }, [
          tip('interval ' + fmtInterval(interval) + ': a run longer than this overlaps the next slot'),
          sv('line', { x1: rx, x2: plotW, y1: ry, y2: ry, stroke: '#667085' }),
          sv('line', { x1: rx + 0.5, x2: rx + 0.5, y1: ry - 3, y2: ry + 3, stroke: '#667085' }),
          sv('line', { x1: plotW - 0.5, x2: plotW - 0.5, y1: ry - 3, y2: ry + 3, stroke: '#667085' }),
          sv('text', { x: rx - 6, y: ry + 4, 'text-anchor': 'end', text: 'interval ' + fmtInterval(interval) }),
        ]));
      }
      append(svg, ig);

      // runs
      runs.forEach(function (o) {
        var r = o.r;
        var x0 = x(o.start), x1 = x(o.end);
        var w = Math.max(3, x1 - x0);
        var y = bandTop + o.lane * (LANE_H + GAP);
        var dur = (o.end - o.start) / 1000;
        var slotT = time(r.slot);
        var lines = [j.job + ' · ' + r.outcome + (r.finishedAt ? '' : ' (running)'),
          'slot ' + fmtDateTime(slotT),
          'started ' + fmtClock(o.start) + (r.finishedAt ? ', finished ' + fmtClock(o.end) : ''),
          'duration ' + fmtSeconds(dur) + (interval ? ' = ' + pct(dur * 1000 / interval) + ' of the ' + fmtInterval(interval) + ' interval' : ''),
          'holder ' + r.holder + ' · fence ' + r.fence + (r.attempts > 1 ? ' · ' + r.attempts + ' attempts' : '')];
        if (r.error) lines.push(r.error);
        append(svg, sv('rect', { class: 'run', 'data-kind': 'run', 'data-outcome': r.outcome, 'data-fence': r.fence,
          x: x0, y: y, width: w, height: LANE_H, rx: 2, fill: COLORS[r.outcome] || '#98a2b3' }, tip(lines.join('\n'))));
        if (interval > 0 && o.end > slotT + interval) {
          var ox = x(slotT + interval);
          if (x1 - ox >= 1) {
            append(svg, sv('rect', { class: 'run', 'data-kind': 'overrun', x: ox, y: y, width: x1 - ox, height: LANE_H,
              fill: 'url(#lh-stripes-overrun)', stroke: '#b42323', 'stroke-width': 1 },
              tip(j.job + ': this run passed its next slot by ' + fmtSeconds((o.end - slotT - interval) / 1000) + ' (interval ' + fmtInterval(interval) + ')')));
          }
        }
      });

      // skips: filled triangles at their slot; missed: hollow triangles
      data.skips.forEach(function (s) {
        var px = x(time(s.slot));
        append(svg, sv('path', { class: 'skip', 'data-kind': 'skip', d: 'M' + (px - 4.5) + ' 1 L' + (px + 4.5) + ' 1 L' + px + ' 10 Z', fill: '#e0a100' },
          tip('skipped slot ' + fmtDateTime(time(s.slot)) + '\nheld by ' + (s.holder || '?') + ' (fence ' + s.holderFence + ', slot ' + (s.holderSlot ? fmtClock(time(s.holderSlot)) : '?') + ')' +
            (s.heldForSeconds !== null ? ' for ' + fmtSeconds(s.heldForSeconds) : '') + '\nrecorded by ' + s.recordedBy)));
      });
      data.missed.forEach(function (m) {
        var px = x(time(m.slot));
        append(svg, sv('path', { class: 'missed', 'data-kind': 'missed', d: 'M' + (px - 4) + ' 1.5 L' + (px + 4) + ' 1.5 L' + px + ' 9.5 Z', fill: '#ffffff', stroke: '#5b6476', 'stroke-width': 1.3 },
          tip('missed slot ' + fmtDateTime(time(m.slot)) + '\n' + m.reason + '\nrecorded by ' + m.recordedBy)));
      });

      // now
      append(svg, sv('line', { x1: plotW + 0.5, x2: plotW + 0.5, y1: 0, y2: bandTop + bandH + 2, stroke: '#1d2433', 'stroke-opacity': 0.35 }));
      if (!runs.length && !data.skips.length && !data.missed.length) {
        append(svg, sv('text', { x: plotW / 2, y: bandTop + bandH / 2 + 4, 'text-anchor': 'middle', text: 'nothing in the last ' + state.hours + ' h' }));
      }

      var byOutcome = {};
      runs.forEach(function (o) { byOutcome[o.r.outcome] = (byOutcome[o.r.outcome] || 0) + 1; });
      var counts = runs.length + (runs.length === 1 ? ' run' : ' runs') +
        ['failed', 'lost', 'aborted'].map(function (k) { return byOutcome[k] ? ' · ' + byOutcome[k] + ' ' + k : ''; }).join('') +
        (data.skips.length ? ' · ' + data.skips.length + ' skipped' : '') + (data.missed.length ? ' · ' + data.missed.length + ' missed' : '');
      box.appendChild(el('div', { class: 'lane-row', 'data-job': j.job }, [
        el('div', { class: 'lane-label' }, [
          el('span', { class: 'job-name', title: j.job, text: j.job }),
          el('span', { class: 'small', text: 'every ' + fmtInterval(j.intervalMs) + ' · ' + j.overlap }),
          el('span', { class: 'small', text: counts }),
        ]),
        el('div', { class: 'lane-chart' }, svg),
      ]));
    });
    document.getElementById('truncated').hidden = !hist.truncated;
  }

  function render() {
    renderStatus();
    if (!state.jobs || !state.history) return;
    renderSummary(state.jobs.jobs, state.jobs.warningRatio);
    renderTable(state.jobs);
    renderTimelines(state.jobs, state.history);
  }

  // ---- range selector ----
  var buttons = document.querySelectorAll('.range button');
  function markRange() {
    Array.prototype.forEach.call(buttons, function (b) { b.setAttribute('aria-pressed', String(Number(b.getAttribute('data-hours')) === state.hours)); });
  }
  Array.prototype.forEach.call(buttons, function (b) {
    b.addEventListener('click', function () {
      state.hours = Number(b.getAttribute('data-hours'));
      markRange();
      history.replaceState(null, '', '?hours=' + state.hours);
      refresh();
    });
  });
  markRange();

  var resizeTimer = null;
  window.addEventListener('resize', function () {
    clearTimeout(resizeTimer);
    resizeTimer = setTimeout(function () { if (state.jobs && state.history) renderTimelines(state.jobs, state.history); }, 150);
  });

  document.getElementById('tz').textContent = Intl.DateTimeFormat().resolvedOptions().timeZone || 'local time';
  refresh();
})();
`;

function legendSwatch(fill: string, label: string, extra = ''): string {
  return `<span><svg width="18" height="10" aria-hidden="true"><rect width="18" height="10" rx="2" fill="${fill}"${extra}/></svg>${label}</span>`;
}

const BODY = `
<header class="top">
  <div class="brand"><span class="mark"></span>leasehold <span class="sub">dashboard</span></div>
  <div class="summary" id="summary"></div>
  <div class="status"><span id="status-dot" class="dot"></span><span id="updated" data-testid="last-updated">loading…</span><span class="badge">read-only</span></div>
</header>
<div id="error" class="banner" data-testid="error" hidden></div>
<main>
  <section class="card">
    <div class="card-head"><h2>Jobs</h2><span class="hint">durations, skips and missed slots over the last 24 h</span></div>
    <div class="table-wrap"><table class="jobs" data-testid="jobs-table">
      <thead><tr>
        <th>job</th><th>schedule</th><th>state</th><th>holder</th><th class="num">lease age</th><th>last outcome</th>
        <th class="num">p50 / p95</th><th>p95 ÷ interval</th><th class="num">skips 24h</th><th class="num">missed 24h</th>
      </tr></thead>
      <tbody id="jobs-body"></tbody>
    </table></div>
    <p id="no-jobs" class="empty" hidden>No scheduled jobs yet: they appear here once a worker started with <code>startWorker()</code> registers them.</p>
  </section>
  <section class="card">
    <div class="card-head">
      <h2>Timeline</h2><span class="hint">runs from start to finish; dashed lines every interval</span><span class="spacer"></span>
      <div class="range" role="group" aria-label="time range" data-testid="range">
        <button type="button" data-hours="1">1h</button><button type="button" data-hours="6">6h</button><button type="button" data-hours="24">24h</button>
      </div>
    </div>
    <div class="legend">
      ${legendSwatch('#1f9d55', 'succeeded')}${legendSwatch('#d93f3f', 'failed')}${legendSwatch('url(#lh-stripes-lost)', 'lost')}${legendSwatch('#98a2b3', 'aborted')}${legendSwatch('#2f6fde', 'running')}
      ${legendSwatch('url(#lh-stripes-overrun)', 'past its next slot', ' stroke="#b42323"')}
      <span><svg width="12" height="10" aria-hidden="true"><path d="M1.5 0.5 L10.5 0.5 L6 9.5 Z" fill="#e0a100"/></svg>skipped slot</span>
      <span><svg width="12" height="10" aria-hidden="true"><path d="M2 1 L10 1 L6 9 Z" fill="#fff" stroke="#5b6476" stroke-width="1.3"/></svg>missed slot</span>
    </div>
    <div id="timelines" class="timelines" data-testid="timelines"></div>
    <div id="truncated" class="notice" hidden>Showing the newest 5,000 runs, skips and missed slots of this window; older ones are left out.</div>
  </section>
</main>
<footer>Times in <span id="tz">local time</span>. Data from <code>leasehold.job_status</code> and the run history · <a href="metrics">/metrics</a> · <a href="healthz">/healthz</a></footer>
<svg class="defs" aria-hidden="true" focusable="false"><defs>
  <pattern id="lh-stripes-lost" patternUnits="userSpaceOnUse" width="6" height="6" patternTransform="rotate(45)">
    <rect width="6" height="6" fill="#f5a54a"/><rect width="3" height="6" fill="#e07b00"/>
  </pattern>
  <pattern id="lh-stripes-overrun" patternUnits="userSpaceOnUse" width="5" height="5" patternTransform="rotate(-45)">
    <rect width="1.6" height="5" fill="rgba(180,35,35,0.85)"/>
  </pattern>
</defs></svg>`;

const FAVICON =
  "data:image/svg+xml,%3Csvg xmlns='http://www.w3.org/2000/svg' viewBox='0 0 16 16'%3E%3Crect width='16' height='16' rx='3' fill='%232f6fde'/%3E%3Crect x='3' y='7' width='10' height='4' rx='1' fill='%23fff'/%3E%3C/svg%3E";

function cspHash(source: string): string {
  return `'sha256-${createHash('sha256').update(source, 'utf8').digest('base64')}'`;
}

export interface DashboardPage {
  html: string;
  /** Allows exactly the page's own inline script and style, and requests to its own origin. */
  contentSecurityPolicy: string;
}

/** The dashboard's HTML; `refreshMs` is how often it reloads its data. */
export function dashboardPage(options: { refreshMs?: number } = {}): DashboardPage {
  const refreshMs = Math.round(options.refreshMs ?? 5000);
  const html =
    `<!doctype html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n<meta name="viewport" content="width=device-width, initial-scale=1">\n` +
    `<title>leasehold dashboard</title>\n<link rel="icon" href="${FAVICON}">\n<style>${STYLE}</style>\n</head>\n<body data-refresh-ms="${refreshMs}">${BODY}\n<script>${SCRIPT}</script>\n</body>\n</html>\n`;
  const contentSecurityPolicy = [
    `default-src 'none'`,
    `script-src ${cspHash(SCRIPT)}`,
    `style-src ${cspHash(STYLE)}`,
    `connect-src 'self'`,
    `img-src 'self' data:`,
    `base-uri 'none'`,
    `form-action 'none'`,
    `frame-ancestors 'none'`,
  ].join('; ');
  return { html, contentSecurityPolicy };
}
