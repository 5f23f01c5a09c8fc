// The observer's JSON API as the dashboard uses it, the token, and the messages line.

const KEY = 'dtq-observer-token';

export const token = {
  get() { try { return sessionStorage.getItem(KEY) || ''; } catch { return ''; } },
  set(v) { try { sessionStorage.setItem(KEY, v); } catch { /* storage refused */ } },
  forget() { try { sessionStorage.removeItem(KEY); } catch { /* storage refused */ } },
};

// enc builds one path segment from data.
export const enc = encodeURIComponent;

// api sends a request and never throws: {ok, status, data} or {ok: false, status, code, error}.
export async function api(method, path, body) {
  const headers = { Accept: 'application/json' };
  const t = token.get();
  if (t) headers.Authorization = 'Bearer ' + t;
  const init = { method, headers, cache: 'no-store', credentials: 'omit' };
  if (body !== undefined) {
    headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  let res;
  try {
    res = await fetch(path, init);
  } catch (e) {
    return { ok: false, status: 0, code: 'network', error: 'the observer did not answer: ' + e.message };
  }
  let data = null;
  try { data = await res.json(); } catch { /* not JSON */ }
  if (res.ok) {
    if (asked && t) { // the token a read asked for works now: the request is answered
      asked = false;
      say('');
      const f = document.getElementById('token');
      if (f) f.classList.remove('wanted');
    }
    return { ok: true, status: res.status, data };
  }
  return {
    ok: false, status: res.status,
    code: (data && data.code) || 'http_' + res.status,
    error: (data && data.error) || 'HTTP ' + res.status,
  };
}

// missing reports an answer saying the endpoint itself does not exist on this observer
// (an older one): the router's own 404 or 405, not a 404 about a queue or task.
export function missing(r) {
  return !r.ok && (r.status === 405 || (r.status === 404 && r.error === 'not found'));
}

export const state = {
  actionsOff: false,
  refresh: () => {}, // replaced by app.js: re-read the current page now
};

// say shows a message (text only) on the messages line.
export function say(msg, kind) {
  const el = document.getElementById('status');
  if (!el) return;
  el.className = 'status' + (kind ? ' ' + kind : '');
  el.textContent = msg || '';
}

let asked = false; // the messages line asks for the token, for a read

// askToken asks for the token; read: a read needed it (a later read that works answers it).
export function askToken(why, read) {
  asked = !!read;
  const msg = why || 'This needs the token: enter it in the Token field above.';
  const el = document.getElementById('status');
  const again = el && el.textContent === msg; // asked already: leave the focus where it is now
  say(msg, 'error');
  const f = document.getElementById('token');
  if (f) { f.classList.add('wanted'); if (!again) f.focus(); }
}

// markActionsOff turns every action button into a disabled one saying so.
export function markActionsOff() {
  state.actionsOff = true;
  document.body.classList.add('actions-off');
  for (const b of document.querySelectorAll('button.action')) offButton(b);
}

export function offButton(b) {
  b.disabled = true;
  b.textContent = 'Actions are off';
  b.setAttribute('aria-label', 'Actions are off on this observer');
  b.title = 'The observer was started without DTQ_OBSERVER_TOKEN';
}

// act sends an action and reports its outcome; it returns the answer. done is the
// message of a success, or a function of the answer's data returning it.
export async function act(method, path, body, done) {
  const r = await api(method, path, body);
  if (r.ok) {
    say((typeof done === 'function' ? done(r.data || {}) : done) || 'Done.', 'ok');
  } else if (r.status === 403 && r.code === 'actions_disabled') {
    markActionsOff();
    say('Refused: ' + r.error, 'error');
  } else if (r.status === 401) {
    askToken('Refused (' + r.error + '): enter the observer token in the Token field above.');
  } else if (!missing(r)) {
    say('Refused: ' + r.error + ' (' + r.code + ')', 'error');
  }
  state.refresh();
  return r;
}
