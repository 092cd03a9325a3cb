/**
 * checkov skips, written as CloudFormation metadata on the resource they concern, each with the
 * reason, so that the justification sits next to the resource in the synthesized template.
 */
import { CfnResource, Stack } from 'aws-cdk-lib';
import { IConstruct } from 'constructs';

export interface CheckovSkip {
  readonly id: string;
  readonly comment: string;
}

/** Adds skips to the resource (or the default child of an L2 construct). */
export function skipCheckov(scope: IConstruct, skips: readonly CheckovSkip[]): void {
  const res = scope instanceof CfnResource ? scope : scope.node.defaultChild;
  if (!(res instanceof CfnResource)) throw new Error(`${scope.node.path} has no CloudFormation resource`);
  const prev = (res.getMetadata('checkov') as { skip?: CheckovSkip[] } | undefined)?.skip ?? [];
  res.addMetadata('checkov', { skip: [...prev, ...skips] });
}

/**
 * Annotates the Lambda functions that CDK itself adds as deploy-time custom resource providers
 * (here: the writer and reader of cross-Region references, and the function that writes the
 * daemon's config object to S3). They run only while CloudFormation deploys, handle no request
 * traffic and hold no data, so the runtime hardening checks do not apply.
 *
 * CDK creates these functions while it resolves cross-stack references, after aspects have run,
 * so this hooks the stack's validation instead (the last step before templates are written).
 */
export function annotateCdkProviders(stack: Stack): void {
  stack.node.addValidation({
    validate: () => {
      for (const node of stack.node.findAll()) {
        if (!(node instanceof CfnResource) || node.cfnResourceType !== 'AWS::Lambda::Function') continue;
        const provider = node.node.path.includes('CustomResourceProvider') || node.node.path.includes('/Custom::CDKBucketDeployment');
        if (!provider || node.getMetadata('checkov') !== undefined) continue;
        skipCheckov(node, PROVIDER_SKIPS);
        // CDK adds an explicit DependsOn on the role that the GetAtt already implies.
        node.addMetadata('cfn-lint', { config: { ignore_checks: ['W3005'] } });
      }
      return [];
    },
  });
}

const PROVIDER_SKIPS: readonly CheckovSkip[] = [
  { id: 'CKV_AWS_115', comment: 'CDK deploy-time provider: runs once per deployment, no concurrency limit needed' },
  { id: 'CKV_AWS_116', comment: 'CDK deploy-time provider: CloudFormation reports its failures; a DLQ would hold nothing' },
  { id: 'CKV_AWS_117', comment: 'CDK deploy-time provider: calls only AWS APIs (SSM, S3), needs no VPC' },
  { id: 'CKV_AWS_173', comment: 'CDK deploy-time provider: its environment holds no secrets' },
];
