/**
 * The daemon's config file (crates/shareplane/src/config.rs), rendered from the settings. The
 * infrastructure owns the keys that say where and when the daemon runs (`region`, `table`,
 * `metrics_namespace`, `listen`, `period_ms`, `phase_ms`, `[[regions]]` with each Region's
 * Route 53 health check id) and where its limits come from (`limits_source = "table"`, written
 * only then: "file" is the daemon's default, and leaving it out keeps a file-mode config's text,
 * so its digest, unchanged); the rest is the operator's, passed through from `daemon` and
 * `limits` in the settings. The API token is not here: it comes from Secrets Manager as
 * SHAREPLANE_API_TOKEN.
 *
 * The same text is rendered by the Terraform module (terraform/modules/region/config.toml.tftpl);
 * keep the two in step.
 */
import { LimitSettings, LimitsSource, Settings, TomlValue } from './settings';

export interface ConfigInput {
  readonly region: string;
  readonly tableName: string;
  /** The address the daemon listens on inside its task. */
  readonly listen: string;
  readonly periodMs: number;
  /** When in each period this Region rebalances (Regions are staggered). */
  readonly phaseMs: number;
  readonly metricNamespace: string;
  /** Every Region in deployment order with its health check id (a CDK token is fine). */
  readonly regions: readonly { readonly name: string; readonly healthCheckId: string }[];
  /** `table`: the limits come from the table; no `[[limits]]` is rendered. */
  readonly limitsSource: LimitsSource;
  readonly limits: readonly LimitSettings[];
  readonly daemon: Readonly<Record<string, TomlValue>>;
}

/** SSM standard parameters hold at most 4 KiB; the advanced tier holds 8 KiB. */
export const STANDARD_PARAMETER_LIMIT_BYTES = 4096;

/** Region i of n rebalances at i/n of the period, so that no two Regions decide at the same instant. */
export function phaseMs(index: number, regionCount: number, periodMs: number): number {
  return Math.floor((index * periodMs) / regionCount);
}

/**
 * One Region's config input from the settings (what the Region stack renders, with the health
 * check ids it reads at deploy time; infra/test.sh renders it with placeholder ids to compare
 * with Terraform's text).
 */
export function configInput(s: Settings, region: string, healthCheckIds: readonly string[], listen: string): ConfigInput {
  const periodMs = s.periodSeconds * 1000;
  return {
    region,
    tableName: s.tableName,
    listen,
    periodMs,
    phaseMs: phaseMs(s.regions.indexOf(region), s.regions.length, periodMs),
    metricNamespace: s.metricNamespace,
    regions: s.regions.map((name, i) => ({ name, healthCheckId: healthCheckIds[i] ?? '' })),
    limitsSource: s.limitsSource,
    limits: s.limits,
    daemon: s.daemon,
  };
}

export function renderConfigToml(c: ConfigInput): string {
  if (c.limitsSource === 'table' && c.limits.length > 0) {
    throw new Error('limits_source = "table" with [[limits]]: the daemon refuses that config');
  }
  const lines = [
    '# Written by the shareplane infrastructure (infra/). Edit the deployment settings, not this text.',
    `region = ${tomlValue(c.region)}`,
    `table = ${tomlValue(c.tableName)}`,
    `metrics_namespace = ${tomlValue(c.metricNamespace)}`,
    `listen = ${tomlValue(c.listen)}`,
    `period_ms = ${tomlValue(c.periodMs)}`,
    `phase_ms = ${tomlValue(c.phaseMs)}`,
  ];
  if (c.limitsSource === 'table') lines.push(`limits_source = ${tomlValue(c.limitsSource)}`);
  // Operator keys in sorted order, as Terraform's templatefile iterates them (the same text both ways).
  for (const [k, v] of sorted(c.daemon)) lines.push(`${k} = ${tomlValue(v)}`);
  for (const r of c.regions) {
    lines.push('', '[[regions]]', `name = ${tomlValue(r.name)}`, `health_check_id = ${tomlValue(r.healthCheckId)}`);
  }
  for (const l of c.limits) {
    lines.push('', '[[limits]]', `id = ${tomlValue(l.id)}`, `rate = ${tomlValue(l.rate)}`);
    for (const [k, v] of sorted(l.extra)) lines.push(`${k} = ${tomlValue(v)}`);
  }
  return lines.join('\n') + '\n';
}

function sorted(o: Readonly<Record<string, TomlValue>>): [string, TomlValue][] {
  return Object.entries(o).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
}

/** A TOML literal: basic strings with every control character escaped, numbers, booleans. */
export function tomlValue(v: TomlValue): string {
  if (typeof v === 'boolean') return v ? 'true' : 'false';
  if (typeof v === 'number') {
    if (!Number.isFinite(v)) throw new Error(`TOML cannot hold ${v}`);
    return Number.isInteger(v) && Math.abs(v) < 2 ** 53 ? v.toFixed(0) : String(v);
  }
  let out = '"';
  for (const ch of v) {
    const code = ch.codePointAt(0) ?? 0;
    if (ch === '"' || ch === '\\') out += '\\' + ch;
    else if (code < 0x20 || code === 0x7f) out += '\\u' + code.toString(16).padStart(4, '0');
    else if (code >= 0xd800 && code <= 0xdfff) throw new Error('TOML strings cannot hold a lone surrogate');
    else out += ch;
  }
  return out + '"';
}
