"""The ECS switch: CDK's `ecsService` and Terraform's `ecs_service` are one setting.

A team that runs the daemon on EKS (infra/helm/shareplane) turns it off; both apps then deploy the
table, health checks, alarms, endpoints, tokens, config and Valkey but no ECS service. This test
compares the CDK app synthesized with it off (SHAREPLANE_CDK_OUT_NOECS, cdk.json's settings with
"ecsService": false) with the example (on) and with the Terraform region module's HCL: the same
default, the same kinds of resources dropped and added, every alarm kept, the same outputs.

Run: infra/test.sh (in infra/.venv-cfnlint, beside tests/test_parity.py).
"""

from __future__ import annotations

import json
import os
import re
import unittest
from pathlib import Path

import hcl2

from tests.test_parity import CDK_JSON, INFRA, MODULES, SAME, load_module, load_templates, resources, unquote

CDK_OUT_NOECS = Path(os.environ.get("SHAREPLANE_CDK_OUT_NOECS", INFRA / "cdk" / "cdk.out.noecs"))


def snake(name: str) -> str:
    """A CDK setting's name as the Terraform variable spells it (desiredCount -> desired_count)."""
    return re.sub(r"([A-Z])", lambda m: "_" + m.group(1).lower(), name)


class EcsSwitch(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        settings = json.loads(CDK_JSON.read_text())["context"]["shareplane"]
        cls.region = settings["regions"][1]
        cls.region_tpl = load_templates()[f"Shareplane-{cls.region}"]
        cls.tf_region = load_module("region")

    def tf(self, rtype: str, name: str) -> dict:
        return self.tf_region["resource"][rtype][name]

    def test_same_ecs_switch(self):
        """ecsService (CDK) and ecs_service (Terraform): the same setting, default on; off, both
        drop the same kinds of resources (the ECS service, cluster, task definition, its roles and
        log group), add the same managed policy, keep every alarm, and publish the same outputs."""
        settings_ts = (INFRA / "cdk" / "lib" / "settings.ts").read_text()
        self.assertIn("ecsService: p.bool(value, 'ecsService', true)", settings_ts)
        self.assertEqual(snake("ecsService"), "ecs_service")
        with (MODULES / "region" / "variables.tf").open() as f:
            variables = {k: v for block in unquote(hcl2.load(f))["variable"] for k, v in block.items()}
        self.assertEqual((variables["ecs_service"]["type"], variables["ecs_service"]["default"]), ("bool", True))
        self.assertEqual(self.tf_region["locals"]["ecs"], "${var.ecs_service}")
        noecs = load_templates(CDK_OUT_NOECS)[f"Shareplane-{self.region}"]

        def counts(t):
            out = {}
            for r in t["Resources"].values():
                out[r["Type"]] = out.get(r["Type"], 0) + 1
            return out

        on, off = counts(self.region_tpl), counts(noecs)
        fewer = {c for c in on if off.get(c, 0) < on[c]}
        more = {c for c in off if off[c] > on.get(c, 0)}
        self.assertEqual(fewer, {"AWS::ECS::Cluster", "AWS::ECS::TaskDefinition", "AWS::ECS::Service", "AWS::IAM::Role",
                                 "AWS::IAM::Policy", "AWS::Logs::LogGroup"})
        self.assertEqual(more, {"AWS::IAM::ManagedPolicy"})
        tf_off, tf_only_off, tf_counted = set(), set(), {}
        for rtype, named in self.tf_region["resource"].items():
            for name, body in named.items():
                count = body.get("count")
                tf_counted[(rtype, name)] = count
                if count == "${local.ecs ? 1 : 0}":
                    tf_off.add(rtype)
                elif count == "${local.ecs ? 0 : 1}":
                    tf_only_off.add(rtype)
        self.assertEqual(tf_off, set().union(*(SAME[c] for c in fewer)))
        self.assertEqual(tf_only_off, set().union(*(SAME[c] for c in more)))
        self.assertEqual(self.tf_region["data"]["aws_iam_policy_document"]["execution"]["count"], "${local.ecs ? 1 : 0}")
        # The pods' policy holds the task role's statements, in both.
        self.assertEqual(self.tf("aws_iam_policy", "daemon")["policy"], "${data.aws_iam_policy_document.task.json}")
        task = next(iter(resources(self.region_tpl, "AWS::ECS::TaskDefinition").values()))
        role = self.region_tpl["Resources"][task["Properties"]["TaskRoleArn"]["Fn::GetAtt"][0]]["Properties"]
        managed = next(iter(resources(noecs, "AWS::IAM::ManagedPolicy").values()))["Properties"]
        self.assertEqual(managed["PolicyDocument"], role["Policies"][0]["PolicyDocument"])
        # Every alarm stays (the daemon on EKS publishes the same metrics).
        names = lambda t: sorted(a["Properties"]["AlarmName"] for a in resources(t, "AWS::CloudWatch::Alarm").values())
        self.assertEqual(names(noecs), names(self.region_tpl))
        # The outputs the pods need: in both, only without ECS (null in Terraform otherwise).
        with (MODULES / "region" / "outputs.tf").open() as f:
            tf_out = {k: v for block in unquote(hcl2.load(f))["output"] for k, v in block.items()}
        extra = {"DaemonPolicyArn": ("daemon_policy_arn", "${one(aws_iam_policy.daemon[*].arn)}"),
                 "DaemonTargetGroupArn": ("daemon_target_group_arn", "${local.ecs ? null : aws_lb_target_group.daemon.arn}"),
                 "DaemonApiTargetGroupArn": ("daemon_api_target_group_arn", "${local.ecs ? null : aws_lb_target_group.api.arn}"),
                 "DaemonSecurityGroupId": ("daemon_security_group_id", "${local.ecs ? null : aws_security_group.daemon.id}")}
        self.assertEqual(set(noecs["Outputs"]) - set(self.region_tpl["Outputs"]), set(extra))
        for c, (t, value) in extra.items():
            self.assertEqual(tf_out[t]["value"], value, c)
        # Which CDK target group is which: the public one forwards the health paths.
        groups = {o: noecs["Outputs"][o]["Value"]["Ref"] for o in ("DaemonTargetGroupArn", "DaemonApiTargetGroupArn")}
        self.assertTrue(groups["DaemonTargetGroupArn"].startswith("DaemonTargets"))
        self.assertTrue(groups["DaemonApiTargetGroupArn"].startswith("DaemonApiTargets"))

    def test_a_deployment_made_before_the_switch_keeps_its_service(self):
        """Every resource that took `count = local.ecs ? 1 : 0` has a `moved` block from its old
        address, so that upgrading the module does not replace a running ECS service."""
        counted = sorted(f"{rtype}.{name}" for rtype, named in self.tf_region["resource"].items()
                         for name, body in named.items() if body.get("count") == "${local.ecs ? 1 : 0}")
        moved = []
        for path in sorted((MODULES / "region").glob("*.tf")):
            with path.open() as f:
                moved += [unquote(m) for m in hcl2.load(f).get("moved", [])]
        self.assertEqual(sorted((m["from"], m["to"]) for m in moved),
                         [(f"${{{c}}}", f"${{{c}[0]}}") for c in counted])
        self.assertIn("aws_ecs_service.daemon", counted)


if __name__ == "__main__":
    unittest.main()
