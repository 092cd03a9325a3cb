// The `shareplane demo` dashboard in a real headless browser (Debian's chromium driven by
// playwright-core): the page loads, shows three Regions, and after a "lose B" click the
// survivors' shares rise once B is silent and its health check reads unhealthy (two signals).
// Then `shareplane run`'s read-only dashboard (/dashboard) on the memory store.
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

const here = path.dirname(fileURLToPath(import.meta.url));
const bin = process.env.SHAREPLANE_BIN || path.join(here, "..", "..", "target", "debug", "shareplane");
const chromiumPath = process.env.CHROMIUM || "/usr/bin/chromium";

function fail(msg) {
  console.error(`dashboard test FAILED: ${msg}`);
  process.exitCode = 1;
  throw new Error(msg);
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

async function until(what, timeoutMs, fn) {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > end) fail(`timed out after ${timeoutMs} ms waiting for ${what}`);
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
  } finally {
    const code = await stopDemo(child);
    fs.rmSync(dir, { recursive: true, force: true });
    if (code !== 0) fail(`shareplane run did not exit cleanly on SIGTERM: ${code} ${err}`);
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

    // Let the shares settle near their targets (A 5,600, B 3,050, C 1,350).
    await until("A's share to settle near 5,600", 60_000, async () => Math.abs((await share(page, "A")) - 5600) < 50);
    const before = { A: await share(page, "A"), C: await share(page, "C") };
    console.log(`before losing B: A ${before.A}, B ${await share(page, "B")}, C ${before.C}`);

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
    await runDashboard(context);
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
