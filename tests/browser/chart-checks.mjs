// Checks of the shares chart (crates/shareplane/src/chart.js) that both dashboards draw: axes with
// numbers, a legend, lines apart, the warning while the sum passes the limit, history across a
// reload, and "not answering". Each check reads the rendered page and fails with what it saw.
import fs from "node:fs";
import path from "node:path";

const num = (s) => Number(String(s).replace(/[,\s]/g, ""));

export function screenshotDir(root) {
  const dir = path.join(root, "tests", ".work", "browser-screenshots", new Date().toISOString().replace(/[:.]/g, "-"));
  fs.mkdirSync(dir, { recursive: true });
  console.log(`screenshots: ${dir}`);
  return dir;
}

export async function shoot(page, dir, name) {
  const file = path.join(dir, `${name}.png`);
  await page.screenshot({ path: file, fullPage: true });
  console.log(`  screenshot ${file}`);
  return file;
}

// Numeric tick labels on both axes, a value axis up to at least `atLeast`, the unit named, and
// a legend entry for every name in `legendNames`.
export async function checkAxesAndLegend(page, fail, atLeast, legendNames) {
  const ys = await page.$$eval(".sp-chart text.tick-y", (ts) => ts.map((t) => t.textContent));
  const yv = ys.map(num);
  if (yv.length < 3 || yv.some((v) => !Number.isFinite(v))) fail(`value axis tick labels: ${JSON.stringify(ys)}`);
  if (Math.max(...yv) < atLeast) fail(`value axis stops at ${Math.max(...yv)}, below ${atLeast}: ${ys}`);
  const xs = await page.$$eval(".sp-chart text.tick-x", (ts) => ts.map((t) => t.textContent));
  if (xs.length < 3 || xs.some((x) => !/^\d\d:\d\d:\d\d$/.test(x))) fail(`time axis tick labels: ${JSON.stringify(xs)}`);
  const svgText = await page.textContent(".sp-chart svg");
  if (!svgText.includes("requests/s")) fail("the value axis does not name its unit (requests/s)");
  const legend = await page.textContent(".sp-chart [data-chart=legend]");
  for (const n of legendNames) if (!legend.includes(n)) fail(`the legend does not name ${n}: ${legend}`);
  console.log(`  axes: values ${ys.join(" ")}; times ${xs[0]} … ${xs[xs.length - 1]}; legend: ${legend.trim()}`);
}

async function chartData(page) {
  return page.$eval(".sp-chart", (c) => ({ points: Number(c.dataset.points), oldest: c.dataset.oldest, top: Number(c.dataset.top) }));
}

// The points of the window survive a reload: right after it (before more than a poll or two),
// the chart has at least as many points as before, starting at the same oldest one.
export async function checkHistoryAcrossReload(page, fail, minPoints) {
  const before = await chartData(page);
  if (!(before.points >= minPoints)) fail(`only ${before.points} points before the reload`);
  await page.reload({ waitUntil: "domcontentloaded" });
  await page.waitForSelector(".sp-chart[data-points]");
  const after = await chartData(page);
  if (after.oldest !== before.oldest || after.points < before.points) {
    fail(`history lost on reload: ${JSON.stringify(before)} before, ${JSON.stringify(after)} after`);
  }
  console.log(`  reload kept the history: ${before.points} points before, ${after.points} right after, same oldest`);
}

// The warning is shown with its reason and a shaded band, the value axis reaches the peak, and
// lines with equal values are drawn apart (their last points differ).
export async function checkWarning(page, fail, peak, states) {
  const w = await page.$eval(".sp-chart [data-chart=warning]", (e) => ({ hidden: e.hidden, state: e.dataset.state, text: e.textContent }));
  if (w.hidden || !states.includes(w.state)) fail(`no warning shown (${JSON.stringify(w)})`);
  if (!/false health verdict/.test(w.text) || !/residual risk 1/.test(w.text)) fail(`the warning gives no reason: ${w.text}`);
  const bands = await page.$$eval(".sp-chart rect.over-band", (rs) => rs.length);
  if (bands < 1) fail("no shaded band where the sum passes the limit");
  const { top } = await chartData(page);
  if (top < peak) fail(`the value axis stops at ${top}, below the sum ${peak}`);
  console.log(`  warning (${w.state}): ${w.text.slice(0, 110)}…; ${bands} band(s); value axis to ${top}`);
}

export async function lastYs(page, keys) {
  return page.$$eval(".sp-chart polyline.line", (ls, ks) => {
    const out = {};
    for (const l of ls) {
      if (!ks.includes(l.dataset.line)) continue;
      const pts = l.getAttribute("points").trim().split(" ");
      out[l.dataset.line] = Number(pts[pts.length - 1].split(",")[1]);
    }
    return out;
  }, keys);
}

// The drawing order: the limit is the last line, above the sum.
export async function checkLimitOnTop(page, fail) {
  const order = await page.$$eval(".sp-chart polyline.line", (ls) => ls.map((l) => l.dataset.line));
  if (order[order.length - 1] !== "limit" || order.lastIndexOf("sum") > order.indexOf("limit")) {
    fail(`the limit is not drawn above the sum: ${order}`);
  }
}

export async function checkNotAnswering(page, fail, until, extraSelector) {
  await until("the chart to say not answering", 20_000, async () =>
    (await page.$eval(".sp-chart [data-chart=status]", (e) => e.dataset.state)) === "not-answering");
  const status = await page.textContent(".sp-chart [data-chart=status]");
  if (!/NOT ANSWERING/.test(status)) fail(`status: ${status}`);
  const extra = extraSelector ? await page.$$eval(extraSelector, (es) => es.map((e) => e.textContent)) : [];
  console.log(`  after the server stopped: "${status.slice(0, 90)}…" ${extra.join(" | ").slice(0, 160)}`);
  return extra;
}
