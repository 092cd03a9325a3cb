/** Builds the deployment from cdk.json's settings (optionally changed) for the assertion tests. */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { App } from 'aws-cdk-lib';
import { Template } from 'aws-cdk-lib/assertions';
import { buildDeployment, Deployment } from '../lib/app';
import { parseSettings, Settings } from '../lib/settings';

const CDK_JSON = path.resolve(__dirname, '..', '..', 'cdk.json');

/** cdk.json's context: the example settings plus the availability zones (so no lookup runs). */
export function cdkContext(): Record<string, unknown> {
  const json = JSON.parse(fs.readFileSync(CDK_JSON, 'utf8')) as { context: Record<string, unknown> };
  return json.context;
}

export function rawSettings(): Record<string, unknown> {
  return structuredClone(cdkContext().shareplane) as Record<string, unknown>;
}

export interface Built {
  readonly settings: Settings;
  readonly deployment: Deployment;
  readonly global: Template;
  /** Region name → its stack's template. */
  readonly regions: ReadonlyMap<string, Template>;
}

/** Synthesizes every stack with cdk.json's settings, changed by `change`. */
export function build(change: (raw: Record<string, unknown>) => void = () => {}): Built {
  const raw = rawSettings();
  change(raw);
  const settings = parseSettings(raw);
  const app = new App({ context: { ...cdkContext(), shareplane: raw } });
  const deployment = buildDeployment(app, settings);
  const regions = new Map<string, Template>();
  for (const [r, stack] of deployment.regions) regions.set(r, Template.fromStack(stack));
  return { settings, deployment, global: Template.fromStack(deployment.global), regions };
}

/** The one resource of `type` in the template (fails if there are none or several). */
export function only(t: Template, type: string): { id: string; props: Record<string, any>; res: Record<string, any> } {
  const found = Object.entries(t.findResources(type));
  if (found.length !== 1) throw new Error(`expected one ${type}, found ${found.length}`);
  const [id, res] = found[0];
  return { id, props: res.Properties ?? {}, res };
}

/** The one resource of `type` whose logical id starts with `prefix` (e.g. the ApiToken secret). */
export function named(t: Template, type: string, prefix: string): { id: string; props: Record<string, any> } {
  const found = Object.entries(t.findResources(type)).filter(([id]) => id.startsWith(prefix));
  if (found.length !== 1) throw new Error(`expected one ${type} ${prefix}*, found ${found.length}`);
  return { id: found[0][0], props: (found[0][1] as any).Properties ?? {} };
}
