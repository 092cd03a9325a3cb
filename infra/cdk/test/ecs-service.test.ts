/**
 * `ecsService: false`: the daemon runs elsewhere (EKS, infra/helm/shareplane), so the stacks
 * deploy everything but the ECS service; the pods take the tasks' place in the same target groups
 * with the same permissions.
 */
import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import { Template } from 'aws-cdk-lib/assertions';
import { parseSettings, SettingsError } from '../lib/settings';
import { build, only, rawSettings } from './fixture';

const REGION = 'eu-west-1';
// Each synthesis of the whole app takes seconds: build each once.
const ecs = build();
const off = build((raw) => { raw.ecsService = false; });
const t = off.regions.get(REGION) as Template;
const ECS_ONLY = ['AWS::ECS::Cluster', 'AWS::ECS::TaskDefinition', 'AWS::ECS::Service', 'AWS::IAM::Role', 'AWS::IAM::Policy'];

function types(tpl: Template): Map<string, number> {
  const out = new Map<string, number>();
  for (const r of Object.values(tpl.toJSON().Resources) as any[]) out.set(r.Type, (out.get(r.Type) ?? 0) + 1);
  return out;
}

function alarmNames(tpl: Template): string[] {
  return Object.values(tpl.findResources('AWS::CloudWatch::Alarm')).map((a: any) => a.Properties.AlarmName).sort();
}

test('the setting defaults to true and takes only a boolean, named in the problem', () => {
  assert.equal(parseSettings(rawSettings()).ecsService, true);
  const raw = rawSettings();
  raw.ecsService = 'no';
  assert.throws(() => parseSettings(raw), (e: unknown) =>
    e instanceof SettingsError && e.problems.some((p) => p.startsWith('ecsService: expected true or false')));
});

test('no ECS cluster, task definition, service, ECS roles or task log group; nothing else goes', () => {
  const before = types(ecs.regions.get(REGION) as Template);
  const after = types(t);
  for (const type of ['AWS::ECS::Cluster', 'AWS::ECS::TaskDefinition', 'AWS::ECS::Service']) {
    assert.equal(after.get(type), undefined, type);
  }
  for (const r of Object.values(t.findResources('AWS::IAM::Role')) as any[]) {
    assert.doesNotMatch(JSON.stringify(r.Properties.AssumeRolePolicyDocument), /ecs-tasks/);
  }
  const logGroups = Object.values(t.findResources('AWS::Logs::LogGroup')).map((g: any) => g.Properties.LogGroupName);
  assert.ok(!logGroups.includes('/shareplane/shareplane-records/daemon'));
  // Every other type keeps its count: the endpoints, tokens, config, Valkey and alarms stay.
  for (const [type, n] of before) {
    if (ECS_ONLY.includes(type) || type === 'AWS::Logs::LogGroup') continue;
    const expected = type === 'AWS::IAM::ManagedPolicy' ? n + 1 : n;
    assert.equal(after.get(type), expected, type);
  }
  assert.equal(before.get('AWS::IAM::ManagedPolicy'), undefined, 'the ECS variant has no managed policy');
});

test('the table, health checks and every alarm are deployed as with ECS', () => {
  assert.deepEqual(off.global.toJSON(), ecs.global.toJSON());
  for (const region of off.settings.regions) {
    const names = alarmNames(off.regions.get(region) as Template);
    assert.deepEqual(names, alarmNames(ecs.regions.get(region) as Template), region);
    assert.ok(names.includes(`shareplane-${region}-NotReady`) && names.includes(`shareplane-${region}-GatewayFenced`));
  }
});

test('the pods get the task role\'s statements as a managed policy, and the target groups to register in', () => {
  const withEcs = ecs.regions.get(REGION) as Template;
  const task = only(withEcs, 'AWS::ECS::TaskDefinition').props;
  const role = withEcs.toJSON().Resources[task.TaskRoleArn['Fn::GetAtt'][0]].Properties;
  const policy = only(t, 'AWS::IAM::ManagedPolicy');
  assert.deepEqual(policy.props.PolicyDocument, role.Policies[0].PolicyDocument);
  assert.equal(policy.props.Roles, undefined, 'attached to nothing: the pods\' role is the team\'s');
  const outputs = t.toJSON().Outputs;
  assert.deepEqual(outputs.DaemonPolicyArn.Value, { Ref: policy.id });
  const groups = t.findResources('AWS::ElasticLoadBalancingV2::TargetGroup');
  assert.equal(Object.keys(groups).length, 2);
  for (const [id, g] of Object.entries(groups) as [string, any][]) {
    assert.equal(g.Properties.Targets, undefined, `${id} starts empty`);
    assert.equal(g.Properties.TargetType, 'ip');
  }
  assert.deepEqual(new Set([outputs.DaemonTargetGroupArn.Value.Ref, outputs.DaemonApiTargetGroupArn.Value.Ref]), new Set(Object.keys(groups)));
  const taskSg = Object.entries(t.findResources('AWS::EC2::SecurityGroup'))
    .filter(([, g]: [string, any]) => g.Properties.GroupDescription === 'shareplane daemon tasks');
  assert.equal(taskSg.length, 1);
  assert.deepEqual(outputs.DaemonSecurityGroupId.Value, { 'Fn::GetAtt': [taskSg[0][0], 'GroupId'] });
  // With ECS none of these is published: the tasks are registered by ECS itself.
  for (const o of ['DaemonPolicyArn', 'DaemonTargetGroupArn', 'DaemonApiTargetGroupArn', 'DaemonSecurityGroupId']) {
    assert.equal(withEcs.toJSON().Outputs[o], undefined, o);
  }
});
