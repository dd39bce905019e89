// Page script, part 5: who the page is for (/api/session) and, for a person who may act, the
// acts on the selected job in the runs card: pause (with a reason), resume, run now, backfill
// (a dry run, then its confirmation) and force-release (confirmed). Read-only dashboards answer
// { actions: false } and the page offers nothing. Every POST carries the session's token.
//
// Test hooks: "session" (who, in the header), "sign-in", "sign-out", "job-actions" (the bar),
// buttons data-act=pause|resume|run-now|backfill|force-release, "pause-reason", "pause-confirm",
// "backfill-from", "backfill-to", "backfill-dry-run", "backfill-slots", "backfill-confirm",
// "force-release-confirm", "action-result" (data-state ok|error).
export const SCRIPT_ACTIONS = String.raw`
  var session = null, actBar = null, actForm = null, actResult = null;

  function post(path, body) {
    return fetch(path, { method: 'POST', cache: 'no-store', credentials: 'same-origin', body: JSON.stringify(body),
      headers: { 'content-type': 'application/json', accept: 'application/json', 'X-Leasehold-Dashboard': '1', 'X-Leasehold-Csrf': session.csrf || '' } })
      .then(function (res) {
        return res.text().then(function (text) {
          var data = null;
          try { data = JSON.parse(text); } catch (e) { data = null; }
          if (!res.ok) throw new Error((data && data.error) || ('HTTP ' + res.status));
          return data;
        });
      });
  }

  function say(text, ok) {
    actResult.textContent = plain(text);
    actResult.setAttribute('data-state', ok ? 'ok' : 'error');
    actResult.className = 'act-result ' + (ok ? 'ok' : 'error');
  }

  function closeForm() { if (actForm) { actForm.textContent = ''; actForm.hidden = true; } }

  function act(name, body, done) {
    body.job = state.selected;
    say(name + ' ' + state.selected + '…', true);
    return post('api/actions/' + name, body).then(function (reply) {
      say(reply.message, true);
      if (done) done(reply); else closeForm();
      refresh();
    }, function (error) { say(error.message, false); });
  }

  function field(label, attrs) {
    var input = el('input', attrs);
    return [el('label', { for: attrs.id, text: label }), input];
  }

  function openForm(kind) {
    closeForm();
    var job = state.selected;
    if (!job) return;
    actForm.hidden = false;
    var cancel = el('button', { type: 'button', class: 'quiet', text: 'Cancel' });
    cancel.addEventListener('click', closeForm);
    if (kind === 'pause') {
      var stop = el('input', { type: 'checkbox', id: 'pause-stop' });
      var go = el('button', { type: 'button', class: 'primary', 'data-testid': 'pause-confirm' }, ['Pause ', visible(job)]);
      append(actForm, [el('div', { class: 'act-row' }, field('Why (shown to whoever looks next)', { id: 'pause-reason', 'data-testid': 'pause-reason', maxlength: 1000, size: 40 })),
        el('div', { class: 'act-row' }, [stop, el('label', { for: 'pause-stop', text: 'also stop the running run (its lease ends)' })]), el('div', { class: 'act-row' }, [go, cancel])]);
      go.addEventListener('click', function () { act('pause', { reason: document.getElementById('pause-reason').value, stopRunning: stop.checked }); });
      document.getElementById('pause-reason').focus();
    } else if (kind === 'backfill') {
      var now = new Date(), hour = new Date(now.getTime() - 3600000);
      var dry = el('button', { type: 'button', class: 'primary', 'data-testid': 'backfill-dry-run', text: 'Dry run' });
      var slots = el('div', { class: 'act-slots', 'data-testid': 'backfill-slots' });
      append(actForm, [el('div', { class: 'act-row' }, field('from (exclusive)', { id: 'backfill-from', 'data-testid': 'backfill-from', value: hour.toISOString().slice(0, 19) + 'Z', size: 22 })
        .concat(field('to (inclusive)', { id: 'backfill-to', 'data-testid': 'backfill-to', value: now.toISOString().slice(0, 19) + 'Z', size: 22 }))),
        el('div', { class: 'act-row' }, [dry, cancel]), slots]);
      var range = function () { return { from: document.getElementById('backfill-from').value.trim(), to: document.getElementById('backfill-to').value.trim() }; };
      // a changed range needs a new dry run
      ['backfill-from', 'backfill-to'].forEach(function (id) { document.getElementById(id).addEventListener('input', function () { slots.textContent = ''; }); });
      dry.addEventListener('click', function () {
        var asked = range();
        slots.textContent = '';
        act('backfill', { from: asked.from, to: asked.to, dryRun: true }, function (reply) {
          var list = el('ul');
          reply.slots.slice(0, 20).forEach(function (s) { append(list, el('li', { text: fmtDateTime(time(s)) })); });
          if (reply.slots.length > 20) append(list, el('li', { text: 'and ' + (reply.slots.length - 20) + ' more' }));
          append(slots, list);
          if (!reply.confirm) return;
          var confirm = el('button', { type: 'button', class: 'primary', 'data-testid': 'backfill-confirm', text: 'Request ' + reply.slots.length + (reply.slots.length === 1 ? ' run' : ' runs') });
          confirm.addEventListener('click', function () { act('backfill', { from: asked.from, to: asked.to, confirm: reply.confirm }); });
          append(slots, confirm);
        });
      });
    } else if (kind === 'force-release') {
      var release = el('button', { type: 'button', class: 'danger', 'data-testid': 'force-release-confirm' }, ['Force-release ', visible(job)]);
      append(actForm, [el('p', { text: 'Take the lease from whoever holds it: the fence moves on, so that holder\'s fenced writes fail, and its run is recorded lost.' }),
        el('div', { class: 'act-row' }, [release, cancel])]);
      release.addEventListener('click', function () { act('force-release', {}); });
    }
  }

  function buildBar() {
    var card = document.getElementById('runs-card');
    actBar = el('div', { class: 'job-actions', 'data-testid': 'job-actions', role: 'group', 'aria-label': 'actions on the selected job' });
    [['pause', 'Pause…'], ['resume', 'Resume'], ['run-now', 'Run now'], ['backfill', 'Backfill…'], ['force-release', 'Force-release…']].forEach(function (b) {
      var button = el('button', { type: 'button', 'data-act': b[0], text: b[1] });
      button.addEventListener('click', function () { if (b[0] === 'resume' || b[0] === 'run-now') { closeForm(); act(b[0], {}); } else openForm(b[0]); });
      append(actBar, button);
    });
    actForm = el('div', { class: 'act-form' });
    actForm.hidden = true;
    actResult = el('p', { class: 'act-result', 'data-testid': 'action-result', role: 'status', 'aria-live': 'polite' });
    append(actBar, [actForm, actResult]);
    card.insertBefore(actBar, card.children[1] || null);
    // another job, or none: the open form was for the previous one
    document.getElementById('jobs-body').addEventListener('click', function () { closeForm(); actResult.textContent = ''; });
    document.getElementById('runs-close').addEventListener('click', closeForm);
  }

  function renderSession() {
    var status = document.querySelector('header .status'), badge = status.querySelector('.badge');
    var who = el('span', { class: 'session', 'data-testid': 'session',
      title: 'acts are recorded in leasehold.actions as this person, with the database role ' + session.role + (session.namespaces ? ' (bound to ' + session.namespaces.join(', ') + ')' : '') });
    if (session.user) {
      append(who, ['signed in as ', el('b', null, visible(session.user))]);
      badge.textContent = session.mayAct ? 'acts as ' + session.role : 'read-only';
      if (session.mode === 'users') {
        var out = el('button', { type: 'button', class: 'quiet', 'data-testid': 'sign-out', text: 'sign out' });
        out.addEventListener('click', function () { post('logout', {}).then(function () { location.reload(); }, function (e) { say(e.message, false); }); });
        append(who, [' · ', out]);
      }
    } else if (session.mode === 'users') append(who, el('a', { href: 'login', 'data-testid': 'sign-in', text: 'sign in to act' }));
    else append(who, 'not signed in');
    if (session.problem) append(who, el('span', { class: 'small', text: ' · ' + session.problem }));
    status.appendChild(who);
    if (session.user && session.mayAct) buildBar();
  }

  api('api/session').then(function (s) { session = s; if (s.actions) renderSession(); }, function () { session = null; });
`;
