/**
 * `limitsSource: "table"`: the daemons take their limits from the shared limits document in the
 * table (`shareplane limits apply`), so the config says `limits_source = "table"` and holds no
 * `[[limits]]`, and nothing is built per limit.
 */
import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import { Template } from 'aws-cdk-lib/assertions';
import { build, only } from './fixture';

const REGION = 'eu-west-1';
const table = build((raw) => {
  raw.limitsSource = 'table';
  delete raw.limits;
});
const file = build();

/** The config parameter's text, with each deploy-time health check id as `<id>`. */
function configText(tpl: Template): string {
  const found = Object.values(tpl.findResources('AWS::SSM::Parameter'))
    .filter((p: any) => p.Properties.Name === '/shareplane/shareplane-records/config') as any[];
  assert.equal(found.length, 1);
  return found[0].Properties.Value['Fn::Join'][1].map((p: unknown) => (typeof p === 'string' ? p : '<id>')).join('');
}

test('with limitsSource "table" every Region\'s config says limits_source = "table" and has no [[limits]]', () => {
  assert.equal(table.settings.limitsSource, 'table');
  assert.deepEqual(table.settings.limits, []);
  for (const [region, tpl] of table.regions) {
    const text = configText(tpl);
    assert.match(text, /^phase_ms = \d+\nlimits_source = "table"\nfence = "own-unhealthy"\npolicy = "two-signals"\n$/m, region);
    assert.ok(!text.includes('[[limits]]'), `${region}: no [[limits]]`);
    assert.equal((text.match(/^\[\[regions\]\]$/gm) ?? []).length, 3, `${region}: every Region`);
    assert.ok(text.endsWith(`[[regions]]\nname = "ap-southeast-2"\nhealth_check_id = "<id>"\n`), region);
  }
});

test('with limitsSource "file" (the default) the config is unchanged: no limits_source key, the [[limits]]', () => {
  for (const [region, tpl] of file.regions) {
    const text = configText(tpl);
    assert.ok(!text.includes('limits_source'), region);
    assert.match(text, /^\[\[limits\]\]\nid = "k-big"$/m, region);
  }
});

test('switching the source rolls the tasks (the config digest changes)', () => {
  const digest = (tpl: Template) => only(tpl, 'AWS::ECS::TaskDefinition').props.ContainerDefinitions[0].Environment
    .find((e: any) => e.Name === 'SHAREPLANE_CONFIG_DIGEST').Value;
  assert.notEqual(digest(table.regions.get(REGION) as Template), digest(file.regions.get(REGION) as Template));
});

test('with limitsSource "table": no per-limit alarm or dashboard row; the alarm over every limit stays', () => {
  const names = Object.values((table.regions.get(REGION) as Template).findResources('AWS::CloudWatch::Alarm'))
    .map((a: any) => a.Properties.AlarmName as string);
  assert.ok(!names.some((n) => n.includes('SumOfSharesAboveLimit')), names.join());
  assert.ok(names.includes(`shareplane-${REGION}-LimitsAboveRate`));
  assert.ok(names.includes(`shareplane-${REGION}-LimitsMismatch`));
  assert.equal(names.length, 14, "10 on the daemons, 4 on the gateways");
  const body = JSON.stringify(only(table.global, 'AWS::CloudWatch::Dashboard').props.DashboardBody);
  assert.ok(!body.includes('Share of '), 'no per-limit row');
  assert.ok(body.includes('Daemon ready (1) per Region'));
});

test('with limitsSource "table" the task roles and the limits writer policy are those of "file"', () => {
  for (const [region, tpl] of table.regions) {
    const roles = (t: Template) => Object.values(t.findResources('AWS::IAM::Role'))
      .filter((r: any) => r.Properties.AssumeRolePolicyDocument.Statement[0].Principal.Service === 'ecs-tasks.amazonaws.com'
        && r.Properties.Policies !== undefined)
      .map((r: any) => r.Properties.Policies);
    assert.deepEqual(roles(tpl), roles(file.regions.get(region) as Template), region);
  }
  assert.deepEqual(only(table.global, 'AWS::IAM::ManagedPolicy').props, only(file.global, 'AWS::IAM::ManagedPolicy').props);
});
