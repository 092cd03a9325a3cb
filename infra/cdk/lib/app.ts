/**
 * Builds the whole deployment into an App: the global stack in the home Region (the first of
 * `settings.regions`) and one stack per Region, each depending on the global stack.
 */
import { App, Tags } from 'aws-cdk-lib';
import { annotateCdkProviders } from './checkov';
import { GlobalStack } from './global-stack';
import { RegionStack } from './region-stack';
import { Settings } from './settings';

export interface Deployment {
  readonly global: GlobalStack;
  /** Region name → its stack, in the order of `settings.regions`. */
  readonly regions: ReadonlyMap<string, RegionStack>;
}

export function buildDeployment(app: App, s: Settings): Deployment {
  const home = s.regions[0];
  const global = new GlobalStack(app, 'Shareplane-Global', {
    env: { account: s.account, region: home },
    description: 'shareplane: global table, Route 53 health checks, dashboard',
    crossRegionReferences: true,
    settings: s,
  });
  const regions = new Map<string, RegionStack>();
  for (const region of s.regions) {
    const ids = s.regions.map((r) => {
      const check = global.healthChecks.get(r);
      if (check === undefined) throw new Error(`no health check for ${r}`);
      return check.healthCheckId;
    });
    const stack = new RegionStack(app, `Shareplane-${region}`, {
      env: { account: s.account, region },
      description: `shareplane: the daemon in ${region}, its endpoint and alarms`,
      crossRegionReferences: true,
      settings: s,
      healthCheckIds: ids,
    });
    stack.addStackDependency(global);
    regions.set(region, stack);
  }
  Tags.of(app).add('application', 'shareplane');
  for (const stack of [global, ...regions.values()]) annotateCdkProviders(stack);
  return { global, regions };
}
