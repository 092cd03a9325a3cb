import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import { Match, Template } from 'aws-cdk-lib/assertions';
import { build, cdkContext, named, only } from './fixture';
import { groupId, reaches, rules } from './network';

const built = build();
const REGION = 'eu-west-1';
const t = built.regions.get(REGION) as Template;

/** The task role's logical id and its single inline policy's statements. */
function taskRole(tpl: Template): { id: string; statements: any[]; props: any } {
  const task = only(tpl, 'AWS::ECS::TaskDefinition').props;
  const id = task.TaskRoleArn['Fn::GetAtt'][0] as string;
  const props = tpl.toJSON().Resources[id].Properties;
  assert.equal(props.Policies.length, 1, 'one inline policy');
  return { id, statements: props.Policies[0].PolicyDocument.Statement, props };
}

/** The SSM parameter named /shareplane/shareplane-records/<suffix>. */
function param(tpl: Template, suffix: string): { id: string; props: Record<string, any> } {
  const found = Object.entries(tpl.findResources('AWS::SSM::Parameter'))
    .filter(([, p]: [string, any]) => p.Properties.Name === `/shareplane/shareplane-records/${suffix}`);
  assert.equal(found.length, 1, `one parameter ${suffix}`);
  return { id: found[0][0], props: (found[0][1] as any).Properties };
}

/** The load balancer of the given scheme, its listener, its listener rule and its target group. */
function endpoint(tpl: Template, scheme: 'internet-facing' | 'internal') {
  const lbs = Object.entries(tpl.findResources('AWS::ElasticLoadBalancingV2::LoadBalancer'))
    .filter(([, r]: [string, any]) => r.Properties.Scheme === scheme);
  assert.equal(lbs.length, 1, `one ${scheme} load balancer`);
  const [lbId, lb] = lbs[0] as [string, any];
  const listeners = Object.entries(tpl.findResources('AWS::ElasticLoadBalancingV2::Listener'))
    .filter(([, r]: [string, any]) => r.Properties.LoadBalancerArn.Ref === lbId);
  assert.equal(listeners.length, 1);
  const [listenerId, listener] = listeners[0] as [string, any];
  const rulesOf = Object.values(tpl.findResources('AWS::ElasticLoadBalancingV2::ListenerRule'))
    .filter((r: any) => r.Properties.ListenerArn.Ref === listenerId) as any[];
  assert.equal(rulesOf.length, 1);
  const rule = rulesOf[0].Properties;
  const tg = tpl.toJSON().Resources[rule.Actions[0].TargetGroupArn.Ref].Properties;
  const sg = lb.Properties.SecurityGroups[0]['Fn::GetAtt'][0] as string;
  return { lb: lb.Properties, listener: listener.Properties, rule, tg, sg };
}

test('one stack per Region, each in its Region and deployed after the global stack', () => {
  assert.deepEqual([...built.deployment.regions.keys()], built.settings.regions);
  for (const [region, stack] of built.deployment.regions) {
    assert.equal(stack.region, region);
    assert.ok(stack.dependencies.includes(built.deployment.global), `${region} depends on the global stack`);
  }
});

test('the task role: read the table, write own-Region items only, read metrics, put only in the namespace', () => {
  for (const [region, tpl] of built.regions) {
    const { statements } = taskRole(tpl);
    const arn = {
      'Fn::Join': ['', ['arn:', { Ref: 'AWS::Partition' }, `:dynamodb:${region}:123456789012:table/shareplane-records`]],
    };
    assert.deepEqual(statements, [
      {
        Sid: 'ReadAllRegionsRecords',
        Effect: 'Allow',
        Action: ['dynamodb:GetItem', 'dynamodb:Query', 'dynamodb:BatchGetItem', 'dynamodb:Scan'],
        Resource: arn,
      },
      {
        Sid: 'WriteOwnRegionItemsOnly',
        Effect: 'Allow',
        Action: ['dynamodb:PutItem', 'dynamodb:UpdateItem', 'dynamodb:DeleteItem', 'dynamodb:ConditionCheckItem'],
        Resource: arn,
        Condition: { 'ForAllValues:StringEquals': { 'dynamodb:LeadingKeys': [region] } },
      },
      {
        Sid: 'ReadHealthCheckMetrics',
        Effect: 'Allow',
        Action: ['cloudwatch:GetMetricData', 'cloudwatch:GetMetricStatistics'],
        Resource: '*',
      },
      {
        Sid: 'PutMetricsInOwnNamespaceOnly',
        Effect: 'Allow',
        Action: 'cloudwatch:PutMetricData',
        Resource: '*',
        Condition: { StringEquals: { 'cloudwatch:namespace': 'Shareplane' } },
      },
    ], `task role of ${region}`);
  }
});

test('no daemon can write the shared limits (#limits): every table write is bound to its own Region\'s items', () => {
  const WRITES = /^dynamodb:(PutItem|UpdateItem|DeleteItem|BatchWriteItem|TransactWriteItems|ConditionCheckItem|PartiQL(Insert|Update|Delete)|\*)$|^\*$/;
  for (const [region, tpl] of built.regions) {
    const writes = taskRole(tpl).statements.filter((s) => [s.Action].flat().some((a: string) => WRITES.test(a)));
    assert.ok(writes.length > 0, `${region} writes its own items`);
    for (const s of writes) {
      assert.deepEqual(s.Condition, { 'ForAllValues:StringEquals': { 'dynamodb:LeadingKeys': [region] } }, `${region}: ${s.Sid}`);
      assert.ok(![s.Action].flat().includes('dynamodb:BatchWriteItem'), `${region}: ${s.Sid}`);
    }
    assert.ok(!region.startsWith('#'), 'a Region name never equals #limits');
  }
});

test('nothing else grants the task role anything', () => {
  const { id, props } = taskRole(t);
  assert.equal(props.ManagedPolicyArns, undefined);
  for (const [pid, p] of Object.entries(t.findResources('AWS::IAM::Policy')) as [string, any][]) {
    assert.ok(!JSON.stringify(p.Properties.Roles).includes(id), `${pid} is attached to the task role`);
  }
  const keyPolicy = JSON.stringify(only(t, 'AWS::KMS::Key').props.KeyPolicy);
  assert.ok(!keyPolicy.includes(id), 'the key policy does not name the task role');
});

test('the namespace in the PutMetricData condition follows the settings', () => {
  const other = build((raw) => (raw.metricNamespace = 'Acme/Shareplane'));
  const { statements } = taskRole(other.regions.get(REGION) as Template);
  const put = statements.find((s) => s.Sid === 'PutMetricsInOwnNamespaceOnly');
  assert.deepEqual(put.Condition, { StringEquals: { 'cloudwatch:namespace': 'Acme/Shareplane' } });
});

test('the daemon runs as a Fargate service of two tasks in private subnets behind the load balancer', () => {
  const svc = only(t, 'AWS::ECS::Service').props;
  assert.equal(svc.LaunchType, 'FARGATE');
  assert.equal(svc.DesiredCount, 2);
  assert.equal(svc.NetworkConfiguration.AwsvpcConfiguration.AssignPublicIp, 'DISABLED');
  assert.deepEqual(svc.DeploymentConfiguration.DeploymentCircuitBreaker, { Enable: true, Rollback: true });
  assert.equal(svc.DeploymentConfiguration.MinimumHealthyPercent, 100);
  // Registered with both load balancers' target groups.
  assert.deepEqual(svc.LoadBalancers.map((l: any) => [l.ContainerName, l.ContainerPort]), [['shareplane', 8080], ['shareplane', 8080]]);
  t.hasResourceProperties('AWS::ECS::Cluster', {
    ClusterSettings: [{ Name: 'containerInsights', Value: 'enabled' }],
  });
});

test('the container: config from the SSM parameter, API token from Secrets Manager, logs to CloudWatch', () => {
  const task = only(t, 'AWS::ECS::TaskDefinition').props;
  assert.deepEqual(task.RequiresCompatibilities, ['FARGATE']);
  assert.equal(task.ContainerDefinitions.length, 1);
  const c = task.ContainerDefinitions[0];
  assert.deepEqual(c.Command, ['run']);
  assert.equal(c.ReadonlyRootFilesystem, true);
  assert.deepEqual(c.PortMappings, [{ ContainerPort: 8080, Protocol: 'tcp' }]);
  assert.deepEqual(c.Secrets.map((s: any) => s.Name), ['SHAREPLANE_CONFIG_TOML', 'SHAREPLANE_API_TOKEN', 'SHAREPLANE_ADMIN_TOKEN']);
  assert.ok(JSON.stringify(c.Secrets[0].ValueFrom).includes(param(t, 'config').id));
  assert.deepEqual(c.Secrets[1].ValueFrom, { Ref: named(t, 'AWS::SecretsManager::Secret', 'ApiToken').id });
  assert.deepEqual(c.Secrets[2].ValueFrom, { Ref: named(t, 'AWS::SecretsManager::Secret', 'AdminToken').id });
  assert.equal(c.LogConfiguration.LogDriver, 'awslogs');
  const logs = Object.entries(t.findResources('AWS::Logs::LogGroup')).find(([id]) => id === c.LogConfiguration.Options['awslogs-group'].Ref);
  assert.ok(logs, 'the log driver writes to the stack log group');
  assert.equal((logs[1] as any).Properties.RetentionInDays, 365);
  assert.ok((logs[1] as any).Properties.KmsKeyId, 'logs are encrypted with the stack key');
  assert.match(c.Environment.find((e: any) => e.Name === 'SHAREPLANE_CONFIG_DIGEST').Value, /^[0-9a-f]{64}$/);
});

test('the config parameter holds this Region, every Region health check id and the limits', () => {
  const value = param(t, 'config').props.Value;
  const parts: any[] = value['Fn::Join'][1];
  const text = parts.map((p) => (typeof p === 'string' ? p : '<id>')).join('');
  assert.match(text, /^region = "eu-west-1"$/m);
  assert.match(text, /^table = "shareplane-records"$/m);
  assert.match(text, /^metrics_namespace = "Shareplane"$/m);
  assert.match(text, /^listen = "0\.0\.0\.0:8080"$/m);
  assert.match(text, /^phase_ms = 1666$/m);
  for (const r of built.settings.regions) {
    assert.ok(text.includes(`[[regions]]\nname = "${r}"\nhealth_check_id = "<id>"`), `health check of ${r}`);
  }
  const reads = parts.filter((p) => typeof p !== 'string');
  assert.equal(reads.length, 3);
  for (const p of reads) assert.equal(p['Fn::GetAtt'][0].startsWith('ExportsReader'), true, 'read from the cross-Region exports');
  assert.ok(text.includes('[[limits]]\nid = "k-big"\nrate = 10000\nburst_s = 2\nfloor = 500\nkind = "capacity"\nstep_cap = 1000\n'));
  assert.ok(!/api_token/.test(text), 'no secret in the parameter');
});

test('the home Region imports the health check ids as plain CloudFormation exports', () => {
  const home = built.regions.get('us-east-1') as Template;
  const parts: any[] = param(home, 'config').props.Value['Fn::Join'][1];
  const reads = parts.filter((p) => typeof p !== 'string');
  assert.equal(reads.length, 3);
  for (const p of reads) assert.ok(p['Fn::ImportValue'], JSON.stringify(p));
});

test('the public endpoint: HTTPS only, health paths only, alias record, DNS-validated certificate', () => {
  const pub = endpoint(t, 'internet-facing');
  assert.equal(pub.listener.Protocol, 'HTTPS');
  assert.equal(pub.listener.Port, 443);
  assert.equal(pub.listener.DefaultActions[0].Type, 'fixed-response');
  assert.deepEqual(pub.rule.Conditions, [{ Field: 'path-pattern', PathPatternConfig: { Values: ['/readyz', '/healthz'] } }]);
  assert.deepEqual([pub.tg.Port, pub.tg.Protocol, pub.tg.TargetType, pub.tg.HealthCheckPath], [8080, 'HTTP', 'ip', '/readyz']);
  t.hasResourceProperties('AWS::CertificateManager::Certificate', {
    DomainName: 'eu-west-1.shareplane.example.com',
    SubjectAlternativeNames: ['api.eu-west-1.shareplane.example.com'],
    ValidationMethod: 'DNS',
    DomainValidationOptions: [
      { DomainName: 'eu-west-1.shareplane.example.com', HostedZoneId: 'Z0123456789EXAMPLE' },
      { DomainName: 'api.eu-west-1.shareplane.example.com', HostedZoneId: 'Z0123456789EXAMPLE' },
    ],
  });
  t.hasResourceProperties('AWS::Route53::RecordSet', {
    Name: 'eu-west-1.shareplane.example.com.', Type: 'A', HostedZoneId: 'Z0123456789EXAMPLE',
    AliasTarget: Match.objectLike({ DNSName: Match.anyValue() }),
  });
});

test('the gateways\' endpoint: an internal HTTPS load balancer in the private subnets for the API paths', () => {
  const api = endpoint(t, 'internal');
  assert.equal(api.listener.Protocol, 'HTTPS');
  assert.equal(api.listener.Port, 443);
  assert.match(api.listener.SslPolicy, /TLS13/);
  assert.equal(api.listener.DefaultActions[0].Type, 'fixed-response');
  assert.deepEqual(api.rule.Conditions, [{ Field: 'path-pattern', PathPatternConfig: { Values: ['/v1/*', '/readyz', '/healthz'] } }]);
  assert.deepEqual([api.tg.Port, api.tg.TargetType, api.tg.HealthCheckPath], [8080, 'ip', '/readyz']);
  const attrs = Object.fromEntries(api.lb.LoadBalancerAttributes.map((a: any) => [a.Key, a.Value]));
  assert.equal(attrs['idle_timeout.timeout_seconds'], '60', 'longer than the 30 s long-poll');
  assert.equal(attrs['routing.http.drop_invalid_header_fields.enabled'], 'true');
  assert.equal(attrs['access_logs.s3.enabled'], 'true');
  // Its subnets are the private ones (no route to an internet gateway).
  const subnets = t.toJSON().Resources;
  for (const ref of api.lb.Subnets) {
    const tags = subnets[ref.Ref].Properties.Tags;
    assert.ok(tags.some((tag: any) => tag.Key === 'aws-cdk:subnet-type' && tag.Value === 'Private'), ref.Ref);
  }
  t.hasResourceProperties('AWS::Route53::RecordSet', {
    Name: 'api.eu-west-1.shareplane.example.com.', Type: 'A',
    AliasTarget: Match.objectLike({ DNSName: Match.anyValue() }),
  });
});

test('reachability: gateways reach the API and Valkey; the internet reaches neither, nor the tasks', () => {
  const gateway = { sg: groupId(t, 'shareplane gateways') };
  const internet = { ip: '198.51.100.7' };
  const api = groupId(t, 'shareplane API inside the VPC');
  const pub = groupId(t, 'shareplane endpoint');
  const tasks = groupId(t, 'shareplane daemon tasks');
  const valkey = groupId(t, 'shareplane Valkey');
  assert.equal(endpoint(t, 'internal').sg, api);
  assert.equal(endpoint(t, 'internet-facing').sg, pub);
  assert.ok(reaches(t, gateway, api, 443), 'gateway → internal load balancer :443');
  assert.ok(reaches(t, gateway, valkey, 6379), 'gateway → Valkey :6379');
  assert.ok(reaches(t, gateway, valkey, 6380), 'gateway → Valkey reader :6380');
  assert.ok(reaches(t, { sg: api }, tasks, 8080), 'internal load balancer → tasks :8080');
  assert.ok(reaches(t, { sg: pub }, tasks, 8080), 'public load balancer → tasks :8080');
  for (const [target, port] of [[api, 443], [valkey, 6379], [tasks, 8080], [pub, 443]] as const) {
    assert.ok(!reaches(t, internet, target, port), `the internet → ${target}:${port}`);
  }
  assert.ok(!reaches(t, gateway, tasks, 8080), 'gateways go through the load balancer');
  assert.ok(!reaches(t, gateway, pub, 443), 'the gateway group is not for the public endpoint');
  assert.ok(!reaches(t, { sg: pub }, valkey, 6379), 'nothing but gateways reaches Valkey');
  assert.ok(!reaches(t, gateway, api, 80), 'HTTPS only');
  // Only Route 53's health checkers reach the public endpoint: the managed prefix list.
  const checkers = { prefixList: 'pl-0a1b2c3d4e5f60002' };
  assert.ok(reaches(t, checkers, pub, 443));
  assert.ok(!reaches(t, checkers, api, 443));
  const fromAddresses = rules(t).filter((r) => r.direction === 'ingress' && 'cidr' in r.peer);
  assert.deepEqual(fromAddresses, [], 'no ingress rule admits an address range');
});

test('the public endpoint admits the Region\'s Route 53 health-checker prefix list (looked up by name)', () => {
  for (const [region, tpl] of built.regions) {
    const ingress = rules(tpl).filter((r) => r.group === groupId(tpl, 'shareplane endpoint') && r.direction === 'ingress');
    assert.equal(ingress.length, 1, region);
    assert.deepEqual([ingress[0].from, ingress[0].to], [443, 443]);
    // The id the lookup of com.amazonaws.<region>.route53-healthchecks returned (cdk.json caches it).
    const key = Object.keys(cdkContext()).find((k) => k.includes(`PrefixListName=com.amazonaws.${region}.route53-healthchecks:`));
    assert.ok(key, `a cached lookup for ${region}`);
    assert.deepEqual(ingress[0].peer, { prefixList: (cdkContext()[key] as any)[0].PrefixListId }, region);
  }
});

test('outputs: the daemon URL (what --rules takes), the rules and demand URLs, the token secret, the gateway group, Valkey, the config', () => {
  const out = t.toJSON().Outputs;
  assert.equal(out.DaemonUrl.Value, 'https://api.eu-west-1.shareplane.example.com');
  assert.equal(out.RulesUrl.Value, 'https://api.eu-west-1.shareplane.example.com/v1/rules');
  assert.equal(out.DemandUrl.Value, 'https://api.eu-west-1.shareplane.example.com/v1/demand');
  assert.deepEqual(out.ApiTokenSecretArn.Value, { Ref: named(t, 'AWS::SecretsManager::Secret', 'ApiToken').id });
  assert.deepEqual(out.AdminTokenSecretArn.Value, { Ref: named(t, 'AWS::SecretsManager::Secret', 'AdminToken').id });
  assert.deepEqual(out.GatewaySecurityGroupId.Value, { 'Fn::GetAtt': [groupId(t, 'shareplane gateways'), 'GroupId'] });
  assert.deepEqual(out.ValkeyUrl.Value, {
    'Fn::Join': ['', ['rediss://', { 'Fn::GetAtt': ['Valkey', 'Endpoint.Address'] }, ':', { 'Fn::GetAtt': ['Valkey', 'Endpoint.Port'] }]],
  });
  assert.deepEqual(out.ConfigParameter.Value, { Ref: param(t, 'config').id });
  assert.deepEqual(out.GatewaySettingsParameter.Value, { Ref: param(t, 'gateway').id });
});

test('the gateway settings parameter holds the same URLs, the secret ARN and the rediss:// URL', () => {
  const value = param(t, 'gateway').props.Value;
  const text = value['Fn::Join'][1].map((p: any) => (typeof p === 'string' ? p : `<${JSON.stringify(p)}>`)).join('');
  assert.match(text, /"daemonUrl":"https:\/\/api\.eu-west-1\.shareplane\.example\.com"/);
  assert.match(text, /"rulesUrl":"https:\/\/api\.eu-west-1\.shareplane\.example\.com\/v1\/rules"/);
  assert.match(text, /"demandUrl":"https:\/\/api\.eu-west-1\.shareplane\.example\.com\/v1\/demand"/);
  assert.match(text, /"apiTokenSecretArn":"<\{"Ref":"ApiToken/);
  assert.match(text, /"redisUrl":"rediss:\/\/<\{"Fn::GetAtt":\["Valkey","Endpoint\.Address"\]\}>:/);
});

test('Valkey: ElastiCache Serverless, Valkey engine, encrypted with the Region key, private subnets, own group', () => {
  const cache = only(t, 'AWS::ElastiCache::ServerlessCache').props;
  assert.equal(cache.Engine, 'valkey');
  assert.equal(cache.MajorEngineVersion, '8');
  assert.deepEqual(cache.KmsKeyId, { 'Fn::GetAtt': [only(t, 'AWS::KMS::Key').id, 'Arn'] });
  assert.deepEqual(cache.SecurityGroupIds, [{ 'Fn::GetAtt': [groupId(t, 'shareplane Valkey'), 'GroupId'] }]);
  assert.deepEqual(cache.SubnetIds, endpoint(t, 'internal').lb.Subnets);
  assert.deepEqual(cache.CacheUsageLimits, { DataStorage: { Maximum: 5, Unit: 'GB' }, ECPUPerSecond: { Maximum: 100000 } });
  assert.equal(cache.ServerlessCacheName, 'shareplane-shareplane-records');
});

test('without Valkey: no cache, no Valkey group or URL, an empty redisUrl for the gateways', () => {
  const off = build((raw) => (raw.valkey = { enabled: false })).regions.get(REGION) as Template;
  off.resourceCountIs('AWS::ElastiCache::ServerlessCache', 0);
  assert.equal(off.toJSON().Outputs.ValkeyUrl, undefined);
  assert.throws(() => groupId(off, 'shareplane Valkey'));
  assert.match(JSON.stringify(param(off, 'gateway').props.Value), /\\"redisUrl\\":\\"\\"/);
  assert.ok(reaches(off, { sg: groupId(off, 'shareplane gateways') }, groupId(off, 'shareplane API inside the VPC'), 443));
});

/** Alarm name (without the `shareplane-<region>-` prefix) → properties. */
function alarms(tpl: Template, region: string): Map<string, any> {
  const prefix = `shareplane-${region}-`;
  const out = new Map<string, any>();
  for (const a of Object.values(tpl.findResources('AWS::CloudWatch::Alarm')) as any[]) {
    assert.ok(a.Properties.AlarmName.startsWith(prefix));
    out.set(a.Properties.AlarmName.slice(prefix.length), a.Properties);
  }
  return out;
}

test('alarms: stale peer records, sum of shares above the limit (per limit and for all), rejected records, no fresh data, stranded room, a raise held back, health unknown, limits mismatch, not ready', () => {
  const a = alarms(t, REGION);
  assert.deepEqual([...a.keys()].sort(), [
    'HealthUnknown', 'LimitsAboveRate', 'LimitsMismatch', 'NotReady', 'RaiseHeldBack', 'RebalancesWithoutFreshData', 'RecordStale-ap-southeast-2',
    'RecordStale-us-east-1', 'RejectedRecords', 'StrandedRoom', 'SumOfSharesAboveLimit-k-big',
    'GatewayFallbackInUse', 'GatewayFenced', 'GatewayNoRules', 'GatewayNotReady',
  ].sort());
  const expect = (name: string, metric: string, dims: Record<string, string>, stat: string, op: string, threshold: number, missing: string) => {
    const p = a.get(name);
    assert.equal(p.Namespace, 'Shareplane', name);
    assert.equal(p.MetricName, metric, name);
    const got = Object.fromEntries(p.Dimensions.map((d: any) => [d.Name, d.Value]));
    assert.deepEqual(got, { Region: REGION, ...dims }, name);
    assert.equal(p.Statistic, stat, name);
    assert.equal(p.ComparisonOperator, op, name);
    assert.equal(p.Threshold, threshold, name);
    assert.equal(p.TreatMissingData, missing, name);
    assert.equal(p.Period, 60, name);
    assert.deepEqual(p.AlarmActions, [{ Ref: only(t, 'AWS::SNS::Topic').id }], name);
  };
  expect('RecordStale-us-east-1', 'PeerRecordAgeSeconds', { Peer: 'us-east-1' }, 'Maximum', 'GreaterThanThreshold', 15, 'notBreaching');
  expect('RecordStale-ap-southeast-2', 'PeerRecordAgeSeconds', { Peer: 'ap-southeast-2' }, 'Maximum', 'GreaterThanThreshold', 15, 'notBreaching');
  expect('SumOfSharesAboveLimit-k-big', 'SeenSumOfShares', { Limit: 'k-big' }, 'Maximum', 'GreaterThanThreshold', 10000, 'notBreaching');
  expect('RejectedRecords', 'RejectedRecords', {}, 'Sum', 'GreaterThanThreshold', 0, 'notBreaching');
  expect('RebalancesWithoutFreshData', 'RebalancesWithoutFreshData', {}, 'Sum', 'GreaterThanThreshold', 0, 'notBreaching');
  expect('StrandedRoom', 'LongestWaitForRecordSeconds', {}, 'Maximum', 'GreaterThanThreshold', 300, 'notBreaching');
  expect('RaiseHeldBack', 'LongestRaiseWaitSeconds', {}, 'Maximum', 'GreaterThanThreshold', 300, 'notBreaching');
  expect('HealthUnknown', 'LongestHealthUnknownSeconds', {}, 'Maximum', 'GreaterThanThreshold', 300, 'notBreaching');
  expect('LimitsMismatch', 'LimitsMismatchPeers', {}, 'Maximum', 'GreaterThanThreshold', 0, 'notBreaching');
  expect('LimitsAboveRate', 'LimitsAboveRate', {}, 'Maximum', 'GreaterThanThreshold', 0, 'notBreaching');
  expect('NotReady', 'Ready', {}, 'Minimum', 'LessThanThreshold', 1, 'breaching');
  expect('GatewayFenced', 'shareplane_gateway_fenced', {}, 'Maximum', 'GreaterThanThreshold', 0, 'notBreaching');
  expect('GatewayNoRules', 'shareplane_gateway_rules_loaded', {}, 'Minimum', 'LessThanThreshold', 1, 'notBreaching');
  expect('GatewayNotReady', 'shareplane_gateway_ready', {}, 'Minimum', 'LessThanThreshold', 1, 'notBreaching');
  expect('GatewayFallbackInUse', 'shareplane_gateway_fallback_in_use', {}, 'Maximum', 'GreaterThanThreshold', 0, 'notBreaching');
});

test('the stale threshold is three rebalance periods', () => {
  const slow = build((raw) => (raw.periodSeconds = 10));
  assert.equal(alarms(slow.regions.get(REGION) as Template, REGION).get('RecordStale-us-east-1').Threshold, 30);
});

test('the alarm topic is encrypted and an e-mail address, when given, is subscribed', () => {
  assert.ok(only(t, 'AWS::SNS::Topic').props.KmsMasterKeyId);
  t.resourceCountIs('AWS::SNS::Subscription', 0);
  const mailed = build((raw) => (raw.alarmEmail = 'oncall@example.com'));
  (mailed.regions.get(REGION) as Template).hasResourceProperties('AWS::SNS::Subscription', {
    Protocol: 'email', Endpoint: 'oncall@example.com',
  });
});

test('an image URI replaces the Docker asset', () => {
  const uri = '123456789012.dkr.ecr.eu-west-1.amazonaws.com/shareplane:1.0.0';
  const pinned = build((raw) => (raw.imageUri = uri));
  const c = only(pinned.regions.get(REGION) as Template, 'AWS::ECS::TaskDefinition').props.ContainerDefinitions[0];
  assert.equal(c.Image, uri);
  const asset = only(t, 'AWS::ECS::TaskDefinition').props.ContainerDefinitions[0].Image;
  assert.match(JSON.stringify(asset), /container-assets/);
});

test('the only Lambda functions are CDK deploy-time providers, each with its checkov skips justified', () => {
  for (const tpl of [built.global, ...built.regions.values()]) {
    for (const [id, fn] of Object.entries(tpl.findResources('AWS::Lambda::Function')) as [string, any][]) {
      assert.match(id, /^CustomCrossRegionExport(Reader|Writer)CustomResourceProvider/);
      const skips = fn.Metadata.checkov.skip;
      assert.deepEqual(skips.map((s: any) => s.id), ['CKV_AWS_115', 'CKV_AWS_116', 'CKV_AWS_117', 'CKV_AWS_173']);
      for (const s of skips) assert.ok(s.comment.length > 20, 'each skip says why');
    }
  }
});

test('VPC flow logs go to an encrypted log group', () => {
  t.hasResourceProperties('AWS::EC2::FlowLog', { ResourceType: 'VPC', TrafficType: 'ALL', LogDestinationType: 'cloud-watch-logs' });
  const groups = Object.values(t.findResources('AWS::Logs::LogGroup')).map((g: any) => g.Properties);
  assert.equal(groups.length, 2);
  for (const g of groups) assert.ok(g.KmsKeyId && g.RetentionInDays === 365, g.LogGroupName);
});

test('inventory: every resource of a Region stack, by type', () => {
  const counts: Record<string, number> = {};
  for (const r of Object.values(t.toJSON().Resources) as any[]) counts[r.Type] = (counts[r.Type] ?? 0) + 1;
  assert.deepEqual(counts, {
    'AWS::KMS::Key': 1,
    'AWS::EC2::VPC': 1, 'AWS::EC2::Subnet': 4, 'AWS::EC2::RouteTable': 4, 'AWS::EC2::SubnetRouteTableAssociation': 4,
    'AWS::EC2::Route': 4, 'AWS::EC2::EIP': 1, 'AWS::EC2::NatGateway': 1, 'AWS::EC2::InternetGateway': 1,
    'AWS::EC2::VPCGatewayAttachment': 1, 'AWS::EC2::FlowLog': 1,
    // Tasks, public load balancer, internal load balancer, gateways, Valkey.
    'AWS::EC2::SecurityGroup': 5, 'AWS::EC2::SecurityGroupIngress': 5, 'AWS::EC2::SecurityGroupEgress': 4,
    // Flow logs, task, execution, cross-Region reference reader.
    'AWS::IAM::Role': 4, 'AWS::IAM::Policy': 2,
    // The daemon config and the gateways' settings.
    'AWS::Logs::LogGroup': 2, 'AWS::SSM::Parameter': 2, 'AWS::SecretsManager::Secret': 2,
    'AWS::CertificateManager::Certificate': 1, 'AWS::Route53::RecordSet': 2,
    'AWS::S3::Bucket': 1, 'AWS::S3::BucketPolicy': 1,
    'AWS::ElasticLoadBalancingV2::LoadBalancer': 2, 'AWS::ElasticLoadBalancingV2::Listener': 2,
    'AWS::ElasticLoadBalancingV2::ListenerRule': 2, 'AWS::ElasticLoadBalancingV2::TargetGroup': 2,
    'AWS::ECS::Cluster': 1, 'AWS::ECS::TaskDefinition': 1, 'AWS::ECS::Service': 1,
    'AWS::ElastiCache::ServerlessCache': 1,
    'AWS::SNS::Topic': 1, 'AWS::CloudWatch::Alarm': 15,
    'Custom::CrossRegionExportReader': 1, 'AWS::Lambda::Function': 1,
  });
  const home: Record<string, number> = {};
  for (const r of Object.values((built.regions.get('us-east-1') as Template).toJSON().Resources) as any[]) {
    home[r.Type] = (home[r.Type] ?? 0) + 1;
  }
  assert.equal(home['Custom::CrossRegionExportReader'], undefined, 'the home Region needs no reader');
  assert.equal(home['AWS::IAM::Role'], 3);
});

test('the key policy: logs only for this account and Region, alarms, the token only through Secrets Manager', () => {
  const statements: any[] = only(t, 'AWS::KMS::Key').props.KeyPolicy.Statement;
  const bySid = new Map(statements.filter((s) => s.Sid).map((s) => [s.Sid, s]));
  assert.deepEqual(bySid.get('CloudWatchLogs').Principal, { Service: 'logs.eu-west-1.amazonaws.com' });
  assert.deepEqual(bySid.get('CloudWatchLogs').Condition, {
    ArnLike: {
      'kms:EncryptionContext:aws:logs:arn': {
        'Fn::Join': ['', ['arn:', { Ref: 'AWS::Partition' }, ':logs:eu-west-1:123456789012:log-group:*']],
      },
    },
  });
  assert.deepEqual(bySid.get('CloudWatchAlarms').Action, ['kms:Decrypt', 'kms:GenerateDataKey*']);
  const exec = only(t, 'AWS::ECS::TaskDefinition').props.ExecutionRoleArn['Fn::GetAtt'][0];
  const decrypt = statements.filter((s) => JSON.stringify(s.Principal).includes(exec));
  assert.equal(decrypt.length, 1);
  assert.deepEqual(decrypt[0].Action, 'kms:Decrypt');
  assert.deepEqual(decrypt[0].Condition, { StringEquals: { 'kms:ViaService': 'secretsmanager.eu-west-1.amazonaws.com' } });
  for (const s of statements.filter((x) => !x.Sid && !JSON.stringify(x.Principal).includes(exec))) {
    // CDK's defaults: the account root (IAM decides) and the Secrets Manager grants through kms:ViaService.
    assert.ok(s.Condition === undefined ? s.Action === 'kms:*' : s.Condition.StringEquals['kms:ViaService'], JSON.stringify(s));
  }
});

test('the log bucket refuses plain HTTP; the execution role reads only its config, token and log group', () => {
  const bucket: any[] = only(t, 'AWS::S3::BucketPolicy').props.PolicyDocument.Statement;
  const deny = bucket.filter((s) => s.Effect === 'Deny');
  assert.equal(deny.length, 1);
  assert.deepEqual(deny[0].Condition, { Bool: { 'aws:SecureTransport': 'false' } });
  const exec = only(t, 'AWS::ECS::TaskDefinition').props.ExecutionRoleArn['Fn::GetAtt'][0];
  const policies = Object.values(t.findResources('AWS::IAM::Policy')).filter((p: any) => JSON.stringify(p.Properties.Roles).includes(exec));
  assert.equal(policies.length, 1);
  for (const s of (policies[0] as any).Properties.PolicyDocument.Statement) {
    if (s.Resource === '*') assert.equal(s.Action, 'ecr:GetAuthorizationToken', 'only the registry login is unscoped');
  }
});
