/**
 * One Region's stack: the network, the daemon as an ECS Fargate service behind a load balancer
 * whose public name Route 53 health-checks, the daemon's config as an SSM parameter, the task
 * role of least privilege, and the alarms on the daemon's metrics.
 */
import { createHash } from 'node:crypto';
import * as path from 'node:path';
import { ArnFormat, Duration, IgnoreMode, RemovalPolicy, Stack, StackProps, CfnOutput } from 'aws-cdk-lib';
import * as acm from 'aws-cdk-lib/aws-certificatemanager';
import * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import * as cwActions from 'aws-cdk-lib/aws-cloudwatch-actions';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import * as ecrAssets from 'aws-cdk-lib/aws-ecr-assets';
import * as ecs from 'aws-cdk-lib/aws-ecs';
import * as elbv2 from 'aws-cdk-lib/aws-elasticloadbalancingv2';
import * as iam from 'aws-cdk-lib/aws-iam';
import * as kms from 'aws-cdk-lib/aws-kms';
import * as logs from 'aws-cdk-lib/aws-logs';
import * as route53 from 'aws-cdk-lib/aws-route53';
import * as route53Targets from 'aws-cdk-lib/aws-route53-targets';
import * as s3 from 'aws-cdk-lib/aws-s3';
import * as secretsmanager from 'aws-cdk-lib/aws-secretsmanager';
import * as sns from 'aws-cdk-lib/aws-sns';
import * as snsSubscriptions from 'aws-cdk-lib/aws-sns-subscriptions';
import * as ssm from 'aws-cdk-lib/aws-ssm';
import { Construct } from 'constructs';
import { skipCheckov } from './checkov';
import { phaseMs, renderConfigToml, STANDARD_PARAMETER_LIMIT_BYTES } from './config-toml';
import { endpointName, HEALTH_PATH } from './global-stack';
import { ALARM_PERIOD_SECONDS, METRICS, STALE_AFTER_PERIODS } from './metrics';
import { Settings } from './settings';

/** The daemon's HTTP port (/healthz, /readyz, /metrics, /v1/rules). */
export const DAEMON_PORT = 8080;
/** The repository root: the Docker build context of the daemon's image. */
const REPO_ROOT = path.resolve(__dirname, '..', '..', '..', '..');

export interface RegionStackProps extends StackProps {
  readonly settings: Settings;
  /** Every Region's health check id, in the order of `settings.regions`. */
  readonly healthCheckIds: readonly string[];
}

export class RegionStack extends Stack {
  readonly taskRole: iam.Role;
  readonly service: ecs.FargateService;
  readonly configParameter: ssm.StringParameter;

  constructor(scope: Construct, id: string, props: RegionStackProps) {
    super(scope, id, props);
    const s = props.settings;
    const region = Stack.of(this).region;
    const key = this.encryptionKey();
    const vpc = this.network(s, key);
    const logGroup = new logs.LogGroup(this, 'DaemonLogs', {
      logGroupName: `/shareplane/${s.tableName}/daemon`,
      retention: s.logRetentionDays as logs.RetentionDays,
      encryptionKey: key,
      removalPolicy: RemovalPolicy.RETAIN,
    });

    this.configParameter = this.config(s, region, props.healthCheckIds);
    this.taskRole = taskRole(this, s, region);
    const { listener, albSg } = this.loadBalancer(s, region, vpc);

    const cluster = new ecs.Cluster(this, 'Cluster', {
      vpc,
      containerInsightsV2: ecs.ContainerInsights.ENABLED,
    });
    const apiToken = new secretsmanager.Secret(this, 'ApiToken', {
      description: 'shareplane daemon API token (bearer token of the write endpoints)',
      encryptionKey: key,
      generateSecretString: { passwordLength: 48, excludePunctuation: true },
    });
    const task = this.taskDefinition(s, logGroup, apiToken);
    const taskSg = new ec2.SecurityGroup(this, 'DaemonSecurityGroup', {
      vpc,
      description: 'shareplane daemon tasks',
      allowAllOutbound: false,
    });
    taskSg.addIngressRule(albSg, ec2.Port.tcp(DAEMON_PORT), 'health checks and requests from the load balancer');
    taskSg.addEgressRule(ec2.Peer.anyIpv4(), ec2.Port.tcp(443), 'AWS APIs (DynamoDB, CloudWatch, SSM, ECR, Logs)');

    this.service = new ecs.FargateService(this, 'Daemon', {
      cluster,
      taskDefinition: task,
      desiredCount: s.desiredCount,
      minHealthyPercent: 100,
      maxHealthyPercent: 200,
      circuitBreaker: { enable: true, rollback: true },
      healthCheckGracePeriod: Duration.seconds(60),
      vpcSubnets: { subnetType: ec2.SubnetType.PRIVATE_WITH_EGRESS },
      securityGroups: [taskSg],
      assignPublicIp: false,
      propagateTags: ecs.PropagatedTagSource.SERVICE,
    });
    const targets = new elbv2.ApplicationTargetGroup(this, 'DaemonTargets', {
      vpc,
      port: DAEMON_PORT,
      protocol: elbv2.ApplicationProtocol.HTTP,
      targetType: elbv2.TargetType.IP,
      targets: [this.service],
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
    listener.addAction('Health', {
      priority: 10,
      conditions: [elbv2.ListenerCondition.pathPatterns([HEALTH_PATH, '/healthz'])],
      action: elbv2.ListenerAction.forward([targets]),
    });

    this.alarms(s, region, key);
    new CfnOutput(this, 'Endpoint', { value: `https://${endpointName(s, region)}${HEALTH_PATH}` });
    new CfnOutput(this, 'ConfigParameter', { value: this.configParameter.parameterName });
  }

  /** One key for this Region's logs and alarm topic, with yearly rotation. */
  private encryptionKey(): kms.Key {
    const key = new kms.Key(this, 'Key', {
      description: 'shareplane: encrypts the daemon logs, VPC flow logs, the alarm topic and the API token',
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

  private network(s: Settings, key: kms.IKey): ec2.Vpc {
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
      encryptionKey: key,
      removalPolicy: RemovalPolicy.RETAIN,
    });
    vpc.addFlowLog('FlowLog', { destination: ec2.FlowLogDestination.toCloudWatchLogs(flowLogs) });
    return vpc;
  }

  /** The daemon's config with every Region's health check id, as an SSM parameter in this Region. */
  private config(s: Settings, region: string, healthCheckIds: readonly string[]): ssm.StringParameter {
    const periodMs = s.periodSeconds * 1000;
    const input = (ids: readonly string[]) => ({
      region,
      tableName: s.tableName,
      listen: `0.0.0.0:${DAEMON_PORT}`,
      periodMs,
      phaseMs: phaseMs(s.regions.indexOf(region), s.regions.length, periodMs),
      metricNamespace: s.metricNamespace,
      regions: s.regions.map((name, i) => ({ name, healthCheckId: ids[i] ?? '' })),
      limits: s.limits,
      daemon: s.daemon,
    });
    // Health check ids are 36-character UUIDs; measure with placeholders of that length.
    const sized = renderConfigToml(input(s.regions.map(() => '0'.repeat(36))));
    const bytes = Buffer.byteLength(sized, 'utf8');
    if (bytes > 2 * STANDARD_PARAMETER_LIMIT_BYTES) {
      throw new Error(`the daemon config is ${bytes} bytes; an SSM parameter holds at most 8192`);
    }
    this.configDigest = createHash('sha256').update(sized).digest('hex');
    return new ssm.StringParameter(this, 'DaemonConfig', {
      parameterName: `/shareplane/${s.tableName}/config`,
      description: 'shareplane daemon config (TOML), passed to the tasks as SHAREPLANE_CONFIG_TOML',
      stringValue: renderConfigToml(input(healthCheckIds)),
      tier: bytes > STANDARD_PARAMETER_LIMIT_BYTES ? ssm.ParameterTier.ADVANCED : ssm.ParameterTier.STANDARD,
    });
  }

  private configDigest = '';

  private taskDefinition(s: Settings, logGroup: logs.ILogGroup, apiToken: secretsmanager.ISecret): ecs.FargateTaskDefinition {
    const task = new ecs.FargateTaskDefinition(this, 'DaemonTask', {
      cpu: s.cpu,
      memoryLimitMiB: s.memoryMiB,
      taskRole: this.taskRole,
      runtimePlatform: {
        operatingSystemFamily: ecs.OperatingSystemFamily.LINUX,
        cpuArchitecture: ecs.CpuArchitecture.X86_64,
      },
      volumes: [{ name: 'tmp' }],
    });
    const container = task.addContainer('shareplane', {
      image: daemonImage(s),
      // Without --config the daemon reads its config from SHAREPLANE_CONFIG_TOML.
      command: ['run'],
      essential: true,
      readonlyRootFilesystem: true,
      portMappings: [{ containerPort: DAEMON_PORT, protocol: ecs.Protocol.TCP }],
      secrets: {
        SHAREPLANE_CONFIG_TOML: ecs.Secret.fromSsmParameter(this.configParameter),
        SHAREPLANE_API_TOKEN: ecs.Secret.fromSecretsManager(apiToken),
      },
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
    return task;
  }

  private loadBalancer(s: Settings, region: string, vpc: ec2.IVpc) {
    const zone = route53.HostedZone.fromHostedZoneAttributes(this, 'Zone', {
      hostedZoneId: s.hostedZoneId,
      zoneName: s.hostedZoneName,
    });
    const name = endpointName(s, region);
    const certificate = new acm.Certificate(this, 'Certificate', {
      domainName: name,
      validation: acm.CertificateValidation.fromDns(zone),
    });
    const albSg = new ec2.SecurityGroup(this, 'LoadBalancerSecurityGroup', {
      vpc,
      description: 'shareplane endpoint: HTTPS from Route 53 health checkers',
      allowAllOutbound: false,
    });
    // Route 53 health checkers probe from addresses across the internet.
    albSg.addIngressRule(ec2.Peer.anyIpv4(), ec2.Port.tcp(443), 'HTTPS from Route 53 health checkers');
    const logBucket = new s3.Bucket(this, 'LoadBalancerLogs', {
      encryption: s3.BucketEncryption.S3_MANAGED,
      blockPublicAccess: s3.BlockPublicAccess.BLOCK_ALL,
      enforceSSL: true,
      versioned: true,
      lifecycleRules: [{ expiration: Duration.days(s.logRetentionDays), noncurrentVersionExpiration: Duration.days(30) }],
      removalPolicy: RemovalPolicy.RETAIN,
    });
    skipCheckov(logBucket, [
      { id: 'CKV_AWS_18', comment: 'this bucket holds access logs itself; logging it would need a bucket per bucket' },
    ]);
    const alb = new elbv2.ApplicationLoadBalancer(this, 'LoadBalancer', {
      vpc,
      internetFacing: true,
      vpcSubnets: { subnetType: ec2.SubnetType.PUBLIC },
      securityGroup: albSg,
      dropInvalidHeaderFields: true,
      deletionProtection: true,
    });
    alb.logAccessLogs(logBucket, 'alb');
    albSg.addEgressRule(ec2.Peer.ipv4(vpc.vpcCidrBlock), ec2.Port.tcp(DAEMON_PORT), 'to the daemon tasks');
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
      zone,
      recordName: name,
      target: route53.RecordTarget.fromAlias(new route53Targets.LoadBalancerTarget(alb)),
    });
    return { listener, albSg };
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
    add('NotReady', `A shareplane daemon in ${region} is not ready, or publishes no metrics at all.`, {
      metric: metric(METRICS.ready.name, {}, 'Minimum'),
      threshold: 1,
      comparisonOperator: cloudwatch.ComparisonOperator.LESS_THAN_THRESHOLD,
      evaluationPeriods: 2,
      datapointsToAlarm: 2,
      // No datapoint means no daemon publishes: that is not ready either.
      treatMissingData: cloudwatch.TreatMissingData.BREACHING,
    });
  }
}

/**
 * The task role: read the table; write only this Region's own items; read CloudWatch metrics
 * (Route 53's HealthCheckStatus in us-east-1); put metrics only in shareplane's namespace.
 */
function taskRole(scope: Construct, s: Settings, region: string): iam.Role {
  const stack = Stack.of(scope);
  const tableArn = stack.formatArn({ service: 'dynamodb', resource: 'table', resourceName: s.tableName });
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
  return new iam.Role(scope, 'DaemonTaskRole', {
    assumedBy: new iam.ServicePrincipal('ecs-tasks.amazonaws.com'),
    description: 'shareplane daemon: read the records, write its own Region items, read health, put metrics',
    inlinePolicies: { shareplane: new iam.PolicyDocument({ statements }) },
  });
}

/** An image URI from the settings, or infra/Dockerfile built at deploy time as a CDK asset. */
function daemonImage(s: Settings): ecs.ContainerImage {
  if (s.imageUri !== '') return ecs.ContainerImage.fromRegistry(s.imageUri);
  return ecs.ContainerImage.fromAsset(REPO_ROOT, {
    file: 'infra/Dockerfile',
    platform: ecrAssets.Platform.LINUX_AMD64,
    ignoreMode: IgnoreMode.DOCKER,
    // Stage only what the build reads; target/, node_modules and the venvs stay out.
    exclude: ['*', '!Cargo.toml', '!Cargo.lock', '!crates', '!infra', 'infra/*', '!infra/Dockerfile', 'crates/*/target'],
  });
}
