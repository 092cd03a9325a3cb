import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import { Match } from 'aws-cdk-lib/assertions';
import { build, only } from './fixture';

const built = build();
const t = built.global;

test('the global stack lives in the home Region (the first Region)', () => {
  assert.equal(built.deployment.global.region, 'us-east-1');
  assert.equal(built.deployment.global.account, '123456789012');
});

test('the global table: pk/sk strings, a replica in every Region, PITR, deletion protection, on demand', () => {
  const table = only(t, 'AWS::DynamoDB::GlobalTable').props;
  assert.equal(table.TableName, 'shareplane-records');
  assert.deepEqual(table.KeySchema, [
    { AttributeName: 'pk', KeyType: 'HASH' },
    { AttributeName: 'sk', KeyType: 'RANGE' },
  ]);
  assert.deepEqual(
    [...table.AttributeDefinitions].sort((a: any, b: any) => a.AttributeName.localeCompare(b.AttributeName)),
    [{ AttributeName: 'pk', AttributeType: 'S' }, { AttributeName: 'sk', AttributeType: 'S' }],
  );
  assert.equal(table.BillingMode, 'PAY_PER_REQUEST');
  assert.equal(table.SSESpecification.SSEEnabled, true);
  assert.deepEqual(table.Replicas.map((r: any) => r.Region).sort(), ['ap-southeast-2', 'eu-west-1', 'us-east-1']);
  for (const r of table.Replicas) {
    assert.equal(r.PointInTimeRecoverySpecification?.PointInTimeRecoveryEnabled, true, `PITR in ${r.Region}`);
    assert.equal(r.DeletionProtectionEnabled, true, `deletion protection in ${r.Region}`);
  }
});

test('provisioned billing autoscales reads in every replica and writes table-wide', () => {
  const p = build((raw) => {
    raw.billing = { mode: 'provisioned', readMin: 5, readMax: 40, writeMin: 3, writeMax: 30, targetUtilizationPercent: 60 };
  });
  const table = only(p.global, 'AWS::DynamoDB::GlobalTable').props;
  assert.equal(table.BillingMode, 'PROVISIONED');
  assert.deepEqual(table.WriteProvisionedThroughputSettings.WriteCapacityAutoScalingSettings, {
    MinCapacity: 3, MaxCapacity: 30, TargetTrackingScalingPolicyConfiguration: { TargetValue: 60 },
  });
  for (const r of table.Replicas) {
    assert.deepEqual(r.ReadProvisionedThroughputSettings.ReadCapacityAutoScalingSettings, {
      MinCapacity: 5, MaxCapacity: 40, TargetTrackingScalingPolicyConfiguration: { TargetValue: 60 },
    });
  }
});

test('one HTTPS health check of /readyz per Region endpoint', () => {
  const checks = Object.values(t.findResources('AWS::Route53::HealthCheck')).map((r: any) => r.Properties.HealthCheckConfig);
  assert.deepEqual(checks.map((c) => c.FullyQualifiedDomainName).sort(), [
    'ap-southeast-2.shareplane.example.com', 'eu-west-1.shareplane.example.com', 'us-east-1.shareplane.example.com',
  ]);
  for (const c of checks) {
    assert.equal(c.Type, 'HTTPS');
    assert.equal(c.Port, 443);
    assert.equal(c.ResourcePath, '/readyz');
    assert.equal(c.EnableSNI, true);
    assert.equal(c.RequestInterval, 10);
    assert.equal(c.FailureThreshold, 3);
  }
});

test('the health check ids are written to every other Region for its stack to read', () => {
  const writers = t.findResources('Custom::CrossRegionExportWriter');
  const regions = Object.values(writers).map((w: any) => w.Properties.WriterProps.region).sort();
  assert.deepEqual(regions, ['ap-southeast-2', 'eu-west-1'], 'the home Region reads them as plain exports');
  const checks = Object.keys(t.findResources('AWS::Route53::HealthCheck')).sort();
  for (const w of Object.values(writers) as any[]) {
    const refs = Object.values(w.Properties.WriterProps.exports).map((v: any) => v.Ref).sort();
    assert.deepEqual(refs, checks, 'every health check id goes to every Region');
  }
});

test('the dashboard shows each Region share and seen sum per limit against the limit', () => {
  const dash = dashboardJson(only(t, 'AWS::CloudWatch::Dashboard').props.DashboardBody);
  const metrics = dash.widgets.flatMap((w: any) => w.properties.metrics ?? []);
  for (const r of built.settings.regions) {
    assert.ok(metrics.some((m: any[]) => m[0] === 'Shareplane' && m[1] === 'Share' && m.includes(r) && m.includes('k-big')), `Share of k-big in ${r}`);
    assert.ok(metrics.some((m: any[]) => m[1] === 'SeenSumOfShares' && m.includes(r)), `SeenSumOfShares in ${r}`);
    assert.ok(metrics.some((m: any[]) => m[1] === 'Ready' && m.includes(r)), `Ready in ${r}`);
  }
  const annotations = dash.widgets.flatMap((w: any) => w.properties.annotations?.horizontal ?? []);
  assert.ok(annotations.some((a: any) => a.value === 10000), 'the limit drawn as a line');
});

/** The dashboard body is a string, or an Fn::Join of strings when it holds tokens. */
function dashboardJson(body: unknown): any {
  if (typeof body === 'string') return JSON.parse(body);
  const join = (body as any)['Fn::Join'];
  assert.ok(join, 'dashboard body is a string or Fn::Join');
  const parts = join[1].map((p: unknown) => (typeof p === 'string' ? p : 'TOKEN'));
  return JSON.parse(parts.join(join[0]));
}

test('outputs name the table, every health check and the limits writer policy', () => {
  t.hasOutput('TableName', Match.anyValue());
  for (const r of built.settings.regions) t.hasOutput(`HealthCheckId${r.replace(/-/g, '')}`, Match.anyValue());
  assert.deepEqual(t.toJSON().Outputs.LimitsWriterPolicyArn.Value, { Ref: only(t, 'AWS::IAM::ManagedPolicy').id });
  // Besides CDK's own exports of the health check ids to the home Region's stack.
  const ours = Object.keys(t.toJSON().Outputs).filter((k) => !k.startsWith('ExportsOutput')).sort();
  assert.deepEqual(ours, ['HealthCheckIdapsoutheast2', 'HealthCheckIdeuwest1', 'HealthCheckIduseast1', 'LimitsWriterPolicyArn', 'TableName']);
});

test('the limits writer policy: read and write only the #limits items of the table in every Region, attached to nothing', () => {
  const policy = only(t, 'AWS::IAM::ManagedPolicy').props;
  const arn = (region: string) => ({
    'Fn::Join': ['', ['arn:', { Ref: 'AWS::Partition' }, `:dynamodb:${region}:123456789012:table/shareplane-records`]],
  });
  assert.deepEqual(policy.PolicyDocument, {
    Version: '2012-10-17',
    Statement: [{
      Sid: 'ReadWriteSharedLimitsOnly',
      Effect: 'Allow',
      Action: ['dynamodb:GetItem', 'dynamodb:Query', 'dynamodb:PutItem', 'dynamodb:DeleteItem', 'dynamodb:BatchWriteItem'],
      // The ARN each Region's daemons use (their task role's resource, region-stack.test.ts).
      Resource: built.settings.regions.map(arn),
      Condition: { 'ForAllValues:StringEquals': { 'dynamodb:LeadingKeys': ['#limits'] } },
    }],
  });
  assert.match(policy.Description, /shared limits \(items with pk #limits\) of table shareplane-records/);
  for (const key of ['Roles', 'Users', 'Groups']) assert.equal(policy[key], undefined, `attached to no ${key}: the operator attaches it`);
});

test('the limits writer policy follows the table name and the Regions', () => {
  const other = build((raw) => { raw.tableName = 'acme-shares'; raw.regions = ['eu-west-1', 'ap-southeast-2']; });
  const doc = only(other.global, 'AWS::IAM::ManagedPolicy').props.PolicyDocument;
  const resources = doc.Statement[0].Resource.map((r: any) => r['Fn::Join'][1][2]);
  assert.deepEqual(resources, [':dynamodb:eu-west-1:123456789012:table/acme-shares', ':dynamodb:ap-southeast-2:123456789012:table/acme-shares']);
});

test('inventory: every resource of the global stack, by type', () => {
  const counts: Record<string, number> = {};
  for (const r of Object.values(t.toJSON().Resources) as any[]) counts[r.Type] = (counts[r.Type] ?? 0) + 1;
  assert.deepEqual(counts, {
    'AWS::DynamoDB::GlobalTable': 1,
    'AWS::Route53::HealthCheck': 3,
    'AWS::CloudWatch::Dashboard': 1,
    // CDK's writer of the cross-Region references: one per other Region, one provider function and role.
    'Custom::CrossRegionExportWriter': 2,
    'AWS::Lambda::Function': 1,
    'AWS::IAM::Role': 1,
    // The limits writer's policy (for operators; attached to nothing here).
    'AWS::IAM::ManagedPolicy': 1,
  });
});
