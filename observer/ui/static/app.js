// The dashboard's entry: hash routing, polling every 2 s while the tab is visible, and
// the token field.
import { token, state, say } from './api.js';
import * as views from './views.js';

const POLL_MS = 2000;
const main = document.getElementById('main');
let page = null;
let gen = 0; // a new route or a visibility change starts a new polling loop
let timer = 0;

function parse() {
  const raw = location.hash.replace(/^#/, '');
  const parts = raw.split('/').filter(Boolean).map(p => {
    try { return decodeURIComponent(p); } catch { return p; }
  });
  if (parts.length === 0) return { view: 'overview' };
  if (parts[0] === 'queues' && parts.length >= 2) {
    if (parts[2] === 'tasks' && parts.length >= 4) return { view: 'task', queue: parts[1], id: parts[3] };
    return { view: 'queue', queue: parts[1], state: parts[2] };
  }
  if (parts[0] === 'dead' && parts.length >= 2) return { view: 'dead', queue: parts[1] };
  if (parts[0] === 'events') return { view: 'events' };
  if (parts[0] === 'cron') return { view: 'cron' };
  return { view: 'notfound' };
}

async function loop(g) {
  if (g !== gen || document.hidden) return;
  clearTimeout(timer);
  try {
    await page.refresh();
  } catch (e) {
    say('The page failed to update: ' + e.message, 'error');
  }
  if (g === gen && !document.hidden) timer = setTimeout(() => loop(g), POLL_MS);
}

state.refresh = () => { gen++; loop(gen); };

function route() {
  if (page && page.stop) page.stop();
  clearTimeout(timer);
  const r = parse();
  main.replaceChildren();
  say('');
  page = views[r.view](main, r);
  const titles = { overview: 'Overview', queue: 'Queue ' + r.queue, task: 'Task ' + r.id, dead: 'Dead letters of ' + r.queue, events: 'Events', cron: 'Periodic entries', notfound: 'Not found' };
  document.title = titles[r.view] + ' · dtq observer';
  const here = { overview: '#/', events: '#/events', cron: '#/cron' }[r.view];
  for (const a of document.querySelectorAll('nav a')) {
    if (a.getAttribute('href') === here && a.className !== 'brand') a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
  state.refresh();
}

document.addEventListener('visibilitychange', () => {
  if (document.hidden) {
    gen++; clearTimeout(timer);
    if (page && page.hidden) page.hidden();
  } else {
    state.refresh();
  }
});

const form = document.getElementById('token-form');
const field = document.getElementById('token');
field.value = token.get();
form.addEventListener('submit', e => {
  e.preventDefault();
  const v = field.value.trim();
  if (v) { token.set(v); say('Token kept for this tab.', 'ok'); } else { token.forget(); say('No token.'); }
  field.classList.remove('wanted');
  state.refresh();
});
document.getElementById('token-forget').addEventListener('click', () => {
  token.forget(); field.value = ''; say('Token forgotten.');
});

window.addEventListener('hashchange', route);
route();
