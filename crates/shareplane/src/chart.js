// The shares-over-time chart of both dashboards (`shareplane demo` at `/`, `shareplane run` at
// `/dashboard`), served to both as `dashboard/chart.js`. Plain SVG, no dependency.
//
//   const chart = ShareChart.create(rootElement, {
//     storageKey, title, windowMs, pollMs,
//     series: [{ key, label }],           // the Regions' lines, in legend order
//     sumLabel, limitLabel, overReason,   // the words for the sum, the limit and why Σ > L matters
//   });
//   chart.push({ t, v: { A: 5600, ... }, sum, limit });   // one poll's answer
//   chart.fail(message);                                  // a poll that got no answer
//
// Lines never hide each other: each has its own colour and dash, and where values are equal
// (within a pixel or two) the lines are drawn a few pixels apart. The limit is drawn last, on top.
// While the sum passes the limit, the time is shaded and a warning gives the reason. The points of
// the window shown are kept in sessionStorage, so a reload keeps the history.
"use strict";

const ShareChart = (() => {
  const W = 900, H = 320, M = { left: 70, right: 34, top: 14, bottom: 44 };
  const COLORS = ["#2563eb", "#d97706", "#059669", "#9333ea", "#0891b2", "#be185d"];
  const DASHES = ["", "9 4", "3 3", "12 3 3 3", "6 2", "1 3"];
  const SUM_STYLE = { color: "#111827", dash: "", width: 3 };
  const LIMIT_STYLE = { color: "#dc2626", dash: "10 5", width: 2.5 };
  const MAX_POINTS = 600;
  let charts = 0; // numbers each chart's clip path
  const fmt = (x) => Math.round(x).toLocaleString("en-US");
  const clock = (t) => new Date(t).toLocaleTimeString("en-GB", { hour12: false });
  const esc = (s) => String(s).replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" })[c]);

  const CSS = `
  .sp-chart { background:#fff; border:1px solid #e5e7eb; border-radius:8px; padding:10px 12px; margin-top:16px; }
  .sp-chart h3 { margin:0 0 6px; font-size:15px; }
  .sp-chart svg.sp-plot { display:block; width:100%; height:auto; }
  .sp-chart svg text { font:12px system-ui, sans-serif; fill:#374151; }
  .sp-chart .sp-status { font-size:13px; margin-bottom:4px; }
  .sp-chart .sp-status.bad { color:#fff; background:#7f1d1d; padding:4px 8px; border-radius:5px; font-weight:600; }
  .sp-chart .sp-status.good { color:#065f46; }
  .sp-chart .sp-warning { border-left:5px solid #dc2626; background:#fef2f2; color:#7f1d1d; padding:6px 10px; margin:4px 0 6px; font-size:13px; }
  .sp-chart .sp-warning[hidden] { display:none; }
  .sp-chart .sp-legend { display:flex; flex-wrap:wrap; gap:4px 18px; font-size:13px; margin-top:4px; font-variant-numeric:tabular-nums; }
  .sp-chart .sp-legend span.item { display:inline-flex; align-items:center; gap:6px; white-space:nowrap; }
  .sp-chart .sp-legend svg { width:34px; height:10px; flex:none; }
  .sp-chart.stale svg { opacity:.45; }`;

  function addStyle() {
    if (document.getElementById("sp-chart-style")) return;
    const s = document.createElement("style");
    s.id = "sp-chart-style";
    s.textContent = CSS;
    document.head.append(s);
  }

  // Steps of 1, 2, 2.5 or 5 times a power of ten, about `count` of them up to `max`.
  function niceStep(max, count) {
    const raw = Math.max(max, 1) / count;
    const p = Math.pow(10, Math.floor(Math.log10(raw)));
    for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= raw) return m * p;
    return 10 * p;
  }

  function valid(p) {
    return p && Number.isFinite(p.t) && Number.isFinite(p.limit) && Number.isFinite(p.sum) &&
      p.v && typeof p.v === "object" && Object.values(p.v).every((x) => x === null || Number.isFinite(x));
  }

  function load(key, windowMs) {
    try {
      const raw = JSON.parse(sessionStorage.getItem(key) || "[]");
      const from = Date.now() - windowMs;
      return Array.isArray(raw) ? raw.filter((p) => valid(p) && p.t >= from).slice(-MAX_POINTS) : [];
    } catch {
      return []; // unreadable history: start afresh (the chart says nothing was kept)
    }
  }

  function save(key, points) {
    try {
      sessionStorage.setItem(key, JSON.stringify(points));
      return true;
    } catch {
      return false; // storage full or refused: the chart goes on without keeping history
    }
  }

  // The lines drawn, bottom to top: the Regions, the sum, the limit.
  function lines(opts) {
    const regions = opts.series.map((s, i) => ({
      key: s.key, label: s.label, get: (p) => p.v[s.key],
      color: COLORS[i % COLORS.length], dash: DASHES[i % DASHES.length], width: 2,
    }));
    return regions.concat(
      { key: "sum", label: opts.sumLabel, get: (p) => p.sum, ...SUM_STYLE },
      { key: "limit", label: opts.limitLabel, get: (p) => p.limit, ...LIMIT_STYLE });
  }

  // Pixel offsets per line at one point: lines whose values fall within `near` pixels of each
  // other are spread 3 px apart around their common value, so none hides another. On a tie the
  // line drawn later goes higher: the limit stays above a sum equal to it.
  function offsets(ys, near) {
    const order = ys.map((y, i) => [y, i]).filter(([y]) => y !== null).sort((a, b) => a[0] - b[0] || b[1] - a[1]);
    const off = ys.map(() => 0);
    for (let s = 0; s < order.length;) {
      let e = s + 1;
      while (e < order.length && order[e][0] - order[e - 1][0] < near) e++;
      for (let k = s; k < e; k++) off[order[k][1]] = (k - s - (e - s - 1) / 2) * 3;
      s = e;
    }
    return off;
  }

  // The time shown: the window, or less while the history is shorter (at least 30 s).
  function scales(points, ls, windowMs) {
    const end = points.length ? Math.max(points[points.length - 1].t, Date.now()) : Date.now();
    const start = points.length ? Math.min(end - 30_000, Math.max(end - windowMs, points[0].t - 2_000)) : end - windowMs;
    const span = end - start;
    let max = 0;
    for (const p of points) for (const l of ls) max = Math.max(max, l.get(p) ?? 0);
    const room = Math.max(max * 1.05, 10); // never clipped: the axis goes past the largest value
    const step = niceStep(room, 5);
    const top = Math.ceil(room / step) * step;
    const pw = W - M.left - M.right, ph = H - M.top - M.bottom;
    return {
      start, end, top, step,
      x: (t) => M.left + ((t - start) / span) * pw,
      y: (v) => M.top + ph - (v / top) * ph,
    };
  }

  function axes(sc) {
    let out = "";
    for (let i = 0; i * sc.step <= sc.top * (1 + 1e-9); i++) {
      const v = i * sc.step;
      const y = sc.y(v).toFixed(1);
      out += `<line x1="${M.left}" x2="${W - M.right}" y1="${y}" y2="${y}" stroke="#e5e7eb"/>` +
        `<text class="tick-y" x="${M.left - 6}" y="${y}" text-anchor="end" dominant-baseline="middle">${v.toLocaleString("en-US", { maximumFractionDigits: 2 })}</text>`;
    }
    const span = sc.end - sc.start;
    const tStep = span > 300_000 ? 60_000 : span > 150_000 ? 30_000 : span > 50_000 ? 15_000 : 5_000;
    for (let t = Math.ceil(sc.start / tStep) * tStep; t <= sc.end; t += tStep) {
      if (sc.x(t) < M.left + 28) continue; // would run into the value axis' labels
      const x = sc.x(t).toFixed(1);
      out += `<line x1="${x}" x2="${x}" y1="${M.top}" y2="${H - M.bottom + 4}" stroke="#f3f4f6"/>` +
        `<text class="tick-x" x="${x}" y="${H - M.bottom + 17}" text-anchor="middle">${clock(t)}</text>`;
    }
    const bottom = H - M.bottom;
    return out +
      `<line x1="${M.left}" x2="${W - M.right}" y1="${bottom}" y2="${bottom}" stroke="#6b7280"/>` +
      `<line x1="${M.left}" x2="${M.left}" y1="${M.top}" y2="${bottom}" stroke="#6b7280"/>` +
      `<text x="14" y="${M.top + (H - M.top - M.bottom) / 2}" text-anchor="middle" ` +
      `transform="rotate(-90 14 ${M.top + (H - M.top - M.bottom) / 2})">requests/s</text>` +
      `<text x="${M.left + (W - M.left - M.right) / 2}" y="${H - 6}" text-anchor="middle">time (this browser's clock, hh:mm:ss)</text>`;
  }

  // Consecutive points closer than `gapMs` are joined; a longer silence (no answer, a reload
  // after a while) breaks the line.
  function runs(points, gapMs) {
    const out = [];
    let cur = [];
    for (const p of points) {
      if (cur.length && p.t - cur[cur.length - 1].t > gapMs) { out.push(cur); cur = []; }
      cur.push(p);
    }
    if (cur.length) out.push(cur);
    return out;
  }

  function paths(points, ls, sc, gapMs) {
    const per = ls.map(() => []);
    for (const run of runs(points, gapMs)) {
      const segs = ls.map(() => []);
      for (const p of run) {
        const ys = ls.map((l) => (Number.isFinite(l.get(p)) ? sc.y(l.get(p)) : null));
        const off = offsets(ys, 2.5);
        ys.forEach((y, i) => { if (y !== null) segs[i].push(`${sc.x(p.t).toFixed(1)},${(y + off[i]).toFixed(1)}`); });
      }
      segs.forEach((s, i) => { if (s.length) per[i].push(s.length === 1 ? [s[0], s[0]] : s); });
    }
    return ls.map((l, i) => per[i].map((s) =>
      `<polyline class="line" data-line="${esc(l.key)}" fill="none" stroke="${l.color}" stroke-width="${l.width}" ` +
      `stroke-linejoin="round" ${l.dash ? `stroke-dasharray="${l.dash}"` : ""} points="${s.join(" ")}"/>`).join("")).join("");
  }

  // The stretches of time in which the sum passed the limit.
  function overSpans(points, gapMs) {
    const spans = [];
    let open = null;
    points.forEach((p, i) => {
      const over = p.sum > p.limit + 0.001;
      const next = points[i + 1];
      if (over && !open) open = { from: p.t, to: p.t, peak: p.sum, limit: p.limit };
      if (over) {
        open.to = next && next.t - p.t <= gapMs ? next.t : p.t;
        open.peak = Math.max(open.peak, p.sum);
      }
      if (!over && open) { spans.push(open); open = null; }
    });
    if (open) { open.now = true; spans.push(open); }
    return spans;
  }

  function bands(spans, sc) {
    return spans.map((s) => {
      const x1 = sc.x(s.from), x2 = Math.max(sc.x(s.to), x1 + 4);
      const right = x1 > W - M.right - 140; // near the right edge: the text goes to the band's left
      return `<rect class="over-band" x="${x1.toFixed(1)}" y="${M.top}" width="${(x2 - x1).toFixed(1)}" ` +
        `height="${H - M.top - M.bottom}" fill="#dc2626" fill-opacity="0.16"/>` +
        `<text class="over-text" x="${(right ? x2 - 3 : x1 + 3).toFixed(1)}" y="${M.top + 12}" ` +
        `text-anchor="${right ? "end" : "start"}" fill="#b91c1c" font-weight="bold">Σ ${fmt(s.peak)} &gt; L ${fmt(s.limit)}</text>`;
    }).join("");
  }

  function skeleton(title) {
    return `<h3>${esc(title)}</h3><div class="sp-status" data-chart="status">waiting for the first answer…</div>` +
      `<div class="sp-warning" data-chart="warning" hidden></div>` +
      `<svg class="sp-plot" data-chart="svg" viewBox="0 0 ${W} ${H}" role="img" aria-label="${esc(title)}"></svg>` +
      `<div class="sp-legend" data-chart="legend"></div>`;
  }

  // Each line's sample, name and latest value.
  function legendHtml(ls, last, kept, stale) {
    return ls.map((l) => {
      const v = last && Number.isFinite(l.get(last)) ? fmt(l.get(last)) : "–";
      return `<span class="item" data-legend="${esc(l.key)}"><svg width="34" height="10" viewBox="0 0 34 10">` +
        `<line x1="1" x2="33" y1="5" y2="5" stroke="${l.color}" stroke-width="${l.width + 0.5}" ` +
        `${l.dash ? `stroke-dasharray="${l.dash}"` : ""}/></svg>${esc(l.label)}: <b>${v}</b></span>`;
    }).join("") + `<span class="item">requests/s, ${stale ? "at the last answer" : "now"}; ${kept ? "history of this tab kept across reloads" : "history not kept (browser storage refused)"}</span>`;
  }

  // The warning for the latest stretch with the sum above the limit in the window, if any:
  // "over" while it lasts, "recent" after it.
  function showWarning(w, spans, o, stale) {
    const s = spans[spans.length - 1];
    w.hidden = !s;
    w.dataset.state = s ? (s.now ? "over" : "recent") : "";
    if (!s) return;
    const when = s.now ? `${stale ? "at the last answer" : "now"}, since ${clock(s.from)}` :
      `from ${clock(s.from)} for ${((s.to - s.from) / 1000).toFixed(1)} s`;
    w.innerHTML = `<b>⚠ ${esc(o.sumLabel)} passes the limit: ${fmt(s.peak)} &gt; L = ${fmt(s.limit)} requests/s (${when}).</b> ` +
      esc(o.overReason);
  }

  function create(root, opts) {
    addStyle();
    const o = { windowMs: 120_000, pollMs: 1000, ...opts };
    const ls = lines(o);
    root.classList.add("sp-chart");
    root.innerHTML = skeleton(o.title);
    const part = (n) => root.querySelector(`[data-chart="${n}"]`);
    let points = load(o.storageKey, o.windowMs);
    let kept = true;
    const gapMs = Math.max(3 * o.pollMs, 2500);
    const clip = `sp-clip-${++charts}`;
    // Lines and bands stay inside the plot (a few pixels more for the offsets of equal values).
    const defs = `<defs><clipPath id="${clip}"><rect x="${M.left}" y="${M.top - 6}" ` +
      `width="${W - M.left - M.right}" height="${H - M.top - M.bottom + 12}"/></clipPath></defs>`;

    function draw() {
      const sc = scales(points, ls, o.windowMs);
      const spans = overSpans(points, gapMs).filter((s) => s.to >= sc.start);
      part("svg").innerHTML = defs + axes(sc) +
        `<g clip-path="url(#${clip})">${bands(spans, sc)}${paths(points, ls, sc, gapMs)}</g>`;
      root.dataset.points = String(points.length);
      root.dataset.oldest = points.length ? String(points[0].t) : "";
      root.dataset.top = String(sc.top);
      part("legend").innerHTML = legendHtml(ls, points[points.length - 1], kept, root.classList.contains("stale"));
      showWarning(part("warning"), spans, o, root.classList.contains("stale"));
    }

    function push(p) {
      if (!valid(p)) return;
      points.push(p);
      const from = p.t - o.windowMs;
      while (points.length && (points[0].t < from || points.length > MAX_POINTS)) points.shift();
      kept = save(o.storageKey, points);
      root.classList.remove("stale");
      const st = part("status");
      st.className = "sp-status good";
      st.dataset.state = "answering";
      st.textContent = `answering: last answer at ${clock(p.t)}`;
      draw();
    }

    function fail(message) {
      const st = part("status");
      if (st.dataset.state !== "not-answering") st.dataset.since = String(Date.now());
      st.className = "sp-status bad";
      st.dataset.state = "not-answering";
      const last = points.length ? `; last answer at ${clock(points[points.length - 1].t)}` : "";
      st.textContent = `NOT ANSWERING since ${clock(Number(st.dataset.since))} (${message})${last}. ` +
        "Values shown are the last ones received, not live.";
      root.classList.add("stale");
      draw();
    }

    draw();
    return { push, fail };
  }

  return { create, niceStep, offsets };
})();
