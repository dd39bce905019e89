// Page script, part 2: the fleet summary, the live workers, one page of the job table and the
// run list of the selected job.
export const SCRIPT_TABLE = String.raw`
  function renderSummary(s) {
    var box = document.getElementById('summary');
    box.textContent = '';
    var parts = [[num(s.jobs), s.jobs === 1 ? ' job' : ' jobs', ''], [num(s.running), ' running', '']];
    if (s.expired) parts.push([num(s.expired), ' expired', 'danger']);
    if (s.creeping) parts.push([num(s.creeping), ' near their interval', 'warn']);
    if (s.over) parts.push([num(s.over), ' over their interval', 'danger']);
    if (s.failing) parts.push([num(s.failing), ' with failed, lost or timed-out runs in 24 h', 'danger']);
    parts.push([num(s.runs24h), ' runs in 24 h (' + num(s.failed24h) + ' failed, ' + num(s.lost24h) + ' lost, ' + num(s.timedOut24h) + ' timed out)', '']);
    parts.forEach(function (p, i) {
      if (i) append(box, ' · ');
      append(box, el('span', { class: p[2] || null }, [el('b', { text: p[0] }), p[1]]));
    });
  }

  function renderWorkers(w) {
    var box = document.getElementById('workers');
    box.textContent = '';
    document.getElementById('workers-count').textContent = w.total + (w.total === 1 ? ' live session' : ' live sessions');
    if (!w.workers.length) { append(box, el('p', { class: 'empty', text: 'No live worker sessions: no process holds a liveness session on this database.' })); return; }
    w.workers.forEach(function (k) {
      // a worker's registered name first (also when idle), then the holders of the leases under it
      var who = (k.holder ? [k.holder] : []).concat(k.holders.filter(function (h) { return h !== k.holder; }));
      if (!who.length) who = ['(unnamed session)'];
      var card = el('div', { class: 'worker', 'data-testid': 'worker', title: 'backend pid ' + k.pid + (k.client ? ' from ' + k.client : '') + (k.since ? ' since ' + fmtDateTime(time(k.since)) : '') });
      append(card, [el('b', null, visible(who.join(', '))), ' · ' + (k.leases ? k.leases + (k.leases === 1 ? ' lease' : ' leases') : 'idle, no lease held') + (k.since ? ' · up ' + fmtSeconds((Date.now() - time(k.since)) / 1000) : '')]);
      box.appendChild(card);
    });
    if (w.total > w.workers.length) append(box, el('span', { class: 'small', text: 'and ' + (w.total - w.workers.length) + ' more' }));
  }

  function renderPager(page) {
    var from = page.total ? page.offset + 1 : 0, to = Math.min(page.total, page.offset + page.jobs.length);
    document.getElementById('page-count').textContent = num(from) + '–' + num(to) + ' of ' + num(page.total) + (page.filter !== 'all' || page.q ? ' matching' : '');
    document.getElementById('prev').disabled = page.offset <= 0;
    document.getElementById('next').disabled = page.offset + page.jobs.length >= page.total;
  }

  // Rows are replaced in place, ROWS_PER_TASK at a time, so that no single task redoes the table.
  var ROWS_PER_TASK = 5;
  function renderTable(page) {
    var body = document.getElementById('jobs-body');
    var now = time(page.now);
    var warnAt = page.warningRatio;
    var jobs = page.jobs.slice(), at = 0;
    document.getElementById('no-jobs').hidden = page.jobs.length > 0;
    renderPager(page);
    return new Promise(function (resolve) {
      (function step() {
        jobs.splice(0, ROWS_PER_TASK).forEach(function (j) {
          var tr = jobRow(j, now, warnAt), old = body.children[at++];
          if (old) body.replaceChild(tr, old); else body.appendChild(tr);
        });
        if (jobs.length) { setTimeout(step, 0); return; }
        while (body.children.length > at) body.removeChild(body.lastChild);
        resolve();
      })();
    });
  }

  function jobRow(j, now, warnAt) {
      var ratio = j.p95IntervalRatio;
      var level = ratio === null ? 'none' : ratio >= 1 ? 'danger' : ratio >= warnAt ? 'warning' : 'ok';
      var tr = el('tr', { 'data-job': j.job, 'data-state': j.state, 'data-level': level, 'aria-selected': String(state.selected === j.job), tabindex: 0 });
      append(tr, el('td', null, el('span', { class: 'job-name' }, visible(j.job))));
      var sched = el('td', { title: 'interval ' + fmtInterval(j.intervalMs) + ', lease ttl ' + fmtInterval(j.ttlMs) + ', overlap ' + j.overlap + ', catch-up ' + j.catchUp }, [
        el('div', { class: 'sched mono nowrap' }, visible(j.schedule)),
        el('div', { class: 'small', text: 'every ' + fmtInterval(j.intervalMs) + (j.timezone ? ' · ' + j.timezone : '') + ' · ' + j.overlap }),
      ]);
      if (j.scheduleNote) append(sched, el('span', { class: 'note', 'data-testid': 'schedule-note', text: j.scheduleNote }));
      append(tr, sched);
      var next = time(j.nextRunAt);
      append(tr, el('td', { class: 'nowrap', 'data-testid': 'next-run', title: next ? fmtDateTime(next) : 'no next slot' },
        next ? [fmtShort(next), el('div', { class: 'small', text: fmtIn(next - now) })] : '–'));
      var stateTitle = j.state === 'expired' ? 'the lease expired without a release: its holder is gone or stalled' : j.state === 'running' ? 'a run holds the lease (fence ' + j.fence + ')' : 'no one holds the lease';
      if (j.paused) stateTitle = 'paused by ' + (j.paused.by || 'unknown') + ' since ' + fmtDateTime(time(j.paused.at)) + (j.paused.reason ? ': ' + j.paused.reason : '') + (j.state === 'running' ? '; a run still holds the lease (fence ' + j.fence + ')' : '');
      append(tr, el('td', null, el('span', { class: 'pill ' + j.state, title: stateTitle, text: j.state })));
      append(tr, el('td', { class: 'mono nowrap', title: j.holder ? 'fence ' + j.fence : null }, j.holder ? visible(j.holder) : '–'));
      append(tr, el('td', { class: 'num', text: j.leaseAgeSeconds === null ? '–' : fmtSeconds(j.leaseAgeSeconds) }));
      var last = j.lastRun, lastCell = el('td', { class: 'nowrap' });
      if (last) {
        append(lastCell, [el('span', { class: 'pill ' + last.outcome, title: 'slot ' + fmtDateTime(time(last.slot)) + (last.error ? '\n' + last.error : ''), text: last.outcome }),
          el('div', { class: 'small', text: (last.finishedAt ? 'started ' : 'since ') + fmtSeconds((now - time(last.startedAt)) / 1000) + ' ago' })]);
        if (last.error) append(lastCell, el('div', { class: 'small', title: last.error }, visible(last.error.length > 48 ? last.error.slice(0, 47) + '…' : last.error)));
      } else append(lastCell, el('span', { class: 'pill none', text: 'never ran' }));
      append(tr, lastCell);
      var bad = j.failed24h + j.lost24h + j.timedOut24h;
      append(tr, el('td', { class: 'num', 'data-testid': 'failures', title: j.runs24h + ' finished runs in 24 h: ' + j.failed24h + ' failed, ' + j.lost24h + ' lost, ' + j.timedOut24h + ' timed out' },
        el('span', { class: bad ? 'count-bad' : null, text: bad ? bad + ' of ' + j.runs24h + ' · ' + pct(bad / j.runs24h) : '0 of ' + j.runs24h })));
      append(tr, el('td', { class: 'num' }, j.p50Seconds === null ? '–' : fmtSeconds(j.p50Seconds) + ' / ' + fmtSeconds(j.p95Seconds)));
      var ratioCell = el('td', { class: 'ratio ' + level, 'data-testid': 'ratio', 'data-level': level,
        title: j.warning || (ratio === null ? 'no finished runs in 24 h' : 'p95 duration is ' + pct(ratio) + ' of the ' + fmtInterval(j.intervalMs) + ' interval') });
      if (ratio === null) append(ratioCell, el('span', { class: 'small', text: '–' }));
      else {
        var meter = el('span', { class: 'meter' }), fill = el('span', { class: 'fill' }), tick = el('span', { class: 'mark' });
        fill.style.width = Math.min(100, ratio * 100) + '%';
        tick.style.left = (warnAt * 100) + '%';
        append(meter, [fill, tick]);
        append(ratioCell, [meter, el('span', { class: 'value', text: pct(ratio) })]);
      }
      append(tr, ratioCell);
      var slots = j.runs24h + j.skips24h;
      append(tr, el('td', { class: 'num', title: j.skips24h + ' skipped of ' + slots + ' slots in 24 h' },
        el('span', { class: j.skips24h ? 'count-hot' : null, text: j.skips24h ? j.skips24h + ' · ' + pct(j.skips24h / slots) : '0' })));
      append(tr, el('td', { class: 'num' }, el('span', { class: j.missed24h ? 'count-bad' : null, text: j.missed24h })));
      return tr;
  }

  // a run now or backfill says so, and who asked, before the run's own detail
  function detailOf(e) {
    var text = e.detail || '';
    if (e.trigger && e.trigger !== 'schedule') {
      text = (e.trigger === 'manual' ? 'run now' : 'backfill') + (e.requestedBy ? ' by ' + e.requestedBy : '') + (text ? ' · ' + text : '');
    }
    return text ? visible(text.length > 200 ? text.slice(0, 199) + '…' : text) : '';
  }

  function renderRuns() {
    var card = document.getElementById('runs-card');
    if (!state.selected || !state.runs) { card.hidden = true; return; }
    card.hidden = false;
    var title = document.getElementById('runs-title');
    title.textContent = '';
    append(title, ['Runs of ', visible(state.selected)]);
    var body = document.getElementById('runs-body');
    body.textContent = '';
    document.getElementById('no-runs').hidden = state.runs.entries.length > 0;
    state.runs.entries.forEach(function (e) {
      append(body, el('tr', { 'data-kind': e.kind, 'data-outcome': e.outcome }, [
        el('td', { class: 'nowrap', text: fmtDateTime(time(e.slot)) }),
        el('td', null, el('span', { class: 'pill ' + (e.kind === 'run' ? e.outcome : e.kind === 'skip' ? 'expired' : 'failed'), text: e.kind === 'run' ? e.outcome : e.kind })),
        el('td', { class: 'mono' }, e.holder ? visible(e.holder) : '–'),
        el('td', { class: 'num', text: e.fence === null ? '–' : e.fence }),
        el('td', { class: 'nowrap', text: fmtDateTime(time(e.at)) }),
        el('td', { class: 'num', text: e.durationSeconds === null ? '–' : fmtSeconds(e.durationSeconds) }),
        el('td', null, detailOf(e)),
      ]));
    });
  }
`;
