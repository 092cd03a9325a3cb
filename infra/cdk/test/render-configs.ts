/**
 * Prints every Region's daemon config as the CDK app renders it, for settings that the example
 * synth does not cover (infra/test.sh: `limitsSource: "table"`), as JSON `{ region: text }`,
 * with the health check id of Region r written `hc-<r>` (what tests/tf-render gives Terraform),
 * so that tests/test_parity.py can compare it with Terraform's text byte for byte.
 *
 * Usage: node dist/test/render-configs.js SETTINGS.json
 */
import * as fs from 'node:fs';
import { configInput, renderConfigToml } from '../lib/config-toml';
import { DAEMON_LISTEN } from '../lib/region-stack';
import { parseSettings } from '../lib/settings';

const file = process.argv[2];
if (file === undefined) {
  process.stderr.write('usage: render-configs.js SETTINGS.json\n');
  process.exit(2);
}
const s = parseSettings(JSON.parse(fs.readFileSync(file, 'utf8')));
const ids = s.regions.map((r) => `hc-${r}`);
const out: Record<string, string> = {};
for (const r of s.regions) out[r] = renderConfigToml(configInput(s, r, ids, DAEMON_LISTEN));
process.stdout.write(`${JSON.stringify(out, null, 2)}\n`);
