"""The Terraform modules describe the same system as the CDK app.

The AWS provider cannot be downloaded here, so `terraform validate` and `plan` cannot run. This
test parses the modules' HCL (python-hcl2) and compares it with the CloudFormation templates the
CDK app synthesized (default settings of infra/cdk/cdk.json, three Regions): the resource types,
the task role's statements and IAM conditions, the alarms, the health checks, the table, the
service and the keys of the daemon's config. When terraform is installed, infra/test.sh also
renders every Region's config with the Terraform config module (no provider needed) and this test
checks it is the same text as the CDK app's.

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
}

# CloudFormation types with no Terraform counterpart, and why.
CDK_ONLY = {
    # Terraform passes the health check ids from the global module to each region module directly.
    "AWS::Lambda::Function": "CDK's cross-Region reference provider",
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


def load_templates() -> dict[str, dict]:
    templates = {}
    for path in sorted(CDK_OUT.glob("*.template.json")):
        templates[path.name.removesuffix(".template.json")] = json.loads(path.read_text())
    if not templates:
        raise AssertionError(f"no templates in {CDK_OUT}: run cdk synth first")
    return templates


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

    def tf(self, rtype: str, name: str) -> dict:
        for mod in (self.tf_global, self.tf_region):
            if name in mod["resource"].get(rtype, {}):
                return mod["resource"][rtype][name]
        self.fail(f"Terraform declares no {rtype}.{name}")

    def test_same_resource_types(self):
        cfn_types = {r["Type"] for t in self.templates.values() for r in t["Resources"].values()}
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
        # The two conditions the issue names, spelled out.
        conds = {s["sid"]: s.get("condition") for s in doc}
        self.assertEqual(conds["WriteOwnRegionItemsOnly"], [
            {"test": "ForAllValues:StringEquals", "variable": "dynamodb:LeadingKeys", "values": ["${var.region}"]}])
        self.assertEqual(conds["PutMetricsInOwnNamespaceOnly"], [
            {"test": "StringEquals", "variable": "cloudwatch:namespace", "values": ["${var.metric_namespace}"]}])
        self.assertEqual(self.tf("aws_iam_role_policy", "task")["policy"], "${data.aws_iam_policy_document.task.json}")

    def test_same_alarms(self):
        prefix = f"shareplane-{self.region}-"
        peers = [r for r in self.settings["regions"] if r != self.region]
        limits = {l["id"]: l["rate"] for l in self.settings["limits"]}
        env = {"var.period_seconds": self.settings.get("periodSeconds", 5)}
        daemon_alarms = self.tf_region["locals"]["daemon_alarms"]
        tf_names = {
            "RecordStale": "record_stale",
            "SumOfSharesAboveLimit": "sum_of_shares_above_limit",
            **{kind: "daemon" for kind in daemon_alarms},
        }
        seen = set()
        for alarm in resources(self.region_tpl, "AWS::CloudWatch::Alarm").values():
            p = alarm["Properties"]
            name = p["AlarmName"].removeprefix(prefix)
            kind = name.split("-", 1)[0]
            seen.add(kind)
            with self.subTest(alarm=name):
                a = self.tf("aws_cloudwatch_metric_alarm", tf_names[kind])
                if tf_names[kind] == "daemon":
                    # One resource over local.daemon_alarms: read each.value.* from this alarm's entry.
                    entry = daemon_alarms[kind]
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
                each_key = kind if tf_names[kind] == "daemon" else name.split("-", 1)[1]
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
        body = td["container_definitions"]
        for needle in ('"SHAREPLANE_CONFIG_TOML"', '"SHAREPLANE_API_TOKEN"', '"SHAREPLANE_CONFIG_DIGEST"',
                       "readonlyRootFilesystem = true", 'command                = ["run"]', '"awslogs"'):
            self.assertIn(needle.replace(" ", ""), body.replace(" ", ""), needle)
        self.assertEqual([x["Name"] for x in c["Secrets"]], ["SHAREPLANE_CONFIG_TOML", "SHAREPLANE_API_TOKEN"])
        self.assertEqual(c["Command"], ["run"])
        tg = next(iter(resources(self.region_tpl, "AWS::ElasticLoadBalancingV2::TargetGroup").values()))["Properties"]
        ttg = self.tf("aws_lb_target_group", "daemon")
        self.assertEqual(ttg["health_check"][0]["path"], tg["HealthCheckPath"])
        self.assertEqual(ttg["port"], "${local.daemon_port}")
        self.assertEqual(tg["Port"], 8080)
        rule = next(iter(resources(self.region_tpl, "AWS::ElasticLoadBalancingV2::ListenerRule").values()))["Properties"]
        trule = self.tf("aws_lb_listener_rule", "health")
        self.assertEqual(trule["condition"][0]["path_pattern"][0]["values"], rule["Conditions"][0]["PathPatternConfig"]["Values"])

    def test_same_config_keys(self):
        param = next(iter(resources(self.region_tpl, "AWS::SSM::Parameter").values()))["Properties"]["Value"]
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
        self.assertEqual(keys(tftpl)[""], cdk[""][: -len(daemon) or None])
        self.assertEqual(keys(tftpl)["[[regions]]"], cdk["[[regions]]"])
        self.assertEqual(keys(tftpl)["[[limits]]"], [k for k in cdk["[[limits]]"] if k not in limit_extra])


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
                param = next(iter(resources(templates[f"Shareplane-{region}"], "AWS::SSM::Parameter").values()))
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
