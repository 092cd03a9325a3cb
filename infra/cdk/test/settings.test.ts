import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import { parseSettings, SettingsError } from '../lib/settings';
import { configInput, phaseMs, renderConfigToml, tomlValue } from '../lib/config-toml';
import { rawSettings } from './fixture';

function problems(change: (raw: Record<string, any>) => void): string[] {
  const raw = rawSettings();
  change(raw);
  try {
    parseSettings(raw);
  } catch (e) {
    assert.ok(e instanceof SettingsError, `unexpected ${e}`);
    return [...e.problems];
  }
  return [];
}

test('the example settings in cdk.json parse, with defaults filled in', () => {
  const s = parseSettings(rawSettings());
  assert.deepEqual(s.regions, ['us-east-1', 'eu-west-1', 'ap-southeast-2']);
  assert.equal(s.metricNamespace, 'Shareplane');
  assert.equal(s.desiredCount, 2);
  assert.deepEqual(s.billing, { mode: 'on-demand' });
  assert.deepEqual(s.limits[0].extra, { floor: 500, step_cap: 1000, burst_s: 2, kind: 'capacity' });
});

test('a JSON string (as given with --context) parses like the object', () => {
  assert.deepEqual(parseSettings(JSON.stringify(rawSettings())), parseSettings(rawSettings()));
});

test('every problem is reported at once, naming its field', () => {
  const found = problems((r) => {
    r.account = '12';
    r.regions = ['us-east-1', 'us-east-1', 'mars-1'];
    r.cpu = 512;
    r.memoryMiB = 512;
    r.limits = [{ id: 'a', rate: -1 }, { id: 'a', rate: 1, nested: { no: 1 } }];
    r.daemon = { api_token: 'x', table: 't', policy: 'freeze' };
    r.colour = 'blue';
    r.billing = { mode: 'provisioned', readMin: 10, readMax: 5 };
  });
  const expected = [
    /^account:/, /^regions\[1\]: us-east-1 is listed twice/, /^regions\[2\]:/, /^cpu\/memoryMiB:/,
    /^limits\[0\]\.rate:/, /^limits\[1\]\.id: a is used twice/, /^limits\[1\]\.nested:/,
    /^daemon\.api_token: set by the infrastructure/, /^daemon\.table:/, /^shareplane\.colour: unknown/,
    /^billing: readMin is above readMax/,
  ];
  for (const re of expected) assert.ok(found.some((p) => re.test(p)), `no problem matching ${re} in:\n${found.join('\n')}`);
  assert.equal(found.length, expected.length, found.join('\n'));
});

test('one Region is not a multi-Region deployment; more than 8 do not fit the daemon', () => {
  assert.match(problems((r) => (r.regions = ['us-east-1'])).join(), /regions: expected a list of 2 to 8/);
  const nine = ['us-east-1', 'us-east-2', 'us-west-1', 'us-west-2', 'eu-west-1', 'eu-west-2', 'eu-west-3', 'eu-north-1', 'ap-south-1'];
  assert.match(problems((r) => (r.regions = nine)).join(), /regions: expected a list of 2 to 8/);
});

test('TOML values are quoted and escaped', () => {
  assert.equal(tomlValue('a"b\\c\n\u0001'), '"a\\"b\\\\c\\u000a\\u0001"');
  assert.equal(tomlValue(10000), '10000');
  assert.equal(tomlValue(0.25), '0.25');
  assert.equal(tomlValue(true), 'true');
  assert.throws(() => tomlValue(Number.NaN));
  assert.throws(() => tomlValue('\ud800'));
});

test('Regions rebalance at staggered phases', () => {
  assert.deepEqual([0, 1, 2].map((i) => phaseMs(i, 3, 5000)), [0, 1666, 3333]);
});

test('the rendered config names every Region with its health check, then the limits', () => {
  const s = parseSettings(rawSettings());
  const text = renderConfigToml({
    region: 'eu-west-1', tableName: 't', metricNamespace: 'Shareplane', listen: '0.0.0.0:8080',
    periodMs: 5000, phaseMs: 1666,
    regions: s.regions.map((name, i) => ({ name, healthCheckId: `hc-${i}` })),
    limitsSource: 'file', limits: s.limits, daemon: { policy: 'two-signals', fence: 'never' },
  });
  assert.equal(text, [
    '# Written by the shareplane infrastructure (infra/). Edit the deployment settings, not this text.',
    'region = "eu-west-1"', 'table = "t"', 'metrics_namespace = "Shareplane"', 'listen = "0.0.0.0:8080"',
    'period_ms = 5000', 'phase_ms = 1666', 'fence = "never"', 'policy = "two-signals"', '',
    '[[regions]]', 'name = "us-east-1"', 'health_check_id = "hc-0"', '',
    '[[regions]]', 'name = "eu-west-1"', 'health_check_id = "hc-1"', '',
    '[[regions]]', 'name = "ap-southeast-2"', 'health_check_id = "hc-2"', '',
    '[[limits]]', 'id = "k-big"', 'rate = 10000', 'burst_s = 2', 'floor = 500', 'kind = "capacity"', 'step_cap = 1000',
    '',
  ].join('\n'));
});

test('the deployment options: existing VPCs, config source, valkey, CPU architecture, each checked', () => {
  const found = problems((r) => {
    r.existingVpcs = {
      'eu-west-1': { vpcId: 'vpc-1', publicSubnetIds: ['subnet-0123456789abcdef0'], privateSubnetIds: ['subnet-0123456789abcdef1', 'subnet-0123456789abcdef1'] },
      'mars-1': { vpcId: 'vpc-0123456789abcdef0', publicSubnetIds: [], privateSubnetIds: [], nat: true },
    };
    r.configSource = 'dynamodb';
    r.valkey = { enabled: 'yes', dataStorageMaxGb: 0 };
    r.cpuArchitecture = 'riscv';
  });
  const expected = [
    /^existingVpcs\.eu-west-1\.vpcId:/, /^existingVpcs\.eu-west-1\.publicSubnetIds: expected a list of at least 2/,
    /^existingVpcs\.eu-west-1\.privateSubnetIds: lists an id twice/, /^existingVpcs\.mars-1: mars-1 is not one of regions/,
    /^existingVpcs\.mars-1\.nat: unknown setting/, /^existingVpcs\.mars-1\.publicSubnetIds:/, /^existingVpcs\.mars-1\.privateSubnetIds:/,
    /^configSource: expected one of "parameter", "s3"/, /^valkey\.enabled: expected true or false/,
    /^valkey\.dataStorageMaxGb: expected an integer in \[1, 5000\]/, /^cpuArchitecture: expected one of "x86_64", "arm64"/,
  ];
  for (const re of expected) assert.ok(found.some((p) => re.test(p)), `no problem matching ${re} in:\n${found.join('\n')}`);
  assert.equal(found.length, expected.length, found.join('\n'));
});

test('defaults: a new VPC everywhere, the config in a parameter, no Valkey, x86_64', () => {
  const raw = rawSettings();
  delete raw.valkey;
  const s = parseSettings(raw);
  assert.deepEqual(s.existingVpcs, {});
  assert.equal(s.configSource, 'parameter');
  assert.deepEqual(s.valkey, { enabled: false, dataStorageMaxGb: 5, ecpuPerSecondMax: 100000 });
  assert.equal(s.cpuArchitecture, 'x86_64');
  assert.equal(parseSettings(rawSettings()).valkey.enabled, true, 'the example turns Valkey on');
});

test('more than 64 limits need the config in S3, which takes up to 200', () => {
  const limits = (n: number) => Array.from({ length: n }, (_, i) => ({ id: `l${i}`, rate: 100 }));
  assert.match(problems((r) => (r.limits = limits(65))).join(), /limits: expected a list of 1 to 64 limits.*"configSource": "s3", up to 200/);
  assert.deepEqual(problems((r) => { r.limits = limits(200); r.configSource = 's3'; }), []);
  assert.match(problems((r) => { r.limits = limits(201); r.configSource = 's3'; }).join(), /1 to 200 limits/);
});

test('a period whose gateway lease could outlast the health check\'s detection is refused', async () => {
  const { HEALTH_CHECK_FAILURE_THRESHOLD, HEALTH_CHECK_INTERVAL_SECONDS } = await import('../lib/global-stack');
  const { MAX_PERIOD_SECONDS, MIN_DETECTION_SECONDS } = await import('../lib/settings');
  assert.equal(MIN_DETECTION_SECONDS, (HEALTH_CHECK_FAILURE_THRESHOLD - 1) * HEALTH_CHECK_INTERVAL_SECONDS);
  assert.deepEqual(problems((r) => (r.periodSeconds = MAX_PERIOD_SECONDS)), []);
  const found = problems((r) => (r.periodSeconds = MAX_PERIOD_SECONDS + 1));
  assert.equal(found.length, 1, found.join('\n'));
  assert.match(found[0], /^periodSeconds: 11 s .* residual risk 5.* at most 10$/);
});

test('limitsSource: "file" by default; "table" takes no limits, and refuses any, naming the field', () => {
  assert.equal(parseSettings(rawSettings()).limitsSource, 'file');
  const table = rawSettings();
  table.limitsSource = 'table';
  delete table.limits;
  assert.deepEqual(parseSettings(table).limits, []);
  assert.deepEqual(parseSettings({ ...table, limits: [] }).limits, []);

  // As the daemon refuses limits_source = "table" with [[limits]] (crates/shareplane/src/config.rs).
  const both = problems((r) => (r.limitsSource = 'table'));
  assert.equal(both.length, 1, both.join('\n'));
  assert.match(both[0], /^limits: must be empty \(or absent\) with "limitsSource": "table"/);
  assert.match(both[0], /shareplane limits apply/);
  assert.match(both[0], /remove these 1 limits .* or set "limitsSource": "file"$/);
  assert.match(problems((r) => { r.limitsSource = 'table'; r.limits = 'k-big'; }).join(), /^limits: must be empty/);

  assert.deepEqual(problems((r) => (r.limitsSource = 'dynamodb')), ['limitsSource: expected one of "file", "table", got "dynamodb"']);
  assert.deepEqual(problems((r) => (r.daemon = { limits_source: 'table' })),
    ['daemon.limits_source: set by the infrastructure from "limitsSource"; use that']);
  // "file" still needs at least one limit.
  assert.match(problems((r) => delete r.limits).join(), /^limits: expected a list of 1 to 64 limits/);
});

test('a config rendered with limitsSource "table" says limits_source = "table" and has no [[limits]]', () => {
  const raw = rawSettings();
  raw.limitsSource = 'table';
  delete raw.limits;
  const s = parseSettings(raw);
  const text = renderConfigToml(configInput(s, 'eu-west-1', ['hc-0', 'hc-1', 'hc-2'], '0.0.0.0:8080'));
  assert.equal(text, [
    '# Written by the shareplane infrastructure (infra/). Edit the deployment settings, not this text.',
    'region = "eu-west-1"', 'table = "shareplane-records"', 'metrics_namespace = "Shareplane"', 'listen = "0.0.0.0:8080"',
    'period_ms = 5000', 'phase_ms = 1666', 'limits_source = "table"', 'fence = "own-unhealthy"', 'policy = "two-signals"', '',
    '[[regions]]', 'name = "us-east-1"', 'health_check_id = "hc-0"', '',
    '[[regions]]', 'name = "eu-west-1"', 'health_check_id = "hc-1"', '',
    '[[regions]]', 'name = "ap-southeast-2"', 'health_check_id = "hc-2"',
    '',
  ].join('\n'));
  // The renderer refuses what the daemon would, even if handed it directly.
  const file = parseSettings(rawSettings());
  assert.throws(() => renderConfigToml({ ...configInput(file, 'eu-west-1', [], '0.0.0.0:8080'), limitsSource: 'table' }),
    /limits_source = "table" with \[\[limits\]\]/);
  assert.ok(!renderConfigToml(configInput(file, 'eu-west-1', [], '0.0.0.0:8080')).includes('limits_source'));
});
