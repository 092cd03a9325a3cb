"""The Helm chart (infra/helm/shareplane) renders, lints and validates offline, and agrees with the
CDK app and the Terraform modules on the settings they share.

Rendering and `helm lint --strict` run in Helm's own Go code (the v4 SDK through the PyPI wheel
`helm-python-sdk`, no helm binary); every rendered object of a Kubernetes kind is validated
strictly against that release's OpenAPI schemas (PyPI `kubernetes-validate`, schemas in the
wheel). The Prometheus Operator's kinds (ServiceMonitor, PrometheusRule) have no schema there:
their fields are checked here.

Parity: the chart is rendered with values made from infra/cdk/cdk.json (the settings both apps
deploy), for every Region, and its daemon config must be the very text the CDK app and the
Terraform module render for that Region (SHAREPLANE_CDK_CONFIGS, SHAREPLANE_TF_CONFIGS, and the
same with limits from the table); the gateways get the DaemonUrl the CDK app publishes as --rules
and the API token only, never the admin token; the alerts name the metrics, statistics,
thresholds and periods of the CDK app's gateway alarms (which test_parity.py holds equal to
Terraform's; the CloudWatch agent's config is test_cloudwatch_agent.py's). The daemon on EKS is
reached through its Service, an optional operator Ingress that carries no token, and (without the
ECS service) the stacks' target groups (class DaemonReach).

Run: infra/test.sh (in infra/.venv-helm).
"""

from __future__ import annotations

import json
import os
import re
import unittest
from pathlib import Path

import helm_python as helm
import kubernetes_validate
import yaml

from tests.test_gateway_wiring import gateway_loads_rules

INFRA = Path(__file__).resolve().parent.parent
CHART = INFRA / "helm" / "shareplane"
CDK_JSON = INFRA / "cdk" / "cdk.json"
CDK_OUT = Path(os.environ.get("SHAREPLANE_CDK_OUT", INFRA / "cdk" / "cdk.out"))
# cdk.json's settings with "ecsService": false (infra/test.sh synthesizes it): the daemon on EKS.
CDK_OUT_NOECS = Path(os.environ.get("SHAREPLANE_CDK_OUT_NOECS", INFRA / "cdk" / "cdk.out.noecs"))
# The daemon's routes, read from its source: the Ingress may route only paths the daemon serves.
DAEMON_API = INFRA.parent / "crates" / "shareplane" / "src" / "api.rs"
KUBE_VERSION = "1.33.0"
NAMESPACE = "shareplane"
RELEASE = "sp"


class UniqueKeyLoader(yaml.SafeLoader):
    """A YAML loader that refuses a mapping with a key twice (Kubernetes keeps the last, silently)."""


def _no_duplicates(loader, node, deep=False):
    keys = [loader.construct_object(k, deep=deep) for k, _ in node.value]
    dup = {k for k in keys if keys.count(k) > 1}
    if dup:
        raise AssertionError(f"duplicate keys {sorted(dup)} at {node.start_mark}")
    return loader.construct_mapping(node, deep)


UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _no_duplicates)


def values_from_settings(settings: dict, region: str, daemon_url: str) -> dict:
    """The chart's values for one Region from the CDK/Terraform settings (cdk.json's shareplane)."""
    return {
        "region": region,
        "metricNamespace": settings.get("metricNamespace", "Shareplane"),
        "gateway": {
            "image": {"repository": "registry.example.com/shareplane-gateway"},
            "daemonUrl": daemon_url,
            "redisUrl": "rediss://valkey.example.com:6379",
            "demandToken": {"existingSecret": "shareplane-api-token"},
        },
        "daemon": {
            "enabled": True,
            "replicas": settings.get("desiredCount", 2),
            "image": {"repository": "registry.example.com/shareplane"},
            "tableName": settings.get("tableName", "shareplane-records"),
            "regions": settings["regions"],
            # The placeholders tests/tf-render and render-configs.js give the health check ids.
            "healthCheckIds": {r: f"hc-{r}" for r in settings["regions"]},
            "periodSeconds": settings.get("periodSeconds", 5),
            "limitsSource": settings.get("limitsSource", "file"),
            "limits": settings.get("limits", []),
            "settings": settings.get("daemon", {}),
            "apiToken": {"existingSecret": "shareplane-api-token"},
            "adminToken": {"existingSecret": "shareplane-admin-token"},
        },
        "serviceMonitor": {"enabled": True},
        "prometheusRule": {"enabled": True},
        "cloudwatchAgent": {"enabled": True},
    }


def render(values: dict) -> list[dict]:
    manifests = helm.Chart.load(CHART).render(values, name=RELEASE, namespace=NAMESPACE, is_install=True)
    objects = []
    for path, text in sorted(manifests.items()):
        if path.endswith("NOTES.txt"):
            continue
        objects += [o for o in yaml.load_all(text, Loader=UniqueKeyLoader) if o]
    return objects


def one(objects: list[dict], kind: str, name: str) -> dict:
    found = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    if len(found) != 1:
        raise AssertionError(f"expected one {kind} {name}, found {len(found)}")
    return found[0]


def container(objects: list[dict], kind: str, name: str) -> dict:
    return one(objects, kind, name)["spec"]["template"]["spec"]["containers"][0]


def env_names(c: dict) -> list[str]:
    return [e["name"] for e in c.get("env", [])]


def cdk_region_template(region: str) -> dict:
    return json.loads((CDK_OUT / f"Shareplane-{region}.template.json").read_text())


def cdk_gateway_alarms(region: str) -> dict[str, dict]:
    """The CDK app's gateway alarms of a Region: id (without shareplane-<region>-) -> properties."""
    prefix = f"shareplane-{region}-"
    out = {}
    for r in cdk_region_template(region)["Resources"].values():
        if r["Type"] == "AWS::CloudWatch::Alarm" and r["Properties"]["MetricName"].startswith("shareplane_gateway_"):
            out[r["Properties"]["AlarmName"].removeprefix(prefix)] = r["Properties"]
    return out


class Chart(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.settings = json.loads(CDK_JSON.read_text())["context"]["shareplane"]
        cls.region = cls.settings["regions"][1]
        cls.daemon_url = cdk_region_template(cls.region)["Outputs"]["DaemonUrl"]["Value"]
        cls.values = values_from_settings(cls.settings, cls.region, cls.daemon_url)
        cls.objects = render(cls.values)

    def test_lints_strict(self):
        report = helm.lint(CHART, self.values, strict=True, kube_version=f"v{KUBE_VERSION}")
        problems = [m for m in report["messages"] if m["severity"] >= 2]
        self.assertEqual((report["errors"], problems), ([], []))

    def test_every_kubernetes_object_validates_strictly(self):
        kinds = set()
        for obj in self.objects:
            kinds.add(obj["kind"])
            if obj["apiVersion"].startswith("monitoring.coreos.com/"):
                continue
            with self.subTest(kind=obj["kind"], name=obj["metadata"]["name"]):
                kubernetes_validate.validate(obj, KUBE_VERSION, strict=True)
        self.assertEqual(kinds, {"ConfigMap", "Deployment", "Service", "ServiceAccount", "PodDisruptionBudget",
                                 "ServiceMonitor", "PrometheusRule"})

    def test_a_daemonset_of_gateways_validates_too(self):
        values = json.loads(json.dumps(self.values))
        values["gateway"].update({"kind": "DaemonSet", "gatewaysPerRegion": 6})
        values["daemon"]["enabled"] = False
        objects = render(values)
        ds = one(objects, "DaemonSet", f"{RELEASE}-gateway")
        kubernetes_validate.validate(ds, KUBE_VERSION, strict=True)
        self.assertIn("gateways_per_region = 6", one(objects, "ConfigMap", f"{RELEASE}-gateway")["data"]["gateway.toml"])
        self.assertEqual([o for o in objects if o["metadata"]["name"] == f"{RELEASE}-daemon"], [])

    def test_the_gateway_takes_the_published_daemon_url_and_probes_readiness(self):
        toml = one(self.objects, "ConfigMap", f"{RELEASE}-gateway")["data"]["gateway.toml"]
        self.assertIn(f'rules = "{self.daemon_url}"\n', toml)
        self.assertRegex(self.daemon_url, r"^https://api\.[a-z0-9-]+\.shareplane\.example\.com$")
        self.assertIn(f'region = "{self.region}"\n', toml)
        c = container(self.objects, "Deployment", f"{RELEASE}-gateway")
        self.assertEqual(c["args"], ["gateway", "--config", "/etc/shareplane/gateway.toml"])
        self.assertEqual(c["livenessProbe"]["httpGet"]["path"], "/healthz")
        self.assertEqual(c["readinessProbe"]["httpGet"]["path"], "/readyz")
        self.assertEqual({p["name"]: p["containerPort"] for p in c["ports"]}, {"grpc": 8081, "http": 8082})
        self.assertTrue(c["resources"]["requests"] and c["resources"]["limits"])
        pdb = one(self.objects, "PodDisruptionBudget", f"{RELEASE}-gateway")["spec"]
        self.assertEqual(pdb["selector"]["matchLabels"], one(self.objects, "Service", f"{RELEASE}-gateway")["spec"]["selector"])

    def test_the_redis_mode_reaches_the_gateway(self):
        """Standalone unless the release says cluster, as it must for the ElastiCache Serverless
        cache that the CDK and Terraform provision (their redisMode)."""
        toml = one(self.objects, "ConfigMap", f"{RELEASE}-gateway")["data"]["gateway.toml"]
        self.assertIn('redis_mode = "standalone"\n', toml)
        values = json.loads(json.dumps(self.values))
        values["gateway"]["redisMode"] = "cluster"
        toml = one(render(values), "ConfigMap", f"{RELEASE}-gateway")["data"]["gateway.toml"]
        self.assertIn('redis_mode = "cluster"\n', toml)

    def test_the_real_gateway_runs_on_the_rendered_config(self):
        """`shareplane gateway --config` on the chart's gateway.toml as rendered, with only the
        addresses made local (the daemon URL's host, Redis, the listeners on 127.0.0.1), loads the
        rule set: the file is one the gateway accepts, and --rules is the daemon's base URL."""
        toml = one(self.objects, "ConfigMap", f"{RELEASE}-gateway")["data"]["gateway.toml"]

        def config(rules: str, redis: str, http: str, d: str) -> list[str]:
            local = {"rules": rules, "redis": redis, "http_listen": http, "grpc_listen": None}
            lines = []
            for line in toml.splitlines():
                key = line.split(" = ", 1)[0]
                if key not in local:
                    lines.append(line)
                elif local[key] is not None:
                    lines.append(f"{key} = {json.dumps(local[key])}")
            self.assertEqual(sum(line.split(" = ", 1)[0] in local for line in toml.splitlines()), 4, toml)
            path = Path(d, "gateway.toml")
            path.write_text("\n".join(lines) + "\n")
            return ["--config", str(path)]

        gateway_loads_rules(self, self.settings, self.region, self.daemon_url, config)

    def test_the_admin_token_goes_to_the_daemon_only(self):
        gw = container(self.objects, "Deployment", f"{RELEASE}-gateway")
        daemon = container(self.objects, "Deployment", f"{RELEASE}-daemon")
        self.assertIn("SHAREPLANE_DEMAND_TOKEN", env_names(gw))
        self.assertNotIn("SHAREPLANE_ADMIN_TOKEN", env_names(gw))
        self.assertNotIn("shareplane-admin-token", json.dumps(one(self.objects, "Deployment", f"{RELEASE}-gateway")))
        self.assertEqual([n for n in env_names(daemon) if n.endswith("_TOKEN")], ["SHAREPLANE_API_TOKEN", "SHAREPLANE_ADMIN_TOKEN"])
        # As on ECS (the CDK app's task definition): the same two secrets, and the gateways' SSM
        # parameter names the API token's secret, not the admin token's.
        task = [r for r in cdk_region_template(self.region)["Resources"].values() if r["Type"] == "AWS::ECS::TaskDefinition"]
        ecs = [s["Name"] for s in task[0]["Properties"]["ContainerDefinitions"][0]["Secrets"] if s["Name"].endswith("_TOKEN")]
        self.assertEqual(ecs, ["SHAREPLANE_API_TOKEN", "SHAREPLANE_ADMIN_TOKEN"])
        gateway_param = [r for r in cdk_region_template(self.region)["Resources"].values()
                         if r["Type"] == "AWS::SSM::Parameter" and r["Properties"]["Name"].endswith("/gateway")]
        self.assertNotIn("AdminToken", json.dumps(gateway_param))

    def test_the_daemon_runs_as_on_ecs(self):
        c = container(self.objects, "Deployment", f"{RELEASE}-daemon")
        tpl = cdk_region_template(self.region)
        ecs = [r for r in tpl["Resources"].values() if r["Type"] == "AWS::ECS::TaskDefinition"][0]["Properties"]["ContainerDefinitions"][0]
        self.assertEqual([p["containerPort"] for p in c["ports"]], [p["ContainerPort"] for p in ecs["PortMappings"]])
        tgs = [r["Properties"] for r in tpl["Resources"].values() if r["Type"] == "AWS::ElasticLoadBalancingV2::TargetGroup"]
        self.assertEqual({c["readinessProbe"]["httpGet"]["path"]}, {t["HealthCheckPath"] for t in tgs})
        self.assertEqual(c["securityContext"]["readOnlyRootFilesystem"], ecs["ReadonlyRootFilesystem"])
        self.assertEqual(c["securityContext"]["runAsUser"], 65532, "the image's nonroot user")
        service = [r for r in tpl["Resources"].values() if r["Type"] == "AWS::ECS::Service"][0]["Properties"]
        self.assertEqual(one(self.objects, "Deployment", f"{RELEASE}-daemon")["spec"]["replicas"], service["DesiredCount"])

    def test_the_daemon_config_is_the_text_cdk_and_terraform_render(self):
        sources = {"CDK": os.environ.get("SHAREPLANE_CDK_CONFIGS", ""), "Terraform": os.environ.get("SHAREPLANE_TF_CONFIGS", ""),
                   "CDK (table)": os.environ.get("SHAREPLANE_CDK_CONFIGS_TABLE", ""),
                   "Terraform (table)": os.environ.get("SHAREPLANE_TF_CONFIGS_TABLE", "")}
        compared = 0
        for name, path in sources.items():
            if not path:
                continue
            settings = dict(self.settings)
            if "table" in name:
                settings.update(limitsSource="table", limits=[])
            configs = json.loads(Path(path).read_text())
            for region in self.settings["regions"]:
                with self.subTest(source=name, region=region):
                    objects = render(values_from_settings(settings, region, self.daemon_url))
                    text = one(objects, "ConfigMap", f"{RELEASE}-daemon")["data"]["config.toml"]
                    self.assertEqual(text, configs[region])
                    compared += 1
        if not os.environ.get("SHAREPLANE_CDK_CONFIGS"):
            self.fail("SHAREPLANE_CDK_CONFIGS is not set (infra/test.sh renders the CDK app's configs)")
        self.assertGreaterEqual(compared, len(self.settings["regions"]))

    def test_the_alerts_are_the_gateway_alarms_of_cdk_and_terraform(self):
        alarms = cdk_gateway_alarms(self.region)
        self.assertEqual(len(alarms), 4)
        rule = one(self.objects, "PrometheusRule", f"{RELEASE}-gateway")
        rules = rule["spec"]["groups"][0]["rules"]
        by_metric = {}
        for r in rules:
            m = re.fullmatch(r'(max|min)\((\w+)\{namespace="(.*)", service="(.*)"\}\) ([<>]) (\d+)', r["expr"])
            self.assertIsNotNone(m, r["expr"])
            self.assertEqual((m.group(3), m.group(4)), (NAMESPACE, f"{RELEASE}-gateway"))
            by_metric[m.group(2)] = (m.group(1), m.group(5), float(m.group(6)), r["for"], r["alert"])
        stat = {"Maximum": "max", "Minimum": "min"}
        op = {"GreaterThanThreshold": ">", "LessThanThreshold": "<"}
        for name, a in alarms.items():
            with self.subTest(alarm=name):
                agg, o, threshold, for_, alert = by_metric[a["MetricName"]]
                self.assertEqual((agg, o, threshold), (stat[a["Statistic"]], op[a["ComparisonOperator"]], a["Threshold"]))
                self.assertEqual(for_, f"{a['EvaluationPeriods'] * a['Period'] // 60}m")
                self.assertEqual(alert, f"Shareplane{name}")
        self.assertEqual(set(by_metric), {a["MetricName"] for a in alarms.values()})

    def test_service_monitors_scrape_the_metrics_ports(self):
        for part in ("gateway", "daemon"):
            with self.subTest(part=part):
                sm = one(self.objects, "ServiceMonitor", f"{RELEASE}-{part}")["spec"]
                svc = one(self.objects, "Service", f"{RELEASE}-{part}")
                self.assertEqual(sm["selector"]["matchLabels"], svc["spec"]["selector"])
                self.assertTrue(set(sm["selector"]["matchLabels"].items()) <= set(svc["metadata"]["labels"].items()))
                self.assertEqual([(e["port"], e["path"]) for e in sm["endpoints"]], [("http", "/metrics")])
                self.assertIn("http", [p["name"] for p in svc["spec"]["ports"]])

    def test_a_mis_wired_release_does_not_render(self):
        cases = {
            "DaemonUrl": lambda v: (v["gateway"].update(daemonUrl=""), v["daemon"].update(enabled=False)),
            "redisUrl": lambda v: v["gateway"].update(redisUrl=""),
            "demandToken": lambda v: v["gateway"]["demandToken"].update(existingSecret=""),
            "adminToken": lambda v: v["daemon"]["adminToken"].update(existingSecret=""),
            "not one of daemon.regions": lambda v: v.update(region="mars-north-1"),
            "Deployment or DaemonSet": lambda v: v["gateway"].update(kind="StatefulSet"),
            "healthCheckIds": lambda v: v["daemon"].update(healthCheckIds={}),
        }
        for needle, change in cases.items():
            with self.subTest(missing=needle):
                values = json.loads(json.dumps(self.values))
                change(values)
                with self.assertRaises(helm.HelmError) as e:
                    render(values)
                self.assertIn(needle, str(e.exception))

    def test_without_daemon_url_the_gateways_use_the_release_daemon(self):
        values = json.loads(json.dumps(self.values))
        values["gateway"]["daemonUrl"] = ""
        toml = one(render(values), "ConfigMap", f"{RELEASE}-gateway")["data"]["gateway.toml"]
        self.assertIn(f'rules = "http://{RELEASE}-daemon.{NAMESPACE}.svc:8080"\n', toml)


class DaemonReach(unittest.TestCase):
    """The daemon on EKS, reached by the release's gateways through its Service, by operators
    through an optional Ingress that carries no credential, and (without the ECS service) by the
    stacks' load balancers through their target groups."""

    @classmethod
    def setUpClass(cls):
        cls.settings = json.loads(CDK_JSON.read_text())["context"]["shareplane"]
        cls.region = cls.settings["regions"][1]
        cls.values = values_from_settings(cls.settings, cls.region, "")
        cls.objects = render(cls.values)
        cls.name = f"{RELEASE}-daemon"

    def changed(self, change) -> list[dict]:
        values = json.loads(json.dumps(self.values))
        change(values["daemon"])
        return render(values)

    def test_the_gateways_reach_the_daemon_through_its_service(self):
        toml = one(self.objects, "ConfigMap", f"{RELEASE}-gateway")["data"]["gateway.toml"]
        rules = re.search(r'(?m)^rules = "http://([^.]+)\.([^.]+)\.svc:(\d+)"$', toml)
        self.assertIsNotNone(rules, toml)
        svc = one(self.objects, "Service", rules.group(1))
        self.assertEqual((rules.group(1), rules.group(2)), (self.name, NAMESPACE))
        port = [p for p in svc["spec"]["ports"] if p["port"] == int(rules.group(3))]
        self.assertEqual(len(port), 1)
        pod = one(self.objects, "Deployment", self.name)["spec"]["template"]
        c = pod["spec"]["containers"][0]
        named = {p["name"]: p["containerPort"] for p in c["ports"]}
        listen = re.search(r'(?m)^listen = "0\.0\.0\.0:(\d+)"$', one(self.objects, "ConfigMap", self.name)["data"]["config.toml"])
        self.assertEqual(named[port[0]["targetPort"]], int(listen.group(1)), "the Service reaches the port the daemon listens on")
        selector = svc["spec"]["selector"].items()
        self.assertLessEqual(set(selector), set(pod["metadata"]["labels"].items()))
        gw_pod = one(self.objects, "Deployment", f"{RELEASE}-gateway")["spec"]["template"]["metadata"]["labels"]
        self.assertFalse(set(selector) <= set(gw_pod.items()), "the daemon's Service must not select gateways")

    def test_nothing_is_exposed_by_default(self):
        kinds = {o["kind"] for o in self.objects}
        self.assertEqual(kinds & {"Ingress", "TargetGroupBinding", "SecurityGroupPolicy"}, set())
        self.assertEqual(one(self.objects, "Service", self.name)["spec"]["type"], "ClusterIP")

    def test_the_operator_ingress_routes_the_operator_paths_and_carries_no_token(self):
        objects = self.changed(lambda d: d.update(ingress={
            "enabled": True, "className": "alb", "host": "ops.eu-west-1.shareplane.example.com",
            "annotations": {"alb.ingress.kubernetes.io/scheme": "internal"},
            "tls": [{"hosts": ["ops.eu-west-1.shareplane.example.com"], "secretName": "ops-tls"}],
            "paths": ["/v1/state", "/v1/events", "/v1/limits", "/v1/peers", "/dashboard"]}))
        ing = one(objects, "Ingress", self.name)
        kubernetes_validate.validate(ing, KUBE_VERSION, strict=True)
        svc = one(objects, "Service", self.name)
        rule = ing["spec"]["rules"][0]
        self.assertEqual(rule["host"], "ops.eu-west-1.shareplane.example.com")
        backends = {(p["backend"]["service"]["name"], p["backend"]["service"]["port"]["name"]) for p in rule["http"]["paths"]}
        self.assertEqual(backends, {(self.name, "http")})
        self.assertIn("http", [p["name"] for p in svc["spec"]["ports"]])
        # Every path is one the daemon serves, and the operator's: the abandon action among them,
        # the gateways' demand and rules not (they use the Service).
        routes = re.findall(r'\.route\("([^"]+)"', DAEMON_API.read_text())
        self.assertIn("/v1/peers/{region}/abandon", routes)
        paths = [p["path"] for p in rule["http"]["paths"]]
        for p in paths:
            with self.subTest(path=p):
                self.assertTrue(any(r.startswith(p) for r in routes), f"{p} routes to nothing the daemon serves")
                self.assertFalse(any(r.startswith(p) for r in ("/v1/demand", "/v1/rules", "/metrics")))
        self.assertTrue(any("/v1/peers/{region}/abandon".startswith(p) for p in paths))
        self.assertEqual(paths, self.chart_default_paths())
        # The admin token: in its Secret, read by the daemon's container alone.
        admin = self.values["daemon"]["adminToken"]["existingSecret"]
        holders = [(o["kind"], o["metadata"]["name"]) for o in objects if admin in json.dumps(o)]
        self.assertEqual(holders, [("Deployment", self.name)])
        self.assertNotIn("TOKEN", json.dumps(ing).upper())

    def chart_default_paths(self) -> list[str]:
        return yaml.safe_load((CHART / "values.yaml").read_text())["daemon"]["ingress"]["paths"]

    def test_an_ingress_that_would_carry_a_token_or_has_no_host_does_not_render(self):
        base = {"enabled": True, "host": "ops.example.com", "paths": ["/v1/state"]}
        cases = {
            "carries no credential": {**base, "annotations": {
                "nginx.ingress.kubernetes.io/auth-secret": self.values["daemon"]["adminToken"]["existingSecret"]}},
            "daemon.ingress.host is required": {**base, "host": ""},
            "names the token Secret": {**base, "annotations": {
                "example.com/secret": f"{NAMESPACE}/{self.values['daemon']['apiToken']['existingSecret']}"}},
        }
        for needle, ingress in cases.items():
            with self.subTest(needle=needle):
                with self.assertRaises(helm.HelmError) as e:
                    self.changed(lambda d: d.update(ingress=ingress))
                self.assertIn(needle, str(e.exception))

    def test_an_annotation_that_only_mentions_a_secret_name_renders(self):
        """Only an annotation whose value is a token's Secret (or namespace/Secret) is refused."""
        admin = self.values["daemon"]["adminToken"]["existingSecret"]
        objects = self.changed(lambda d: d.update(ingress={
            "enabled": True, "host": "ops.example.com", "paths": ["/v1/state"],
            "annotations": {"example.com/note": f"not {admin}"}}))
        self.assertEqual(one(objects, "Ingress", self.name)["metadata"]["annotations"], {"example.com/note": f"not {admin}"})

    def test_without_ecs_the_pods_join_the_stacks_target_groups(self):
        """With `ecsService: false` the stacks publish their two target groups and the daemon's
        security group; the chart binds the daemon's Service to both (IP targets on the port the
        target groups take, healthy on the path they check) and gives the pods that group."""
        tpl = json.loads((CDK_OUT_NOECS / f"Shareplane-{self.region}.template.json").read_text())
        outputs = tpl["Outputs"]
        groups = {part: tpl["Resources"][outputs[o]["Value"]["Ref"]]["Properties"]
                  for part, o in (("health", "DaemonTargetGroupArn"), ("api", "DaemonApiTargetGroupArn"))}
        arns = {part: f"arn:aws:elasticloadbalancing:{self.region}:123456789012:targetgroup/{part}/0123456789abcdef"
                for part in groups}
        exposed = lambda d: d.update(targetGroups=arns, securityGroupIds=["sg-0daemon00000000000", "sg-0cluster0000000000"],
                                     ingress={"enabled": True, "host": "ops.example.com", "paths": ["/v1/state"]})
        objects = self.changed(exposed)
        values = json.loads(json.dumps(self.values))
        exposed(values["daemon"])
        report = helm.lint(CHART, values, strict=True, kube_version=f"v{KUBE_VERSION}")
        self.assertEqual((report["errors"], [m for m in report["messages"] if m["severity"] >= 2]), ([], []))
        svc = one(objects, "Service", self.name)
        c = container(objects, "Deployment", self.name)
        for part, tg in groups.items():
            with self.subTest(part=part):
                b = one(objects, "TargetGroupBinding", f"{self.name}-{part}")
                self.assertEqual(b["apiVersion"], "elbv2.k8s.aws/v1beta1")
                self.assertEqual(set(b["spec"]), {"targetGroupARN", "targetType", "serviceRef"})
                self.assertEqual(b["spec"]["targetGroupARN"], arns[part])
                self.assertEqual(b["spec"]["targetType"], tg["TargetType"])
                self.assertEqual(b["spec"]["serviceRef"], {"name": self.name, "port": tg["Port"]})
                self.assertIn(tg["Port"], [p["port"] for p in svc["spec"]["ports"]])
                self.assertEqual(c["readinessProbe"]["httpGet"]["path"], tg["HealthCheckPath"])
                self.assertNotIn("Targets", tg, "the stack registers no ECS task")
        sgp = one(objects, "SecurityGroupPolicy", self.name)
        self.assertEqual(sgp["apiVersion"], "vpcresources.k8s.aws/v1beta1")
        self.assertEqual(sgp["spec"]["podSelector"]["matchLabels"], svc["spec"]["selector"])
        self.assertEqual(sgp["spec"]["securityGroups"]["groupIds"], ["sg-0daemon00000000000", "sg-0cluster0000000000"])
        self.assertIn("DaemonSecurityGroupId", outputs)
        with self.assertRaises(helm.HelmError) as e:
            self.changed(lambda d: d.update(targetGroups={"public": arns["health"]}))
        self.assertIn("daemon.targetGroups.public", str(e.exception))


if __name__ == "__main__":
    unittest.main()
