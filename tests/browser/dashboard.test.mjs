// The `shareplane demo` dashboard in a real headless browser (Debian's chromium driven by
// playwright-core): the page loads, shows three Regions, and after a "lose B" click the
// survivors' shares rise once B is silent and its health check reads unhealthy (two signals).
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
