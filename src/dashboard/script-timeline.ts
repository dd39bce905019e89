// Page script, part 3: timelines for the jobs of the current table page. Drawn a few lanes per
// task (so no task blocks the page for long), runs closer than a pixel merged into one mark,
// one shared tooltip instead of a <title> per mark.
export const SCRIPT_TIMELINE = String.raw`
  var COLORS = { succeeded: '#1f9d55', failed: '#d93f3f', lost: 'url(#lh-stripes-lost)', aborted: '#98a2b3', 'timed-out': '#e8890c', running: '#2f6fde' };
  var LABEL_W = 190, LANES_PER_TASK = 2;
  var tipBox = null;
  function withTip(node, text) { node.__tip = text; return node; }
  document.addEventListener('mouseover', function (e) {
    var t = e.target, text = t && t.__tip;
    if (!text) { if (tipBox) tipBox.hidden = true; return; }
    if (!tipBox) { tipBox = el('div', { class: 'tooltip', role: 'tooltip' }); document.body.appendChild(tipBox); }
    tipBox.textContent = plain(text);
    tipBox.hidden = false;
    tipBox.style.left = Math.max(4, Math.min(e.clientX + 12, window.innerWidth - tipBox.offsetWidth - 8)) + 'px';
    tipBox.style.top = (e.clientY + 14) + 'px';
  });

  // Tick labels at least one label width apart, none under the "now" label at the right end.
  var NOW_LABEL_W = 78, TICK_LABEL_W = 44;
  function axisStep(spanMs, width) {
    var steps = [60e3, 120e3, 300e3, 600e3, 900e3, 1800e3, 3600e3, 7200e3, 10800e3, 21600e3, 43200e3, 86400e3];
    for (var i = 0; i < steps.length; i++) if (steps[i] / spanMs * width >= TICK_LABEL_W + 24) return steps[i];
    return steps[steps.length - 1];
  }
  function alignedTicks(from, to, step) {
    var off = -new Date(from).getTimezoneOffset() * 60000;
    var t = Math.ceil((from + off) / step) * step - off, out = [];
    for (; t <= to; t += step) out.push(t);
    return out;
  }

  function drawAxis(box, width, plotW, from, now, x, note) {
    var axis = sv('svg', { width: width, height: 22, 'data-testid': 'timeline-axis' });
    alignedTicks(from, now, axisStep(now - from, plotW)).forEach(function (t) {
      var px = x(t);
      if (px < TICK_LABEL_W / 2 || px > plotW - NOW_LABEL_W - TICK_LABEL_W / 2) return;
      append(axis, [sv('line', { x1: px, x2: px, y1: 16, y2: 22, stroke: '#c8ced8' }), sv('text', { x: px, y: 12, 'text-anchor': 'middle', 'data-tick': t, text: fmtShort(t) })]);
    });
    append(axis, sv('text', { x: plotW, y: 12, 'text-anchor': 'end', fill: '#1d2433', text: 'now ' + fmtShort(now) }));
    append(axis, sv('line', { x1: 0, x2: plotW, y1: 21.5, y2: 21.5, stroke: '#e4e7ec' }));
    box.appendChild(el('div', { class: 'lane-row axis' }, [el('div', { class: 'small window-note', 'data-testid': 'window-note', text: note || '' }), el('div', { class: 'axis' }, axis)]));
  }

  function drawLane(j, data, width, plotW, from, now, x) {
    var interval = j.intervalMs || 0, pxPerMs = plotW / (now - from);
    var lanesEnd = [], marks = [];
    data.runs.forEach(function (r) {
      var start = time(r.startedAt), end = r.finishedAt ? time(r.finishedAt) : now, lane = 0;
      while (lane < lanesEnd.length && lanesEnd[lane] > start) lane++;
      if (lane > 3) lane = 3;
      lanesEnd[lane] = Math.max(lanesEnd[lane] || 0, end);
      var x0 = x(start), x1 = Math.max(x(end), x0 + 3), prev = marks[marks.length - 1];
      // runs that would share a pixel with the previous mark of the same outcome join it
      var trig = r.trigger || 'schedule';
      if (prev && prev.lane === lane && prev.outcome === r.outcome && prev.trigger === trig && x0 <= prev.x1 + 1) { prev.x1 = Math.max(prev.x1, x1); prev.runs.push(r); return; }
      marks.push({ lane: lane, outcome: r.outcome, trigger: trig, x0: x0, x1: x1, runs: [r], start: start, end: end });
    });
    var lanes = Math.max(1, lanesEnd.length), MARK_H = 14, LANE_H = 18, GAP = 3, RULER_H = 14;
    var bandTop = MARK_H, bandH = lanes * LANE_H + (lanes - 1) * GAP;
    var svg = sv('svg', { width: width, height: bandTop + bandH + RULER_H, 'data-testid': 'timeline-' + j.job, 'data-job': j.job, role: 'img', 'aria-label': 'timeline of ' + j.job });
    append(svg, sv('rect', { x: 0, y: bandTop - 2, width: plotW, height: bandH + 4, fill: '#f8f9fb', rx: 3 }));
    var ig = sv('g', { 'data-testid': 'interval-' + j.job, 'data-interval-ms': interval });
    if (interval > 0) {
      var intervalPx = interval * pxPerMs;
      var anchor = time(j.lastSlot) || (data.runs.length ? time(data.runs[data.runs.length - 1].slot) : 0);
      if (intervalPx >= 5) {
        for (var t = anchor - Math.floor((anchor - from) / interval) * interval; t <= now; t += interval) {
          var px = x(t);
          append(ig, sv('line', { x1: px, x2: px, y1: bandTop - 2, y2: bandTop + bandH + 2, stroke: '#d3d9e3', 'stroke-dasharray': '2 2' }));
        }
      }
      var rw = Math.max(2, Math.min(plotW / 2, intervalPx)), ry = bandTop + bandH + 8, rx = plotW - rw;
      append(ig, withTip(sv('g', { class: 'ruler' }, [
        sv('line', { x1: rx, x2: plotW, y1: ry, y2: ry, stroke: '#667085' }),
        sv('text', { x: rx - 6, y: ry + 4, 'text-anchor': 'end', text: 'interval ' + fmtInterval(interval) }),
      ]), 'interval ' + fmtInterval(interval) + ': a run longer than this overlaps the next slot'));
    }
    append(svg, ig);
    marks.forEach(function (m) {
      var y = bandTop + m.lane * (LANE_H + GAP), r = m.runs[0];
      // a backfill runs a past slot and a run now has no slot of its own: neither is late
      var onSchedule = m.trigger === 'schedule', asked = m.trigger === 'backfill' ? 'backfill of slot ' + fmtDateTime(time(r.slot)) : 'run now';
      var tip = m.runs.length > 1
        ? j.job + ' · ' + m.runs.length + ' ' + m.outcome + ' runs from ' + fmtClock(time(r.startedAt)) + ' to ' + fmtClock(time(m.runs[m.runs.length - 1].startedAt)) + ' (zoom in to see each)'
        : [j.job + ' · ' + r.outcome + (r.finishedAt ? '' : ' (running)'), 'slot ' + fmtDateTime(time(r.slot)),
           onSchedule ? 'started ' + fmtClock(m.start) + ' (' + fmtSeconds(Math.max(0, time(r.startedAt) - time(r.slot)) / 1000) + ' after its slot)' + (r.finishedAt ? ', finished ' + fmtClock(m.end) : '')
             : asked + ', started ' + fmtClock(m.start) + (r.finishedAt ? ', finished ' + fmtClock(m.end) : ''),
           'duration ' + fmtSeconds((m.end - m.start) / 1000) + (interval ? ' = ' + pct((m.end - m.start) / interval) + ' of the ' + fmtInterval(interval) + ' interval' : ''),
           'holder ' + r.holder + ' · fence ' + r.fence + (r.attempts > 1 ? ' · ' + r.attempts + ' attempts' : '')].concat(r.error ? [r.error] : []).join('\n');
      append(svg, withTip(sv('rect', { class: 'run' + (onSchedule ? '' : ' requested'), 'data-kind': 'run', 'data-outcome': m.outcome, 'data-trigger': m.trigger, 'data-fence': r.fence, 'data-runs': m.runs.length,
        x: m.x0, y: y, width: m.x1 - m.x0, height: LANE_H, rx: 2, fill: COLORS[m.outcome] || '#98a2b3' }), tip));
      var slotT = time(r.slot);
      if (onSchedule && m.runs.length === 1 && interval > 0 && m.end > slotT + interval) {
        var ox = x(slotT + interval);
        if (m.x1 - ox >= 1) append(svg, withTip(sv('rect', { class: 'run', 'data-kind': 'overrun', x: ox, y: y, width: m.x1 - ox, height: LANE_H, fill: 'url(#lh-stripes-overrun)', stroke: '#b42323', 'stroke-width': 1 }),
          j.job + ': this run passed its next slot by ' + fmtSeconds((m.end - slotT - interval) / 1000) + ' (interval ' + fmtInterval(interval) + ')'));
      }
    });
    data.skips.forEach(function (s) {
      var px = x(time(s.slot));
      append(svg, withTip(sv('path', { class: 'skip', 'data-kind': 'skip', d: 'M' + (px - 4.5) + ' 1 L' + (px + 4.5) + ' 1 L' + px + ' 10 Z', fill: '#e0a100' }),
        'skipped slot ' + fmtDateTime(time(s.slot)) + '\nheld by ' + (s.holder || '?') + ' (fence ' + s.holderFence + ')' + (s.heldForSeconds !== null ? ' for ' + fmtSeconds(s.heldForSeconds) : '') + '\nrecorded by ' + s.recordedBy));
    });
    data.missed.forEach(function (m) {
      var px = x(time(m.slot));
      append(svg, withTip(sv('path', { class: 'missed', 'data-kind': 'missed', d: 'M' + (px - 4) + ' 1.5 L' + (px + 4) + ' 1.5 L' + px + ' 9.5 Z', fill: '#ffffff', stroke: '#5b6476', 'stroke-width': 1.3 }),
        'missed slot ' + fmtDateTime(time(m.slot)) + '\n' + m.reason + '\nrecorded by ' + m.recordedBy));
    });
    append(svg, sv('line', { x1: plotW + 0.5, x2: plotW + 0.5, y1: 0, y2: bandTop + bandH + 2, stroke: '#1d2433', 'stroke-opacity': 0.35 }));
    if (!data.runs.length && !data.skips.length && !data.missed.length) {
      append(svg, sv('text', { x: plotW / 2, y: bandTop + bandH / 2 + 4, 'text-anchor': 'middle', text: 'nothing in the last ' + fmtHours(state.hours) }));
    }
    var byOutcome = {};
    data.runs.forEach(function (r) { byOutcome[r.outcome] = (byOutcome[r.outcome] || 0) + 1; });
    var counts = data.runs.length + (data.runs.length === 1 ? ' run' : ' runs') +
      ['failed', 'lost', 'timed-out', 'aborted'].map(function (k) { return byOutcome[k] ? ' · ' + byOutcome[k] + ' ' + k : ''; }).join('') +
      (data.skips.length ? ' · ' + data.skips.length + ' skipped' : '') + (data.missed.length ? ' · ' + data.missed.length + ' missed' : '');
    return el('div', { class: 'lane-row', 'data-job': j.job }, [
      el('div', { class: 'lane-label' }, [el('span', { class: 'job-name', title: j.job }, visible(j.job)),
        el('span', { class: 'small', text: 'every ' + fmtInterval(j.intervalMs) + ' · ' + j.overlap }), el('span', { class: 'small', text: counts })]),
      el('div', { class: 'lane-chart' }, svg),
    ]);
  }

  // The first run, skip or missed slot of the window, when the window holds all of them.
  function historyStart(hist) {
    if (hist.truncated) return null;
    var first = null;
    hist.runs.forEach(function (r) { var t = time(r.startedAt); if (first === null || t < first) first = t; });
    hist.skips.concat(hist.missed).forEach(function (s) { var t = time(s.slot); if (first === null || t < first) first = t; });
    return first;
  }

  // Resolves when every lane is drawn.
  function renderTimelines(page, hist) {
    var box = document.getElementById('timelines');
    var now = time(hist.now), from = time(hist.since), note = '';
    // history younger than the window: start the axis at its first entry, not at a sliver
    var first = historyStart(hist);
    if (first !== null && first - from > (now - from) / 4) {
      from = Math.min(now - 5 * 60e3, first - Math.max(30e3, (now - first) / 20));
      note = 'nothing before ' + fmtShort(first);
    }
    // narrow screens: each lane's label above its chart
    var stacked = box.clientWidth < 640;
    box.classList.toggle('stacked', stacked);
    var width = Math.max(160, box.clientWidth - (stacked ? 0 : LABEL_W)), plotW = width - 8;
    var x = function (t) { return Math.max(0, Math.min(plotW, (t - from) / (now - from) * plotW)); };
    var byJob = {};
    function bucket(name) { return byJob[name] || (byJob[name] = { runs: [], skips: [], missed: [] }); }
    hist.runs.forEach(function (r) { bucket(r.job).runs.push(r); });
    hist.skips.forEach(function (s) { bucket(s.job).skips.push(s); });
    hist.missed.forEach(function (m) { bucket(m.job).missed.push(m); });
    // lanes are replaced in place, a few per task, so that no single task lays out all of them
    var axis = el('div');
    drawAxis(axis, width, plotW, from, now, x, note);
    if (box.firstChild) box.replaceChild(axis.firstChild, box.firstChild); else box.appendChild(axis.firstChild);
    var jobs = page.jobs.slice(), at = 1;
    return new Promise(function (resolve) {
      (function step() {
        jobs.splice(0, LANES_PER_TASK).forEach(function (j) {
          var lane = drawLane(j, bucket(j.job), width, plotW, from, now, x), old = box.children[at++];
          if (old) box.replaceChild(lane, old); else box.appendChild(lane);
        });
        if (jobs.length) { setTimeout(step, 0); return; }
        while (box.children.length > at) box.removeChild(box.lastChild);
        document.getElementById('truncated').hidden = !hist.truncated;
        resolve();
      })();
    });
  }
`;
