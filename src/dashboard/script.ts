// Page script, part 4: state, the refresh loop and the controls. One refresh at a time: the
// next starts only after the previous one's requests and drawing finished (marks
// lh-refresh-start / lh-refresh-end in the Performance timeline say when).
import { SCRIPT_ACTIONS } from './script-actions.js';
import { SCRIPT_CHARTS } from './script-charts.js';
import { SCRIPT_FORMAT } from './script-format.js';
import { SCRIPT_TABLE } from './script-table.js';
import { SCRIPT_TIMELINE } from './script-timeline.js';
import { SCRIPT_TRENDS } from './script-trends.js';

const SCRIPT_MAIN = String.raw`
  var REFRESH_MS = Number(document.body.getAttribute('data-refresh-ms')) || 5000;
  var RANGES = [0.25, 1, 6, 24];
  var PAGE_SIZE = Number(document.body.getAttribute('data-page-size')) || 50;
  var params = new URLSearchParams(location.search);
  var state = { hours: RANGES.indexOf(Number(params.get('hours'))) >= 0 ? Number(params.get('hours')) : 1,
    offset: 0, q: '', filter: 'all', selected: null, runs: null, page: null, updatedAt: null, error: null };
  var timer = null, busy = false, again = false;

  function api(path) {
    return fetch(path, { cache: 'no-store', headers: { accept: 'application/json', 'X-Leasehold-Dashboard': '1' } }).then(function (res) {
      return res.text().then(function (body) {
        var data = null;
        try { data = JSON.parse(body); } catch (e) { data = null; }
        if (!res.ok) throw new Error((data && data.error) || ('HTTP ' + res.status + ' from ' + path));
        if (data === null) throw new Error('not JSON from ' + path);
        return data;
      });
    });
  }
  function query(o) { var p = new URLSearchParams(); Object.keys(o).forEach(function (k) { [].concat(o[k]).forEach(function (v) { if (v !== '' && v !== null && v !== undefined) p.append(k, String(v)); }); }); return p.toString(); }

  function refresh() {
    clearTimeout(timer);
    if (busy) { again = true; return; }
    busy = true;
    performance.mark('lh-refresh-start');
    api('api/jobs?' + query({ offset: state.offset, limit: PAGE_SIZE, q: state.q, filter: state.filter })).then(function (page) {
      state.page = page;
      var names = page.jobs.map(function (j) { return j.job; });
      return Promise.all([
        renderTable(page),
        api('api/summary'),
        names.length ? api('api/timelines?' + query({ job: names, hours: state.hours })) : { now: page.now, since: page.now, runs: [], skips: [], missed: [], truncated: false },
        state.selected ? api('api/runs?' + query({ job: state.selected })) : null,
      ]).then(function (r) {
        renderSummary(r[1].summary);
        renderWorkers(r[1].workers);
        state.runs = r[3];
        renderRuns();
        return renderTimelines(page, r[2]);
      });
    }).then(function () {
      return maybeTrends(false); // after the others: no more requests at once than before
    }).then(function () {
      state.updatedAt = new Date(); state.error = null;
      renderStatus();
    }, function (error) {
      state.error = error;
      renderStatus();
    }).then(function () {
      busy = false;
      performance.mark('lh-refresh-end');
      if (again) { again = false; refresh(); } else timer = setTimeout(tick, REFRESH_MS);
    });
  }
  function tick() { if (document.hidden) { timer = setTimeout(tick, REFRESH_MS); return; } refresh(); }
  document.addEventListener('visibilitychange', function () { if (!document.hidden && !busy) refresh(); });

  function renderStatus() {
    var dot = document.getElementById('status-dot'), stamp = document.getElementById('updated'), banner = document.getElementById('error');
    if (state.updatedAt) {
      stamp.textContent = 'Updated ' + fmtClock(state.updatedAt) + ' · every ' + fmtSeconds(REFRESH_MS / 1000);
      stamp.setAttribute('data-updated-at', state.updatedAt.toISOString());
    }
    if (state.error) {
      dot.className = 'dot error';
      banner.hidden = false;
      banner.textContent = plain('Cannot load data: ' + state.error.message + '. Retrying every ' + fmtSeconds(REFRESH_MS / 1000) + (state.updatedAt ? '; showing data from ' + fmtClock(state.updatedAt) + '.' : '.'));
    } else { dot.className = 'dot ok'; banner.hidden = true; }
  }

  var buttons = document.querySelectorAll('.range button[data-hours]');
  function markRange() { Array.prototype.forEach.call(buttons, function (b) { b.setAttribute('aria-pressed', String(Number(b.getAttribute('data-hours')) === state.hours)); }); }
  Array.prototype.forEach.call(buttons, function (b) {
    b.addEventListener('click', function () {
      state.hours = Number(b.getAttribute('data-hours'));
      markRange();
      history.replaceState(null, '', '?hours=' + state.hours);
      refresh();
    });
  });
  markRange();
  document.getElementById('prev').addEventListener('click', function () { state.offset = Math.max(0, state.offset - PAGE_SIZE); refresh(); });
  document.getElementById('next').addEventListener('click', function () { state.offset += PAGE_SIZE; refresh(); });
  document.getElementById('filter').addEventListener('change', function (e) { state.filter = e.target.value; state.offset = 0; refresh(); });
  var searchTimer = null;
  document.getElementById('search').addEventListener('input', function (e) {
    clearTimeout(searchTimer);
    searchTimer = setTimeout(function () { state.q = e.target.value.trim(); state.offset = 0; refresh(); }, 250);
  });
  function select(tr) {
    var job = tr && tr.getAttribute('data-job');
    if (!job) return;
    state.selected = state.selected === job ? null : job;
    state.runs = null;
    Array.prototype.forEach.call(document.querySelectorAll('#jobs-body tr'), function (row) { row.setAttribute('aria-selected', String(row.getAttribute('data-job') === state.selected)); });
    renderRuns();
    refresh();
  }
  var jobsBody = document.getElementById('jobs-body');
  jobsBody.addEventListener('click', function (e) { select(e.target.closest('tr')); });
  jobsBody.addEventListener('keydown', function (e) { if (e.key === 'Enter' || e.key === ' ') { e.preventDefault(); select(e.target.closest('tr')); } });
  document.getElementById('runs-close').addEventListener('click', function () { state.selected = null; state.runs = null; renderRuns(); });

  var resizeTimer = null;
  window.addEventListener('resize', function () { clearTimeout(resizeTimer); resizeTimer = setTimeout(refresh, 200); });
  document.getElementById('tz').textContent = Intl.DateTimeFormat().resolvedOptions().timeZone || 'local time';
  document.getElementById('controls').hidden = false;
  refresh();
`;

export const SCRIPT = `(function () {\n  'use strict';${SCRIPT_FORMAT}${SCRIPT_TABLE}${SCRIPT_TIMELINE}${SCRIPT_CHARTS}${SCRIPT_TRENDS}${SCRIPT_MAIN}${SCRIPT_ACTIONS}})();\n`;
