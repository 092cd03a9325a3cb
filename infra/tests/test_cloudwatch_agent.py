"""The path from the gateways' Prometheus gauges to the CloudWatch alarms of CDK and Terraform.

A gateway exports Prometheus text on /metrics only; the gateway alarms of the CDK app
(cdk/lib/gateway-alarms.ts) and the Terraform module (modules/region/gateway_alarms.tf) read
CloudWatch metrics. The chart's CloudWatch agent config (templates/cloudwatch-agent.yaml) is what
puts the one into the other: its Prometheus scrape config finds the gateway pods' `http` port, and
its EMF processor's metric declaration writes the selected gauges into the metric namespace with
the dimension Region. No CloudWatch agent runs here (it is not in any registry this machine
reaches), so this test checks the two files against what they meet on each side:

- the alarms: the selected metric names are exactly the metric names of the CDK app's gateway
  alarms (synthesized templates) and of Terraform's (HCL), in their namespace and dimension;
- the targets: Prometheus' relabelling (keep, and replace with or without source labels: the
  rules this config uses) applied to the pods the chart renders keeps the gateways' `http` port
  and nothing else;
- the gateway: a real `shareplane gateway` (target/debug/shareplane) on the chart's rendered
  config is scraped, and the declaration, applied to its exposition with the target's labels,
  selects exactly the alarms' metrics, each a gauge (the agent turns counters into deltas, which
  these alarms' thresholds do not expect);
- the agent's workload (cloudwatchAgent.deploy): validated strictly, files mounted where the
  agent reads them, a Role that lets it list this namespace's pods.

Run: infra/test.sh (in infra/.venv-helm).
"""

from __future__ import annotations

import json
import re
import unittest
from pathlib import Path

import hcl2
import kubernetes_validate
import yaml

from tests.test_helm_chart import (CDK_JSON, CHART, INFRA, KUBE_VERSION, NAMESPACE, RELEASE, cdk_gateway_alarms, cdk_region_template,
                                   helm, one, render, values_from_settings)
from tests.test_gateway_wiring import gateway_loads_rules
from tests.test_parity import unquote

AGENT = f"{RELEASE}-cloudwatch-agent"


def tf_gateway_alarms() -> tuple[dict[str, dict], dict]:
    """Terraform's gateway alarms (locals.gateway_alarms: id -> settings) and their resource."""
    with (INFRA / "terraform" / "modules" / "region" / "gateway_alarms.tf").open() as f:
        doc = unquote(hcl2.load(f))
    alarms = {k: v for block in doc["locals"] for k, v in block.get("gateway_alarms", {}).items()}
    resource = [b["aws_cloudwatch_metric_alarm"]["gateway"] for b in doc["resource"] if "aws_cloudwatch_metric_alarm" in b]
    if len(alarms) == 0 or len(resource) != 1:
        raise AssertionError("gateway_alarms.tf: expected locals.gateway_alarms and one aws_cloudwatch_metric_alarm.gateway")
    return alarms, resource[0]


def relabel(rules: list[dict], labels: dict[str, str]) -> dict[str, str] | None:
    """Prometheus relabelling, the subset this config uses: `keep` and `replace` (default action),
    regexes anchored at both ends, source values joined by ';'. None when a rule drops the target."""
    labels = dict(labels)
    for r in rules:
        value = ";".join(labels.get(s, "") for s in r.get("source_labels", []))
        m = re.fullmatch(r.get("regex", "(.*)"), value)
        action = r.get("action", "replace")
        if action == "keep":
            if not m:
                return None
        elif action == "replace":
            if m:
                replacement = r.get("replacement", "$1")
                labels[r["target_label"]] = re.sub(r"\$\{?(\d+)\}?", lambda g: m.group(int(g.group(1))) or "", replacement)
        else:
            raise AssertionError(f"relabel action {action!r} is not modelled here: extend the test")
    return {k: v for k, v in labels.items() if not k.startswith("__")}


def discovered(objects: list[dict]) -> list[tuple[str, dict[str, str]]]:
    """What Prometheus' pod discovery sees of the rendered workloads: one target per container
    port, as (workload/port, meta labels)."""
    targets = []
    for o in objects:
        if o["kind"] not in ("Deployment", "DaemonSet"):
            continue
        pod = o["spec"]["template"]
        meta = {f"__meta_kubernetes_pod_label_{re.sub(r'[^a-zA-Z0-9_]', '_', k)}": v for k, v in pod["metadata"]["labels"].items()}
        meta["__meta_kubernetes_pod_name"] = f"{o['metadata']['name']}-0"
        meta["__meta_kubernetes_namespace"] = NAMESPACE
        for c in pod["spec"]["containers"]:
            for p in c.get("ports", []):
                targets.append((f"{o['metadata']['name']}/{p.get('name')}",
                                {**meta, "__meta_kubernetes_pod_container_port_name": p.get("name", "")}))
    return targets


def exposition(text: str) -> tuple[dict[str, str], list[tuple[str, dict[str, str]]]]:
    """Prometheus text: ({family: type}, [(sample name, labels)])."""
    types, samples = {}, []
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            types[name] = kind.strip()
        elif line and not line.startswith("#"):
            m = re.match(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s", line)
            if m is None:
                raise AssertionError(f"not a sample line: {line!r}")
            labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(3) or ""))
            samples.append((m.group(1), labels))
    return types, samples


def selected(declaration: dict, name: str, labels: dict[str, str]) -> bool:
    """The EMF processor's choice for one sample: its source labels match, its name matches a
    selector, and it carries every dimension (regexes as Go's MatchString: unanchored search)."""
    source = ";".join(labels.get(s, "") for s in declaration["source_labels"])
    return (re.search(declaration["label_matcher"], source) is not None
            and any(re.search(sel, name) for sel in declaration["metric_selectors"])
            and all(d in labels for dims in declaration["dimensions"] for d in dims))


class CloudWatchPath(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.settings = json.loads(CDK_JSON.read_text())["context"]["shareplane"]
        cls.region = cls.settings["regions"][1]
        cls.daemon_url = cdk_region_template(cls.region)["Outputs"]["DaemonUrl"]["Value"]
        cls.values = values_from_settings(cls.settings, cls.region, cls.daemon_url)
        cls.values["cloudwatchAgent"].update(deploy=True, clusterName="prod-eu", image={"tag": "1.300000.0"},
                                             serviceAccount={"annotations": {"eks.amazonaws.com/role-arn": "arn:aws:iam::123456789012:role/cw"}})
        cls.objects = render(cls.values)
        cm = one(cls.objects, "ConfigMap", AGENT)["data"]
        cls.agent = json.loads(cm["cwagentconfig.json"])
        cls.prometheus = yaml.safe_load(cm["prometheus.yaml"])
        cls.declaration = cls.agent["logs"]["metrics_collected"]["prometheus"]["emf_processor"]["metric_declaration"]

    def test_the_declaration_names_the_alarms_of_cdk_and_terraform(self):
        cdk = cdk_gateway_alarms(self.region)
        tf, tf_resource = tf_gateway_alarms()
        self.assertEqual(len(self.declaration), 1)
        d = self.declaration[0]
        names = sorted(s.removeprefix("^").removesuffix("$") for s in d["metric_selectors"])
        self.assertEqual(names, sorted(a["MetricName"] for a in cdk.values()))
        self.assertEqual(names, sorted(a["metric_name"] for a in tf.values()))
        self.assertEqual(sorted(cdk), sorted(tf))
        emf = self.agent["logs"]["metrics_collected"]["prometheus"]["emf_processor"]
        self.assertEqual(emf["metric_namespace"], self.settings["metricNamespace"])
        self.assertEqual({a["Namespace"] for a in cdk.values()}, {self.settings["metricNamespace"]})
        self.assertEqual(tf_resource["namespace"], "${var.metric_namespace}")
        self.assertEqual(d["dimensions"], [["Region"]])
        self.assertEqual({tuple(x["Name"] for x in a["Dimensions"]) for a in cdk.values()}, {("Region",)})
        self.assertEqual(tf_resource["dimensions"], {"Region": "${var.region}"})
        self.assertEqual(self.agent["agent"]["region"], self.region)

    def test_the_scrape_config_keeps_the_gateways_http_port_and_nothing_else(self):
        jobs = self.prometheus["scrape_configs"]
        self.assertEqual(len(jobs), 1)
        job = jobs[0]
        self.assertEqual(job["kubernetes_sd_configs"], [{"role": "pod", "namespaces": {"names": [NAMESPACE]}}])
        self.assertNotIn("metrics_path", job, "the default, /metrics: the gateway's")
        kept = {}
        for target, meta in discovered(self.objects):
            labels = relabel(job["relabel_configs"], meta)
            if labels is not None:
                kept[target] = labels
        self.assertEqual(sorted(kept), [f"{RELEASE}-gateway/http"])
        labels = kept[f"{RELEASE}-gateway/http"]
        self.assertEqual(labels["Region"], self.region)
        self.assertEqual(labels["pod_name"], f"{RELEASE}-gateway-0")
        labels["job"] = job["job_name"]
        self.assertTrue(re.search(self.declaration[0]["label_matcher"], labels["job"]))

    def test_scraping_the_real_gateway_selects_the_alarms_gauges(self):
        toml = one(self.objects, "ConfigMap", f"{RELEASE}-gateway")["data"]["gateway.toml"]

        def config(rules: str, redis: str, http: str, d: str) -> list[str]:
            local = {"rules": rules, "redis": redis, "http_listen": http, "grpc_listen": None}
            lines = [line if line.split(" = ", 1)[0] not in local else
                     (f"{line.split(' = ', 1)[0]} = {json.dumps(local[line.split(' = ', 1)[0]])}"
                      if local[line.split(" = ", 1)[0]] is not None else "")
                     for line in toml.splitlines()]
            path = Path(d, "gateway.toml")
            path.write_text("\n".join(lines) + "\n")
            return ["--config", str(path)]

        text = gateway_loads_rules(self, self.settings, self.region, self.daemon_url, config)
        types, samples = exposition(text)
        target = {"job": self.prometheus["scrape_configs"][0]["job_name"], "Region": self.region, "pod_name": "gw-0"}
        chosen = {name for name, labels in samples if selected(self.declaration[0], name, {**labels, **target})}
        alarms = {a["MetricName"] for a in cdk_gateway_alarms(self.region).values()}
        self.assertEqual(chosen, alarms, "the declaration selects exactly the alarms' metrics from a real gateway")
        for name in sorted(alarms):
            with self.subTest(metric=name):
                self.assertEqual(types.get(name), "gauge")
                self.assertEqual([labels for n, labels in samples if n == name], [{}], "one sample: one value per gateway")

    def test_the_agent_runs_on_those_files(self):
        report = helm.lint(CHART, self.values, strict=True, kube_version=f"v{KUBE_VERSION}")
        self.assertEqual((report["errors"], [m for m in report["messages"] if m["severity"] >= 2]), ([], []))
        dep = one(self.objects, "Deployment", AGENT)
        for kind in ("Deployment", "ServiceAccount", "Role", "RoleBinding"):
            kubernetes_validate.validate(one(self.objects, kind, AGENT), KUBE_VERSION, strict=True)
        spec = dep["spec"]["template"]["spec"]
        self.assertEqual(dep["spec"]["replicas"], 1, "one scraper, or every datapoint twice")
        c = spec["containers"][0]
        self.assertEqual(c["image"], "public.ecr.aws/cloudwatch-agent/cloudwatch-agent:1.300000.0")
        volumes = {v["name"]: v["configMap"] for v in spec["volumes"]}
        files = {}
        for m in c["volumeMounts"]:
            cm = volumes[m["name"]]
            self.assertEqual(cm["name"], AGENT)
            for item in cm["items"]:
                files[f"{m['mountPath']}/{item['path']}"] = item["key"]
        self.assertEqual(files, {"/etc/cwagentconfig/cwagentconfig.json": "cwagentconfig.json",
                                 self.agent["logs"]["metrics_collected"]["prometheus"]["prometheus_config_path"]: "prometheus.yaml"})
        prom = self.agent["logs"]["metrics_collected"]["prometheus"]
        self.assertEqual((prom["cluster_name"], prom["log_group_name"]), ("prod-eu", "/aws/containerinsights/prod-eu/prometheus"))
        sa = one(self.objects, "ServiceAccount", AGENT)
        self.assertEqual(spec["serviceAccountName"], sa["metadata"]["name"])
        self.assertIn("eks.amazonaws.com/role-arn", sa["metadata"]["annotations"])
        role = one(self.objects, "Role", AGENT)
        self.assertEqual(role["rules"], [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}])
        binding = one(self.objects, "RoleBinding", AGENT)
        self.assertEqual(binding["roleRef"]["name"], role["metadata"]["name"])
        self.assertEqual(binding["subjects"], [{"kind": "ServiceAccount", "name": sa["metadata"]["name"], "namespace": NAMESPACE}])
        # A changed config rolls the agent.
        values = json.loads(json.dumps(self.values))
        values["cloudwatchAgent"]["scrapeInterval"] = "15s"
        changed = one(render(values), "Deployment", AGENT)["spec"]["template"]["metadata"]["annotations"]["checksum/config"]
        self.assertNotEqual(changed, dep["spec"]["template"]["metadata"]["annotations"]["checksum/config"])

    def test_off_by_default_and_mis_wired_agents_do_not_render(self):
        values = json.loads(json.dumps(self.values))
        values["cloudwatchAgent"]["deploy"] = False
        self.assertEqual([o["kind"] for o in render(values) if o["metadata"]["name"] == AGENT], ["ConfigMap"])
        cases = {
            "cloudwatchAgent.image.tag is required": lambda cw: cw.update(image={"tag": ""}),
            "cloudwatchAgent.clusterName is required": lambda cw: cw.update(clusterName=""),
            "needs cloudwatchAgent.enabled": lambda cw: cw.update(enabled=False),
        }
        for needle, change in cases.items():
            with self.subTest(needle=needle):
                values = json.loads(json.dumps(self.values))
                change(values["cloudwatchAgent"])
                with self.assertRaises(helm.HelmError) as e:
                    render(values)
                self.assertIn(needle, str(e.exception))


if __name__ == "__main__":
    unittest.main()
