/**
 * The global stack, deployed in the home Region (the first Region of the settings): the DynamoDB
 * global table with a replica in every Region, one Route 53 health check per Region's endpoint,
 * and the dashboard of shares per Region and limit.
 *
 * Route 53 publishes `HealthCheckStatus` only in us-east-1, wherever the health check was
 * created; the daemons read it there. The health check ids reach each Region's stack as
 * cross-Region references (written at deploy time into SSM parameters of the consuming Region),
 * so a running or restarting daemon never depends on the home Region to read its config.
 */
import { Duration, Stack, StackProps, CfnOutput } from 'aws-cdk-lib';
import * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import * as dynamodb from 'aws-cdk-lib/aws-dynamodb';
import * as route53 from 'aws-cdk-lib/aws-route53';
import { Construct } from 'constructs';
import { METRICS } from './metrics';
import { Settings } from './settings';

/** Route 53 probes each endpoint every 10 s and calls it unhealthy after 3 failures (~30 s). */
export const HEALTH_CHECK_INTERVAL_SECONDS = 10;
export const HEALTH_CHECK_FAILURE_THRESHOLD = 3;
export const HEALTH_PATH = '/readyz';

/** The public name of a Region's endpoint, known before anything is deployed. */
export function endpointName(s: Settings, region: string): string {
  return `${region}.${s.endpointSubdomain}.${s.hostedZoneName}`;
}

export interface GlobalStackProps extends StackProps {
  readonly settings: Settings;
}

export class GlobalStack extends Stack {
  readonly table: dynamodb.TableV2;
  /** Region name → its endpoint's health check. */
  readonly healthChecks: ReadonlyMap<string, route53.HealthCheck>;

  constructor(scope: Construct, id: string, props: GlobalStackProps) {
    super(scope, id, props);
    const s = props.settings;
    this.table = new dynamodb.TableV2(this, 'Records', {
      tableName: s.tableName,
      // Each Region writes only items whose pk is its own Region name (see the task role).
      partitionKey: { name: 'pk', type: dynamodb.AttributeType.STRING },
      sortKey: { name: 'sk', type: dynamodb.AttributeType.STRING },
      billing: tableBilling(s),
      replicas: s.regions.slice(1).map((region) => ({ region })),
      pointInTimeRecoverySpecification: { pointInTimeRecoveryEnabled: true },
      deletionProtection: true,
      encryption: dynamodb.TableEncryptionV2.awsManagedKey(),
    });

    const checks = new Map<string, route53.HealthCheck>();
    for (const region of s.regions) {
      const check = new route53.HealthCheck(this, `HealthCheck-${region}`, {
        type: route53.HealthCheckType.HTTPS,
        fqdn: endpointName(s, region),
        port: 443,
        resourcePath: HEALTH_PATH,
        enableSNI: true,
        requestInterval: Duration.seconds(HEALTH_CHECK_INTERVAL_SECONDS),
        failureThreshold: HEALTH_CHECK_FAILURE_THRESHOLD,
      });
      checks.set(region, check);
      new CfnOutput(this, `HealthCheckId-${region}`, {
        description: `Route 53 health check of ${endpointName(s, region)}`,
        value: check.healthCheckId,
      });
    }
    this.healthChecks = checks;
    new CfnOutput(this, 'TableName', { value: this.table.tableName });

    new cloudwatch.Dashboard(this, 'Dashboard', {
      dashboardName: `shareplane-${s.tableName}`,
      widgets: dashboardRows(s),
    });
  }
}

function tableBilling(s: Settings): dynamodb.Billing {
  const b = s.billing;
  if (b.mode === 'on-demand') return dynamodb.Billing.onDemand();
  return dynamodb.Billing.provisioned({
    readCapacity: dynamodb.Capacity.autoscaled({
      minCapacity: b.readMin,
      maxCapacity: b.readMax,
      targetUtilizationPercent: b.targetUtilizationPercent,
    }),
    writeCapacity: dynamodb.Capacity.autoscaled({
      minCapacity: b.writeMin,
      maxCapacity: b.writeMax,
      targetUtilizationPercent: b.targetUtilizationPercent,
    }),
  });
}

/** One row per limit: each Region's share and the sum it sees, against the limit; then readiness. */
function dashboardRows(s: Settings): cloudwatch.IWidget[][] {
  const metric = (name: string, region: string, dims: Record<string, string>, stat: string) =>
    new cloudwatch.Metric({
      namespace: s.metricNamespace,
      metricName: name,
      region,
      dimensionsMap: { Region: region, ...dims },
      statistic: stat,
      period: Duration.minutes(1),
      label: `${region}`,
    });
  const rows: cloudwatch.IWidget[][] = s.limits.map((l) => [
    new cloudwatch.GraphWidget({
      title: `Share of ${l.id} per Region (requests/s)`,
      width: 12,
      stacked: true,
      left: s.regions.map((r) => metric(METRICS.share.name, r, { Limit: l.id }, 'Average')),
      leftAnnotations: [{ value: l.rate, label: `limit ${l.rate}`, color: '#d62728' }],
    }),
    new cloudwatch.GraphWidget({
      title: `Sum of shares of ${l.id} as each Region sees it (requests/s)`,
      width: 12,
      left: s.regions.map((r) => metric(METRICS.seenSumOfShares.name, r, { Limit: l.id }, 'Maximum')),
      leftAnnotations: [{ value: l.rate, label: `limit ${l.rate}`, color: '#d62728' }],
    }),
  ]);
  rows.push([
    new cloudwatch.GraphWidget({
      title: 'Daemon ready (1) per Region',
      width: 12,
      left: s.regions.map((r) => metric(METRICS.ready.name, r, {}, 'Minimum')),
    }),
    new cloudwatch.GraphWidget({
      title: 'Rejected records and rebalances without fresh data per Region',
      width: 12,
      left: s.regions.flatMap((r) => [
        metric(METRICS.rejectedRecords.name, r, {}, 'Sum').with({ label: `${r} rejected` }),
        metric(METRICS.rebalancesWithoutFreshData.name, r, {}, 'Sum').with({ label: `${r} without fresh data` }),
      ]),
    }),
  ]);
  return rows;
}
