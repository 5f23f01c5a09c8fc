// The pages. Each is view(root, route) → {refresh, stop}: refresh re-reads the API and
// redraws the data (polled by app.js); stop ends what the page started.
import { h, swap, fmtTime, fmtAge, num } from './dom.js';
import { api, act, enc, missing, state, say, askToken, offButton, token } from './api.js';
import { bands, throughput, sumThroughput } from './charts.js';

const qlink = q => '#/queues/' + enc(q);
const tlink = (q, id) => '#/queues/' + enc(q) + '/tasks/' + enc(id);
const dlink = q => '#/dead/' + enc(q);

// actionButton is a button sending an action; it says so when actions are off.
function actionButton(text, label, onClick, key) {
  const b = h('button', { type: 'button', class: 'action', 'aria-label': label, 'data-key': key, text });
  b.addEventListener('click', async () => {
    b.disabled = true;
    try { await onClick(); } finally { if (!state.actionsOff) b.disabled = false; }
  });
  if (state.actionsOff) offButton(b);
  return b;
}

// failure renders a failed read as text, asking for the token on a 401.
function failure(r, what) {
  if (r.status === 401) {
    askToken('Reading needs the token here: enter it in the Token field above.', true);
    return h('p', { class: 'error' }, 'Reading ' + what + ' needs the token (' + r.error + ').');
  }
  return h('p', { class: 'error' }, 'Could not read ' + what + ': ' + r.error + (r.code ? ' (' + r.code + ')' : ''));
}

function table(caption, head, rows, cls) {
  return h('div', { class: 'table-wrap' },
    h('table', { class: cls },
      caption ? h('caption', {}, caption) : null,
      h('thead', {}, h('tr', {}, head.map(c => h('th', { scope: 'col' }, c)))),
      h('tbody', {}, rows)));
}

function badge(text, kind) { return h('span', { class: 'badge ' + kind }, text); }

// CANCELLABLE: the states a task can be cancelled in (a running one is asked to stop).
const CANCELLABLE = ['queued', 'running', 'scheduled', 'retrying'];

// cancelled is the message of a cancel's answer: done at once, or requested of the
// worker running the task.
const cancelled = id => d => d.cancel === 'requested'
  ? 'Cancel requested for ' + id + '; its worker stops it.'
  : 'Cancelled ' + id + '.';

// period writes a limit's period (ns) as dtq limit set reads it: s, m, h for one second,
// minute or hour, else a duration such as 1m30s or 500ms.
function period(ns) {
  let ms = Math.round(Number(ns) / 1e6);
  const one = { 1000: 's', 60000: 'm', 3600000: 'h' }[ms];
  if (one) return one;
  if (!(ms > 0)) return String(ns) + 'ns';
  let out = '';
  for (const [unit, size] of [['h', 3600000], ['m', 60000], ['s', 1000], ['ms', 1]]) {
    if (ms >= size) { out += Math.floor(ms / size) + unit; ms %= size; }
  }
  return out;
}

// limitsTable is the table of a queue's rate and concurrency limits with their use.
function limitsTable(limits) {
  if (!limits || !limits.length) return null;
  const now = Date.now();
  return table('Limits', ['Scope', 'Rate', 'Burst', 'Concurrency', 'Next start'], limits.map(l => {
    const fn = l.function || '';
    const scope = h('th', { scope: 'row', class: 'scope' }, fn ? ['function ', h('code', {}, fn)] : 'queue');
    if (l.error) {
      return h('tr', { 'data-limit': fn }, scope, h('td', { class: 'error', colspan: '4' }, 'Unreadable: ' + l.error));
    }
    return h('tr', { 'data-limit': fn }, scope,
      h('td', { class: 'rate' }, l.rate ? `${l.rate}/${period(l.per)}` : '–'),
      h('td', { class: 'num burst' }, l.rate ? String(l.burst ?? 1) : '–'),
      h('td', { class: 'concurrency' }, l.concurrency ? `${l.running ?? 0} / ${l.concurrency} running` : '–'),
      h('td', { class: 'next' }, !l.rate ? '–' : l.next_token_ms > now
        ? h('time', { datetime: new Date(l.next_token_ms).toISOString() }, fmtTime(l.next_token_ms)) : 'now'));
  }), 'limits-table');
}

let firstRender = false;
function rendered() {
  if (!firstRender) { firstRender = true; performance.mark('dtq-first-render'); }
}

// ---------------------------------------------------------------- overview

export function overview(root) {
  const chart = h('div', { class: 'chart-box' });
  const queues = h('section', { 'aria-labelledby': 'h-queues' });
  const workers = h('section', { 'aria-labelledby': 'h-workers' });
  root.append(h('h1', {}, 'Overview'), chart,
    h('h2', { id: 'h-queues' }, 'Queues'), queues,
    h('h2', { id: 'h-workers' }, 'Workers'), workers);
  return {
    async refresh() {
      const [qr, wr] = await Promise.all([api('GET', '/api/v1/queues'), api('GET', '/api/v1/workers')]);
      if (!qr.ok) swap(queues, failure(qr, 'the queues'));
      else {
        const list = qr.data.queues || [];
        const tp = sumThroughput(list.map(q => q.throughput));
        swap(chart, tp ? throughput(tp, 'All queues, per minute') : null);
        const retrying = list.some(q => q.retrying !== undefined);
        swap(queues, list.length ? table(null,
          ['Queue', 'State', 'Lag', 'Pending', 'Scheduled', retrying ? 'Retrying' : null, 'Dead', 'Bands p9 → p0'].filter(Boolean),
          list.map(q => h('tr', { 'data-queue': q.queue },
            h('th', { scope: 'row' }, h('a', { href: qlink(q.queue), 'data-key': 'q:' + q.queue }, q.queue)),
            h('td', { class: 'state' }, q.error ? badge('unreadable', 'bad') : q.paused ? badge('paused', 'warn') : badge('active', 'good'),
              q.error ? h('span', { class: 'error' }, ' ' + q.error) : null),
            h('td', { class: 'num lag' }, num(q.lag)),
            h('td', { class: 'num pending' }, num(q.pending)),
            h('td', { class: 'num scheduled' }, num(q.scheduled)),
            retrying ? h('td', { class: 'num retrying' }, num(q.retrying)) : null,
            h('td', { class: 'num dead' }, q.dead ? h('a', { href: dlink(q.queue), 'aria-label': q.dead + ' dead tasks of ' + q.queue }, num(q.dead)) : '0'),
            h('td', {}, bands(q.priorities)))), 'queues')
          : h('p', {}, 'No queues yet: nothing was ever enqueued under this prefix.'));
      }
      if (!wr.ok) swap(workers, failure(wr, 'the workers'));
      else {
        const list = wr.data.workers || [];
        swap(workers,
          h('p', { class: 'counts' }, `${wr.data.live} live, ${wr.data.stale} stale, ${wr.data.stopped} stopped`),
          list.length ? table(null,
            ['Worker', 'Host', 'Liveness', 'Status', 'Active', 'Processed', 'Failed', 'Queues', 'Heartbeat'],
            list.map(w => h('tr', { 'data-worker': w.worker_id },
              h('th', { scope: 'row' }, w.worker_id),
              h('td', {}, w.hostname || ''),
              h('td', { class: 'liveness' }, badge(w.liveness, w.liveness === 'live' ? 'good' : w.liveness === 'stale' ? 'bad' : 'muted')),
              h('td', {}, w.status || ''),
              h('td', { class: 'num' }, w.active_tasks !== undefined ? `${w.active_tasks}/${w.concurrency}` : ''),
              h('td', { class: 'num' }, num(w.tasks_processed)),
              h('td', { class: 'num' }, num(w.tasks_failed)),
              h('td', {}, w.queues || ''),
              h('td', {}, fmtAge(w.heartbeat_age_s)))), 'workers')
            : h('p', {}, 'No worker has registered.'));
      }
      rendered();
    },
  };
}

// ---------------------------------------------------------------- one queue

const STATES = ['queued', 'running', 'scheduled', 'retrying', 'dead', 'succeeded'];
const unsupported = new Set(); // states this observer cannot list
const runMissing = { v: false };

export function queue(root, route) {
  const name = route.queue;
  let tab = STATES.includes(route.state) ? route.state : 'queued';
  let cursors = [''];
  const head = h('div', { class: 'queue-head' });
  const stats = h('div');
  const chart = h('div', { class: 'chart-box' });
  const tabs = h('div', { role: 'group', 'aria-label': 'Tasks by state', class: 'tabs' });
  const panel = h('div', { id: 'tasks-panel', 'aria-live': 'polite', 'aria-label': 'Tasks' });
  root.append(h('h1', {}, 'Queue ', h('span', { class: 'name' }, name)), head, stats, chart,
    h('h2', {}, 'Tasks'), tabs, panel);

  const drawTabs = () => swap(tabs, STATES.filter(st => !unsupported.has(st)).map(st =>
    h('button', {
      type: 'button', 'aria-pressed': String(st === tab), 'aria-controls': 'tasks-panel',
      'data-key': 'tab:' + st, class: st === tab ? 'tab selected' : 'tab',
      on: { click: () => { tab = st; cursors = ['']; drawTabs(); state.refresh(); } },
    }, st)));
  drawTabs();

  const rowActions = it => {
    const out = [];
    if (tab === 'dead') {
      out.push(actionButton('Requeue', 'Requeue ' + it.id, () =>
        act('POST', `/api/v1/queues/${enc(name)}/dead/${enc(it.id)}/requeue`, undefined, 'Requeued ' + it.id + '.'), 'rq:' + it.id));
    }
    if ((tab === 'scheduled' || tab === 'retrying') && !runMissing.v) {
      out.push(actionButton('Run now', 'Run ' + it.id + ' now', async () => {
        const r = await act('POST', `/api/v1/queues/${enc(name)}/tasks/${enc(it.id)}/run`, undefined, 'Queued ' + it.id + ' to run now.');
        if (missing(r)) { runMissing.v = true; say('Run now is not available on this observer.', 'error'); state.refresh(); }
      }, 'run:' + it.id));
    }
    if (CANCELLABLE.includes(tab)) {
      out.push(actionButton('Cancel', 'Cancel ' + it.id, () =>
        act('POST', `/api/v1/queues/${enc(name)}/tasks/${enc(it.id)}/cancel`, undefined, cancelled(it.id)), 'cancel:' + it.id));
    }
    return out;
  };

  return {
    async refresh() {
      const base = '/api/v1/queues/' + enc(name);
      const cur = cursors[cursors.length - 1];
      const [qr, tr] = await Promise.all([
        api('GET', base),
        api('GET', `${base}/tasks?state=${enc(tab)}&limit=50` + (cur ? '&cursor=' + enc(cur) : '')),
      ]);
      if (!qr.ok) {
        swap(head, failure(qr, 'the queue'));
        swap(stats); swap(chart); swap(panel);
        return;
      }
      const q = qr.data;
      swap(head,
        h('p', { class: 'queue-state' }, q.paused ? badge('paused', 'warn') : badge('active', 'good'), ' ',
          q.paused
            ? actionButton('Resume', 'Resume queue ' + name, () => act('POST', base + '/resume', undefined, 'Resumed ' + name + '.'), 'pause')
            : actionButton('Pause', 'Pause queue ' + name, () => act('POST', base + '/pause', undefined, 'Paused ' + name + '.'), 'pause'),
          ' ', h('a', { href: dlink(name) }, 'Dead letters (' + num(q.dead) + ')')),
        q.error ? h('p', { class: 'error' }, 'Redis refused to read this queue: ' + q.error) : null);
      swap(stats, h('dl', { class: 'stats' },
        [['lag', q.lag], ['pending', q.pending], ['scheduled', q.scheduled], ['due now', q.due],
          q.retrying !== undefined ? ['retrying', q.retrying] : null, ['dead', q.dead]]
          .filter(Boolean).map(([k, v]) => h('div', { class: 'stat', 'data-stat': k }, h('dt', {}, k), h('dd', {}, num(v))))),
      table('Per band', ['Band', 'Lag', 'Pending'], (q.priorities || []).map(b =>
        h('tr', {}, h('th', { scope: 'row' }, 'p' + b.priority), h('td', { class: 'num' }, num(b.lag)), h('td', { class: 'num' }, num(b.pending)))), 'bands-table'),
      bands(q.priorities), limitsTable(q.limits));
      swap(chart, q.throughput ? throughput(q.throughput, 'This queue, per minute') : null);

      if (!tr.ok) {
        if (tr.status === 400 && tr.code === 'bad_state' || missing(tr)) {
          // This observer cannot list the state (an older one): hide its tab.
          unsupported.add(tab);
          tab = 'queued'; cursors = [''];
          drawTabs();
          swap(panel, h('p', { class: 'note' }, 'That state cannot be listed by this observer: ' + tr.error));
          return;
        }
        swap(panel, failure(tr, 'the tasks'));
        return;
      }
      const items = tr.data.items || [];
      const next = tr.data.next_cursor || '';
      const pager = h('div', { class: 'pager' },
        cursors.length > 1 ? h('button', { type: 'button', 'data-key': 'first', on: { click: () => { cursors = ['']; state.refresh(); } } }, 'First page') : null,
        h('span', {}, `Page ${cursors.length}`),
        next ? h('button', { type: 'button', 'data-key': 'next', on: { click: () => { cursors.push(next); state.refresh(); } } }, 'Next page') : null);
      const atHead = { queued: 'Entry', running: 'Held by', scheduled: 'Due', retrying: 'Due', dead: 'Died', succeeded: 'Finished' }[tab];
      swap(panel, items.length
        ? table(null, ['Task', 'Function', 'Status', 'Priority', 'Attempt', 'Failures', atHead, 'Last error', 'Actions'],
          items.map(it => h('tr', { 'data-task': it.id },
            h('th', { scope: 'row' }, h('a', { href: tlink(name, it.id), 'data-key': 't:' + it.id }, it.id)),
            h('td', {}, it.function || ''),
            h('td', {}, it.missing ? badge('record gone', 'muted') : it.status || ''),
            h('td', { class: 'num' }, String(it.priority ?? '')),
            h('td', { class: 'num' }, String(it.attempt ?? '')),
            h('td', { class: 'num' }, String(it.failures ?? '')),
            h('td', {}, tab === 'running' ? `${it.consumer || ''} (idle ${((it.idle_ms || 0) / 1000).toFixed(1)} s)` : it.at_ms ? fmtTime(it.at_ms) : it.entry_id || ''),
            h('td', { class: 'error-text' }, it.error || ''),
            h('td', { class: 'actions' }, rowActions(it)))), 'tasks')
        : h('p', { class: 'empty' }, `No ${tab} tasks.`), pager);
    },
  };
}

// ---------------------------------------------------------------- one task

function bodyBlock(title, b) {
  if (!b) return null;
  const meta = `${b.encoding}, ${num(b.size)} bytes stored` + (b.truncated ? ', truncated to the first 64 KiB' : '');
  return h('section', { class: 'body', 'data-part': title.toLowerCase() }, h('h2', {}, title), h('p', { class: 'meta' }, meta),
    h('pre', { class: 'value', tabindex: '0', 'aria-label': title }, b.value));
}

export function task(root, route) {
  const { queue: name, id } = route;
  const box = h('div');
  root.append(h('h1', {}, 'Task ', h('span', { class: 'name' }, id)),
    h('p', {}, 'in queue ', h('a', { href: qlink(name) }, name)), box);
  const base = `/api/v1/queues/${enc(name)}`;
  return {
    async refresh() {
      const r = await api('GET', `${base}/tasks/${enc(id)}`);
      if (!r.ok) {
        swap(box, r.status === 404 && !missing(r) ? h('p', { class: 'error' }, 'No such task (a finished record expires): ' + r.error) : failure(r, 'the task'));
        return;
      }
      const t = r.data;
      const acts = [];
      if (t.status === 'dead') {
        acts.push(actionButton('Requeue', 'Requeue task ' + id, () => act('POST', `${base}/dead/${enc(id)}/requeue`, undefined, 'Requeued ' + id + '.'), 'requeue'));
        acts.push(actionButton('Delete', 'Delete dead task ' + id, async () => {
          const d = await act('DELETE', `${base}/dead/${enc(id)}`, undefined, 'Deleted ' + id + '.');
          if (missing(d)) say('Deleting dead tasks is not available on this observer.', 'error');
        }, 'delete'));
      }
      if ((t.status === 'scheduled' || t.status === 'retrying') && !runMissing.v) {
        acts.push(actionButton('Run now', 'Run task ' + id + ' now', async () => {
          const d = await act('POST', `${base}/tasks/${enc(id)}/run`, undefined, 'Queued ' + id + ' to run now.');
          if (missing(d)) { runMissing.v = true; say('Run now is not available on this observer.', 'error'); }
        }, 'run'));
      }
      if (CANCELLABLE.includes(t.status)) {
        acts.push(actionButton('Cancel', 'Cancel task ' + id, () => act('POST', `${base}/tasks/${enc(id)}/cancel`, undefined, cancelled(id)), 'cancel'));
      }
      const fields = Object.entries(t).filter(([k, v]) => k !== 'payload' && k !== 'result' && typeof v !== 'object');
      swap(box,
        acts.length ? h('p', { class: 'actions' }, acts) : null,
        h('dl', { class: 'record' }, fields.map(([k, v]) =>
          h('div', { 'data-field': k }, h('dt', {}, k), h('dd', {}, k.endsWith('_ms') && v ? `${fmtTime(v)} (${v})` : String(v))))),
        bodyBlock('Payload', t.payload), bodyBlock('Result', t.result));
    },
  };
}

// ---------------------------------------------------------------- dead letters

const bulk = { missing: new Set() }; // bulk endpoints this observer lacks ('requeue', 'delete', 'delete-one')

export function dead(root, route) {
  const name = route.queue;
  const base = `/api/v1/queues/${enc(name)}`;
  const selected = new Set();
  let items = [];
  let cursors = [''];
  const tools = h('div', { class: 'toolbar', role: 'group', 'aria-label': 'Dead letter actions' });
  const confirmBox = h('div', { class: 'confirm', role: 'alertdialog', 'aria-live': 'assertive' });
  const list = h('div');
  root.append(h('h1', {}, 'Dead letters of ', h('a', { href: qlink(name), class: 'name' }, name)), tools, confirmBox, list);

  const report = (what, d) => {
    const parts = [`${what} ${d.requeued ?? d.deleted ?? 0}`];
    if (d.not_found && d.not_found.length) parts.push('not found: ' + d.not_found.join(', '));
    if (d.wrong_state && d.wrong_state.length) parts.push('not dead any more: ' + d.wrong_state.join(', '));
    say(parts.join('; ') + '.', 'ok');
  };

  // each runs the per-task endpoint over ids: for an observer without the bulk ones.
  const each = async (ids, one, what) => {
    let n = 0; const failed = [];
    for (const id of ids) {
      const r = await one(id);
      if (r.ok) n++; else failed.push(id + ': ' + r.error);
      if (r.status === 401 || r.status === 403 || missing(r)) return r;
    }
    say(`${what} ${n}` + (failed.length ? '; refused: ' + failed.join('; ') : '') + '.', failed.length ? 'error' : 'ok');
    return { ok: true };
  };

  const requeue = async ids => {
    if (!bulk.missing.has('requeue')) {
      const r = await act('POST', base + '/dead/requeue', ids ? { ids } : { all: true });
      if (r.ok) { report('Requeued', r.data); selected.clear(); return; }
      if (!missing(r)) return;
      bulk.missing.add('requeue');
    }
    if (!ids) { say('Requeue all is not available on this observer: select the tasks instead.', 'error'); draw(); return; }
    const r = await each(ids, id => act('POST', `${base}/dead/${enc(id)}/requeue`), 'Requeued');
    if (r.ok) selected.clear();
  };
  const remove = async ids => {
    if (!bulk.missing.has('delete')) {
      const r = await act('POST', base + '/dead/delete', ids ? { ids } : { all: true });
      if (r.ok) { report('Deleted', r.data); selected.clear(); return; }
      if (!missing(r)) return;
      bulk.missing.add('delete');
    }
    if (!ids || bulk.missing.has('delete-one')) { say('Deleting dead tasks is not available on this observer.', 'error'); draw(); return; }
    const r = await each(ids, id => act('DELETE', `${base}/dead/${enc(id)}`), 'Deleted');
    if (missing(r)) { bulk.missing.add('delete-one'); say('Deleting dead tasks is not available on this observer.', 'error'); draw(); }
    else if (r.ok) selected.clear();
  };

  const confirm = (question, run) => {
    const yes = h('button', { type: 'button', class: 'action danger', 'data-key': 'confirm-yes' }, 'Yes, ' + question.toLowerCase());
    const no = h('button', { type: 'button', 'data-key': 'confirm-no' }, 'No, keep them');
    yes.addEventListener('click', async () => { swap(confirmBox); await run(); });
    no.addEventListener('click', () => { swap(confirmBox); say('Nothing changed.'); });
    swap(confirmBox, h('p', {}, question + ': every dead task of ' + name + ', not only this page. Sure?'), yes, ' ', no);
    if (state.actionsOff) offButton(yes);
    no.focus();
  };

  const draw = () => {
    const sel = [...selected];
    const canDelete = !(bulk.missing.has('delete') && bulk.missing.has('delete-one'));
    swap(tools,
      actionButton(`Requeue selected (${sel.length})`, `Requeue the ${sel.length} selected dead tasks`, () => sel.length ? requeue(sel) : say('Select tasks first.', 'error'), 'rq-sel'),
      canDelete ? actionButton(`Delete selected (${sel.length})`, `Delete the ${sel.length} selected dead tasks`, () => sel.length ? remove(sel) : say('Select tasks first.', 'error'), 'del-sel') : null,
      bulk.missing.has('requeue') ? null : actionButton('Requeue all…', 'Requeue every dead task of ' + name, () => confirm('Requeue all', () => requeue(null)), 'rq-all'),
      bulk.missing.has('delete') ? null : actionButton('Delete all…', 'Delete every dead task of ' + name, () => confirm('Delete all', () => remove(null)), 'del-all'));
  };

  const toggle = (id, on) => { if (on) selected.add(id); else selected.delete(id); draw(); };

  return {
    async refresh() {
      const cur = cursors[cursors.length - 1];
      const r = await api('GET', `${base}/tasks?state=dead&limit=100` + (cur ? '&cursor=' + enc(cur) : ''));
      if (!r.ok) { swap(list, failure(r, 'the dead tasks')); swap(tools); return; }
      items = r.data.items || [];
      const ids = new Set(items.map(i => i.id));
      for (const id of [...selected]) if (!ids.has(id)) selected.delete(id);
      draw();
      const next = r.data.next_cursor || '';
      const all = h('input', { type: 'checkbox', 'aria-label': 'Select every task on this page', 'data-key': 'sel-all' });
      all.checked = items.length > 0 && items.every(i => selected.has(i.id));
      all.addEventListener('change', () => {
        for (const i of items) if (all.checked) selected.add(i.id); else selected.delete(i.id);
        for (const c of list.querySelectorAll('input[data-id]')) c.checked = all.checked;
        draw();
      });
      swap(list, items.length ? h('div', { class: 'table-wrap' }, h('table', { class: 'dead' },
        h('thead', {}, h('tr', {}, h('th', { scope: 'col' }, all), ['Task', 'Function', 'Died', 'Attempt', 'Failures', 'Last error', 'Actions'].map(c => h('th', { scope: 'col' }, c)))),
        h('tbody', {}, items.map(it => {
          const box = h('input', { type: 'checkbox', 'aria-label': 'Select ' + it.id, 'data-key': 'sel:' + it.id, 'data-id': it.id });
          box.checked = selected.has(it.id);
          box.addEventListener('change', () => toggle(it.id, box.checked));
          return h('tr', { 'data-task': it.id },
            h('td', {}, box),
            h('th', { scope: 'row' }, h('a', { href: tlink(name, it.id), 'data-key': 't:' + it.id }, it.id)),
            h('td', {}, it.function || ''),
            h('td', {}, fmtTime(it.at_ms)),
            h('td', { class: 'num' }, String(it.attempt ?? '')),
            h('td', { class: 'num' }, String(it.failures ?? '')),
            h('td', { class: 'error-text' }, it.error || ''),
            h('td', { class: 'actions' },
              actionButton('Requeue', 'Requeue ' + it.id, () => requeue([it.id]), 'rq:' + it.id),
              bulk.missing.has('delete-one') ? null : actionButton('Delete', 'Delete ' + it.id, async () => {
                const d = await act('DELETE', `${base}/dead/${enc(it.id)}`, undefined, 'Deleted ' + it.id + '.');
                if (missing(d)) { bulk.missing.add('delete-one'); say('Deleting dead tasks is not available on this observer.', 'error'); state.refresh(); }
              }, 'del:' + it.id)));
        })))) : h('p', { class: 'empty' }, 'No dead tasks.'),
      h('div', { class: 'pager' },
        cursors.length > 1 ? h('button', { type: 'button', 'data-key': 'first', on: { click: () => { cursors = ['']; state.refresh(); } } }, 'First page') : null,
        h('span', {}, `Page ${cursors.length}`),
        next ? h('button', { type: 'button', 'data-key': 'next', on: { click: () => { cursors.push(next); state.refresh(); } } }, 'Next page') : null));
    },
  };
}

// ---------------------------------------------------------------- periodic entries

// zoneOf splits a spec into its time zone (CRON_TZ= or TZ=, UTC otherwise) and the rest.
function zoneOf(spec) {
  const m = /^(?:CRON_)?TZ=(\S+)\s+(.*)$/.exec(spec || '');
  return m ? [m[1], m[2]] : ['UTC', spec || ''];
}

export function cron(root) {
  const list = h('div');
  root.append(h('h1', {}, 'Periodic entries'), list);
  return {
    async refresh() {
      const r = await api('GET', '/api/v1/cron');
      if (!r.ok) {
        swap(list, missing(r) ? h('p', { class: 'note' }, 'This observer lists no periodic entries.') : failure(r, 'the periodic entries'));
        return;
      }
      const items = r.data.entries || [];
      swap(list, items.length ? table(null,
        ['Entry', 'State', 'Schedule', 'Time zone', 'Queue', 'Function', 'Priority', 'Missed ticks', 'Next tick', 'Updated', 'Payload', 'Actions'],
        items.map(c => {
          const [zone, sched] = zoneOf(c.spec);
          const base = '/api/v1/cron/' + enc(c.name);
          return h('tr', { 'data-cron': c.name },
            h('th', { scope: 'row' }, c.name),
            h('td', { class: 'state' }, c.error ? badge('unreadable', 'bad') : c.paused ? badge('paused', 'warn') : badge('active', 'good'),
              c.error ? h('span', { class: 'error' }, ' ' + c.error) : null),
            h('td', { class: 'spec' }, h('code', {}, sched)),
            h('td', { class: 'zone' }, c.error ? '' : zone),
            h('td', {}, c.queue ? h('a', { href: qlink(c.queue) }, c.queue) : ''),
            h('td', {}, c.function || ''),
            h('td', { class: 'num' }, c.error ? '' : String(c.priority ?? '')),
            h('td', { class: 'missed' }, c.missed || ''),
            h('td', { class: 'next' }, c.next_ms ? h('time', { datetime: new Date(c.next_ms).toISOString() }, fmtTime(c.next_ms)) : c.paused ? 'none while paused' : ''),
            h('td', {}, fmtTime(c.updated_ms)),
            h('td', { class: 'payload' }, c.payload || ''),
            h('td', { class: 'actions' }, c.error ? null : c.paused
              ? actionButton('Resume', 'Resume periodic entry ' + c.name, () => act('POST', base + '/resume', undefined, 'Resumed ' + c.name + '.'), 'cron:' + c.name)
              : actionButton('Pause', 'Pause periodic entry ' + c.name, () => act('POST', base + '/pause', undefined, 'Paused ' + c.name + '.'), 'cron:' + c.name)));
        }), 'cron')
        : h('p', { class: 'empty' }, 'No periodic entries: dtq cron add creates one.'));
      rendered();
    },
  };
}

// ---------------------------------------------------------------- live events

const MAX_EVENTS = 200;

export function events(root) {
  const mode = h('p', { class: 'note', role: 'status' }, 'Connecting…');
  const list = h('ol', { class: 'events', reversed: true, 'aria-label': 'Events, newest first' });
  root.append(h('h1', {}, 'Live events'), mode, list);
  let ctrl = null, connecting = false, connected = false, fallback = false, lastId = '';
  let prev = null;

  const add = (ev) => {
    const d = ev.data || {};
    const q = d.queue, t = d.task;
    const li = h('li', { class: 'event', 'data-type': ev.type },
      h('time', {}, d.ts ? fmtTime(d.ts) : ''), ' ',
      h('span', { class: 'type' }, ev.type || ''), ' ',
      q ? h('a', { href: qlink(q), class: 'queue' }, q) : null, ' ',
      q && t ? h('a', { href: tlink(q, t), class: 'task' }, t) : t ? h('span', { class: 'task' }, t) : null, ' ',
      d.worker ? h('span', { class: 'worker' }, d.worker) : null, ' ',
      d.attempt ? h('span', {}, 'attempt ' + d.attempt) : null, ' ',
      d.detail ? h('span', { class: 'detail' }, d.detail) : null);
    list.prepend(li);
    while (list.children.length > MAX_EVENTS) list.lastElementChild.remove();
  };

  const dispatch = (raw) => {
    if (raw.id) lastId = raw.id;
    let data = {};
    try { data = JSON.parse(raw.data); } catch { data = { detail: raw.data }; }
    add({ type: raw.event || data.type || 'message', data });
  };

  const connect = async () => {
    connecting = true;
    ctrl = new AbortController();
    const headers = { Accept: 'text/event-stream' };
    const tok = token.get();
    if (tok) headers.Authorization = 'Bearer ' + tok;
    if (lastId) headers['Last-Event-ID'] = lastId;
    let res;
    try {
      res = await fetch('/api/v1/events', { headers, signal: ctrl.signal, cache: 'no-store', credentials: 'omit' });
    } catch (e) {
      connecting = false;
      if (!ctrl.signal.aborted) mode.textContent = 'Disconnected (' + e.message + '); retrying.';
      return;
    }
    connecting = false;
    if (res.status === 404) {
      fallback = true;
      mode.textContent = 'This observer serves no event stream: showing the changes seen by polling every 2 s.';
      state.refresh();
      return;
    }
    if (!res.ok) {
      let msg = 'HTTP ' + res.status;
      try { msg = (await res.json()).error || msg; } catch { /* not JSON */ }
      if (res.status === 401) askToken('The event stream needs the token: enter it in the Token field above.', true);
      mode.textContent = 'The event stream refused: ' + msg;
      return;
    }
    connected = true;
    mode.textContent = 'Live: new events appear at the top.';
    const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
    let buf = '', ev = {};
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += value;
        let i;
        while ((i = buf.indexOf('\n')) >= 0) {
          let line = buf.slice(0, i);
          buf = buf.slice(i + 1);
          if (line.endsWith('\r')) line = line.slice(0, -1);
          if (line === '') { if (ev.data !== undefined) dispatch(ev); ev = {}; continue; }
          if (line.startsWith(':')) continue;
          const c = line.indexOf(':');
          const f = c < 0 ? line : line.slice(0, c);
          let v = c < 0 ? '' : line.slice(c + 1);
          if (v.startsWith(' ')) v = v.slice(1);
          if (f === 'data') ev.data = ev.data === undefined ? v : ev.data + '\n' + v;
          else if (f === 'id') ev.id = v;
          else if (f === 'event') ev.event = v;
        }
      }
    } catch (e) {
      if (!ctrl.signal.aborted) mode.textContent = 'Disconnected (' + e.message + '); reconnecting.';
    }
    connected = false;
  };

  // poll is the fallback: the differences between two reads of the queues and workers.
  const poll = async () => {
    const [qr, wr] = await Promise.all([api('GET', '/api/v1/queues'), api('GET', '/api/v1/workers')]);
    if (!qr.ok || !wr.ok) { mode.textContent = 'Could not read: ' + (qr.ok ? wr : qr).error; return; }
    const now = Date.now();
    const cur = { q: new Map(qr.data.queues.map(q => [q.queue, q])), w: new Map(wr.data.workers.map(w => [w.worker_id, w])) };
    if (prev) {
      for (const [n, q] of cur.q) {
        const p = prev.q.get(n);
        const ch = ['lag', 'pending', 'scheduled', 'dead', 'paused'].filter(k => !p || p[k] !== q[k]).map(k => `${k} ${p ? p[k] : '–'} → ${q[k]}`);
        if (ch.length) add({ type: 'QUEUE_CHANGED', data: { ts: now, queue: n, detail: ch.join(', ') } });
      }
      for (const [id, w] of cur.w) {
        const p = prev.w.get(id);
        if (!p || p.liveness !== w.liveness) add({ type: 'WORKER_' + String(w.liveness).toUpperCase(), data: { ts: now, worker: id } });
      }
    }
    if (!prev) mode.textContent = `This observer serves no event stream: showing the changes seen by polling every 2 s (watching ${cur.q.size} queues and ${cur.w.size} workers).`;
    prev = cur;
  };

  return {
    async refresh() {
      if (fallback) return poll();
      if (!connected && !connecting) connect();
    },
    hidden() { if (ctrl) ctrl.abort(); connected = false; connecting = false; },
    stop() { if (ctrl) ctrl.abort(); },
  };
}

export function notfound(root) {
  root.append(h('h1', {}, 'No such page'), h('p', {}, h('a', { href: '#/' }, 'Back to the overview')));
  return { async refresh() {} };
}
