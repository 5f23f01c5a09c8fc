// DOM helpers. Data is only ever set as text (textContent, text nodes) or as an
// attribute value (setAttribute): never parsed as HTML.

const SVG = 'http://www.w3.org/2000/svg';

function build(el, attrs, children) {
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'text') el.textContent = String(v);
    else if (k === 'on') for (const [ev, fn] of Object.entries(v)) el.addEventListener(ev, fn);
    else if (k === 'class') el.setAttribute('class', Array.isArray(v) ? v.filter(Boolean).join(' ') : v);
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

// h creates an HTML element: h('a', {href, class, text, on: {click}}, ...children).
export function h(tag, attrs, ...children) {
  return build(document.createElement(tag), attrs, children);
}

// s creates an SVG element.
export function s(tag, attrs, ...children) {
  return build(document.createElementNS(SVG, tag), attrs, children);
}

// swap replaces the children of el, keeping the keyboard focus on the element with the
// same data-key when there was one inside el.
export function swap(el, ...nodes) {
  const a = document.activeElement;
  const key = a && el.contains(a) ? a.getAttribute('data-key') : null;
  el.replaceChildren(...nodes.flat().filter(Boolean));
  if (key !== null) {
    for (const c of el.querySelectorAll('[data-key]')) {
      if (c.getAttribute('data-key') === key) { c.focus(); break; }
    }
  }
}

export function fmtTime(ms) {
  if (!ms) return '';
  const d = new Date(Number(ms));
  return isNaN(d) ? String(ms) : d.toLocaleString();
}

export function fmtClock(ms) {
  const d = new Date(Number(ms));
  return d.toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' });
}

export function fmtAge(s) {
  if (s === undefined || s === null) return '';
  s = Number(s);
  if (s < 60) return s.toFixed(1) + ' s ago';
  if (s < 3600) return Math.round(s / 60) + ' min ago';
  return (s / 3600).toFixed(1) + ' h ago';
}

export function num(n) {
  return n === undefined || n === null ? '–' : Number(n).toLocaleString();
}
