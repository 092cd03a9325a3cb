// The `shareplane demo` dashboard in a real headless browser (Debian's chromium driven by
// playwright-core): the page loads, shows three Regions, and after a "lose B" click the
// survivors' shares rise once B is silent and its health check reads unhealthy (two signals).
// The chart: numeric axes and a legend naming every Region, history kept across a reload, the
// warning while the sum passes the limit (the demo driven into a false verdict on a cut Region,
// and the page fed a sum of 12,000 by intercepting /demo/state), "not answering" once the demo
// stops. Then `shareplane run`'s read-only dashboard (/dashboard) on the memory store, with the
// same chart, and the same page of Region A under `shareplane local`, with a line for each
// peer's share as A sees it. Screenshots go to tests/.work/browser-screenshots/<time>/ (printed).
//
// Usage: node dashboard.test.mjs   (SHAREPLANE_BIN overrides target/debug/shareplane,
// CHROMIUM overrides /usr/bin/chromium). Every wait is bounded; the demo is stopped with SIGTERM
// and must exit cleanly.
import { chromium } from "playwright-core";
import { spawn } from "node:child_process";
import fs from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import * as chart from "./chart-checks.mjs";

const here = path.dirname(fileURLToPath(import.meta.url));
const bin = process.env.SHAREPLANE_BIN || path.join(here, "..", "..", "target", "debug", "shareplane");
const chromiumPath = process.env.CHROMIUM || "/usr/bin/chromium";
const shots = chart.screenshotDir(path.join(here, "..", ".."));

class Failure extends Error {}

function fail(msg) {
  console.error(`dashboard test FAILED: ${msg}`);
  process.exitCode = 1;
  throw new Failure(msg);
}

function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.once("error", reject);
    s.listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

// Polls `fn` until it returns something truthy. A page that has not rendered yet makes
// Playwright throw (an element not found): that is "not yet", not a failure (a loaded CI machine
// rendered the local dashboard's chart after the first poll, 2026-12-07); a fail() inside `fn`
// still ends the test at once, and a timeout says what was last thrown.
async function until(what, timeoutMs, fn) {
  const end = Date.now() + timeoutMs;
  let last = "";
  for (;;) {
    try {
      const v = await fn();
      if (v) return v;
    } catch (e) {
      if (e instanceof Failure) throw e;
      last = ` (last: ${String(e && e.message ? e.message : e).split("\n")[0]})`;
    }
    if (Date.now() > end) fail(`timed out after ${timeoutMs} ms waiting for ${what}${last}`);
    await new Promise((r) => setTimeout(r, 250));
  }
}

function startDemo(port) {
  if (!fs.existsSync(bin)) fail(`no binary at ${bin}: run cargo build -p shareplane first`);
  const child = spawn(bin, ["demo", "--listen", `127.0.0.1:${port}`], { stdio: ["ignore", "pipe", "pipe"] });
  let out = "";
  child.stdout.on("data", (d) => { out += d; });
  child.stderr.on("data", () => {});
  const url = until("the demo to print its dashboard URL", 60_000, () => {
    if (child.exitCode !== null) fail(`demo exited early with ${child.exitCode}: ${out}`);
    const m = out.match(/dashboard: (http:\/\/\S+)/);
    return m && m[1];
  });
  return { child, url };
}

function stopDemo(child) {
  return new Promise((resolve) => {
    if (child.exitCode !== null) return resolve(child.exitCode);
    const timer = setTimeout(() => { child.kill("SIGKILL"); resolve("killed after 15 s"); }, 15_000);
    child.once("exit", (code) => { clearTimeout(timer); resolve(code); });
    child.kill("SIGTERM");
  });
}

async function share(page, region) {
  const text = await page.textContent(`[data-field="share"][data-region="${region}"]`);
  const n = Number(String(text).replace(/,/g, ""));
  return Number.isFinite(n) ? n : NaN;
}

// `shareplane run` on the memory store (Regions A and B, only A running): its read-only page at
// /dashboard shows A leading, its limit with a share, and B as a peer.
async function runDashboard(context) {
  let stopped = false;
  const port = await freePort();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "shareplane-run-dashboard-"));
  const config = path.join(dir, "run.toml");
  fs.writeFileSync(config, [
    'region = "A"', "period_ms = 1000", 'store = "memory"', `listen = "127.0.0.1:${port}"`,
    'api_token = "0123456789abcdef"', "[[regions]]", 'name = "A"', "[[regions]]", 'name = "B"',
    "[[limits]]", 'id = "k-run"', "rate = 10000", "",
  ].join("\n"));
  const child = spawn(bin, ["run", "--config", config], { stdio: ["ignore", "ignore", "pipe"] });
  let err = "";
  child.stderr.on("data", (d) => { err += d; });
  try {
    const page = await context.newPage();
    const url = `http://127.0.0.1:${port}/dashboard`;
    await until("shareplane run to serve its dashboard", 60_000, async () => {
      if (child.exitCode !== null) fail(`shareplane run exited early with ${child.exitCode}: ${err}`);
      try { return (await page.goto(url, { timeout: 5_000 })).ok(); } catch { return false; }
    });
    await until("A to show as leader", 30_000, async () => (await page.textContent('[data-field="role"]')) === "leader");
    const region = await page.textContent('[data-field="region"]');
    if (region !== "A") fail(`the run dashboard shows Region ${region}`);
    const row = await until("the limit k-run with a share", 30_000, async () => {
      const cells = await page.$$eval('[data-field="limits"] tr[data-key="k-run"] td', (tds) => tds.map((t) => t.textContent));
      return cells.length > 3 && Number(String(cells[3]).replace(/,/g, "")) > 0 ? cells : null;
    });
    const peers = await page.$$eval('[data-field="peers"] tr', (trs) => trs.map((t) => t.dataset.key));
    if (peers.join(",") !== "B") fail(`peers shown: ${peers}`);
    console.log(`run dashboard: Region ${region} leader, k-run ${row.slice(0, 4).join(" | ")}, peers ${peers}`);
    const buttons = await page.$$("button, form, input");
    if (buttons.length !== 0) fail(`the run dashboard has ${buttons.length} controls; it is read-only`);
    await until("the run chart to hold 5 points", 20_000, async () =>
      Number(await page.$eval(".sp-chart", (c) => c.dataset.points)) >= 5);
    await chart.checkAxesAndLegend(page, fail, 10_000, ["Region A's share", "Region B's share, as A sees it", "Seen sum of shares", "Limit L"]);
    await chart.checkLimitOnTop(page, fail);
    await chart.checkHistoryAcrossReload(page, fail, 5);
    await chart.shoot(page, shots, "run-dashboard");
    const code = await stopDemo(child);
    stopped = true;
    if (code !== 0) fail(`shareplane run did not exit cleanly on SIGTERM: ${code} ${err}`);
    await chart.checkNotAnswering(page, fail, until, '[data-field="error"]');
    const banner = await page.textContent('[data-field="error"]');
    if (!/NOT ANSWERING/.test(banner)) fail(`the run dashboard does not say it is not answering: ${banner}`);
    await chart.shoot(page, shots, "run-dashboard-not-answering");
  } finally {
    const code = stopped ? 0 : await stopDemo(child);
    fs.rmSync(dir, { recursive: true, force: true });
    if (code !== 0) fail(`shareplane run did not exit cleanly on SIGTERM: ${code} ${err}`);
  }
}

// `shareplane local` (three whole daemons): Region A's /dashboard draws its own share and each
// peer's as A sees them, lines apart, whose latest values add up to the seen sum.
async function localDashboard(context) {
  if (!fs.existsSync(bin)) fail(`no binary at ${bin}`);
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "shareplane-local-dashboard-"));
  const child = spawn(bin, ["local", "--dir", dir, "--port", "0"], { stdio: ["ignore", "pipe", "pipe"] });
  let out = "", err = "";
  child.stdout.on("data", (d) => { out += d; });
  child.stderr.on("data", (d) => { err += d; });
  try {
    const url = await until("shareplane local to print A's dashboard", 60_000, () => {
      if (child.exitCode !== null) fail(`shareplane local exited early with ${child.exitCode}: ${err}`);
      const m = out.match(/A: dashboard (http:\/\/\S+)/);
      return m && m[1].replace(/,$/, "");
    });
    const page = await context.newPage();
    await page.goto(url, { timeout: 30_000 });
    await until("A's chart to hold 5 points with both peers' shares", 60_000, async () => {
      const n = Number(await page.$eval(".sp-chart", (c) => c.dataset.points));
      const lines = await page.$$eval(".sp-chart polyline.line", (ls) => ls.map((l) => l.dataset.line));
      return n >= 5 && lines.includes("peer:B") && lines.includes("peer:C");
    });
    await chart.checkAxesAndLegend(page, fail, 10_000,
      ["Region A's share", "Region B's share, as A sees it", "Region C's share, as A sees it", "Seen sum of shares", "Limit L"]);
    await chart.checkLimitOnTop(page, fail);
    const legend = await page.$$eval(".sp-chart [data-legend]", (es) =>
      Object.fromEntries(es.map((e) => [e.dataset.legend, Number(e.querySelector("b").textContent.replace(/,/g, ""))])));
    const parts = ["own", "peer:B", "peer:C"].map((k) => legend[k]);
    if (parts.some((x) => !(x > 0))) fail(`a share line without a value: ${JSON.stringify(legend)}`);
    const total = parts.reduce((a, b) => a + b, 0);
    if (Math.abs(total - legend.sum) > 3) fail(`own and peers' shares ${parts} do not add up to the seen sum ${legend.sum}`);
    const ys = await chart.lastYs(page, ["own", "peer:B", "peer:C"]);
    if (Object.keys(ys).length !== 3) fail(`not every share drawn: ${JSON.stringify(ys)}`);
    console.log(`local dashboard (A): shares own ${parts[0]}, B ${parts[1]}, C ${parts[2]}; seen sum ${legend.sum}; last y ${JSON.stringify(ys)}`);
    await chart.shoot(page, shots, "local-dashboard-peers");
  } finally {
    const code = await stopDemo(child);
    fs.rmSync(dir, { recursive: true, force: true });
    if (code !== 0) fail(`shareplane local did not exit cleanly on SIGTERM: ${code} ${err}`);
  }
}

// The demo driven into residual risk 1: C cut off (it keeps enforcing its share), then marked
// unhealthy while A, its only live peer, has counted it silent: A reclaims C's room before C
// reads its verdict and fences. The Regions rebalance a third of a period apart (A, B, C), so the
// mark is set just after one of C's rebalances: A's comes before C's next. Returns whether the
// page caught the sum above L.
async function drivenFalseVerdict(page, url) {
  // From a sum at L (A and C have taken B's room), A's reclaim of C lifts it above L.
  await until("the sum back at L after B's reclaim", 60_000, async () =>
    Number(String(await page.textContent("#sum-value")).replace(/,/g, "")) >= 9_900);
  await page.click("#cut-C");
  await new Promise((r) => setTimeout(r, 4_500)); // A counts C silent for 3+ of its rebalances
  const version = async () => (await (await fetch(new URL("/regions/C/v1/state?limits_count=1", url))).json()).record_version;
  const v0 = await version();
  const end = Date.now() + 3_000;
  while (Date.now() < end && (await version()) === v0) await new Promise((r) => setTimeout(r, 5));
  await page.click("#unhealthy-C");
  const until10 = Date.now() + 10_000;
  while (Date.now() < until10) {
    const state = await page.$eval(".sp-chart [data-chart=warning]", (e) => e.dataset.state);
    if (state === "over" || state === "recent") return true;
    await new Promise((r) => setTimeout(r, 100));
  }
  return false;
}

// The rendering path fed a snapshot of the running demo with every Region enforcing 4,000
// (equal values) and the sum at 12,000: the warning shows, the axis reaches 12,000, and the
// three equal lines are drawn apart.
async function injectedOverLimit(page, url) {
  const snap = await (await fetch(new URL("/demo/state", url))).json();
  for (const r of snap.regions) { r.enforced = 4_000; r.published.rate = 4_000; }
  snap.sum_enforced = 12_000;
  await page.route("**/demo/state", (route) => route.fulfill({ json: snap }));
  try {
    await until("the warning for the injected sum", 10_000, async () =>
      (await page.$eval(".sp-chart [data-chart=warning]", (e) => e.dataset.state)) === "over");
    await new Promise((r) => setTimeout(r, 1_500));
    await chart.checkWarning(page, fail, 12_000, ["over"]);
    await chart.checkAxesAndLegend(page, fail, 12_000, ["Region A", "Region B", "Region C"]);
    const ys = await chart.lastYs(page, ["A", "B", "C"]);
    if (new Set(Object.values(ys)).size !== 3) fail(`equal values hide each other: last y of A, B, C ${JSON.stringify(ys)}`);
    console.log(`  equal values drawn apart: last y ${JSON.stringify(ys)}`);
    await chart.shoot(page, shots, "demo-warning-injected");
  } finally {
    await page.unroute("**/demo/state");
  }
}

async function main() {
  const port = await freePort();
  const { child, url: urlPromise } = startDemo(port);
  const profile = fs.mkdtempSync(path.join(os.tmpdir(), "shareplane-chromium-"));
  let context;
  try {
    const url = await urlPromise;
    context = await chromium.launchPersistentContext(profile, {
      executablePath: chromiumPath,
      headless: true,
      args: ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
        "--disable-component-update", "--disable-sync"],
    });
    const page = await context.newPage();
    await page.goto(url, { timeout: 30_000 });
    const regions = await until("three Region cards", 20_000, async () => {
      const names = await page.$$eval("section.region", (els) => els.map((e) => e.dataset.region));
      return names.length === 3 ? names : null;
    });
    if (regions.join(",") !== "A,B,C") fail(`Regions shown: ${regions}`);
    console.log("dashboard shows Regions", regions.join(", "));
    await page.setViewportSize({ width: 1280, height: 1000 });

    // Let the shares settle near their targets (A 5,600, B 3,050, C 1,350).
    await until("A's share to settle near 5,600", 60_000, async () => Math.abs((await share(page, "A")) - 5600) < 50);
    const before = { A: await share(page, "A"), C: await share(page, "C") };
    console.log(`before losing B: A ${before.A}, B ${await share(page, "B")}, C ${before.C}`);
    console.log("the chart: axes, legend, limit on top, history across a reload");
    await chart.checkAxesAndLegend(page, fail, 10_000, ["Region A", "Region B", "Region C", "Sum of shares enforced", "Limit L"]);
    await chart.checkLimitOnTop(page, fail);
    await until("the chart to hold 20 points (10 s)", 30_000, async () =>
      Number(await page.$eval(".sp-chart", (c) => c.dataset.points)) >= 20);
    await chart.checkHistoryAcrossReload(page, fail, 20);
    await chart.shoot(page, shots, "demo-settled");

    await page.click("#lose-B");
    const t0 = Date.now();
    await until("the survivors' shares to rise after B is lost", 90_000, async () => {
      const a = await share(page, "A"), c = await share(page, "C");
      const sum = Number(String(await page.textContent("#sum-value")).replace(/,/g, ""));
      if (sum > 10_000.001) fail(`sum of published shares ${sum} above the limit`);
      return a > before.A + 100 && c > before.C + 100;
    });
    const peersA = await page.textContent('[data-field="peers"][data-region="A"]');
    console.log(`after losing B (${Date.now() - t0} ms): A ${await share(page, "A")}, C ${await share(page, "C")}; A sees ${peersA}`);
    if (!/B: reclaimed/.test(peersA)) fail(`A does not show B as reclaimed: ${peersA}`);
    await chart.shoot(page, shots, "demo-after-lose-B");

    console.log("driving the demo into a false verdict: cut C, then mark it unhealthy");
    if (!(await drivenFalseVerdict(page, url))) fail("the sum never passed L after C, cut off, was marked unhealthy (or the page did not show it)");
    await chart.checkWarning(page, fail, 10_000, ["over", "recent"]);
    await chart.shoot(page, shots, "demo-warning-driven");
    console.log("the chart fed a sum of 12,000 (intercepted /demo/state)");
    await injectedOverLimit(page, url);

    const code = await stopDemo(child);
    if (code !== 0) fail(`demo did not exit cleanly on SIGTERM: ${code}`);
    const tags = await chart.checkNotAnswering(page, fail, until, '[data-field="status"]');
    if (tags.some((t) => t !== "not answering")) fail(`Region tags after the demo stopped: ${tags}`);
    await chart.shoot(page, shots, "demo-not-answering");
    await runDashboard(context);
    await localDashboard(context);
    console.log("dashboard test passed");
  } finally {
    if (context) await context.close();
    const code = await stopDemo(child);
    fs.rmSync(profile, { recursive: true, force: true });
    if (code !== 0) fail(`demo did not exit cleanly on SIGTERM: ${code}`);
  }
}

main().catch((e) => {
  if (!process.exitCode) console.error(e);
  process.exitCode = 1;
});
