/**
 * The deployment settings an operator chooses (cdk.json context key `shareplane`), parsed and
 * checked before any construct is built. {@link parseSettings} reports every problem at once,
 * naming the field, so that a typo does not cost one `cdk synth` per mistake.
 */

/** At most this many Regions: the daemon's RegionId is an index below 8. */
export const MAX_REGIONS = 8;

/** One limit as the daemon's config describes it. `id` and `rate` are also read by the alarms. */
export interface LimitSettings {
  /** The limit's name, e.g. "k-big": a metric dimension and part of alarm names. */
  readonly id: string;
  /** The global limit in requests per second; the "sum of shares" alarm fires above it. */
  readonly rate: number;
  /** Every other key (floor, step cap, kind, ...) is passed to the daemon's `[[limits]]` table as is. */
  readonly extra: Readonly<Record<string, TomlValue>>;
}

export type TomlValue = string | number | boolean;

export type BillingSettings =
  | { readonly mode: 'on-demand' }
  | {
      readonly mode: 'provisioned';
      readonly readMin: number;
      readonly readMax: number;
      readonly writeMin: number;
      readonly writeMax: number;
      /** Target utilisation of the autoscaling policy, in percent. */
      readonly targetUtilizationPercent: number;
    };

/** An existing VPC of one Region, used instead of creating one. */
export interface ExistingVpc {
  readonly vpcId: string;
  /** At least two, in different Availability Zones: the public load balancer. */
  readonly publicSubnetIds: readonly string[];
  /**
   * At least two, in different Availability Zones, with a route to the AWS APIs (NAT or VPC
   * endpoints): the tasks, the internal load balancer and Valkey.
   */
  readonly privateSubnetIds: readonly string[];
  /** Security groups of existing gateways, admitted to the daemon's API and Valkey. */
  readonly gatewaySecurityGroupIds: readonly string[];
}

/** Where the daemon's config travels. */
export type ConfigSource = 'parameter' | 's3';

/**
 * Where the daemons take their limits from (`limits_source` in their config): `file`, the
 * `[[limits]]` of each Region's config (rendered from `limits`); `table`, the one shared limits
 * document in the global table that `shareplane limits apply` writes (then `limits` must be
 * empty: the daemon refuses a config with both).
 */
export type LimitsSource = 'file' | 'table';

export interface ValkeySettings {
  readonly enabled: boolean;
  /** The serverless cache's data storage limit, GB. */
  readonly dataStorageMaxGb: number;
  /** The serverless cache's ECPU-per-second limit. */
  readonly ecpuPerSecondMax: number;
}

export interface Settings {
  /** The AWS account every stack deploys to. */
  readonly account: string;
  /** Region names; the first is the home Region, which holds the global stack. */
  readonly regions: readonly string[];
  readonly tableName: string;
  readonly billing: BillingSettings;
  /** CloudWatch namespace the daemon publishes to; the task role may put metrics only here. */
  readonly metricNamespace: string;
  /** The public hosted zone that holds every Region's endpoint name. */
  readonly hostedZoneId: string;
  readonly hostedZoneName: string;
  /** Endpoint of Region r: `<r>.<endpointSubdomain>.<hostedZoneName>`. */
  readonly endpointSubdomain: string;
  /** A container image URI (same tag in every Region); empty: build infra/Dockerfile as a CDK asset. */
  readonly imageUri: string;
  /**
   * Whether the daemons run as this stack's ECS Fargate service (the default). `false` is for a
   * team that runs the daemon elsewhere, e.g. on EKS with infra/helm/shareplane: the stacks then
   * deploy the table, health checks, alarms, endpoints (load balancers, certificate, names),
   * tokens, config and Valkey, but no ECS cluster, task definition, service, execution role or
   * task log group; instead of the task role, a managed policy with its statements (output
   * DaemonPolicyArn) for the pods' role, and the two target groups' ARNs for the pods.
   */
  readonly ecsService: boolean;
  /** The tasks' CPU architecture (and the platform the image asset is built for). */
  readonly cpuArchitecture: 'x86_64' | 'arm64';
  readonly desiredCount: number;
  readonly cpu: number;
  readonly memoryMiB: number;
  readonly natGateways: number;
  /** Region name → an existing VPC to deploy into; Regions not listed get a new VPC. */
  readonly existingVpcs: Readonly<Record<string, ExistingVpc>>;
  /**
   * `parameter`: an SSM parameter (at most 8 KB, about 74 limits over three Regions) passed as
   * SHAREPLANE_CONFIG_TOML. `s3`: an object in a bucket of the Region, fetched by an init
   * container into a shared volume, read with `--config` (no size limit of its own).
   */
  readonly configSource: ConfigSource;
  /** The image of that init container (the AWS CLI). */
  readonly configFetchImage: string;
  /** An optional ElastiCache Serverless Valkey per Region for the gateways' buckets. */
  readonly valkey: ValkeySettings;
  readonly logRetentionDays: number;
  /**
   * The daemon's rebalance period (`period_ms` in its config); Region i of n rebalances at phase
   * i/n of it. A peer record older than 3 periods raises the stale alarm.
   */
  readonly periodSeconds: number;
  /** Optional address subscribed to every Region's alarm topic. */
  readonly alarmEmail: string;
  /** Where the daemons take their limits from; with `table`, {@link limits} is empty. */
  readonly limitsSource: LimitsSource;
  /**
   * With `limitsSource` `file`: every Region's `[[limits]]`, and a per-limit alarm and dashboard
   * row each. With `table`: empty (the limits live in the table).
   */
  readonly limits: readonly LimitSettings[];
  /** Extra top-level keys of the daemon's config (policy, fence), passed as is. */
  readonly daemon: Readonly<Record<string, TomlValue>>;
}

/** Every problem found in the settings, one line each, naming the field. */
export class SettingsError extends Error {
  constructor(readonly problems: readonly string[]) {
    super(`invalid shareplane settings:\n  - ${problems.join('\n  - ')}`);
    this.name = 'SettingsError';
  }
}

const REGION_RE = /^[a-z]{2}(-gov)?-[a-z]+-\d$/;
const ACCOUNT_RE = /^\d{12}$/;
const TABLE_RE = /^[A-Za-z0-9_.-]{3,255}$/;
const NAMESPACE_RE = /^[A-Za-z0-9 ._/#:-]{1,255}$/;
const ID_RE = /^[A-Za-z0-9_-]{1,64}$/;
const TOML_KEY_RE = /^[A-Za-z0-9_-]{1,64}$/;
const DNS_LABELS_RE = /^([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)*[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/;
const ZONE_ID_RE = /^Z[A-Z0-9]{1,31}$/;
const EMAIL_RE = /^[^@\s]+@[^@\s]+\.[^@\s]+$/;
const VPC_ID_RE = /^vpc-[0-9a-f]{8,17}$/;
const SUBNET_ID_RE = /^subnet-[0-9a-f]{8,17}$/;
const SG_ID_RE = /^sg-[0-9a-f]{8,17}$/;
const IMAGE_RE = /^[a-z0-9.:/_@-]{1,512}$/;
/**
 * Most limits per config source. An SSM parameter holds 8 KB (about 74 limits over three
 * Regions). Past that the config lives in S3; what binds then is one alarm per limit in each
 * Region stack (CloudFormation: 500 resources) and two dashboard widgets per limit (CloudWatch:
 * 500 widgets), so 200 leaves room for both.
 */
export const MAX_LIMITS: Readonly<Record<ConfigSource, number>> = { parameter: 64, s3: 200 };
/** The default init container that copies the config from S3 (AWS CLI v2, pinned). */
export const DEFAULT_CONFIG_FETCH_IMAGE = 'public.ecr.aws/aws-cli/aws-cli:2.22.0';
/**
 * Keys the infrastructure writes itself (see config-toml.ts), keys that must not sit in a plain
 * parameter (`api_token` comes from Secrets Manager) and keys that make no sense on AWS.
 */
/**
 * The soonest Route 53 can call a Region unhealthy after its daemon died: the first failed probe
 * may come at once, then failure threshold − 1 more intervals (global-stack.ts: every 10 s, 3
 * failures). Keep in step with HEALTH_CHECK_INTERVAL_SECONDS and HEALTH_CHECK_FAILURE_THRESHOLD
 * (a test checks it).
 */
export const MIN_DETECTION_SECONDS = 20;
/**
 * The daemon counts a peer silent after 3 own rebalances (silent_after), and gateways' leases are
 * shorter than (3 − 1) periods; they must run out before the health check can call the Region
 * unhealthy, so 2 × period ≤ MIN_DETECTION_SECONDS.
 */
export const MAX_PERIOD_SECONDS = MIN_DETECTION_SECONDS / 2;

const RESERVED_KEYS = [
  'region', 'table', 'metrics_namespace', 'listen', 'period_ms', 'phase_ms', 'regions', 'limits',
  'api_token', 'store', 'aws_endpoint', 'replica_id', 'limits_source',
];
/** Fargate's valid (cpu, memory) pairs for the sizes a daemon can sensibly use. */
const FARGATE_MEMORY: Readonly<Record<number, readonly number[]>> = {
  256: [512, 1024, 2048],
  512: [1024, 2048, 3072, 4096],
  1024: [2048, 3072, 4096, 5120, 6144, 7168, 8192],
};
/** CloudWatch Logs' allowed retention values, in days. */
const RETENTION_DAYS = [1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922, 3288, 3653];

/**
 * Parses the raw context value (an object from cdk.json, or a JSON string from `--context`).
 * Throws {@link SettingsError} listing every problem.
 */
export function parseSettings(raw: unknown): Settings {
  const p = new Problems();
  let value = raw;
  if (typeof value === 'string') {
    try {
      value = JSON.parse(value);
    } catch (e) {
      throw new SettingsError([`shareplane: not valid JSON: ${(e as Error).message}`]);
    }
  }
  if (!isRecord(value)) {
    throw new SettingsError(['shareplane: missing; set the context key "shareplane" in cdk.json']);
  }
  const known = [
    'account', 'regions', 'tableName', 'billing', 'metricNamespace', 'hostedZoneId', 'hostedZoneName',
    'endpointSubdomain', 'imageUri', 'desiredCount', 'cpu', 'memoryMiB', 'natGateways', 'logRetentionDays',
    'periodSeconds', 'alarmEmail', 'limits', 'daemon', 'cpuArchitecture', 'existingVpcs', 'configSource',
    'configFetchImage', 'valkey', 'limitsSource', 'ecsService',
  ];
  p.unknownKeys('shareplane', value, known);
  const regions = parseRegions(p, value.regions);
  const configSource = p.oneOf(value, 'configSource', 'parameter', ['parameter', 's3'] as const);
  const limitsSource = p.oneOf(value, 'limitsSource', 'file', ['file', 'table'] as const);
  const s = {
    account: p.str(value, 'account', undefined, ACCOUNT_RE, 'twelve digits'),
    regions,
    tableName: p.str(value, 'tableName', 'shareplane-records', TABLE_RE, '3-255 of A-Z a-z 0-9 _ . -'),
    billing: parseBilling(p, value.billing),
    metricNamespace: p.str(value, 'metricNamespace', 'Shareplane', NAMESPACE_RE, 'a CloudWatch namespace'),
    hostedZoneId: p.str(value, 'hostedZoneId', undefined, ZONE_ID_RE, 'a Route 53 hosted zone id'),
    hostedZoneName: p.str(value, 'hostedZoneName', undefined, DNS_LABELS_RE, 'a lower-case DNS name without trailing dot'),
    endpointSubdomain: p.str(value, 'endpointSubdomain', 'shareplane', DNS_LABELS_RE, 'lower-case DNS labels'),
    imageUri: p.str(value, 'imageUri', '', /^(|[a-z0-9.:/_@-]{1,512})$/, 'an image URI or empty'),
    cpuArchitecture: p.oneOf(value, 'cpuArchitecture', 'x86_64', ['x86_64', 'arm64'] as const),
    ecsService: p.bool(value, 'ecsService', true),
    desiredCount: p.int(value, 'desiredCount', 2, 1, 10),
    cpu: p.int(value, 'cpu', 256, 256, 1024),
    memoryMiB: p.int(value, 'memoryMiB', 512, 512, 8192),
    natGateways: p.int(value, 'natGateways', 1, 1, 2),
    existingVpcs: parseExistingVpcs(p, value.existingVpcs, regions),
    configSource,
    configFetchImage: p.str(value, 'configFetchImage', DEFAULT_CONFIG_FETCH_IMAGE, IMAGE_RE, 'an image URI'),
    valkey: parseValkey(p, value.valkey),
    logRetentionDays: p.int(value, 'logRetentionDays', 365, 1, 3653),
    periodSeconds: p.int(value, 'periodSeconds', 5, 1, 300),
    alarmEmail: p.str(value, 'alarmEmail', '', /^(|[^@\s]+@[^@\s]+\.[^@\s]+)$/, 'an e-mail address or empty'),
    limitsSource,
    limits: limitsSource === 'table'
      ? noLimits(p, value.limits)
      : parseLimits(p, value.limits, MAX_LIMITS[configSource]),
    daemon: parseDaemon(p, value.daemon),
  };
  if (!(FARGATE_MEMORY[s.cpu] ?? []).includes(s.memoryMiB)) {
    p.add(`cpu/memoryMiB: ${s.cpu}/${s.memoryMiB} is not a Fargate size (cpu 256, 512 or 1024 with matching memory)`);
  }
  if (!RETENTION_DAYS.includes(s.logRetentionDays)) {
    p.add(`logRetentionDays: ${s.logRetentionDays} is not one of CloudWatch Logs' values (${RETENTION_DAYS.join(', ')})`);
  }
  if (s.alarmEmail !== '' && !EMAIL_RE.test(s.alarmEmail)) p.add('alarmEmail: not an e-mail address');
  if (s.periodSeconds > MAX_PERIOD_SECONDS) {
    p.add(`periodSeconds: ${s.periodSeconds} s gives gateways a rule-set lease of up to ${2 * s.periodSeconds} s `
      + `(2 periods), but Route 53 may call a dead daemon's Region unhealthy ${MIN_DETECTION_SECONDS} s after it died; `
      + `the lease must run out before that (docs/PROTOCOL.md, residual risk 5): use at most ${MAX_PERIOD_SECONDS}`);
  }
  p.throwIfAny();
  return s;
}

function parseRegions(p: Problems, raw: unknown): string[] {
  if (!Array.isArray(raw) || raw.length < 2 || raw.length > MAX_REGIONS) {
    p.add(`regions: expected a list of 2 to ${MAX_REGIONS} Region names`);
    return [];
  }
  const seen = new Set<string>();
  raw.forEach((r, i) => {
    if (typeof r !== 'string' || !REGION_RE.test(r)) p.add(`regions[${i}]: ${JSON.stringify(r)} is not a Region name`);
    else if (seen.has(r)) p.add(`regions[${i}]: ${r} is listed twice`);
    else seen.add(r);
  });
  return raw.filter((r): r is string => typeof r === 'string');
}

function parseBilling(p: Problems, raw: unknown): BillingSettings {
  if (raw === undefined) return { mode: 'on-demand' };
  if (!isRecord(raw)) {
    p.add('billing: expected an object with "mode"');
    return { mode: 'on-demand' };
  }
  if (raw.mode === 'on-demand') {
    p.unknownKeys('billing', raw, ['mode']);
    return { mode: 'on-demand' };
  }
  if (raw.mode !== 'provisioned') {
    p.add('billing.mode: expected "on-demand" or "provisioned"');
    return { mode: 'on-demand' };
  }
  p.unknownKeys('billing', raw, ['mode', 'readMin', 'readMax', 'writeMin', 'writeMax', 'targetUtilizationPercent']);
  const b = {
    mode: 'provisioned' as const,
    readMin: p.int(raw, 'readMin', 5, 1, 40000, 'billing.'),
    readMax: p.int(raw, 'readMax', 50, 1, 40000, 'billing.'),
    writeMin: p.int(raw, 'writeMin', 5, 1, 40000, 'billing.'),
    writeMax: p.int(raw, 'writeMax', 50, 1, 40000, 'billing.'),
    targetUtilizationPercent: p.int(raw, 'targetUtilizationPercent', 70, 20, 90, 'billing.'),
  };
  if (b.readMin > b.readMax) p.add('billing: readMin is above readMax');
  if (b.writeMin > b.writeMax) p.add('billing: writeMin is above writeMax');
  return b;
}

function parseExistingVpcs(p: Problems, raw: unknown, regions: readonly string[]): Record<string, ExistingVpc> {
  if (raw === undefined) return {};
  if (!isRecord(raw)) {
    p.add('existingVpcs: expected an object of Region name → { vpcId, publicSubnetIds, privateSubnetIds }');
    return {};
  }
  const out: Record<string, ExistingVpc> = {};
  for (const [region, v] of Object.entries(raw)) {
    const at = `existingVpcs.${region}`;
    if (!regions.includes(region)) p.add(`${at}: ${region} is not one of regions`);
    if (!isRecord(v)) {
      p.add(`${at}: expected an object with vpcId, publicSubnetIds and privateSubnetIds`);
      continue;
    }
    p.unknownKeys(at, v, ['vpcId', 'publicSubnetIds', 'privateSubnetIds', 'gatewaySecurityGroupIds']);
    out[region] = {
      vpcId: p.str(v, 'vpcId', undefined, VPC_ID_RE, 'a VPC id (vpc-...)', `${at}.`),
      publicSubnetIds: p.ids(v, 'publicSubnetIds', SUBNET_ID_RE, 'subnet ids', 2, `${at}.`),
      privateSubnetIds: p.ids(v, 'privateSubnetIds', SUBNET_ID_RE, 'subnet ids', 2, `${at}.`),
      gatewaySecurityGroupIds: v.gatewaySecurityGroupIds === undefined
        ? []
        : p.ids(v, 'gatewaySecurityGroupIds', SG_ID_RE, 'security group ids', 1, `${at}.`),
    };
  }
  return out;
}

function parseValkey(p: Problems, raw: unknown): ValkeySettings {
  const off = { enabled: false, dataStorageMaxGb: 5, ecpuPerSecondMax: 100_000 };
  if (raw === undefined) return off;
  if (!isRecord(raw)) {
    p.add('valkey: expected an object with "enabled"');
    return off;
  }
  p.unknownKeys('valkey', raw, ['enabled', 'dataStorageMaxGb', 'ecpuPerSecondMax']);
  if (typeof raw.enabled !== 'boolean') p.add('valkey.enabled: expected true or false');
  return {
    enabled: raw.enabled === true,
    // ElastiCache Serverless: 1 to 5,000 GB, 1,000 to 15,000,000 ECPU per second.
    dataStorageMaxGb: p.int(raw, 'dataStorageMaxGb', off.dataStorageMaxGb, 1, 5000, 'valkey.'),
    ecpuPerSecondMax: p.int(raw, 'ecpuPerSecondMax', off.ecpuPerSecondMax, 1000, 15_000_000, 'valkey.'),
  };
}

function parseLimits(p: Problems, raw: unknown, max: number): LimitSettings[] {
  if (!Array.isArray(raw) || raw.length < 1 || raw.length > max) {
    const hint = max === MAX_LIMITS.parameter ? ` (more with "configSource": "s3", up to ${MAX_LIMITS.s3})` : '';
    p.add(`limits: expected a list of 1 to ${max} limits, each with at least "id" and "rate"${hint}`);
    return [];
  }
  const ids = new Set<string>();
  return raw.flatMap((l, i) => {
    const at = `limits[${i}]`;
    if (!isRecord(l)) {
      p.add(`${at}: expected an object`);
      return [];
    }
    const id = p.str(l, 'id', undefined, ID_RE, '1-64 of A-Z a-z 0-9 _ -', `${at}.`);
    if (ids.has(id)) p.add(`${at}.id: ${id} is used twice`);
    ids.add(id);
    const rate = l.rate;
    if (typeof rate !== 'number' || !Number.isFinite(rate) || rate <= 0 || rate > 1e9) {
      p.add(`${at}.rate: expected a number of requests per second in (0, 1e9]`);
    }
    const extra: Record<string, TomlValue> = {};
    for (const [k, v] of Object.entries(l)) {
      if (k === 'id' || k === 'rate') continue;
      if (!TOML_KEY_RE.test(k)) p.add(`${at}.${k}: keys must be 1-64 of A-Z a-z 0-9 _ -`);
      else if (isTomlValue(v)) extra[k] = v;
      else p.add(`${at}.${k}: expected a string, a finite number or a boolean`);
    }
    return [{ id, rate: typeof rate === 'number' ? rate : 0, extra }];
  });
}

/**
 * With `limitsSource` `table` the daemon takes its limits from the table and refuses a config that
 * has `[[limits]]` too (crates/shareplane/src/config.rs): so must the settings.
 */
function noLimits(p: Problems, raw: unknown): LimitSettings[] {
  if (raw === undefined || (Array.isArray(raw) && raw.length === 0)) return [];
  const n = Array.isArray(raw) ? `these ${raw.length} limits` : 'this value';
  p.add(`limits: must be empty (or absent) with "limitsSource": "table": the daemons then take their limits `
    + `from the table (write them with \`shareplane limits apply\`) and refuse a config with [[limits]]; `
    + `remove ${n} (put them in the limits file), or set "limitsSource": "file"`);
  return [];
}

function parseDaemon(p: Problems, raw: unknown): Record<string, TomlValue> {
  if (raw === undefined) return {};
  if (!isRecord(raw)) {
    p.add('daemon: expected an object of extra top-level config keys');
    return {};
  }
  const out: Record<string, TomlValue> = {};
  for (const [k, v] of Object.entries(raw)) {
    if (k === 'limits_source') p.add('daemon.limits_source: set by the infrastructure from "limitsSource"; use that');
    else if (RESERVED_KEYS.includes(k)) p.add(`daemon.${k}: set by the infrastructure; remove it`);
    else if (!TOML_KEY_RE.test(k)) p.add(`daemon.${k}: keys must be 1-64 of A-Z a-z 0-9 _ -`);
    else if (isTomlValue(v)) out[k] = v;
    else p.add(`daemon.${k}: expected a string, a finite number or a boolean`);
  }
  return out;
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function isTomlValue(v: unknown): v is TomlValue {
  return typeof v === 'string' || typeof v === 'boolean' || (typeof v === 'number' && Number.isFinite(v));
}

/** Collects problems; the typed getters return a placeholder after recording one. */
class Problems {
  private readonly list: string[] = [];

  add(problem: string): void {
    this.list.push(problem);
  }

  throwIfAny(): void {
    if (this.list.length > 0) throw new SettingsError(this.list);
  }

  unknownKeys(at: string, obj: Record<string, unknown>, known: readonly string[]): void {
    for (const k of Object.keys(obj)) if (!known.includes(k)) this.add(`${at}.${k}: unknown setting`);
  }

  str(obj: Record<string, unknown>, key: string, dflt: string | undefined, re: RegExp, what: string, at = ''): string {
    const v = obj[key] ?? dflt;
    if (typeof v !== 'string' || !re.test(v)) {
      this.add(`${at}${key}: expected ${what}, got ${JSON.stringify(v)}`);
      return '';
    }
    return v;
  }

  oneOf<T extends string>(obj: Record<string, unknown>, key: string, dflt: T, values: readonly T[], at = ''): T {
    const v = obj[key] ?? dflt;
    if (typeof v !== 'string' || !(values as readonly string[]).includes(v)) {
      this.add(`${at}${key}: expected one of ${values.map((x) => JSON.stringify(x)).join(', ')}, got ${JSON.stringify(v)}`);
      return dflt;
    }
    return v as T;
  }

  /** A list of at least `min` distinct ids matching `re`. */
  ids(obj: Record<string, unknown>, key: string, re: RegExp, what: string, min: number, at = ''): string[] {
    const v = obj[key];
    if (!Array.isArray(v) || v.length < min || !v.every((x) => typeof x === 'string' && re.test(x))) {
      this.add(`${at}${key}: expected a list of at least ${min} ${what}, got ${JSON.stringify(v)}`);
      return [];
    }
    if (new Set(v).size !== v.length) this.add(`${at}${key}: lists an id twice`);
    return v as string[];
  }

  bool(obj: Record<string, unknown>, key: string, dflt: boolean, at = ''): boolean {
    const v = obj[key] ?? dflt;
    if (typeof v !== 'boolean') {
      this.add(`${at}${key}: expected true or false, got ${JSON.stringify(v)}`);
      return dflt;
    }
    return v;
  }

  int(obj: Record<string, unknown>, key: string, dflt: number, min: number, max: number, at = ''): number {
    const v = obj[key] ?? dflt;
    if (typeof v !== 'number' || !Number.isInteger(v) || v < min || v > max) {
      this.add(`${at}${key}: expected an integer in [${min}, ${max}], got ${JSON.stringify(v)}`);
      return min;
    }
    return v;
  }
}
