"""The Terraform modules describe the same system as the CDK app.

The AWS provider cannot be downloaded here, so `terraform validate` and `plan` cannot run. This
test parses the modules' HCL (python-hcl2) and compares it with the CloudFormation templates the
CDK app synthesized (default settings of infra/cdk/cdk.json, three Regions): the resource types,
the task role's statements and IAM conditions, the alarms, the health checks, the table, the
service, the limits writer's policy, the outputs and the keys of the daemon's config. When
terraform is installed, infra/test.sh also renders every Region's config with the Terraform config
module (no provider needed), for the example's settings and with limits from the table, and this
test checks it is the same text as the CDK app's.

Run: infra/test.sh (sets SHAREPLANE_CDK_OUT and SHAREPLANE_TF_CONFIGS).
"""

from __future__ import annotations

import json
import os
import re
import tomllib
import unittest
from pathlib import Path

import hcl2

INFRA = Path(__file__).resolve().parent.parent
MODULES = INFRA / "terraform" / "modules"
CDK_OUT = Path(os.environ.get("SHAREPLANE_CDK_OUT", INFRA / "cdk" / "cdk.out"))
# The same app synthesized with the options the example leaves off (infra/cdk/test/variant.json:
# an existing VPC, the config in S3, arm64), so that their resources are compared too.
CDK_OUT_VARIANT = Path(os.environ.get("SHAREPLANE_CDK_OUT_VARIANT", INFRA / "cdk" / "cdk.out.variant"))
CDK_JSON = INFRA / "cdk" / "cdk.json"

# Each CloudFormation type the CDK app emits => the Terraform types that declare the same thing.
SAME = {
    "AWS::DynamoDB::GlobalTable": {"aws_dynamodb_table", "aws_dynamodb_table_replica"},
    "AWS::Route53::HealthCheck": {"aws_route53_health_check"},
    "AWS::CloudWatch::Dashboard": {"aws_cloudwatch_dashboard"},
    "AWS::KMS::Key": {"aws_kms_key"},
    "AWS::EC2::VPC": {"aws_vpc"},
    "AWS::EC2::Subnet": {"aws_subnet"},
    "AWS::EC2::InternetGateway": {"aws_internet_gateway"},
    "AWS::EC2::EIP": {"aws_eip"},
    "AWS::EC2::NatGateway": {"aws_nat_gateway"},
    "AWS::EC2::RouteTable": {"aws_route_table"},
    "AWS::EC2::Route": {"aws_route"},
    "AWS::EC2::SubnetRouteTableAssociation": {"aws_route_table_association"},
    "AWS::EC2::FlowLog": {"aws_flow_log"},
    "AWS::EC2::SecurityGroup": {"aws_security_group"},
    "AWS::EC2::SecurityGroupIngress": {"aws_vpc_security_group_ingress_rule"},
    "AWS::EC2::SecurityGroupEgress": {"aws_vpc_security_group_egress_rule"},
    "AWS::Logs::LogGroup": {"aws_cloudwatch_log_group"},
    "AWS::IAM::Role": {"aws_iam_role"},
    "AWS::IAM::Policy": {"aws_iam_role_policy"},
    # The limits writer's policy (global), attached to nothing: the operator attaches it.
    "AWS::IAM::ManagedPolicy": {"aws_iam_policy"},
    "AWS::S3::Bucket": {"aws_s3_bucket"},
    "AWS::S3::BucketPolicy": {"aws_s3_bucket_policy"},
    "AWS::ElasticLoadBalancingV2::LoadBalancer": {"aws_lb"},
    "AWS::ElasticLoadBalancingV2::Listener": {"aws_lb_listener"},
    "AWS::ElasticLoadBalancingV2::ListenerRule": {"aws_lb_listener_rule"},
    "AWS::ElasticLoadBalancingV2::TargetGroup": {"aws_lb_target_group"},
    "AWS::CertificateManager::Certificate": {"aws_acm_certificate"},
    "AWS::Route53::RecordSet": {"aws_route53_record"},
    "AWS::ECS::Cluster": {"aws_ecs_cluster"},
    "AWS::ECS::TaskDefinition": {"aws_ecs_task_definition"},
    "AWS::ECS::Service": {"aws_ecs_service"},
    "AWS::SSM::Parameter": {"aws_ssm_parameter"},
    "AWS::SecretsManager::Secret": {"aws_secretsmanager_secret"},
    "AWS::SNS::Topic": {"aws_sns_topic"},
    "AWS::SNS::Subscription": {"aws_sns_topic_subscription"},
    "AWS::CloudWatch::Alarm": {"aws_cloudwatch_metric_alarm"},
    "AWS::ElastiCache::ServerlessCache": {"aws_elasticache_serverless_cache"},
    # The config object in S3: CDK writes it at deploy time with its deployment function.
    "Custom::CDKBucketDeployment": {"aws_s3_object"},
}

# CloudFormation types with no Terraform counterpart, and why.
CDK_ONLY = {
    # Terraform passes the health check ids from the global module to each region module directly.
    "AWS::Lambda::Function": "CDK's cross-Region reference provider, and its S3 deployment function",
    "AWS::Lambda::LayerVersion": "the AWS CLI layer of CDK's S3 deployment function",
    "Custom::CrossRegionExportWriter": "CDK's cross-Region reference writer",
    "Custom::CrossRegionExportReader": "CDK's cross-Region reference reader",
    # Terraform's aws_internet_gateway takes the VPC id itself.
    "AWS::EC2::VPCGatewayAttachment": "part of aws_internet_gateway",
}

# Terraform types with no CloudFormation counterpart, and why.
TF_ONLY = {
    "aws_acm_certificate_validation": "CloudFormation waits for DNS validation itself",
    "aws_secretsmanager_secret_version": "CloudFormation generates the token (GenerateSecretString)",
    "aws_s3_bucket_public_access_block": "a property of AWS::S3::Bucket",
    "aws_s3_bucket_versioning": "a property of AWS::S3::Bucket",
    "aws_s3_bucket_server_side_encryption_configuration": "a property of AWS::S3::Bucket",
    "aws_s3_bucket_lifecycle_configuration": "a property of AWS::S3::Bucket",
    "aws_s3_bucket_logging": "a property of AWS::S3::Bucket",
    "aws_ecr_repository": "CDK builds infra/Dockerfile as an asset and pushes it to its bootstrap repository",
    "aws_ecr_lifecycle_policy": "CDK builds infra/Dockerfile as an asset and pushes it to its bootstrap repository",
    "aws_appautoscaling_target": "AWS::DynamoDB::GlobalTable holds its autoscaling settings",
    "aws_appautoscaling_policy": "AWS::DynamoDB::GlobalTable holds its autoscaling settings",
    "aws_default_security_group": "Terraform can empty the default group without a Lambda; CDK would need one",
}


def unquote(v):
    """python-hcl2 keeps the quotes of string literals; drop them and its bookkeeping keys."""
    if isinstance(v, str):
        if len(v) >= 2 and v[0] == '"' and v[-1] == '"':
            return json.loads(v)
        return v
    if isinstance(v, list):
        return [unquote(x) for x in v]
    if isinstance(v, dict):
        return {unquote(k): unquote(x) for k, x in v.items() if k not in ("__is_block__", "__comments__")}
    return v


def load_module(name: str) -> dict[str, dict]:
    """{"resource"|"data": {type: {name: body}}, "locals": {name: value}} over the module's .tf files."""
    out: dict[str, dict] = {"resource": {}, "data": {}, "locals": {}}
    for path in sorted((MODULES / name).glob("*.tf")):
        with path.open() as f:
            doc = unquote(hcl2.load(f))
        for kind in ("resource", "data"):
            for block in doc.get(kind, []):
                for rtype, named in block.items():
                    for rname, body in named.items():
                        out[kind].setdefault(rtype, {})[rname] = body
            for block in doc.get("locals", []):
                out["locals"].update(block)
    return out


def load_templates(out: Path = CDK_OUT) -> dict[str, dict]:
    templates = {}
    for path in sorted(out.glob("*.template.json")):
        templates[path.name.removesuffix(".template.json")] = json.loads(path.read_text())
    if not templates:
        raise AssertionError(f"no templates in {out}: run cdk synth first (infra/test.sh)")
    return templates


def config_parameter(template: dict) -> dict:
    """The SSM parameter holding the daemon's config (the other one holds the gateways' settings)."""
    found = [r for r in resources(template, "AWS::SSM::Parameter").values() if r["Properties"]["Name"].endswith("/config")]
    if len(found) != 1:
        raise AssertionError(f"expected one config parameter, found {len(found)}")
    return found[0]


def resources(template: dict, rtype: str) -> dict[str, dict]:
    return {k: v for k, v in template["Resources"].items() if v["Type"] == rtype}


def as_list(v):
    return v if isinstance(v, list) else [v]


class Parity(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.templates = load_templates()
        cls.settings = json.loads(CDK_JSON.read_text())["context"]["shareplane"]
        cls.region = cls.settings["regions"][1]
        cls.home = cls.settings["regions"][0]
        cls.global_tpl = cls.templates["Shareplane-Global"]
        cls.region_tpl = cls.templates[f"Shareplane-{cls.region}"]
        cls.tf_global = load_module("global")
        cls.tf_region = load_module("region")
        cls.tf_types = set(cls.tf_global["resource"]) | set(cls.tf_region["resource"])
        cls.variant = load_templates(CDK_OUT_VARIANT)
        cls.variant_settings = json.loads((INFRA / "cdk" / "test" / "variant.json").read_text())
        cls.variant_tpl = cls.variant[f"Shareplane-{cls.region}"]

    def tf(self, rtype: str, name: str) -> dict:
        for mod in (self.tf_global, self.tf_region):
            if name in mod["resource"].get(rtype, {}):
                return mod["resource"][rtype][name]
        self.fail(f"Terraform declares no {rtype}.{name}")

    def test_same_resource_types(self):
        cfn_types = {r["Type"] for t in [*self.templates.values(), *self.variant.values()] for r in t["Resources"].values()}
        # The e-mail subscription exists only when an address is set; its Terraform twin is counted.
        cfn_types.add("AWS::SNS::Subscription")
        unknown = cfn_types - set(SAME) - set(CDK_ONLY)
        self.assertEqual(unknown, set(), "CloudFormation types with no mapping: add them to SAME or CDK_ONLY")
        missing = {c: sorted(SAME[c]) for c in cfn_types & set(SAME) if not SAME[c] <= self.tf_types}
        self.assertEqual(missing, {}, "resources the CDK app declares and Terraform lacks")
        expected_tf = set().union(*(SAME[c] for c in cfn_types & set(SAME))) | set(TF_ONLY)
        extra = self.tf_types - expected_tf
        self.assertEqual(extra, set(), "Terraform resources with no CDK counterpart: add the CDK side or justify in TF_ONLY")
        unused = set(TF_ONLY) - self.tf_types
        self.assertEqual(unused, set(), "TF_ONLY lists types Terraform no longer declares")

    def test_same_task_role_statements_and_conditions(self):
        task = next(iter(resources(self.region_tpl, "AWS::ECS::TaskDefinition").values()))
        role_id = task["Properties"]["TaskRoleArn"]["Fn::GetAtt"][0]
        policies = self.region_tpl["Resources"][role_id]["Properties"]["Policies"]
        self.assertEqual(len(policies), 1)
        cfn = policies[0]["PolicyDocument"]["Statement"]
        doc = self.tf_region["data"]["aws_iam_policy_document"]["task"]["statement"]
        # The values CDK resolved at synth time and the Terraform variables that hold them.
        symbols = {self.region: "${var.region}", self.settings.get("metricNamespace", "Shareplane"): "${var.metric_namespace}"}

        def cfn_statement(s):
            conds = sorted(
                (test, var, tuple(symbols.get(v, v) for v in as_list(vals)))
                for test, by_var in s.get("Condition", {}).items()
                for var, vals in by_var.items()
            )
            resource = "*" if s["Resource"] == "*" else "table"
            return s["Sid"], sorted(as_list(s["Action"])), resource, conds

        def tf_statement(s):
            conds = sorted((c["test"], c["variable"], tuple(c["values"])) for c in s.get("condition", []))
            resource = "*" if s["resources"] == ["*"] else ("table" if s["resources"] == ["${local.table_arn}"] else s["resources"])
            return s["sid"], sorted(s["actions"]), resource, conds

        self.assertEqual([tf_statement(s) for s in doc], [cfn_statement(s) for s in cfn])
        # With the config in S3 (the variant) the role reads its one object: Terraform's dynamic statements.
        task_v = next(iter(resources(self.variant_tpl, "AWS::ECS::TaskDefinition").values()))
        role_v = self.variant_tpl["Resources"][task_v["Properties"]["TaskRoleArn"]["Fn::GetAtt"][0]]
        cfn_v = role_v["Properties"]["Policies"][0]["PolicyDocument"]["Statement"]
        extra_cfn = [x for x in cfn_v if x["Sid"] not in {y["Sid"] for y in cfn}]
        dynamic = self.tf_region["data"]["aws_iam_policy_document"]["task"]["dynamic"]
        extra_tf = []
        for block in dynamic:
            d = block["statement"]
            self.assertEqual(d["for_each"], f'${{local.config_in_s3 ? ["{sid_of(d)}"] : []}}')
            self.assertEqual(d["content"][0]["sid"], "${statement.value}")
            c = d["content"][0]
            conds = sorted((k["test"], k["variable"], tuple(v.replace("${var.region}", self.region) for v in k["values"]))
                           for k in c.get("condition", []))
            extra_tf.append((sid_of(d), sorted(c["actions"]), conds))
        symbols_v = {f"s3.{self.region}.amazonaws.com": f"s3.{self.region}.amazonaws.com"}
        self.assertEqual(extra_tf, [
            (x["Sid"], sorted(as_list(x["Action"])),
             sorted((t, v, tuple(symbols_v.get(w, w) for w in as_list(ws))) for t, by in x.get("Condition", {}).items() for v, ws in by.items()))
            for x in extra_cfn])
        self.assertEqual([x["Sid"] for x in extra_cfn], ["ReadOwnConfigObject", "DecryptOwnConfigObject"])
        # The two conditions the issue names, spelled out.
        conds = {s["sid"]: s.get("condition") for s in doc}
        self.assertEqual(conds["WriteOwnRegionItemsOnly"], [
            {"test": "ForAllValues:StringEquals", "variable": "dynamodb:LeadingKeys", "values": ["${var.region}"]}])
        self.assertEqual(conds["PutMetricsInOwnNamespaceOnly"], [
            {"test": "StringEquals", "variable": "cloudwatch:namespace", "values": ["${var.metric_namespace}"]}])
        self.assertEqual(self.tf("aws_iam_role_policy", "task")["policy"], "${data.aws_iam_policy_document.task.json}")

    def test_same_limits_writer_policy(self):
        """Read and write only the #limits items, of the table each Region's daemons use, in every Region."""
        policies = resources(self.global_tpl, "AWS::IAM::ManagedPolicy")
        self.assertEqual(len(policies), 1)
        cfn = next(iter(policies.values()))["Properties"]
        for key in ("Roles", "Users", "Groups"):
            self.assertNotIn(key, cfn, "attached by the operator, not here")
        [s] = cfn["PolicyDocument"]["Statement"]
        tf_policy = self.tf("aws_iam_policy", "limits_writer")
        self.assertEqual(tf_policy["policy"], "${data.aws_iam_policy_document.limits_writer.json}")
        [d] = self.tf_global["data"]["aws_iam_policy_document"]["limits_writer"]["statement"]
        loc = self.tf_global["locals"]
        key = loc["limits_partition_key"]
        self.assertEqual(key, "#limits")
        tf_conds = sorted((c["test"], c["variable"], tuple(v.replace("${local.limits_partition_key}", key) for v in c["values"]))
                          for c in d["condition"])
        cfn_conds = sorted((test, var, tuple(as_list(vals))) for test, by in s["Condition"].items() for var, vals in by.items())
        self.assertEqual(cfn_conds, [("ForAllValues:StringEquals", "dynamodb:LeadingKeys", ("#limits",))])
        self.assertEqual(tf_conds, cfn_conds)
        self.assertEqual((d["sid"], d["actions"]), (s["Sid"], as_list(s["Action"])))
        self.assertEqual(sorted(s["Action"]), sorted(
            ["dynamodb:GetItem", "dynamodb:Query", "dynamodb:PutItem", "dynamodb:DeleteItem", "dynamodb:BatchWriteItem"]))
        self.assertEqual(s["Effect"], "Allow")
        # The resources: the table in every Region, spelled as each Region's task role spells it.
        account = self.settings["account"]

        def cfn_arn(r):
            parts = r["Fn::Join"][1]
            self.assertEqual(parts[:2], ["arn:", {"Ref": "AWS::Partition"}])
            return "arn:P" + parts[2]
        table = self.settings.get("tableName", "shareplane-records")
        self.assertEqual([cfn_arn(r) for r in s["Resource"]],
                         [f"arn:P:dynamodb:{r}:{account}:table/{table}" for r in self.settings["regions"]])
        task = next(iter(resources(self.region_tpl, "AWS::ECS::TaskDefinition").values()))
        role = self.region_tpl["Resources"][task["Properties"]["TaskRoleArn"]["Fn::GetAtt"][0]]
        daemon_arn = role["Properties"]["Policies"][0]["PolicyDocument"]["Statement"][0]["Resource"]
        self.assertIn(daemon_arn, s["Resource"], "the ARN the daemons of the Region use")
        self.assertEqual(d["resources"], "${local.table_arns}")
        per_region = self.tf_region["locals"]["table_arn"].replace("${var.region}", "${r}")
        self.assertEqual(loc["table_arns"], f'${{[for r in var.regions : "{per_region}"]}}')

    def test_same_global_outputs(self):
        cdk = {k: v for k, v in self.global_tpl["Outputs"].items() if not k.startswith("ExportsOutput")}
        with (MODULES / "global" / "outputs.tf").open() as f:
            tf = {k: v for block in unquote(hcl2.load(f))["output"] for k, v in block.items()}
        regions = self.settings["regions"]
        self.assertEqual(sorted(cdk), sorted(["TableName", "LimitsWriterPolicyArn", *(f"HealthCheckId{r.replace('-', '')}" for r in regions)]))
        for name in ("table_name", "limits_writer_policy_arn", "health_check_ids"):
            self.assertIn(name, tf)
        policy_id = next(iter(resources(self.global_tpl, "AWS::IAM::ManagedPolicy")))
        self.assertEqual(cdk["LimitsWriterPolicyArn"]["Value"], {"Ref": policy_id})
        self.assertEqual(tf["limits_writer_policy_arn"]["value"], "${aws_iam_policy.limits_writer.arn}")
        with (INFRA / "terraform" / "examples" / "three-regions" / "outputs.tf").open() as f:
            example = {k: v for block in unquote(hcl2.load(f))["output"] for k, v in block.items()}
        self.assertEqual(example["limits_writer_policy_arn"]["value"], "${module.global.limits_writer_policy_arn}")

    def test_same_alarms(self):
        prefix = f"shareplane-{self.region}-"
        peers = [r for r in self.settings["regions"] if r != self.region]
        limits = {l["id"]: l["rate"] for l in self.settings["limits"]}
        env = {"var.period_seconds": self.settings.get("periodSeconds", 5)}
        daemon_alarms = self.tf_region["locals"]["daemon_alarms"]
        gateway_alarms = self.tf_region["locals"]["gateway_alarms"]
        tf_names = {
            "RecordStale": "record_stale",
            "SumOfSharesAboveLimit": "sum_of_shares_above_limit",
            **{kind: "daemon" for kind in daemon_alarms},
            **{kind: "gateway" for kind in gateway_alarms},
        }
        seen = set()
        for alarm in resources(self.region_tpl, "AWS::CloudWatch::Alarm").values():
            p = alarm["Properties"]
            name = p["AlarmName"].removeprefix(prefix)
            kind = name.split("-", 1)[0]
            seen.add(kind)
            with self.subTest(alarm=name):
                a = self.tf("aws_cloudwatch_metric_alarm", tf_names[kind])
                if tf_names[kind] in ("daemon", "gateway"):
                    # One resource over local.daemon_alarms (gateway_alarms): read each.value.* from the entry.
                    entry = {**daemon_alarms, **gateway_alarms}[kind]
                    a = {k: each_value_of(v, entry) for k, v in a.items()}
                each_value = {"rate": limits.get(name.split("-", 1)[-1])}
                self.assertEqual(a["metric_name"], p["MetricName"])
                self.assertEqual(a["namespace"], "${var.metric_namespace}")
                self.assertEqual(a["statistic"], p["Statistic"])
                self.assertEqual(a["period"], p["Period"])
                self.assertEqual(a["comparison_operator"], p["ComparisonOperator"])
                self.assertEqual(a["evaluation_periods"], p["EvaluationPeriods"])
                self.assertEqual(a.get("datapoints_to_alarm"), p.get("DatapointsToAlarm"))
                self.assertEqual(a["treat_missing_data"], p["TreatMissingData"])
                self.assertEqual(evaluate(a["threshold"], env, each_value), p["Threshold"])
                self.assertEqual(sorted(a["dimensions"]), sorted(d["Name"] for d in p["Dimensions"]))
                self.assertEqual(a["alarm_actions"], ["${aws_sns_topic.alarms.arn}"])
                each_key = kind if tf_names[kind] in ("daemon", "gateway") else name.split("-", 1)[1]
                self.assertEqual(a["alarm_name"].replace("${var.region}", self.region).replace("${each.key}", each_key),
                                 p["AlarmName"])
        self.assertEqual(seen, set(tf_names))
        self.assertEqual(self.tf("aws_cloudwatch_metric_alarm", "daemon")["for_each"], "${local.daemon_alarms}")
        self.assertEqual(self.tf("aws_cloudwatch_metric_alarm", "record_stale")["for_each"], "${toset(local.peers)}")
        self.assertEqual(len(peers), len([n for n in resources(self.region_tpl, "AWS::CloudWatch::Alarm").values()
                                          if "RecordStale" in n["Properties"]["AlarmName"]]))

    def test_same_health_checks(self):
        cfn = [r["Properties"]["HealthCheckConfig"] for r in resources(self.global_tpl, "AWS::Route53::HealthCheck").values()]
        self.assertEqual(len(cfn), len(self.settings["regions"]))
        hc = self.tf("aws_route53_health_check", "endpoint")
        self.assertEqual(hc["for_each"], "${local.endpoints}")
        for c in cfn:
            self.assertEqual(
                (hc["type"], hc["port"], hc["resource_path"], hc["enable_sni"], hc["request_interval"], hc["failure_threshold"]),
                (c["Type"], c["Port"], c["ResourcePath"], c["EnableSNI"], c["RequestInterval"], c["FailureThreshold"]),
            )

    def test_same_table(self):
        g = next(iter(resources(self.global_tpl, "AWS::DynamoDB::GlobalTable").values()))["Properties"]
        t = self.tf("aws_dynamodb_table", "records")
        keys = {k["KeyType"]: k["AttributeName"] for k in g["KeySchema"]}
        self.assertEqual((t["hash_key"], t["range_key"]), (keys["HASH"], keys["RANGE"]))
        self.assertEqual(sorted((a["name"], a["type"]) for a in t["attribute"]),
                         sorted((a["AttributeName"], a["AttributeType"]) for a in g["AttributeDefinitions"]))
        self.assertEqual(t["stream_view_type"], g["StreamSpecification"]["StreamViewType"])
        self.assertIs(t["deletion_protection_enabled"], True)
        self.assertEqual(t["point_in_time_recovery"], [{"enabled": True}])
        replica = self.tf("aws_dynamodb_table_replica", "records")
        self.assertIs(replica["point_in_time_recovery"], True)
        self.assertIs(replica["deletion_protection_enabled"], True)
        for r in g["Replicas"]:
            self.assertTrue(r["PointInTimeRecoverySpecification"]["PointInTimeRecoveryEnabled"])
            self.assertTrue(r["DeletionProtectionEnabled"])

    def test_same_service_and_container(self):
        svc = next(iter(resources(self.region_tpl, "AWS::ECS::Service").values()))["Properties"]
        task = next(iter(resources(self.region_tpl, "AWS::ECS::TaskDefinition").values()))["Properties"]
        c = task["ContainerDefinitions"][0]
        variables = {}
        with (MODULES / "region" / "variables.tf").open() as f:
            for block in unquote(hcl2.load(f))["variable"]:
                variables.update(block)
        self.assertEqual(variables["desired_count"]["default"], svc["DesiredCount"])
        s = self.tf("aws_ecs_service", "daemon")
        self.assertEqual(s["launch_type"], svc["LaunchType"])
        self.assertEqual(s["deployment_minimum_healthy_percent"], svc["DeploymentConfiguration"]["MinimumHealthyPercent"])
        self.assertEqual(s["deployment_circuit_breaker"], [{"enable": True, "rollback": True}])
        self.assertEqual(s["network_configuration"][0]["assign_public_ip"], False)
        td = self.tf("aws_ecs_task_definition", "daemon")
        self.assertEqual(td["container_definitions"],
                         "${local.config_in_s3 ? jsonencode(local.containers_s3) : jsonencode(local.containers_parameter)}")
        loc = self.tf_region["locals"]
        base = loc["daemon_container"]
        self.assertIs(base["readonlyRootFilesystem"], c["ReadonlyRootFilesystem"])
        self.assertEqual(base["logConfiguration"]["logDriver"], c["LogConfiguration"]["LogDriver"])
        self.assertEqual([e["name"] for e in base["environment"]], [e["Name"] for e in c["Environment"]])
        self.assertEqual(base["stopTimeout"], c["StopTimeout"])
        # The parameter variant (the example) and the S3 variant: command, secrets, init container.
        param = re.sub(r"\s+", "", loc["containers_parameter"][0])
        self.assertIn('command=["run"]', param)
        self.assertIn('name="SHAREPLANE_CONFIG_TOML"', param)
        self.assertIn("local.api_token_secret", param)
        self.assertIn("local.admin_token_secret", param)
        self.assertEqual([x["Name"] for x in c["Secrets"]], ["SHAREPLANE_CONFIG_TOML", "SHAREPLANE_API_TOKEN", "SHAREPLANE_ADMIN_TOKEN"])
        self.assertEqual(c["Command"], ["run"])
        cv = next(iter(resources(self.variant_tpl, "AWS::ECS::TaskDefinition").values()))["Properties"]["ContainerDefinitions"]
        s3_daemon = re.sub(r"\s+", "", loc["containers_s3"][0])
        self.assertIn('command=["run","--config",local.config_file]', s3_daemon)
        self.assertEqual(cv[0]["Command"], ["run", "--config", "/etc/shareplane/config.toml"])
        self.assertEqual(loc["config_file"], "/etc/shareplane/config.toml")
        self.assertIn('dependsOn=[{containerName="fetch-config",condition="SUCCESS"}]', s3_daemon)
        self.assertEqual(cv[0]["DependsOn"], [{"Condition": "SUCCESS", "ContainerName": "fetch-config"}])
        fetch = loc["containers_s3"][1]
        self.assertEqual((fetch["name"], fetch["essential"], fetch["readonlyRootFilesystem"]),
                         (cv[1]["Name"], cv[1]["Essential"], cv[1]["ReadonlyRootFilesystem"]))
        self.assertEqual(fetch["command"][:2] + fetch["command"][3:], cv[1]["Command"][:2] + cv[1]["Command"][3:])
        variables = {**variables}
        self.assertEqual(variables["config_fetch_image"]["default"], cv[1]["Image"])
        self.assertEqual(variables["cpu_architecture"]["default"].upper(), task["RuntimePlatform"]["CpuArchitecture"])
        tv = next(iter(resources(self.variant_tpl, "AWS::ECS::TaskDefinition").values()))["Properties"]
        self.assertEqual(tv["RuntimePlatform"]["CpuArchitecture"], "ARM64")
        self.assertEqual(self.tf("aws_ecs_task_definition", "daemon")["runtime_platform"][0]["cpu_architecture"],
                         "${upper(var.cpu_architecture)}")
        # Both load balancers' target groups take the tasks.
        self.assertEqual(len(svc["LoadBalancers"]), 2)
        self.assertEqual([lb["target_group_arn"] for lb in s["load_balancer"]],
                         ["${aws_lb_target_group.daemon.arn}", "${aws_lb_target_group.api.arn}"])
        tg = next(iter(resources(self.region_tpl, "AWS::ElasticLoadBalancingV2::TargetGroup").values()))["Properties"]
        ttg = self.tf("aws_lb_target_group", "daemon")
        self.assertEqual(ttg["health_check"][0]["path"], tg["HealthCheckPath"])
        self.assertEqual(ttg["port"], "${local.daemon_port}")
        self.assertEqual(tg["Port"], 8080)
        rule = next(iter(resources(self.region_tpl, "AWS::ElasticLoadBalancingV2::ListenerRule").values()))["Properties"]
        trule = self.tf("aws_lb_listener_rule", "health")
        self.assertEqual(trule["condition"][0]["path_pattern"][0]["values"], rule["Conditions"][0]["PathPatternConfig"]["Values"])

    def test_same_config_keys(self):
        param = config_parameter(self.region_tpl)["Properties"]["Value"]
        parts = param["Fn::Join"][1]
        cdk_text = "".join(p if isinstance(p, str) else "ID" for p in parts)
        tftpl = (MODULES / "region" / "config" / "config.toml.tftpl").read_text()

        def keys(text):
            # Literal keys of each table, in order: "", "[[regions]]", "[[limits]]".
            tables, current = {}, ""
            for line in text.splitlines():
                line = line.strip()
                if line.startswith("[["):
                    current = line
                m = re.match(r"^([a-z_]+) = ", line)
                if m:
                    tables.setdefault(current, [])
                    if m.group(1) not in tables[current]:
                        tables[current].append(m.group(1))
            return tables

        daemon = sorted(self.settings.get("daemon", {}))
        limit_extra = [k for k in self.settings["limits"][0] if k not in ("id", "rate")]
        cdk = keys(cdk_text)
        self.assertEqual(cdk[""], ["region", "table", "metrics_namespace", "listen", "period_ms", "phase_ms", *daemon])
        # limits_source is written only with "table" (the example's settings say "file"), right after phase_ms.
        self.assertEqual([k for k in keys(tftpl)[""] if k != "limits_source"], cdk[""][: -len(daemon) or None])
        self.assertIn('phase_ms = ${phase_ms}\n%{ if limits_source != "file" ~}\nlimits_source = ${jsonencode(limits_source)}\n'
                      '%{ endif ~}\n%{ for k, v in daemon ~}', tftpl)
        self.assertNotIn("limits_source", cdk_text)
        self.assertEqual(keys(tftpl)["[[regions]]"], cdk["[[regions]]"])
        self.assertEqual(keys(tftpl)["[[limits]]"], [k for k in cdk["[[limits]]"] if k not in limit_extra])


    # ---- The network: security groups, who reaches whom, the two endpoints ---------------------

    def test_same_security_groups_and_rules(self):
        cdk = cdk_rules(self.region_tpl, self.region)
        tf = tf_rules(self.tf_region)
        tf_default = {r for r in tf if r[2] != "existing"}
        self.assertEqual(tf_default, cdk, "the same rules between the same groups")
        # The existing gateways' groups (variant: an existing VPC) get the same ingress as the gateway group.
        variant = cdk_rules(self.variant_tpl, self.region)
        self.assertEqual({r for r in tf if r[2] == "existing"}, {r for r in variant if r[2] == "existing"})
        self.assertTrue(any(r[2] == "existing" for r in tf))
        # Each group described alike.
        groups = self.tf_region["resource"]["aws_security_group"]
        cdk_groups = {role_of(g["Properties"]["GroupDescription"]): g["Properties"]["GroupDescription"]
                      for g in resources(self.region_tpl, "AWS::EC2::SecurityGroup").values()}
        self.assertEqual({name: g["description"] for name, g in groups.items()}, cdk_groups)
        pl = self.tf_region["data"]["aws_ec2_managed_prefix_list"]["route53_healthchecks"]
        self.assertEqual(pl["name"], "com.amazonaws.${var.region}.route53-healthchecks")

    def test_gateways_reach_the_api_and_valkey_and_the_internet_does_not(self):
        for name, rules in (("CDK", cdk_rules(self.region_tpl, self.region)), ("Terraform", tf_rules(self.tf_region))):
            with self.subTest(app=name):
                self.assertTrue(reaches(rules, "gateway", "api_lb", 443))
                self.assertTrue(reaches(rules, "gateway", "valkey", 6379))
                self.assertTrue(reaches(rules, "api_lb", "daemon", 8080))
                self.assertTrue(reaches(rules, "lb", "daemon", 8080))
                self.assertTrue(reaches(rules, "prefix:route53-healthchecks", "lb", 443))
                for target, port in (("api_lb", 443), ("valkey", 6379), ("daemon", 8080), ("lb", 443)):
                    self.assertFalse(reaches(rules, "0.0.0.0/0", target, port), f"the internet reaches {target}:{port}")
                self.assertFalse(reaches(rules, "gateway", "daemon", 8080), "only through the load balancer")
                self.assertFalse(reaches(rules, "prefix:route53-healthchecks", "api_lb", 443))
                self.assertEqual([r for r in rules if r[1] == "ingress" and "/" in r[2]], [], "no ingress from addresses")

    def test_same_endpoints(self):
        lbs = {r["Properties"]["Scheme"]: r["Properties"] for r in resources(self.region_tpl, "AWS::ElasticLoadBalancingV2::LoadBalancer").values()}
        self.assertEqual(sorted(lbs), ["internal", "internet-facing"])
        api, pub = self.tf("aws_lb", "api"), self.tf("aws_lb", "endpoint")
        self.assertEqual((api["internal"], pub["internal"]), (True, False))
        self.assertEqual((api["subnets"], pub["subnets"]), ("${local.private_subnet_ids}", "${local.public_subnet_ids}"))
        attrs = {a["Key"]: a["Value"] for a in lbs["internal"]["LoadBalancerAttributes"]}
        self.assertEqual(str(api["idle_timeout"]), attrs["idle_timeout.timeout_seconds"])
        self.assertEqual(api["access_logs"][0]["prefix"], attrs["access_logs.s3.prefix"])
        rules = [r["Properties"] for r in resources(self.region_tpl, "AWS::ElasticLoadBalancingV2::ListenerRule").values()]
        cdk_paths = sorted(tuple(r["Conditions"][0]["PathPatternConfig"]["Values"]) for r in rules)
        tf_paths = sorted(tuple(self.tf("aws_lb_listener_rule", n)["condition"][0]["path_pattern"][0]["values"]) for n in ("api", "health"))
        self.assertEqual(tf_paths, cdk_paths)
        self.assertIn(("/v1/*", "/readyz", "/healthz"), tf_paths)
        for listener in resources(self.region_tpl, "AWS::ElasticLoadBalancingV2::Listener").values():
            self.assertEqual(listener["Properties"]["Protocol"], "HTTPS")
        self.assertEqual([self.tf("aws_lb_listener", n)["protocol"] for n in ("api", "https")], ["HTTPS", "HTTPS"])
        cert = next(iter(resources(self.region_tpl, "AWS::CertificateManager::Certificate").values()))["Properties"]
        self.assertEqual(cert["SubjectAlternativeNames"], [f"api.{self.region}.shareplane.example.com"])
        self.assertEqual(self.tf("aws_acm_certificate", "endpoint")["subject_alternative_names"], ["${local.api_name}"])
        self.assertEqual(load_module("region/urls")["locals"]["api_name"], "api.${local.endpoint}")
        self.assertEqual(self.tf("aws_route53_record", "api")["alias"][0]["name"], "${aws_lb.api.dns_name}")

    def test_same_outputs(self):
        cdk = self.region_tpl["Outputs"]
        with (MODULES / "region" / "outputs.tf").open() as f:
            tf = {k: v for block in unquote(hcl2.load(f))["output"] for k, v in block.items()}
        same = {"Endpoint": "endpoint_url", "RulesUrl": "rules_url", "DemandUrl": "demand_url", "DaemonUrl": "daemon_url",
                "ApiTokenSecretArn": "api_token_secret_arn", "AdminTokenSecretArn": "admin_token_secret_arn", "GatewaySecurityGroupId": "gateway_security_group_id",
                "GatewaySettingsParameter": "gateway_settings_parameter", "ValkeyUrl": "valkey_url",
                "ConfigParameter": "config_parameter"}
        self.assertEqual(set(cdk), set(same))
        self.assertIn("ConfigObject", self.variant_tpl["Outputs"])
        self.assertIn("config_object", tf)
        for c, t in same.items():
            self.assertIn(t, tf, c)
        api = f"https://api.{self.region}.shareplane.example.com"
        self.assertEqual((cdk["RulesUrl"]["Value"], cdk["DemandUrl"]["Value"]), (f"{api}/v1/rules", f"{api}/v1/demand"))
        self.assertEqual((tf["rules_url"]["value"], tf["demand_url"]["value"]), ("${local.api_url}/v1/rules", "${local.api_url}/v1/demand"))
        self.assertEqual((cdk["DaemonUrl"]["Value"], tf["daemon_url"]["value"]), (api, "${local.api_url}"))
        self.assertEqual(self.tf_region["locals"]["api_url"], "${module.urls.daemon_url}")
        self.assertEqual(tf["valkey_url"]["value"], "${local.valkey_url}")
        self.assertIn('"rediss://${c.endpoint[0].address}:${c.endpoint[0].port}"', self.tf_region["locals"]["valkey_url"])
        self.assertEqual(cdk["ValkeyUrl"]["Value"]["Fn::Join"][1][0], "rediss://")

    def test_same_gateway_settings(self):
        p = [r for r in resources(self.region_tpl, "AWS::SSM::Parameter").values() if r["Properties"]["Name"].endswith("/gateway")]
        self.assertEqual(len(p), 1)
        # Deploy-time values (the secret ARN, the Valkey address) sit inside the JSON strings.
        text = "".join(x if isinstance(x, str) else "T" for x in p[0]["Properties"]["Value"]["Fn::Join"][1])
        cdk_keys = sorted(json.loads(text))
        tf_value = self.tf("aws_ssm_parameter", "gateway")["value"]
        tf_keys = sorted(re.findall(r"(\w+)\s*=", tf_value))
        self.assertEqual(tf_keys, cdk_keys)
        self.assertNotIn("admin_token", tf_value, "the gateways never get the admin token")
        self.assertEqual(cdk_keys, ["apiTokenSecretArn", "daemonUrl", "demandUrl", "gatewaySecurityGroupId", "redisMode", "redisUrl", "rulesUrl"])

    def test_same_valkey(self):
        c = next(iter(resources(self.region_tpl, "AWS::ElastiCache::ServerlessCache").values()))["Properties"]
        t = self.tf("aws_elasticache_serverless_cache", "valkey")
        self.assertEqual((t["engine"], t["major_engine_version"]), (c["Engine"], c["MajorEngineVersion"]))
        self.assertEqual(t["kms_key_id"], "${aws_kms_key.main.arn}")
        self.assertEqual(t["subnet_ids"], "${local.private_subnet_ids}")
        self.assertEqual(t["security_group_ids"], ["${aws_security_group.valkey[0].id}"])
        limits = t["cache_usage_limits"][0]
        self.assertEqual(limits["data_storage"][0]["unit"], c["CacheUsageLimits"]["DataStorage"]["Unit"])
        with (MODULES / "region" / "variables.tf").open() as f:
            variables = {k: v for block in unquote(hcl2.load(f))["variable"] for k, v in block.items()}
        self.assertIn("data_storage_max_gb = optional(number, 5)", variables["valkey"]["type"].replace("${", ""))
        self.assertEqual(c["CacheUsageLimits"]["DataStorage"]["Maximum"], 5)
        self.assertIn("ecpu_per_second_max = optional(number, 100000)", variables["valkey"]["type"].replace("${", ""))
        self.assertEqual(c["CacheUsageLimits"]["ECPUPerSecond"]["Maximum"], 100000)

    def test_same_config_in_s3(self):
        buckets = {k: r["Properties"] for k, r in resources(self.variant_tpl, "AWS::S3::Bucket").items() if k.startswith("ConfigBucket")}
        self.assertEqual(len(buckets), 1)
        b = next(iter(buckets.values()))
        sse = b["BucketEncryption"]["ServerSideEncryptionConfiguration"][0]
        tsse = self.tf("aws_s3_bucket_server_side_encryption_configuration", "config")["rule"][0]
        self.assertEqual(tsse["apply_server_side_encryption_by_default"][0]["sse_algorithm"], sse["ServerSideEncryptionByDefault"]["SSEAlgorithm"])
        self.assertIs(tsse["bucket_key_enabled"], sse["BucketKeyEnabled"])
        self.assertEqual(self.tf("aws_s3_bucket_versioning", "config")["versioning_configuration"][0]["status"], b["VersioningConfiguration"]["Status"])
        self.assertEqual(self.tf("aws_s3_bucket_logging", "config")["target_prefix"], b["LoggingConfiguration"]["LogFilePrefix"])
        obj = self.tf("aws_s3_object", "config")
        self.assertEqual((obj["key"], obj["content"]), ("${local.config_object_key}", "${local.config_toml}"))
        deploy = next(iter(resources(self.variant_tpl, "Custom::CDKBucketDeployment").values()))["Properties"]
        self.assertEqual(self.tf_region["locals"]["config_object_key"], "daemon.toml")
        self.assertIn("daemon.toml", json.dumps(self.variant_tpl["Outputs"]["ConfigObject"]))
        self.assertTrue(deploy["DestinationBucketName"]["Ref"].startswith("ConfigBucket"))
        self.assertEqual(self.tf("aws_ssm_parameter", "config")["count"], "${local.config_in_s3 ? 0 : 1}")
        pre = self.tf("aws_ssm_parameter", "config")["lifecycle"][0]["precondition"][0]
        self.assertEqual(pre["condition"], "${length(local.config_toml) <= 8192}")

    def test_existing_vpc_creates_no_network(self):
        variant_types = {r["Type"] for r in self.variant_tpl["Resources"].values()}
        network = {"AWS::EC2::VPC", "AWS::EC2::Subnet", "AWS::EC2::InternetGateway", "AWS::EC2::NatGateway", "AWS::EC2::EIP",
                   "AWS::EC2::RouteTable", "AWS::EC2::Route", "AWS::EC2::FlowLog", "AWS::EC2::SubnetRouteTableAssociation"}
        self.assertEqual(variant_types & network, set())
        vpc = self.variant_settings["existingVpcs"][self.region]
        for g in resources(self.variant_tpl, "AWS::EC2::SecurityGroup").values():
            self.assertEqual(g["Properties"]["VpcId"], vpc["vpcId"])
        # Every Terraform network resource is created only without var.existing_vpc.
        with (MODULES / "region" / "network.tf").open() as f:
            doc = unquote(hcl2.load(f))
        for kind in ("resource", "data"):
            for block in doc.get(kind, []):
                for rtype, named in block.items():
                    for name, body in named.items():
                        if rtype == "aws_iam_policy_document" and name == "flow_assume":
                            continue
                        self.assertRegex(str(body.get("count")), r"local\.(create_vpc|subnet_count)", f"{rtype}.{name}")


ROLES = {
    "shareplane daemon tasks": "daemon",
    "shareplane endpoint": "lb",
    "shareplane API inside the VPC": "api_lb",
    "shareplane gateways": "gateway",
    "shareplane Valkey": "valkey",
}


def role_of(description: str) -> str:
    """A security group's role (the Terraform resource name) from its description."""
    found = [role for prefix, role in ROLES.items() if description.startswith(prefix)]
    if len(found) != 1:
        raise AssertionError(f"no role for the group described {description!r}")
    return found[0]


def cdk_rules(template: dict, region: str) -> set[tuple]:
    """Every security group rule as (group role, direction, peer, from port, to port)."""
    groups = {k: role_of(g["Properties"]["GroupDescription"]) for k, g in resources(template, "AWS::EC2::SecurityGroup").items()}
    context = json.loads(CDK_JSON.read_text())["context"]
    prefix_lists = {v[0]["PrefixListId"]: "prefix:route53-healthchecks" for k, v in context.items()
                    if f"PrefixListName=com.amazonaws.{region}.route53-healthchecks:" in k}

    def ref(v):
        name = v["Fn::GetAtt"][0] if isinstance(v, dict) else v
        return groups.get(name, "existing" if str(name).startswith("sg-") else name)

    def peer(r, direction):
        sg = r.get("SourceSecurityGroupId" if direction == "ingress" else "DestinationSecurityGroupId")
        if sg is not None:
            return ref(sg)
        pl = r.get("SourcePrefixListId")
        if pl is not None:
            return prefix_lists[pl]
        return r["CidrIp"]

    out = set()
    for gid, g in resources(template, "AWS::EC2::SecurityGroup").items():
        for direction, key in (("ingress", "SecurityGroupIngress"), ("egress", "SecurityGroupEgress")):
            for r in g["Properties"].get(key, []):
                if r.get("Description") == "Disallow all traffic":
                    continue  # CDK's stand-in for "no egress", which Terraform's groups have by default
                out.add((groups[gid], direction, peer(r, direction), r["FromPort"], r["ToPort"]))
    for rtype, direction in (("AWS::EC2::SecurityGroupIngress", "ingress"), ("AWS::EC2::SecurityGroupEgress", "egress")):
        for r in resources(template, rtype).values():
            p = r["Properties"]
            out.add((ref(p["GroupId"]), direction, peer(p, direction), p["FromPort"], p["ToPort"]))
    return out


def tf_rules(module: dict) -> set[tuple]:
    """The same tuples from the Terraform rule resources (ports and groups resolved)."""
    values = {"${local.daemon_port}": 8080, "${local.valkey_ports.from}": 6379, "${local.valkey_ports.to}": 6380}

    def group(v):
        m = re.fullmatch(r"\$\{aws_security_group\.(\w+)(\[0\])?\.id\}", v)
        if m:
            return m.group(1)
        if v == "${each.key}":
            return "existing"
        raise AssertionError(f"unexpected group reference {v!r}")

    out = set()
    for rtype, direction in (("aws_vpc_security_group_ingress_rule", "ingress"), ("aws_vpc_security_group_egress_rule", "egress")):
        for name, r in module["resource"].get(rtype, {}).items():
            if "referenced_security_group_id" in r:
                p = group(r["referenced_security_group_id"])
            elif "prefix_list_id" in r:
                assert r["prefix_list_id"] == "${data.aws_ec2_managed_prefix_list.route53_healthchecks.id}", name
                p = "prefix:route53-healthchecks"
            else:
                p = r["cidr_ipv4"]
            assert r["ip_protocol"] == "tcp", name
            out.add((group(r["security_group_id"]), direction, p, values.get(r["from_port"], r["from_port"]), values.get(r["to_port"], r["to_port"])))
    return out


def reaches(rules: set[tuple], source: str, target: str, port: int) -> bool:
    """Traffic from `source` (a role, "prefix:…" or an address range) to group `target` on `port`:
    the source group's egress (for a group of the stack) and the target's ingress must allow it."""
    roles = set(ROLES.values())

    def allows(group, direction, peer):
        return any(r[0] == group and r[1] == direction and r[2] == peer and r[3] <= port <= r[4] for r in rules)

    if source in roles and not allows(source, "egress", target):
        return False
    return allows(target, "ingress", source)


class ConfigText(unittest.TestCase):
    """Terraform's config module renders, byte for byte, the config the CDK app writes."""

    def test_same_config_text(self):
        rendered = os.environ.get("SHAREPLANE_TF_CONFIGS")
        if not rendered:
            self.skipTest("terraform is not installed: the Terraform config module was not rendered")
        tf = json.loads(Path(rendered).read_text())
        settings = json.loads(CDK_JSON.read_text())["context"]["shareplane"]
        regions = settings["regions"]
        templates = load_templates()
        self.assertEqual(sorted(tf), sorted(regions))
        for region in regions:
            with self.subTest(region=region):
                param = config_parameter(templates[f"Shareplane-{region}"])
                parts = param["Properties"]["Value"]["Fn::Join"][1]
                ids = iter(f"hc-{r}" for r in regions)
                cdk = "".join(p if isinstance(p, str) else next(ids) for p in parts)
                self.assertEqual(tf[region], cdk)
                doc = tomllib.loads(cdk)
                self.assertEqual(doc["region"], region)
                self.assertEqual([(r["name"], r["health_check_id"]) for r in doc["regions"]], [(r, f"hc-{r}") for r in regions])
                self.assertEqual([(l["id"], l["rate"]) for l in doc["limits"]], [(l["id"], l["rate"]) for l in settings["limits"]])
                self.assertEqual(doc["listen"], "0.0.0.0:8080")
                self.assertNotIn("api_token", doc)


    def test_same_config_text_with_limits_from_the_table(self):
        """limitsSource / limits_source = "table": limits_source = "table" after phase_ms, no [[limits]]."""
        cdk_path = os.environ.get("SHAREPLANE_CDK_CONFIGS_TABLE")
        if not cdk_path:
            self.skipTest("infra/test.sh renders these (dist/test/render-configs.js)")
        cdk = json.loads(Path(cdk_path).read_text())
        settings = json.loads(CDK_JSON.read_text())["context"]["shareplane"]
        regions = settings["regions"]
        self.assertEqual(sorted(cdk), sorted(regions))
        templates = load_templates()
        for region in regions:
            with self.subTest(region=region):
                doc = tomllib.loads(cdk[region])
                self.assertEqual(doc["limits_source"], "table")
                self.assertNotIn("limits", doc)
                self.assertNotIn("[[limits]]", cdk[region])
                self.assertEqual([(r["name"], r["health_check_id"]) for r in doc["regions"]], [(r, f"hc-{r}") for r in regions])
                # The same text as the example's synthesized config, but for the source and the limits.
                parts = config_parameter(templates[f"Shareplane-{region}"])["Properties"]["Value"]["Fn::Join"][1]
                ids = iter(f"hc-{r}" for r in regions)
                file_text = "".join(p if isinstance(p, str) else next(ids) for p in parts)
                expected = re.sub(r"(?m)^(phase_ms = \d+\n)", r'\1limits_source = "table"\n', file_text.split("\n[[limits]]\n")[0])
                self.assertEqual(cdk[region], expected)
        tf_path = os.environ.get("SHAREPLANE_TF_CONFIGS_TABLE")
        if not tf_path:
            self.skipTest("terraform is not installed: the Terraform config module was not rendered")
        tf = json.loads(Path(tf_path).read_text())
        self.assertEqual(sorted(tf), sorted(regions))
        for region in regions:
            with self.subTest(region=region):
                self.assertEqual(tf[region], cdk[region])


def sid_of(dynamic_statement: dict) -> str:
    """The Sid a dynamic statement block gets: its for_each holds the one name."""
    m = re.search(r'\["(\w+)"\]', dynamic_statement["for_each"])
    if not m:
        raise AssertionError(f"cannot read the Sid of {dynamic_statement}")
    return m.group(1)


def each_value_of(v, entry: dict):
    """`${each.value.NAME}` read from the for_each entry; anything else as it is."""
    m = re.fullmatch(r"\$\{each\.value\.(\w+)\}", v) if isinstance(v, str) else None
    return entry[m.group(1)] if m else v


def evaluate(expr, env: dict, each_value: dict):
    """A threshold: a number, or a small arithmetic expression over known variables."""
    if isinstance(expr, (int, float)):
        return expr
    m = re.fullmatch(r"\$\{(.*)\}", expr)
    if not m:
        raise AssertionError(f"unexpected threshold {expr!r}")
    body = m.group(1)
    for k, v in env.items():
        body = body.replace(k, str(v))
    body = body.replace("each.value.rate", str(each_value["rate"]))
    if not re.fullmatch(r"[0-9.*+ ]+", body):
        raise AssertionError(f"cannot evaluate threshold {expr!r}")
    return eval(body)  # noqa: S307 - digits and + * only, checked above


if __name__ == "__main__":
    unittest.main()
