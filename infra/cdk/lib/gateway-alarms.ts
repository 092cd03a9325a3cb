/**
 * The gateways' alarms. A gateway exports Prometheus gauges only (`/metrics`); they reach
 * CloudWatch through the CloudWatch agent's Prometheus scraping, whose EMF processor writes them
 * into the daemon's metric namespace with the one dimension `Region` (the chart's
 * `cloudwatchAgent` ConfigMap, infra/helm/shareplane/templates/cloudwatch-agent.yaml). Every
 * alarm takes the worst gateway of the Region (Maximum of a bad-is-1 gauge, Minimum of a
 * good-is-1 gauge). No datapoint is not breaching: without the agent (or without gateways) the
 * alarms stay quiet, which infra/README.md says; the chart's PrometheusRule carries the same
 * alerts for clusters that run Prometheus instead.
 */
import * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';

/** The gateway gauges the alarms read (crates/shareplane-gateway/src/metrics.rs). */
export const GATEWAY_METRICS = {
  /** 1 while capacity limits are fenced (the rule set's lease ran out), else 0. */
  fenced: 'shareplane_gateway_fenced',
  /** 1 once a rule set is loaded, else 0. */
  rulesLoaded: 'shareplane_gateway_rules_loaded',
  /** 1 when /readyz answers 200 (rules loaded, not fenced, Redis reached), else 0. */
  ready: 'shareplane_gateway_ready',
  /** 1 while Redis is unreachable and the per-limit failure policy decides, else 0. */
  fallbackInUse: 'shareplane_gateway_fallback_in_use',
} as const;

export interface GatewayAlarm {
  /** Part of the alarm name, `shareplane-<region>-<id>`. */
  readonly id: string;
  readonly description: (region: string) => string;
  readonly metricName: string;
  readonly statistic: 'Maximum' | 'Minimum';
  readonly comparison: cloudwatch.ComparisonOperator;
  readonly threshold: number;
  readonly evaluationPeriods: number;
  readonly datapointsToAlarm: number;
}

const above0 = cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD;
const below1 = cloudwatch.ComparisonOperator.LESS_THAN_THRESHOLD;

/** Each for two one-minute periods in a row, so that a restart or a short Redis blip does not page. */
export const GATEWAY_ALARMS: readonly GatewayAlarm[] = [
  {
    id: 'GatewayFenced',
    description: (r) => `A shareplane gateway in ${r} is fenced: its rule set's lease ran out and it refuses capacity limits.`,
    metricName: GATEWAY_METRICS.fenced, statistic: 'Maximum', comparison: above0, threshold: 0,
    evaluationPeriods: 2, datapointsToAlarm: 2,
  },
  {
    id: 'GatewayNoRules',
    description: (r) => `A shareplane gateway in ${r} has no rule set: it limits nothing (check its --rules, the daemon URL).`,
    metricName: GATEWAY_METRICS.rulesLoaded, statistic: 'Minimum', comparison: below1, threshold: 1,
    evaluationPeriods: 2, datapointsToAlarm: 2,
  },
  {
    id: 'GatewayNotReady',
    description: (r) => `A shareplane gateway in ${r} is not ready (no rule set, fenced, or Redis not reached).`,
    metricName: GATEWAY_METRICS.ready, statistic: 'Minimum', comparison: below1, threshold: 1,
    evaluationPeriods: 2, datapointsToAlarm: 2,
  },
  {
    id: 'GatewayFallbackInUse',
    description: (r) => `A shareplane gateway in ${r} cannot reach its Redis/Valkey: each limit's failure policy decides.`,
    metricName: GATEWAY_METRICS.fallbackInUse, statistic: 'Maximum', comparison: above0, threshold: 0,
    evaluationPeriods: 2, datapointsToAlarm: 2,
  },
];
