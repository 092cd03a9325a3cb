/**
 * The deployment options beyond the example: an existing VPC, the config in S3 (past the SSM
 * parameter's 8 KB), arm64 tasks, and the image asset's build context.
 */
import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { App } from 'aws-cdk-lib';
import { Template } from 'aws-cdk-lib/assertions';
import { buildDeployment } from '../lib/app';
import { parseSettings } from '../lib/settings';
import { build, cdkContext, only, rawSettings } from './fixture';
import { groupId, reaches } from './network';

const REGION = 'eu-west-1';
/** The variant infra/test.sh synthesizes too: an existing VPC in eu-west-1, the config in S3, arm64. */
const VARIANT = JSON.parse(fs.readFileSync(path.resolve(__dirname, '..', '..', 'test', 'variant.json'), 'utf8'));
const EXISTING = VARIANT.existingVpcs[REGION];
// Each synthesis of the whole app takes seconds: build each variant once.
const plain = build();
const variant = build((raw) => Object.assign(raw, VARIANT));

function typesOf(t: Template): Set<string> {
  return new Set(Object.values(t.toJSON().Resources).map((r: any) => r.Type));
}

test('an existing VPC: no network resources, the given subnets for each part, existing gateways admitted', () => {
  const built = variant;
  const t = built.regions.get(REGION) as Template;
  for (const type of ['AWS::EC2::VPC', 'AWS::EC2::Subnet', 'AWS::EC2::NatGateway', 'AWS::EC2::InternetGateway', 'AWS::EC2::FlowLog', 'AWS::EC2::Route']) {
    assert.ok(!typesOf(t).has(type), `${type} is the operator's`);
  }
  const lbs = Object.values(t.findResources('AWS::ElasticLoadBalancingV2::LoadBalancer')).map((r: any) => r.Properties);
  const bySchema = Object.fromEntries(lbs.map((p) => [p.Scheme, p.Subnets]));
  assert.deepEqual(bySchema['internet-facing'], EXISTING.publicSubnetIds);
  assert.deepEqual(bySchema.internal, EXISTING.privateSubnetIds);
  const svc = only(t, 'AWS::ECS::Service').props;
  assert.deepEqual(svc.NetworkConfiguration.AwsvpcConfiguration.Subnets, EXISTING.privateSubnetIds);
  assert.deepEqual(only(t, 'AWS::ElastiCache::ServerlessCache').props.SubnetIds, EXISTING.privateSubnetIds);
  for (const g of Object.values(t.findResources('AWS::EC2::SecurityGroup')) as any[]) {
    assert.equal(g.Properties.VpcId, EXISTING.vpcId);
  }
  for (const tg of Object.values(t.findResources('AWS::ElasticLoadBalancingV2::TargetGroup')) as any[]) {
    assert.equal(tg.Properties.VpcId, EXISTING.vpcId);
  }
  // The existing gateways' group reaches the API and Valkey (ingress; its egress is the operator's).
  const existingGw = { sg: 'sg-0123456789abcdef0' };
  assert.ok(reaches(t, existingGw, groupId(t, 'shareplane API inside the VPC'), 443));
  assert.ok(reaches(t, existingGw, groupId(t, 'shareplane Valkey'), 6379));
  assert.ok(!reaches(t, existingGw, groupId(t, 'shareplane daemon tasks'), 8080));
  assert.ok(!reaches(t, { ip: '198.51.100.7' }, groupId(t, 'shareplane API inside the VPC'), 443));
  // Other Regions still get their own VPC.
  assert.ok(typesOf(built.regions.get('us-east-1') as Template).has('AWS::EC2::VPC'));
});

test('the config in S3: a KMS-encrypted, versioned, TLS-only bucket, written at deploy time, read by an init container', () => {
  const t = variant.regions.get(REGION) as Template;
  assert.equal(Object.values(t.findResources('AWS::SSM::Parameter')).filter((p: any) => p.Properties.Name.endsWith('/config')).length, 0);
  const buckets = Object.entries(t.findResources('AWS::S3::Bucket')) as [string, any][];
  const [bucketId, bucket] = buckets.find(([id]) => id.startsWith('ConfigBucket')) as [string, any];
  const sse = bucket.Properties.BucketEncryption.ServerSideEncryptionConfiguration[0];
  assert.equal(sse.ServerSideEncryptionByDefault.SSEAlgorithm, 'aws:kms');
  assert.deepEqual(sse.ServerSideEncryptionByDefault.KMSMasterKeyID, { 'Fn::GetAtt': [only(t, 'AWS::KMS::Key').id, 'Arn'] });
  assert.equal(bucket.Properties.VersioningConfiguration.Status, 'Enabled');
  assert.deepEqual(bucket.Properties.PublicAccessBlockConfiguration, {
    BlockPublicAcls: true, BlockPublicPolicy: true, IgnorePublicAcls: true, RestrictPublicBuckets: true,
  });
  assert.ok(bucket.Properties.LoggingConfiguration.DestinationBucketName, 'access logs');
  const policy = (Object.values(t.findResources('AWS::S3::BucketPolicy')) as any[]).find((p) => p.Properties.Bucket.Ref === bucketId);
  assert.ok(policy.Properties.PolicyDocument.Statement.some((s: any) => s.Effect === 'Deny' && s.Condition?.Bool?.['aws:SecureTransport'] === 'false'));
  // The object: written by CDK's deployment function, with the health check ids filled in at deploy time.
  const deploy = only(t, 'Custom::CDKBucketDeployment').props;
  assert.deepEqual(deploy.DestinationBucketName, { Ref: bucketId });
  assert.equal(deploy.SourceMarkers.length, 1);
  assert.equal(Object.keys(deploy.SourceMarkers[0]).length, 3, 'three health check ids, read at deploy time');

  const task = only(t, 'AWS::ECS::TaskDefinition').props;
  const [daemon, fetch] = task.ContainerDefinitions;
  assert.deepEqual(daemon.Command, ['run', '--config', '/etc/shareplane/config.toml']);
  assert.deepEqual(daemon.Secrets.map((x: any) => x.Name), ['SHAREPLANE_API_TOKEN', 'SHAREPLANE_ADMIN_TOKEN']);
  assert.deepEqual(daemon.DependsOn, [{ Condition: 'SUCCESS', ContainerName: 'fetch-config' }]);
  assert.deepEqual(daemon.MountPoints.find((m: any) => m.SourceVolume === 'config'), { ContainerPath: '/etc/shareplane', ReadOnly: true, SourceVolume: 'config' });
  assert.equal(fetch.Name, 'fetch-config');
  assert.equal(fetch.Essential, false);
  assert.equal(fetch.ReadonlyRootFilesystem, true);
  assert.equal(fetch.Image, 'public.ecr.aws/aws-cli/aws-cli:2.22.0');
  assert.deepEqual(fetch.Command, ['s3', 'cp', { 'Fn::Join': ['', ['s3://', { Ref: bucketId }, '/daemon.toml']] }, '/config/config.toml', '--only-show-errors']);

  // The task role reads that one object and decrypts only through S3; the execution role reads no config.
  const roleId = task.TaskRoleArn['Fn::GetAtt'][0];
  const statements: any[] = t.toJSON().Resources[roleId].Properties.Policies[0].PolicyDocument.Statement;
  const bySid = new Map(statements.map((s) => [s.Sid, s]));
  assert.deepEqual(bySid.get('ReadOwnConfigObject'), {
    Sid: 'ReadOwnConfigObject', Effect: 'Allow', Action: 's3:GetObject',
    Resource: { 'Fn::Join': ['', [{ 'Fn::GetAtt': [bucketId, 'Arn'] }, '/daemon.toml']] },
  });
  assert.deepEqual(bySid.get('DecryptOwnConfigObject').Condition, { StringEquals: { 'kms:ViaService': 's3.eu-west-1.amazonaws.com' } });
  const exec = task.ExecutionRoleArn['Fn::GetAtt'][0];
  const execPolicy = (Object.values(t.findResources('AWS::IAM::Policy')) as any[]).find((p) => JSON.stringify(p.Properties.Roles).includes(exec));
  assert.ok(!JSON.stringify(execPolicy).includes('ssm:'), 'the execution role reads no parameter');
  assert.match(JSON.stringify(t.toJSON().Outputs.ConfigObject.Value), /s3:\/\/.*daemon\.toml/);
});

test('past 8 KB the parameter refuses and says to use S3; S3 takes 200 limits', () => {
  // 64 limits (the most a parameter may carry) with long ids are more than 8 KB.
  const many = (n: number) => Array.from({ length: n }, (_, i) => ({
    id: `partner-${String(i).padStart(4, '0')}`.padEnd(64, 'x'), rate: 1000 + i, floor: 10, step_cap: 100, kind: 'capacity',
  }));
  const raw = rawSettings();
  raw.limits = many(64);
  const app = new App({ context: { ...cdkContext(), shareplane: raw } });
  assert.throws(() => buildDeployment(app, parseSettings(raw)), /SSM parameter holds at most 8192: set "configSource": "s3"/);
  const big = build((r) => { r.configSource = 's3'; r.limits = many(200); });
  const deploy = only(big.regions.get(REGION) as Template, 'Custom::CDKBucketDeployment');
  assert.ok(deploy, 'the config object is written');
  const bytes = Buffer.byteLength(fs.readFileSync(findDataAsset(big, 'daemon.toml')));
  assert.ok(bytes > 8192 * 2, `config of ${bytes} bytes`);
});

test('arm64: Graviton tasks and an arm64 image asset', () => {
  const t = variant.regions.get(REGION) as Template;
  assert.deepEqual(only(t, 'AWS::ECS::TaskDefinition').props.RuntimePlatform, { CpuArchitecture: 'ARM64', OperatingSystemFamily: 'LINUX' });
  assert.deepEqual(imageAssets(variant).map((a) => a.platform), ['linux/arm64']);
  const x86 = plain;
  assert.deepEqual(only(x86.regions.get(REGION) as Template, 'AWS::ECS::TaskDefinition').props.RuntimePlatform.CpuArchitecture, 'X86_64');
  assert.deepEqual(imageAssets(x86).map((a) => a.platform), ['linux/amd64']);
});

test('the image asset stages exactly what infra/Dockerfile copies: the workspace, tests/e2e, no build output', () => {
  const [asset] = imageAssets(plain);
  assert.equal(asset.file, 'infra/Dockerfile');
  const files = listFiles(asset.dir);
  const top = [...new Set(files.map((f) => f.split('/')[0]))].sort();
  assert.deepEqual(top, ['.dockerignore', 'Cargo.lock', 'Cargo.toml', 'crates', 'infra', 'tests']);
  assert.deepEqual(files.filter((f) => f.startsWith('infra/')), ['infra/Dockerfile']);
  assert.ok(files.filter((f) => f.startsWith('tests/')).every((f) => f.startsWith('tests/e2e/')), 'only tests/e2e of tests/');
  assert.ok(files.some((f) => /(^|\/)target\//.test(f)) === false, 'no target/');
  // Every workspace member's manifest is there (cargo loads them all, even to build one crate).
  const members = ['crates/shareplane', 'crates/shareplane-aws', 'crates/shareplane-core', 'crates/shareplane-limiter',
    'crates/shareplane-sim', 'crates/shareplane-store', 'tests/e2e'];
  for (const m of members) assert.ok(files.includes(`${m}/Cargo.toml`), m);
  // And every COPY source of the Dockerfile.
  const dockerfile = fs.readFileSync(path.join(asset.dir, 'infra/Dockerfile'), 'utf8');
  const sources = [...dockerfile.matchAll(/^COPY (?!--from)(.+) \S+$/gm)].flatMap((m) => m[1].split(/\s+/));
  assert.deepEqual(sources, ['Cargo.toml', 'Cargo.lock', 'crates', 'tests/e2e']);
  for (const src of sources) assert.ok(files.some((f) => f === src || f.startsWith(`${src}/`)), src);
});

interface ImageAsset { readonly dir: string; readonly file: string; readonly platform: string }

/** The distinct container image assets of the deployment's Region stacks, from the cloud assembly. */
function imageAssets(built: ReturnType<typeof build>): ImageAsset[] {
  const assembly = (built.deployment.global.node.root as App).synth();
  const seen = new Map<string, ImageAsset>();
  for (const name of fs.readdirSync(assembly.directory).filter((f) => f.endsWith('.assets.json'))) {
    const manifest = JSON.parse(fs.readFileSync(path.join(assembly.directory, name), 'utf8'));
    for (const [id, a] of Object.entries(manifest.dockerImages ?? {}) as [string, any][]) {
      seen.set(id, { dir: path.join(assembly.directory, a.source.directory), file: a.source.dockerFile, platform: a.source.platform });
    }
  }
  return [...seen.values()];
}

/** The staged file of the S3 deployment source holding `name` (Source.data writes it as a zip of one file). */
function findDataAsset(built: ReturnType<typeof build>, name: string): string {
  const assembly = (built.deployment.global.node.root as App).synth();
  for (const entry of fs.readdirSync(assembly.directory)) {
    const candidate = path.join(assembly.directory, entry, name);
    if (fs.existsSync(candidate)) return candidate;
  }
  throw new Error(`no staged ${name} in ${assembly.directory}`);
}

function listFiles(dir: string, prefix = ''): string[] {
  return fs.readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const rel = prefix + e.name;
    return e.isDirectory() ? listFiles(path.join(dir, e.name), `${rel}/`) : [rel];
  }).sort();
}
