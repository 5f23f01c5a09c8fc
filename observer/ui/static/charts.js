// Charts drawn as inline SVG with DOM calls.
import { s, h, fmtClock } from './dom.js';

// bands draws a queue's per-band lag (dark) and pending (light) as ten small columns,
// p9 first.
export function bands(priorities) {
  const list = priorities || [];
  const max = Math.max(1, ...list.map(b => (b.lag || 0) + (b.pending || 0)));
  const W = 14, H = 32;
  const label = list.map(b => `p${b.priority}: lag ${b.lag}, pending ${b.pending}`).join('; ');
  const svg = s('svg', {
    class: 'bands', viewBox: `0 0 ${W * 10} ${H + 10}`, width: W * 10, height: H + 10,
    role: 'img', 'aria-label': 'lag and pending per band: ' + label,
  });
  list.forEach((b, i) => {
    const x = i * W + 2;
    const lh = Math.round(H * (b.lag || 0) / max);
    const ph = Math.round(H * (b.pending || 0) / max);
    const g = s('g', {}, s('title', { text: `priority ${b.priority}: lag ${b.lag}, pending ${b.pending}` }));
    g.append(s('rect', { class: 'band-bg', x, y: 0, width: W - 4, height: H }));
    if (ph) g.append(s('rect', { class: 'band-pending', x, y: H - ph - lh, width: W - 4, height: ph }));
    if (lh) g.append(s('rect', { class: 'band-lag', x, y: H - lh, width: W - 4, height: lh }));
    g.append(s('text', { class: 'band-label', x: x + (W - 4) / 2, y: H + 9, 'text-anchor': 'middle', text: String(b.priority) }));
    svg.append(g);
  });
  return svg;
}

// sumThroughput adds the per-minute series of several queues, aligned by minute.
export function sumThroughput(list) {
  const tps = list.filter(t => t && Array.isArray(t.processed));
  if (!tps.length) return null;
  const start = Math.max(...tps.map(t => t.start_ms));
  const step = tps[0].step_s || 60;
  const n = tps[0].processed.length;
  const out = { start_ms: start, step_s: step, processed: new Array(n).fill(0), failed: new Array(n).fill(0) };
  for (const t of tps) {
    const off = Math.round((start - t.start_ms) / (step * 1000));
    for (let i = 0; i < n; i++) {
      out.processed[i] += Number(t.processed[i + off] || 0);
      out.failed[i] += Number((t.failed || [])[i + off] || 0);
    }
  }
  return out;
}

// throughput draws processed and failed tasks per minute, oldest first.
export function throughput(tp, caption) {
  const n = tp.processed.length;
  const W = 600, H = 120, top = 14, bw = W / n;
  const max = Math.max(1, ...tp.processed.map(Number), ...tp.failed.map(Number));
  const total = tp.processed.reduce((a, b) => a + Number(b), 0);
  const failed = tp.failed.reduce((a, b) => a + Number(b), 0);
  const svg = s('svg', {
    class: 'chart', viewBox: `0 0 ${W} ${H + top + 16}`, preserveAspectRatio: 'none', role: 'img',
    'aria-label': `${caption}: ${total} processed, ${failed} failed in the last ${Math.round(n * tp.step_s / 60)} minutes`,
  });
  svg.append(s('line', { class: 'axis', x1: 0, y1: top + H, x2: W, y2: top + H }));
  svg.append(s('text', { class: 'tick', x: 2, y: 10, text: 'max ' + max + '/min' }));
  for (let i = 0; i < n; i++) {
    const p = Number(tp.processed[i]) || 0, f = Number(tp.failed[i]) || 0;
    const at = tp.start_ms + i * tp.step_s * 1000;
    const g = s('g', {}, s('title', { text: `${fmtClock(at)}: ${p} processed, ${f} failed` }));
    const ph = H * p / max, fh = H * f / max;
    if (p) g.append(s('rect', { class: 'processed', x: i * bw + 0.5, y: top + H - ph, width: bw - 1, height: ph }));
    if (f) g.append(s('rect', { class: 'failed', x: i * bw + 0.5, y: top + H - fh, width: bw - 1, height: fh }));
    svg.append(g);
  }
  svg.append(s('text', { class: 'tick', x: 2, y: top + H + 13, text: fmtClock(tp.start_ms) }));
  svg.append(s('text', { class: 'tick', x: W - 2, y: top + H + 13, 'text-anchor': 'end', text: 'now' }));
  return h('figure', { class: 'throughput' },
    h('figcaption', {}, caption + ' ',
      h('span', { class: 'key processed' }, 'processed ' + total), ' ',
      h('span', { class: 'key failed' }, 'failed ' + failed)),
    svg);
}
