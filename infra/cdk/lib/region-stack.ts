/**
 * One Region's stack: the network (new, or an existing VPC), the daemon as an ECS Fargate
 * service behind two load balancers (a public one whose name Route 53 health-checks, open only
 * to Route 53's health checkers, and an internal one that gateways use for `/v1/rules` and
 * `/v1/demand`), the daemon's config (an SSM parameter, or an object in S3), its two tokens (the
 * API token, which gateways hold too, and the admin token, the daemon tasks' only), the task role
 * of least privilege, an optional Valkey for the gateways' buckets, what the gateways need (the
 * daemon's base URL for `--rules`, in the outputs and an SSM parameter), and the alarms on the
 * daemon's and the gateways' metrics.
 */
import { createHash } from 'node:crypto';
import * as path from 'node:path';
import { Annotations, ArnFormat, CfnOutput, Duration, Fn, IgnoreMode, RemovalPolicy, Stack, StackProps } from 'aws-cdk-lib';
import * as acm from 'aws-cdk-lib/aws-certificatemanager';
import * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import * as cwActions from 'aws-cdk-lib/aws-cloudwatch-actions';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import * as ecrAssets from 'aws-cdk-lib/aws-ecr-assets';
import * as ecs from 'aws-cdk-lib/aws-ecs';
import * as elasticache from 'aws-cdk-lib/aws-elasticache';
import * as elbv2 from 'aws-cdk-lib/aws-elasticloadbalancingv2';
import * as iam from 'aws-cdk-lib/aws-iam';
import * as kms from 'aws-cdk-lib/aws-kms';
import * as logs from 'aws-cdk-lib/aws-logs';
import * as route53 from 'aws-cdk-lib/aws-route53';
import * as route53Targets from 'aws-cdk-lib/aws-route53-targets';
import * as s3 from 'aws-cdk-lib/aws-s3';
import * as s3deploy from 'aws-cdk-lib/aws-s3-deployment';
import * as secretsmanager from 'aws-cdk-lib/aws-secretsmanager';
import * as sns from 'aws-cdk-lib/aws-sns';
import * as snsSubscriptions from 'aws-cdk-lib/aws-sns-subscriptions';
import * as ssm from 'aws-cdk-lib/aws-ssm';
import { Construct } from 'constructs';
import { skipCheckov } from './checkov';
import { GATEWAY_ALARMS } from './gateway-alarms';
import { configInput, renderConfigToml, STANDARD_PARAMETER_LIMIT_BYTES } from './config-toml';
import { endpointName, HEALTH_PATH, tableArn as tableArnIn } from './global-stack';
import { ALARM_PERIOD_SECONDS, METRICS, STALE_AFTER_PERIODS, STRANDED_AFTER_SECONDS } from './metrics';
import { Settings } from './settings';

/** The daemon's HTTP port (/healthz, /readyz, /metrics, /v1/rules). */
export const DAEMON_PORT = 8080;
/** The daemon's `listen` inside its task. */
export const DAEMON_LISTEN = `0.0.0.0:${DAEMON_PORT}`;
/** ElastiCache Serverless: the endpoint (6379) and the reader endpoint (6380), both TLS. */
export const VALKEY_PORTS = { from: 6379, to: 6380 } as const;
/** The paths the internal load balancer forwards to the daemon; anything else gets 404. */
export const API_PATHS = ['/v1/*', '/readyz', '/healthz'] as const;
/** What the DaemonUrl output says: it is what `shareplane gateway --rules` takes. */
export const DAEMON_URL_DESCRIPTION =
  'The daemon API base URL inside the VPC: pass it as `shareplane gateway --rules` (the gateway GETs <it>/v1/rules and POSTs <it>/v1/demand)';
/** The config object's key in the Region's config bucket (configSource "s3"). */
export const CONFIG_OBJECT_KEY = 'daemon.toml';
/** Where the daemon reads the file the init container fetched (configSource "s3"). */
export const CONFIG_FILE = '/etc/shareplane/config.toml';
/** SSM advanced parameters hold at most 8 KiB. */
export const ADVANCED_PARAMETER_LIMIT_BYTES = 2 * STANDARD_PARAMETER_LIMIT_BYTES;
/** The repository root: the Docker build context of the daemon's image (see /.dockerignore). */
const REPO_ROOT = path.resolve(__dirname, '..', '..', '..', '..');

/** The AWS-managed prefix list of Route 53's health checkers in a Region (IPv4). */
export function healthCheckersPrefixList(region: string): string {
  return `com.amazonaws.${region}.route53-healthchecks`;
}

/** The name gateways use for the daemon's API, inside the VPC (an internal load balancer). */
export function apiName(s: Settings, region: string): string {
  return `api.${endpointName(s, region)}`;
}

export interface RegionStackProps extends StackProps {
  readonly settings: Settings;
  /** Every Region's health check id, in the order of `settings.regions`. */
  readonly healthCheckIds: readonly string[];
}

/** The VPC and the subnets each part runs in. */
interface Network {
  readonly vpc: ec2.IVpc;
  readonly publicSubnets: ec2.SubnetSelection;
  readonly privateSubnets: ec2.SubnetSelection;
  /** Existing gateways' security groups (existing VPCs only), admitted like the stack's own. */
  readonly gatewayGroups: readonly ec2.ISecurityGroup[];
}

/** The daemon's two secrets: the API (demand) token and the admin token. */
interface DaemonTokens {
  readonly apiToken: secretsmanager.ISecret;
  readonly adminToken: secretsmanager.ISecret;
}

/** How the config reaches the task: what the container gets and what the task role must read. */
interface ConfigDelivery {
  /** For the outputs: the parameter name or the object's S3 URI. */
  readonly location: string;
  readonly parameter?: ssm.StringParameter;
  readonly object?: { readonly bucket: s3.IBucket; readonly key: string };
}

export class RegionStack extends Stack {
  /** The ECS tasks' role (settings.ecsService), or undefined. */
  readonly taskRole?: iam.Role;
  /** Without the ECS service: the same statements as a managed policy, for the pods' role. */
  readonly daemonPolicy?: iam.ManagedPolicy;
  /** The daemons' ECS service, or undefined with `ecsService: false`. */
  readonly service?: ecs.FargateService;
  /** The security group to attach to this Region's gateways (reaches the API and Valkey). */
  readonly gatewaySecurityGroup: ec2.SecurityGroup;
  private readonly key: kms.Key;
  private configDigest = '';

  constructor(scope: Construct, id: string, props: RegionStackProps) {
    super(scope, id, props);
    const s = props.settings;
    const region = Stack.of(this).region;
    this.key = this.encryptionKey();
    const net = this.network(s, region);
    const logBucket = this.logBucket(s);
    const config = this.config(s, region, props.healthCheckIds, logBucket);
    const statements = daemonStatements(this, s, region, config, this.key);
    if (s.ecsService) {
      this.taskRole = new iam.Role(this, 'DaemonTaskRole', {
        assumedBy: new iam.ServicePrincipal('ecs-tasks.amazonaws.com'),
        description: DAEMON_POLICY_DESCRIPTION,
        inlinePolicies: { shareplane: new iam.PolicyDocument({ statements }) },
      });
    } else {
      // The daemon runs elsewhere (EKS: IRSA or Pod Identity): its role is the team's; this is
      // what to attach to it.
      this.daemonPolicy = new iam.ManagedPolicy(this, 'DaemonPolicy', { description: DAEMON_POLICY_DESCRIPTION, statements });
    }
    const apiToken = new secretsmanager.Secret(this, 'ApiToken', {
      description: 'shareplane daemon API token (bearer token of the write endpoints)',
      encryptionKey: this.key,
      generateSecretString: { passwordLength: 48, excludePunctuation: true },
    });
    // The operator's token (abandon and other actions beyond demand): the daemon tasks get it,
    // gateways never do (it is not in the gateway settings below).
    const adminToken = new secretsmanager.Secret(this, 'AdminToken', {
      description: 'shareplane daemon admin token (bearer token of the operator endpoints, e.g. abandon)',
      encryptionKey: this.key,
      generateSecretString: { passwordLength: 48, excludePunctuation: true },
    });

    // Security groups: who may talk to whom. Every rule names its peer group; only the public
    // endpoint admits addresses, and only Route 53's health checkers.
    const group = (gid: string, description: string) =>
      new ec2.SecurityGroup(this, gid, { vpc: net.vpc, description, allowAllOutbound: false });
    const taskSg = group('DaemonSecurityGroup', 'shareplane daemon tasks');
    const publicSg = group('LoadBalancerSecurityGroup', 'shareplane endpoint: HTTPS from Route 53 health checkers');
    const apiSg = group('ApiLoadBalancerSecurityGroup', 'shareplane API inside the VPC: HTTPS from the gateways');
    this.gatewaySecurityGroup = group('GatewaySecurityGroup', 'shareplane gateways: attach to reach the daemon API and Valkey');
    const gateways: ec2.ISecurityGroup[] = [this.gatewaySecurityGroup, ...net.gatewayGroups];
    const checkers = ec2.PrefixList.fromLookup(this, 'Route53HealthCheckers', {
      prefixListName: healthCheckersPrefixList(region),
    });
    publicSg.addIngressRule(ec2.Peer.prefixList(checkers.prefixListId), ec2.Port.tcp(443), 'HTTPS from Route 53 health checkers');
    for (const lb of [publicSg, apiSg]) {
      lb.addEgressRule(taskSg, ec2.Port.tcp(DAEMON_PORT), 'to the daemon tasks');
      taskSg.addIngressRule(lb, ec2.Port.tcp(DAEMON_PORT), 'from the load balancer');
    }
    for (const gw of gateways) apiSg.addIngressRule(gw, ec2.Port.tcp(443), 'HTTPS from the gateways');
    this.gatewaySecurityGroup.addEgressRule(apiSg, ec2.Port.tcp(443), 'to the daemon API');
    taskSg.addEgressRule(ec2.Peer.anyIpv4(), ec2.Port.tcp(443), 'AWS APIs (DynamoDB, CloudWatch, SSM, S3, ECR, Logs)');

    const certificate = this.certificate(s, region);
    const publicListener = this.publicEndpoint(s, region, net, publicSg, certificate, logBucket);
    const apiListener = this.apiEndpoint(s, region, net, apiSg, certificate, logBucket);

    if (this.taskRole !== undefined) {
      this.service = this.ecsService(s, region, net, taskSg, { apiToken, adminToken }, config);
    }
    const healthTargets = this.targetGroup('DaemonTargets', net.vpc);
    publicListener.addAction('Health', {
      priority: 10,
      conditions: [elbv2.ListenerCondition.pathPatterns([HEALTH_PATH, '/healthz'])],
      action: elbv2.ListenerAction.forward([healthTargets]),
    });
    const apiTargets = this.targetGroup('DaemonApiTargets', net.vpc);
    apiListener.addAction('Api', {
      priority: 10,
      conditions: [elbv2.ListenerCondition.pathPatterns([...API_PATHS])],
      action: elbv2.ListenerAction.forward([apiTargets]),
    });

    const valkeyUrl = s.valkey.enabled ? this.valkey(s, net, gateways) : '';
    const api = `https://${apiName(s, region)}`;
    const gatewaySettings = new ssm.StringParameter(this, 'GatewaySettings', {
      parameterName: `/shareplane/${s.tableName}/gateway`,
      description: 'shareplane: what a gateway in this Region needs (JSON: daemon base URL for --rules, token secret, Valkey URL)',
      stringValue: Stack.of(this).toJsonString({
        daemonUrl: api,
        rulesUrl: `${api}/v1/rules`,
        demandUrl: `${api}/v1/demand`,
        apiTokenSecretArn: apiToken.secretArn,
        redisUrl: valkeyUrl,
        // ElastiCache Serverless is cluster mode: a gateway left in standalone mode would send a
        // request's limits to one node and fail on every key another node holds.
        redisMode: valkeyUrl === '' ? '' : 'cluster',
        gatewaySecurityGroupId: this.gatewaySecurityGroup.securityGroupId,
      }),
    });

    this.alarms(s, region, this.key);
    const out = (oid: string, value: string, description: string) => new CfnOutput(this, oid, { value, description });
    out('Endpoint', `https://${endpointName(s, region)}${HEALTH_PATH}`, 'The public health endpoint Route 53 probes');
    out('DaemonUrl', api, DAEMON_URL_DESCRIPTION);
    out('RulesUrl', `${api}/v1/rules`, 'The rule set\'s endpoint (GET, long-poll; for curl): a gateway takes DaemonUrl as --rules');
    out('DemandUrl', `${api}/v1/demand`, 'POST demand totals with the API token as bearer token');
    out('ApiTokenSecretArn', apiToken.secretArn, 'Secrets Manager secret holding the API token (daemons, and gateways as SHAREPLANE_DEMAND_TOKEN)');
    out('AdminTokenSecretArn', adminToken.secretArn, 'Secrets Manager secret holding the admin token (daemons only, SHAREPLANE_ADMIN_TOKEN)');
    out('GatewaySecurityGroupId', this.gatewaySecurityGroup.securityGroupId, 'Attach to the gateways');
    out('GatewaySettingsParameter', gatewaySettings.parameterName, 'SSM parameter with all of the above as JSON');
    if (config.parameter) out('ConfigParameter', config.location, 'The SSM parameter holding the daemon config');
    else out('ConfigObject', config.location, 'The S3 object holding the daemon config');
    if (valkeyUrl !== '') out('ValkeyUrl', valkeyUrl, 'The gateways\' Redis/Valkey (TLS only)');
    if (this.daemonPolicy !== undefined) {
      // The daemon runs elsewhere: what its pods need to take the ECS tasks' place.
      out('DaemonPolicyArn', this.daemonPolicy.managedPolicyArn, 'Attach to the daemon pods\' role (IRSA or Pod Identity): the ECS task role\'s statements');
      out('DaemonTargetGroupArn', healthTargets.targetGroupArn, 'Register the daemon pods here (IP targets, port 8080): the public endpoint Route 53 probes');
      out('DaemonApiTargetGroupArn', apiTargets.targetGroupArn, 'Register the daemon pods here (IP targets, port 8080): the internal API load balancer of DaemonUrl');
      out('DaemonSecurityGroupId', taskSg.securityGroupId, 'Attach to the daemon pods (security groups for pods): both load balancers reach them on 8080');
    }
  }

  /** The daemons as an ECS Fargate service of `desiredCount` tasks in the private subnets. */
  private ecsService(
    s: Settings, region: string, net: Network, taskSg: ec2.ISecurityGroup, tokens: DaemonTokens, config: ConfigDelivery,
  ): ecs.FargateService {
    const logGroup = new logs.LogGroup(this, 'DaemonLogs', {
      logGroupName: `/shareplane/${s.tableName}/daemon`,
      retention: s.logRetentionDays as logs.RetentionDays,
      encryptionKey: this.key,
      removalPolicy: RemovalPolicy.RETAIN,
    });
    const cluster = new ecs.Cluster(this, 'Cluster', {
      vpc: net.vpc,
      containerInsightsV2: ecs.ContainerInsights.ENABLED,
    });
    return new ecs.FargateService(this, 'Daemon', {
      cluster,
      taskDefinition: this.taskDefinition(s, region, logGroup, tokens, config),
      desiredCount: s.desiredCount,
      minHealthyPercent: 100,
      maxHealthyPercent: 200,
      circuitBreaker: { enable: true, rollback: true },
      healthCheckGracePeriod: Duration.seconds(60),
      vpcSubnets: net.privateSubnets,
      securityGroups: [taskSg],
      assignPublicIp: false,
      propagateTags: ecs.PropagatedTagSource.SERVICE,
    });
  }

  /** One key for this Region's logs and alarm topic, with yearly rotation. */
  private encryptionKey(): kms.Key {
    const key = new kms.Key(this, 'Key', {
      description: 'shareplane: encrypts the logs, the alarm topic, the API token, the config bucket and Valkey',
      enableKeyRotation: true,
      removalPolicy: RemovalPolicy.RETAIN,
    });
    key.addToResourcePolicy(
      new iam.PolicyStatement({
        sid: 'CloudWatchLogs',
        principals: [new iam.ServicePrincipal(`logs.${this.region}.amazonaws.com`)],
        actions: ['kms:Encrypt*', 'kms:Decrypt*', 'kms:ReEncrypt*', 'kms:GenerateDataKey*', 'kms:Describe*'],
        resources: ['*'],
        conditions: {
          ArnLike: { 'kms:EncryptionContext:aws:logs:arn': this.formatArn({ service: 'logs', resource: 'log-group', resourceName: '*', arnFormat: ArnFormat.COLON_RESOURCE_NAME }) },
        },
      }),
    );
    key.addToResourcePolicy(
      new iam.PolicyStatement({
        sid: 'CloudWatchAlarms',
        principals: [new iam.ServicePrincipal('cloudwatch.amazonaws.com')],
        actions: ['kms:Decrypt', 'kms:GenerateDataKey*'],
        resources: ['*'],
      }),
    );
    return key;
  }

  private network(s: Settings, region: string): Network {
    const existing = s.existingVpcs[region];
    if (existing !== undefined) {
      // The operator's VPC: its flow logs, routes and endpoints are theirs. Only ids are known
      // at synth time (no lookup), which is all the resources below need.
      const vpc = ec2.Vpc.fromVpcAttributes(this, 'Vpc', { vpcId: existing.vpcId, availabilityZones: Fn.getAzs() });
      // Nothing here selects subnets by zone or reads their route tables: every part names its subnets.
      Annotations.of(vpc).acknowledgeWarning('@aws-cdk/aws-ec2:vpcAttributeIsListTokenavailabilityZones', 'subnets are given by id');
      const subnets = (kind: string, ids: readonly string[]) => ({
        subnets: ids.map((sid, i) => {
          const subnet = ec2.Subnet.fromSubnetId(this, `${kind}Subnet${i}`, sid);
          Annotations.of(subnet).acknowledgeWarning('@aws-cdk/aws-ec2:noSubnetRouteTableId', 'no route table is read');
          return subnet;
        }),
      });
      return {
        vpc,
        publicSubnets: subnets('Public', existing.publicSubnetIds),
        privateSubnets: subnets('Private', existing.privateSubnetIds),
        gatewayGroups: existing.gatewaySecurityGroupIds.map((gid, i) =>
          ec2.SecurityGroup.fromSecurityGroupId(this, `Gateways${i}`, gid, { mutable: false })),
      };
    }
    const vpc = new ec2.Vpc(this, 'Vpc', {
      maxAzs: 2,
      natGateways: s.natGateways,
      // Nothing uses the default group; restricting it would need a CDK custom resource (a Lambda).
      restrictDefaultSecurityGroup: false,
      subnetConfiguration: [
        { name: 'public', subnetType: ec2.SubnetType.PUBLIC, cidrMask: 24 },
        { name: 'private', subnetType: ec2.SubnetType.PRIVATE_WITH_EGRESS, cidrMask: 24 },
      ],
    });
    const flowLogs = new logs.LogGroup(this, 'FlowLogs', {
      logGroupName: `/shareplane/${s.tableName}/vpc-flow`,
      retention: s.logRetentionDays as logs.RetentionDays,
      encryptionKey: this.key,
      removalPolicy: RemovalPolicy.RETAIN,
    });
    vpc.addFlowLog('FlowLog', { destination: ec2.FlowLogDestination.toCloudWatchLogs(flowLogs) });
    return {
      vpc,
      publicSubnets: { subnetType: ec2.SubnetType.PUBLIC },
      privateSubnets: { subnetType: ec2.SubnetType.PRIVATE_WITH_EGRESS },
      gatewayGroups: [],
    };
  }

  /** Access logs of both load balancers and of the config bucket. */
  private logBucket(s: Settings): s3.Bucket {
    const bucket = new s3.Bucket(this, 'LoadBalancerLogs', {
      encryption: s3.BucketEncryption.S3_MANAGED,
      blockPublicAccess: s3.BlockPublicAccess.BLOCK_ALL,
      enforceSSL: true,
      versioned: true,
      lifecycleRules: [{ expiration: Duration.days(s.logRetentionDays), noncurrentVersionExpiration: Duration.days(30) }],
      removalPolicy: RemovalPolicy.RETAIN,
    });
    skipCheckov(bucket, [
      { id: 'CKV_AWS_18', comment: 'this bucket holds access logs itself; logging it would need a bucket per bucket' },
    ]);
    return bucket;
  }

  /**
   * The daemon's config with every Region's health check id: an SSM parameter in this Region
   * (at most 8 KB), or an object in this Region's config bucket.
   */
  private config(s: Settings, region: string, healthCheckIds: readonly string[], logBucket: s3.IBucket): ConfigDelivery {
    const input = (ids: readonly string[]) => configInput(s, region, ids, DAEMON_LISTEN);
    // Health check ids are 36-character UUIDs; measure with placeholders of that length.
    const sized = renderConfigToml(input(s.regions.map(() => '0'.repeat(36))));
    const bytes = Buffer.byteLength(sized, 'utf8');
    this.configDigest = createHash('sha256').update(sized).digest('hex');
    const text = renderConfigToml(input(healthCheckIds));
    if (s.configSource === 's3') {
      const bucket = new s3.Bucket(this, 'ConfigBucket', {
        encryption: s3.BucketEncryption.KMS,
        encryptionKey: this.key,
        bucketKeyEnabled: true,
        blockPublicAccess: s3.BlockPublicAccess.BLOCK_ALL,
        enforceSSL: true,
        versioned: true,
        serverAccessLogsBucket: logBucket,
        serverAccessLogsPrefix: 'config-access/',
        lifecycleRules: [{ noncurrentVersionExpiration: Duration.days(90) }],
        removalPolicy: RemovalPolicy.RETAIN,
      });
      skipCheckov(bucket, [
        { id: 'CKV_AWS_18', comment: 'access logging is on (to the Region log bucket); checkov cannot follow the reference' },
      ]);
      // Written at deploy time (the health check ids are known only then) by CDK's deployment
      // function; the tasks read it at start.
      new s3deploy.BucketDeployment(this, 'DaemonConfigObject', {
        destinationBucket: bucket,
        sources: [s3deploy.Source.data(CONFIG_OBJECT_KEY, text)],
        prune: false,
        retainOnDelete: true,
        memoryLimit: 256,
      });
      return { location: `s3://${bucket.bucketName}/${CONFIG_OBJECT_KEY}`, object: { bucket, key: CONFIG_OBJECT_KEY } };
    }
    if (bytes > ADVANCED_PARAMETER_LIMIT_BYTES) {
      throw new Error(
        `the daemon config is ${bytes} bytes; an SSM parameter holds at most ${ADVANCED_PARAMETER_LIMIT_BYTES}: ` +
          'set "configSource": "s3"',
      );
    }
    const parameter = new ssm.StringParameter(this, 'DaemonConfig', {
      parameterName: `/shareplane/${s.tableName}/config`,
      description: 'shareplane daemon config (TOML), passed to the tasks as SHAREPLANE_CONFIG_TOML',
      stringValue: text,
      tier: bytes > STANDARD_PARAMETER_LIMIT_BYTES ? ssm.ParameterTier.ADVANCED : ssm.ParameterTier.STANDARD,
    });
    return { location: parameter.parameterName, parameter };
  }

  private taskDefinition(
    s: Settings, region: string, logGroup: logs.ILogGroup, tokens: DaemonTokens, config: ConfigDelivery,
  ): ecs.FargateTaskDefinition {
    const task = new ecs.FargateTaskDefinition(this, 'DaemonTask', {
      cpu: s.cpu,
      memoryLimitMiB: s.memoryMiB,
      taskRole: this.taskRole,
      runtimePlatform: {
        operatingSystemFamily: ecs.OperatingSystemFamily.LINUX,
        cpuArchitecture: s.cpuArchitecture === 'arm64' ? ecs.CpuArchitecture.ARM64 : ecs.CpuArchitecture.X86_64,
      },
      volumes: [{ name: 'tmp' }, ...(config.object ? [{ name: 'config' }, { name: 'fetch-tmp' }] : [])],
    });
    const secrets: Record<string, ecs.Secret> = {};
    if (config.parameter) secrets.SHAREPLANE_CONFIG_TOML = ecs.Secret.fromSsmParameter(config.parameter);
    secrets.SHAREPLANE_API_TOKEN = ecs.Secret.fromSecretsManager(tokens.apiToken);
    secrets.SHAREPLANE_ADMIN_TOKEN = ecs.Secret.fromSecretsManager(tokens.adminToken);
    const container = task.addContainer('shareplane', {
      image: daemonImage(s),
      // Without --config the daemon reads its config from SHAREPLANE_CONFIG_TOML.
      command: config.object ? ['run', '--config', CONFIG_FILE] : ['run'],
      essential: true,
      readonlyRootFilesystem: true,
      portMappings: [{ containerPort: DAEMON_PORT, protocol: ecs.Protocol.TCP }],
      secrets,
      environment: {
        // Changes whenever the config's settings change, so that a new task definition rolls
        // the service; editing the parameter by hand needs `aws ecs update-service --force-new-deployment`.
        SHAREPLANE_CONFIG_DIGEST: this.configDigest,
        RUST_LOG: 'info',
      },
      logging: ecs.LogDrivers.awsLogs({ logGroup, streamPrefix: 'daemon' }),
      // The daemon's shutdown is bounded; ECS sends SIGTERM, then SIGKILL after this.
      stopTimeout: Duration.seconds(30),
    });
    container.addMountPoints({ containerPath: '/tmp', sourceVolume: 'tmp', readOnly: false });
    if (config.object) {
      // The config is copied from S3 before the daemon starts, into a volume only these two
      // containers share; the daemon mounts it read-only. A failed copy fails the task.
      const fetch = task.addContainer('fetch-config', {
        image: ecs.ContainerImage.fromRegistry(s.configFetchImage),
        essential: false,
        readonlyRootFilesystem: true,
        command: ['s3', 'cp', `s3://${config.object.bucket.bucketName}/${config.object.key}`, '/config/config.toml', '--only-show-errors'],
        environment: { AWS_REGION: region, HOME: '/tmp' },
        logging: ecs.LogDrivers.awsLogs({ logGroup, streamPrefix: 'fetch-config' }),
      });
      fetch.addMountPoints(
        { containerPath: '/config', sourceVolume: 'config', readOnly: false },
        { containerPath: '/tmp', sourceVolume: 'fetch-tmp', readOnly: false },
      );
      container.addMountPoints({ containerPath: path.posix.dirname(CONFIG_FILE), sourceVolume: 'config', readOnly: true });
      container.addContainerDependencies({ container: fetch, condition: ecs.ContainerDependencyCondition.SUCCESS });
    }
    return task;
  }

  /** One certificate for the public endpoint and the internal API name, validated in the zone. */
  private certificate(s: Settings, region: string): acm.Certificate {
    const zone = this.zone(s);
    return new acm.Certificate(this, 'Certificate', {
      domainName: endpointName(s, region),
      subjectAlternativeNames: [apiName(s, region)],
      validation: acm.CertificateValidation.fromDns(zone),
    });
  }

  private zone(s: Settings): route53.IHostedZone {
    const existing = this.node.tryFindChild('Zone') as route53.IHostedZone | undefined;
    return existing ?? route53.HostedZone.fromHostedZoneAttributes(this, 'Zone', {
      hostedZoneId: s.hostedZoneId,
      zoneName: s.hostedZoneName,
    });
  }

  /** The internet-facing endpoint Route 53 probes: HTTPS, /readyz and /healthz only. */
  private publicEndpoint(
    s: Settings, region: string, net: Network, sg: ec2.ISecurityGroup, certificate: acm.ICertificate, logBucket: s3.IBucket,
  ): elbv2.ApplicationListener {
    const alb = new elbv2.ApplicationLoadBalancer(this, 'LoadBalancer', {
      vpc: net.vpc,
      internetFacing: true,
      vpcSubnets: net.publicSubnets,
      securityGroup: sg,
      dropInvalidHeaderFields: true,
      deletionProtection: true,
    });
    alb.logAccessLogs(logBucket, 'alb');
    const listener = alb.addListener('Https', {
      port: 443,
      protocol: elbv2.ApplicationProtocol.HTTPS,
      certificates: [certificate],
      sslPolicy: elbv2.SslPolicy.RECOMMENDED_TLS,
      open: false,
      // Only the health endpoints are public; everything else is answered here.
      defaultAction: elbv2.ListenerAction.fixedResponse(404, { contentType: 'text/plain', messageBody: 'not found' }),
    });
    new route53.ARecord(this, 'EndpointRecord', {
      zone: this.zone(s),
      recordName: endpointName(s, region),
      target: route53.RecordTarget.fromAlias(new route53Targets.LoadBalancerTarget(alb)),
    });
    return listener;
  }

  /**
   * The gateways' way in: an internal HTTPS load balancer in the private subnets that forwards
   * the API paths to the daemon tasks. Its name lives in the public zone but resolves to private
   * addresses, so it works from the VPC and from networks peered with it.
   */
  private apiEndpoint(
    s: Settings, region: string, net: Network, sg: ec2.ISecurityGroup, certificate: acm.ICertificate, logBucket: s3.IBucket,
  ): elbv2.ApplicationListener {
    const alb = new elbv2.ApplicationLoadBalancer(this, 'ApiLoadBalancer', {
      vpc: net.vpc,
      internetFacing: false,
      vpcSubnets: net.privateSubnets,
      securityGroup: sg,
      dropInvalidHeaderFields: true,
      deletionProtection: true,
      // Longer than the daemon's longest long-poll (30 s).
      idleTimeout: Duration.seconds(60),
    });
    alb.logAccessLogs(logBucket, 'api');
    const listener = alb.addListener('Https', {
      port: 443,
      protocol: elbv2.ApplicationProtocol.HTTPS,
      certificates: [certificate],
      sslPolicy: elbv2.SslPolicy.RECOMMENDED_TLS,
      open: false,
      defaultAction: elbv2.ListenerAction.fixedResponse(404, { contentType: 'text/plain', messageBody: 'not found' }),
    });
    new route53.ARecord(this, 'ApiRecord', {
      zone: this.zone(s),
      recordName: apiName(s, region),
      target: route53.RecordTarget.fromAlias(new route53Targets.LoadBalancerTarget(alb)),
    });
    return listener;
  }

  /**
   * A target group of the daemon tasks, healthy when /readyz says so. Without the ECS service it
   * starts empty: the daemon pods register into it (the chart's TargetGroupBinding).
   */
  private targetGroup(tid: string, vpc: ec2.IVpc): elbv2.ApplicationTargetGroup {
    return new elbv2.ApplicationTargetGroup(this, tid, {
      vpc,
      port: DAEMON_PORT,
      protocol: elbv2.ApplicationProtocol.HTTP,
      targetType: elbv2.TargetType.IP,
      targets: this.service === undefined ? [] : [this.service],
      deregistrationDelay: Duration.seconds(30),
      healthCheck: {
        path: HEALTH_PATH,
        interval: Duration.seconds(10),
        timeout: Duration.seconds(5),
        healthyThresholdCount: 2,
        unhealthyThresholdCount: 3,
        healthyHttpCodes: '200',
      },
    });
  }

  /**
   * ElastiCache Serverless for Valkey in the private subnets, encrypted with the Region's key;
   * serverless caches accept TLS only. Returns the gateways' `rediss://` URL.
   */
  private valkey(s: Settings, net: Network, gateways: readonly ec2.ISecurityGroup[]): string {
    const sg = new ec2.SecurityGroup(this, 'ValkeySecurityGroup', {
      vpc: net.vpc,
      description: 'shareplane Valkey: TLS from the gateways only',
      allowAllOutbound: false,
    });
    const ports = ec2.Port.tcpRange(VALKEY_PORTS.from, VALKEY_PORTS.to);
    for (const gw of gateways) sg.addIngressRule(gw, ports, 'Valkey (TLS) from the gateways');
    this.gatewaySecurityGroup.addEgressRule(sg, ports, 'to Valkey (TLS)');
    const cache = new elasticache.CfnServerlessCache(this, 'Valkey', {
      serverlessCacheName: valkeyName(s.tableName),
      description: 'shareplane: the gateways\' token buckets',
      engine: 'valkey',
      majorEngineVersion: '8',
      kmsKeyId: this.key.keyArn,
      securityGroupIds: [sg.securityGroupId],
      subnetIds: net.vpc.selectSubnets(net.privateSubnets).subnetIds,
      cacheUsageLimits: {
        dataStorage: { maximum: s.valkey.dataStorageMaxGb, unit: 'GB' },
        ecpuPerSecond: { maximum: s.valkey.ecpuPerSecondMax },
      },
    });
    return `rediss://${cache.attrEndpointAddress}:${cache.attrEndpointPort}`;
  }

  private alarms(s: Settings, region: string, key: kms.IKey): void {
    const topic = new sns.Topic(this, 'Alarms', { displayName: `shareplane alarms (${region})`, masterKey: key });
    if (s.alarmEmail !== '') topic.addSubscription(new snsSubscriptions.EmailSubscription(s.alarmEmail));
    const action = new cwActions.SnsAction(topic);
    const metric = (name: string, dims: Record<string, string>, statistic: string) =>
      new cloudwatch.Metric({
        namespace: s.metricNamespace,
        metricName: name,
        dimensionsMap: { Region: region, ...dims },
        statistic,
        period: Duration.seconds(ALARM_PERIOD_SECONDS),
      });
    const add = (id: string, what: string, props: Omit<cloudwatch.AlarmProps, 'alarmName' | 'alarmDescription'>) => {
      const alarm = new cloudwatch.Alarm(this, id, {
        alarmName: `shareplane-${region}-${id}`,
        alarmDescription: `${what} See infra/README.md, "Alarms".`,
        ...props,
      });
      alarm.addAlarmAction(action);
      alarm.addOkAction(action);
    };
    for (const peer of s.regions.filter((r) => r !== region)) {
      add(`RecordStale-${peer}`, `${region} has seen no new record from ${peer} for more than ${STALE_AFTER_PERIODS} periods.`, {
        metric: metric(METRICS.peerRecordAgeSeconds.name, { Peer: peer }, 'Maximum'),
        threshold: STALE_AFTER_PERIODS * s.periodSeconds,
        comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
        evaluationPeriods: 2,
        datapointsToAlarm: 2,
        treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
      });
    }
    for (const l of s.limits) {
      add(`SumOfSharesAboveLimit-${l.id}`, `The sum of shares of ${l.id} seen by ${region} is above the limit ${l.rate}/s.`, {
        metric: metric(METRICS.seenSumOfShares.name, { Limit: l.id }, 'Maximum'),
        threshold: l.rate,
        comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
        evaluationPeriods: 1,
        treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
      });
    }
    add('LimitsAboveRate', `Some limit's shares, as ${region} sees them, add up to more than its rate (every limit counted).`, {
      metric: metric(METRICS.limitsAboveRate.name, {}, 'Maximum'),
      threshold: 0,
      comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
      evaluationPeriods: 1,
      treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
    });
    add('RejectedRecords', `${region} rejected a peer record that failed validation.`, {
      metric: metric(METRICS.rejectedRecords.name, {}, 'Sum'),
      threshold: 0,
      comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
      evaluationPeriods: 1,
      treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
    });
    add('RebalancesWithoutFreshData', `${region} rebalanced while some peer's record was not fresh.`, {
      metric: metric(METRICS.rebalancesWithoutFreshData.name, {}, 'Sum'),
      threshold: 0,
      comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
      evaluationPeriods: 1,
      treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
    });
    add('StrandedRoom', `${region} has been unable to close a peer's ended epoch for want of its last record for more than ${STRANDED_AFTER_SECONDS} s: that room is held by nobody.`, {
      metric: metric(METRICS.longestWaitForRecordSeconds.name, {}, 'Maximum'),
      threshold: STRANDED_AFTER_SECONDS,
      comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
      evaluationPeriods: 1,
      treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
    });
    add('RaiseHeldBack', `A limit's raise in ${region} has waited more than ${STRANDED_AFTER_SECONDS} s for a peer to account with ${region}'s new epoch: the raise's room is unused.`, {
      metric: metric(METRICS.longestRaiseWaitSeconds.name, {}, 'Maximum'),
      threshold: STRANDED_AFTER_SECONDS,
      comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
      evaluationPeriods: 1,
      treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
    });
    add('HealthUnknown', `The health verdict of some Region, as ${region} reads it, has been unknown for more than ${STRANDED_AFTER_SECONDS} s: were that Region lost, it would never be reclaimed. Check its health check and its CloudWatch data.`, {
      metric: metric(METRICS.longestHealthUnknownSeconds.name, {}, 'Maximum'),
      threshold: STRANDED_AFTER_SECONDS,
      comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
      evaluationPeriods: 1,
      treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
    });
    add('LimitsMismatch', `${region} runs other limits than some peer, for longer than the daemon's rollout window: the Regions do not hold one limit.`, {
      metric: metric(METRICS.limitsMismatchPeers.name, {}, 'Maximum'),
      threshold: 0,
      comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
      evaluationPeriods: 1,
      treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
    });
    add('NotReady', `A shareplane daemon in ${region} is not ready, or publishes no metrics at all.`, {
      metric: metric(METRICS.ready.name, {}, 'Minimum'),
      threshold: 1,
      comparisonOperator: cloudwatch.ComparisonOperator.LESS_THAN_THRESHOLD,
      evaluationPeriods: 2,
      datapointsToAlarm: 2,
      // No datapoint means no daemon publishes: that is not ready either.
      treatMissingData: cloudwatch.TreatMissingData.BREACHING,
    });
    for (const g of GATEWAY_ALARMS) {
      add(g.id, g.description(region), {
        metric: metric(g.metricName, {}, g.statistic),
        threshold: g.threshold,
        comparisonOperator: g.comparison,
        evaluationPeriods: g.evaluationPeriods,
        datapointsToAlarm: g.datapointsToAlarm,
        // No datapoint: no gateway ships metrics (see gateway-alarms.ts), not a gateway in trouble.
        treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
      });
    }
  }
}

const DAEMON_POLICY_DESCRIPTION =
  'shareplane daemon: read the records, write its own Region items, read health, put metrics, read its config';

/**
 * The task role's statements: read the table; write only this Region's own items; read CloudWatch
 * metrics (Route 53's HealthCheckStatus in us-east-1); put metrics only in shareplane's namespace;
 * with the config in S3, read that one object (the init container runs with the same role).
 */
function daemonStatements(scope: Construct, s: Settings, region: string, config: ConfigDelivery, key: kms.IKey): iam.PolicyStatement[] {
  // The same ARN the limits writer's policy names for this Region (global-stack.ts).
  const tableArn = tableArnIn(scope, s.tableName, region);
  const statements = [
    new iam.PolicyStatement({
      sid: 'ReadAllRegionsRecords',
      actions: ['dynamodb:GetItem', 'dynamodb:Query', 'dynamodb:BatchGetItem', 'dynamodb:Scan'],
      resources: [tableArn],
    }),
    new iam.PolicyStatement({
      sid: 'WriteOwnRegionItemsOnly',
      actions: ['dynamodb:PutItem', 'dynamodb:UpdateItem', 'dynamodb:DeleteItem', 'dynamodb:ConditionCheckItem'],
      resources: [tableArn],
      conditions: { 'ForAllValues:StringEquals': { 'dynamodb:LeadingKeys': [region] } },
    }),
    new iam.PolicyStatement({
      // CloudWatch's read actions cannot be scoped to a resource: `*` is the only valid value.
      // The daemon reads AWS/Route53 HealthCheckStatus, which lives in us-east-1.
      sid: 'ReadHealthCheckMetrics',
      actions: ['cloudwatch:GetMetricData', 'cloudwatch:GetMetricStatistics'],
      resources: ['*'],
    }),
    new iam.PolicyStatement({
      sid: 'PutMetricsInOwnNamespaceOnly',
      actions: ['cloudwatch:PutMetricData'],
      resources: ['*'],
      conditions: { StringEquals: { 'cloudwatch:namespace': s.metricNamespace } },
    }),
  ];
  if (config.object) {
    statements.push(
      new iam.PolicyStatement({
        sid: 'ReadOwnConfigObject',
        actions: ['s3:GetObject'],
        resources: [config.object.bucket.arnForObjects(config.object.key)],
      }),
      new iam.PolicyStatement({
        sid: 'DecryptOwnConfigObject',
        actions: ['kms:Decrypt'],
        resources: [key.keyArn],
        conditions: { StringEquals: { 'kms:ViaService': `s3.${region}.amazonaws.com` } },
      }),
    );
  }
  return statements;
}

/** An image URI from the settings, or infra/Dockerfile built at deploy time as a CDK asset. */
function daemonImage(s: Settings): ecs.ContainerImage {
  if (s.imageUri !== '') return ecs.ContainerImage.fromRegistry(s.imageUri);
  // What is sent is /.dockerignore's allow-list (CDK reads it, as docker build does): the
  // workspace manifests, the lock file, crates/, tests/e2e and the Dockerfile.
  return ecs.ContainerImage.fromAsset(REPO_ROOT, {
    file: 'infra/Dockerfile',
    // The daemon's stage (the gateway's is `gateway`, for the Helm chart).
    target: 'daemon',
    platform: s.cpuArchitecture === 'arm64' ? ecrAssets.Platform.LINUX_ARM64 : ecrAssets.Platform.LINUX_AMD64,
    ignoreMode: IgnoreMode.DOCKER,
  });
}

/** ElastiCache names: 1-40 of a-z 0-9 -, starting with a letter, no "--", no trailing "-". */
export function valkeyName(tableName: string): string {
  const slug = `shareplane-${tableName.toLowerCase()}`.replace(/[^a-z0-9-]+/g, '-').replace(/-+/g, '-');
  return slug.slice(0, 40).replace(/-+$/, '');
}
