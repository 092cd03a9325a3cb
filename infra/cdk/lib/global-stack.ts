/**
 * The global stack, deployed in the home Region (the first Region of the settings): the DynamoDB
 * global table with a replica in every Region, one Route 53 health check per Region's endpoint,
 * the dashboard of shares per Region and limit, and the managed policy for whoever writes the
 * shared limits (`shareplane limits apply`).
 *
 * Route 53 publishes `HealthCheckStatus` only in us-east-1, wherever the health check was
 * created; the daemons read it there. The health check ids reach each Region's stack as
 * cross-Region references (written at deploy time into SSM parameters of the consuming Region),
 * so a running or restarting daemon never depends on the home Region to read its config.
 */
import { Duration, Stack, StackProps, CfnOutput } from 'aws-cdk-lib';
import * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import * as dynamodb from 'aws-cdk-lib/aws-dynamodb';
import * as iam from 'aws-cdk-lib/aws-iam';
import * as route53 from 'aws-cdk-lib/aws-route53';
import { Construct, IConstruct } from 'constructs';
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

/**
 * The partition key of the shared limits' items (crates/shareplane-aws/src/limits.rs,
 * `LIMITS_PK`): a head and the document's parts. No Region's name starts with `#`, so no task
 * role's `dynamodb:LeadingKeys` condition (its own Region's name) admits a write of these items.
 */
export const LIMITS_PARTITION_KEY = '#limits';

/**
 * What `shareplane limits apply` and `shareplane limits show` call on the `#limits` items: a
 * consistent GetItem of the head, Query of the parts, PutItem of parts and head, DeleteItem of
 * refused or collected parts; BatchWriteItem grants nothing beyond PutItem and DeleteItem of the
 * same items (the condition covers each item of the batch).
 */
export const LIMITS_WRITER_ACTIONS = [
  'dynamodb:GetItem', 'dynamodb:Query', 'dynamodb:PutItem', 'dynamodb:DeleteItem', 'dynamodb:BatchWriteItem',
] as const;

/**
 * The table's ARN in one Region: what that Region's daemons call (their task role names it) and
 * what `shareplane limits apply --config <that Region's config>` writes to.
 */
export function tableArn(scope: IConstruct, tableName: string, region: string): string {
  return Stack.of(scope).formatArn({ service: 'dynamodb', region, resource: 'table', resourceName: tableName });
}

export interface GlobalStackProps extends StackProps {
  readonly settings: Settings;
}

export class GlobalStack extends Stack {
  readonly table: dynamodb.TableV2;
  /** Region name → its endpoint's health check. */
  readonly healthChecks: ReadonlyMap<string, route53.HealthCheck>;
  /** Read and write the shared limits (`#limits` items) only: attach to whoever runs `shareplane limits apply`. */
  readonly limitsWriterPolicy: iam.ManagedPolicy;

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

    // The shared limits are written once, from any Region's replica (the config given to
    // `shareplane limits apply` names the Region), so the policy names the table in every Region,
    // exactly as each Region's task role names it, and only the `#limits` items of it.
    this.limitsWriterPolicy = new iam.ManagedPolicy(this, 'LimitsWriterPolicy', {
      description: `shareplane: read and write only the shared limits (items with pk ${LIMITS_PARTITION_KEY}) `
        + `of table ${s.tableName} in every Region; attach to whoever runs shareplane limits apply`,
      statements: [
        new iam.PolicyStatement({
          sid: 'ReadWriteSharedLimitsOnly',
          actions: [...LIMITS_WRITER_ACTIONS],
          resources: s.regions.map((r) => tableArn(this, s.tableName, r)),
          conditions: { 'ForAllValues:StringEquals': { 'dynamodb:LeadingKeys': [LIMITS_PARTITION_KEY] } },
        }),
      ],
    });
    new CfnOutput(this, 'LimitsWriterPolicyArn', {
      description: 'Managed policy to attach to the role that runs shareplane limits apply (the #limits items only)',
      value: this.limitsWriterPolicy.managedPolicyArn,
    });

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
