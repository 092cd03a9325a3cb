#!/usr/bin/env node
/** The CDK app's entry point: reads the `shareplane` context (cdk.json) and builds the stacks. */
import { App } from 'aws-cdk-lib';
import { buildDeployment } from '../lib/app';
import { parseSettings, SettingsError } from '../lib/settings';

const app = new App();
try {
  buildDeployment(app, parseSettings(app.node.tryGetContext('shareplane')));
} catch (e) {
  if (!(e instanceof SettingsError)) throw e;
  process.stderr.write(`${e.message}\n`);
  process.exit(2);
}
