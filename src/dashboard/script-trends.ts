// Page script, part 6: the Trends card. A job's trends while its runs are open (state.selected),
// the fleet's otherwise; fetched after the rest of a refresh (so a refresh never sends more
// requests at once than before), and again only when the job or the range changes or
// TREND_EVERY_MS has passed: the buckets move slowly, and the fleet's are shared on the server.
export const SCRIPT_TRENDS = String.raw`
  var TREND_EVERY_MS = 30000, FLEET_MAX_HOURS = 24;
  var trends = { key: null, at: 0, hours: 24 };
  var HOLDER_COLORS = ['#2f6fde', '#1f9d55', '#e8890c', '#8e44ad', '#d93f3f', '#16a2b8', '#a0722a', '#e05aa0', '#98a2b3'];

  function trendHours() { return state.selected ? trends.hours : Math.min(trends.hours, FLEET_MAX_HOURS); }
  function markTrendRange() {
    Array.prototype.forEach.call(document.querySelectorAll('[data-trend-hours]'), function (b) {
      var h = Number(b.getAttribute('data-trend-hours'));
      b.disabled = !state.selected && h > FLEET_MAX_HOURS;
      b.setAttribute('aria-pressed', String(h === trendHours()));
    });
    document.getElementById('trends-fleet').hidden = !state.selected;
  }

  // Resolves when the trends are drawn (or were fresh enough).
  function maybeTrends(force) {
    var job = state.selected, hours = trendHours(), key = (job === null ? '' : 'job:' + job) + '|' + hours;
    markTrendRange();
    if (!force && key === trends.key && Date.now() - trends.at < TREND_EVERY_MS) return Promise.resolve();
    return api('api/trends?' + query({ job: job, hours: hours })).then(function (t) {
      trends.key = key; trends.at = Date.now();
      renderTrends(t);
    });
  }

  function rate(part, whole) { return whole > 0 ? part / whole : null; }
  function fmtPct(v) { return v === null ? '–' : v > 0 && v < 0.001 ? '<0.1%' : v < 0.1 ? (Math.round(v * 1000) / 10) + '%' : Math.round(v * 100) + '%'; }
  function fmtSecs(v) { return fmtSeconds(v); }

  function renderTrends(t) {
    var box = document.getElementById('trends'), title = document.getElementById('trends-title');
    title.textContent = '';
    append(title, t.job === null ? 'Trends of the fleet' : ['Trends of ', visible(t.job)]);
    // a history younger than the window starts at its first bucket, not as a sliver at the right
    var buckets = t.buckets, firstUsed = 0;
    while (firstUsed < buckets.length && !buckets[firstUsed].runs && !buckets[firstUsed].skips && !buckets[firstUsed].missed) firstUsed++;
    var start = Math.max(0, Math.min(firstUsed, buckets.length - 12));
    buckets = buckets.slice(start);
    var times = buckets.map(function (b) { return time(b.at); }), pick = function (f) { return buckets.map(f); };
    var wide = box.clientWidth >= 760, width = Math.floor(wide ? (box.clientWidth - 20) / 2 : box.clientWidth);
    box.classList.toggle('two', wide);
    var sampled = t.sample && t.sample.jobs < t.sample.of ? 'from the runs of ' + num(t.sample.jobs) + ' of ' + num(t.sample.of) + ' jobs' : null;
    var base = { times: times, stepMs: t.stepMs, width: width };
    var charts = [];
    if (t.job !== null) {
      var d95 = pick(function (b) { return b.durationP95; }), worst = Math.max.apply(null, d95.filter(function (v) { return v !== null; }).concat([0]));
      charts.push(chart(Object.assign({}, base, { id: 'duration', title: 'Run duration', fmt: fmtSecs,
        note: 'per ' + fmtInterval(t.stepMs) + ' of starts',
        summary: t.intervalMs ? 'highest p95 ' + fmtSeconds(worst) + ' = ' + pct(worst * 1000 / t.intervalMs) + ' of the ' + fmtInterval(t.intervalMs) + ' interval' : null,
        ref: t.intervalMs ? { value: t.intervalMs / 1000, label: 'interval ' + fmtInterval(t.intervalMs) } : null,
        series: [{ name: 'p95', values: d95, color: '#d93f3f', width: 2.5 }, { name: 'p50', values: pick(function (b) { return b.durationP50; }), color: '#2f6fde' },
          { name: 'max', values: pick(function (b) { return b.durationMax; }), color: '#667085', dash: '2 3', width: 1.5 }] })));
    }
    var runs = 0, bad = 0, skips = 0, late = 0, sched = 0;
    buckets.forEach(function (b) { runs += b.runs; bad += b.failed + b.lost + b.timedOut; skips += b.skips; late += b.late; sched += b.scheduled; });
    charts.push(chart(Object.assign({}, base, { id: 'rates', title: 'Failure, skip and lateness rates', fmt: fmtPct, note: 'late: started over 1 s after its slot' + (sampled ? ' (' + sampled + ')' : ''),
      summary: 'over the window: ' + fmtPct(rate(bad, runs)) + ' of ' + num(runs) + ' runs failed, lost or timed out; ' + fmtPct(rate(skips, runs + skips)) + ' of slots skipped; ' + fmtPct(rate(late, sched)) + ' of scheduled runs late',
      series: [{ name: 'failed', values: pick(function (b) { return rate(b.failed + b.lost + b.timedOut, b.runs); }), color: '#d93f3f', width: 2.5 },
        { name: 'skipped', values: pick(function (b) { return rate(b.skips, b.runs + b.skips); }), color: '#e0a100', dash: '6 3' },
        { name: 'late', values: pick(function (b) { return rate(b.late, b.scheduled); }), color: '#8e44ad', dash: '2 3' }] })));
    var total = 0, shares = t.holders.map(function (h) { var sum = h.runs.slice(start).reduce(function (a, v) { return a + v; }, 0); total += sum; return [h.holder, sum]; });
    charts.push(chart(Object.assign({}, base, { id: 'workers', title: 'Runs by worker', fmt: function (v) { return num(Math.round(v * 10) / 10); }, note: sampled,
      summary: shares.length ? shares.map(function (s) { return s[0] + ' ' + num(s[1]) + ' of ' + num(total) + ' (' + pct(rate(s[1], total) || 0) + ')'; }).join(' · ') : 'no finished runs',
      series: t.holders.map(function (h, i) { return { name: h.holder, values: h.runs.slice(start), color: HOLDER_COLORS[i % HOLDER_COLORS.length], bars: true }; }) })));
    charts.push(chart(Object.assign({}, base, { id: 'lateness', title: t.job === null ? 'Tick lateness: start after slot' : 'Start after slot', fmt: fmtSecs,
      note: 'scheduled runs' + (sampled ? ', ' + sampled : ''),
      series: [{ name: 'p95', values: pick(function (b) { return b.lateP95; }), color: '#8e44ad', width: 2.5 }, { name: 'p50', values: pick(function (b) { return b.lateP50; }), color: '#2f6fde' },
        { name: 'max', values: pick(function (b) { return b.lateMax; }), color: '#667085', dash: '2 3', width: 1.5 }] })));
    box.textContent = '';
    append(box, charts);
    var hint = document.getElementById('trends-hint');
    hint.textContent = 'per ' + fmtInterval(t.stepMs) + (start ? ', from the first recorded run' : '') + (t.truncated ? '; more runs than one chart reads: the oldest buckets lack some' : '');
  }

  Array.prototype.forEach.call(document.querySelectorAll('[data-trend-hours]'), function (b) {
    b.addEventListener('click', function () { trends.hours = Number(b.getAttribute('data-trend-hours')); maybeTrends(true).catch(function () { trends.key = null; }); });
  });
  document.getElementById('trends-fleet').addEventListener('click', function () {
    state.selected = null; state.runs = null;
    Array.prototype.forEach.call(document.querySelectorAll('#jobs-body tr'), function (row) { row.setAttribute('aria-selected', 'false'); });
    renderRuns();
    maybeTrends(true).catch(function () { trends.key = null; });
  });
`;
