"""A gateway started on the URL the infra publishes loads a rule set.

The CDK app (cdk synth, offline) and the Terraform region module (its `urls` module, rendered
offline by tests/tf-render) publish the daemon's base URL as `DaemonUrl` / `daemon_url` (and as
`daemonUrl` in the gateways' SSM parameter): what `shareplane gateway --rules` takes. This test
checks both render the same URL for every Region, then for every Region starts a real daemon
(`shareplane run`, memory store, on 127.0.0.1) and a real `shareplane gateway` whose `--rules` is
the published value with its scheme and host swapped for the local daemon's (same path), and
asserts that the gateway loads the daemon's rule set (its /metrics report the rule set's version;
`shareplane_gateway_rules_loaded` too where the gateway exports it).

The binary is the one tests/run-all.sh built (target/debug/shareplane, or SHAREPLANE_BIN); this
test builds nothing. Without it, or without redis-server, the test fails when
SHAREPLANE_REQUIRE_SERVICES=1 and is skipped otherwise.

Run: infra/test.sh (sets SHAREPLANE_CDK_OUT and SHAREPLANE_TF_DAEMON_URLS).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
import unittest
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

INFRA = Path(__file__).resolve().parent.parent
ROOT = INFRA.parent
CDK_OUT = Path(os.environ.get("SHAREPLANE_CDK_OUT", INFRA / "cdk" / "cdk.out"))
CDK_JSON = INFRA / "cdk" / "cdk.json"
TF_DAEMON_URLS = os.environ.get("SHAREPLANE_TF_DAEMON_URLS", "")
BIN = Path(os.environ.get("SHAREPLANE_BIN", ROOT / "target" / "debug" / "shareplane"))
REQUIRE = os.environ.get("SHAREPLANE_REQUIRE_SERVICES") == "1"
TOKEN = "wiring-test-token-0123456789"


def missing(what: str):
    """Fail under SHAREPLANE_REQUIRE_SERVICES=1, else skip."""
    if REQUIRE:
        raise AssertionError(f"{what} (SHAREPLANE_REQUIRE_SERVICES=1)")
    raise unittest.SkipTest(what)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url: str, timeout: float = 2.0) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def until(what: str, seconds: float, probe, procs=()):
    """probe() until it returns something truthy; fails with `what` (and any exited process's log)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for name, p, log in procs:
            if p.poll() is not None:
                raise AssertionError(f"{name} exited with {p.returncode} while waiting for {what}:\n{Path(log).read_text()}")
        try:
            got = probe()
        except OSError:
            got = None
        if got:
            return got
        time.sleep(0.2)
    raise AssertionError(f"timed out after {seconds} s waiting for {what}")


def local(published: str, port: int) -> str:
    """The published URL with its scheme and host swapped for the local daemon's; same path."""
    u = urlsplit(published)
    return urlunsplit(("http", f"127.0.0.1:{port}", u.path, u.query, u.fragment))


def cdk_daemon_urls() -> dict[str, dict[str, str]]:
    """Region -> {"output": DaemonUrl, "parameter": the gateways' parameter's daemonUrl}."""
    out = {}
    for path in sorted(CDK_OUT.glob("Shareplane-*.template.json")):
        tpl = json.loads(path.read_text())
        if "DaemonUrl" not in tpl.get("Outputs", {}):
            continue
        region = path.name.removeprefix("Shareplane-").removesuffix(".template.json")
        params = [r["Properties"] for r in tpl["Resources"].values()
                  if r["Type"] == "AWS::SSM::Parameter" and r["Properties"]["Name"].endswith("/gateway")]
        # Deploy-time values (secret ARN, Valkey address) sit inside the JSON strings.
        text = "".join(x if isinstance(x, str) else "T" for x in params[0]["Value"]["Fn::Join"][1])
        out[region] = {"output": tpl["Outputs"]["DaemonUrl"]["Value"], "parameter": json.loads(text)["daemonUrl"]}
    return out


class Wiring(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.settings = json.loads(CDK_JSON.read_text())["context"]["shareplane"]
        cls.cdk = cdk_daemon_urls()
        if not TF_DAEMON_URLS:
            missing("SHAREPLANE_TF_DAEMON_URLS is not set: terraform did not render the URLs (infra/test.sh)")
        cls.tf = json.loads(Path(TF_DAEMON_URLS).read_text())

    def test_cdk_and_terraform_publish_the_same_daemon_url(self):
        self.assertEqual(sorted(self.cdk), sorted(self.settings["regions"]))
        for region in self.settings["regions"]:
            with self.subTest(region=region):
                self.assertEqual(self.cdk[region]["output"], self.tf[region])
                self.assertEqual(self.cdk[region]["parameter"], self.tf[region])
                self.assertRegex(self.tf[region], r"^https://[a-z0-9.-]+$", "a base URL: no path")

    def test_a_gateway_on_the_published_url_loads_the_rule_set(self):
        for region in self.settings["regions"]:
            with self.subTest(region=region):
                published = self.tf[region]

                def flags(rules: str, redis: str, http: str, _dir: str) -> list[str]:
                    return ["--rules", rules, "--redis", redis, "--http-listen", http, "--gateway-id", f"wiring-{region}"]

                gateway_loads_rules(self, self.settings, region, published, flags)


def gateway_loads_rules(test: unittest.TestCase, settings: dict, region: str, published: str, gateway_args) -> str:
    """Starts redis-server and `shareplane run` (memory store, the settings' Regions and limits) on
    127.0.0.1, then `shareplane gateway <gateway_args(rules, redis, http_listen, dir)>`, where rules
    is `published` with the scheme and host swapped for the daemon's; asserts the gateway loads
    the rule set and admits a check of the first limit. Stops all three; returns the gateway's
    /metrics as it was after the check."""
    if not BIN.is_file():
        missing(f"{BIN} is missing: tests/run-all.sh builds it (cargo build -p shareplane)")
    if shutil.which("redis-server") is None:
        missing("redis-server is not installed")
    with tempfile.TemporaryDirectory(prefix="shareplane-wiring-") as d:
        procs = []
        try:
            redis_port, daemon_port, http_port = free_port(), free_port(), free_port()
            procs.append(start(d, "redis-server", [
                "redis-server", "--bind", "127.0.0.1", "--port", str(redis_port), "--save", "", "--appendonly", "no"]))
            config = Path(d, "daemon.toml")
            config.write_text(daemon_config(settings, region, daemon_port))
            procs.append(start(d, "shareplane run", [str(BIN), "run", "--config", str(config)]))
            rules = local(published, daemon_port)
            args = gateway_args(rules, f"redis://127.0.0.1:{redis_port}/", f"127.0.0.1:{http_port}", d)
            procs.append(start(d, "shareplane gateway", [str(BIN), "gateway", *args]))
            metrics = f"http://127.0.0.1:{http_port}/metrics"

            def loaded():
                status, body = get(metrics)
                m = re.search(r"^shareplane_gateway_rules_version (\S+)$", body, re.M)
                return body if status == 200 and m and float(m.group(1)) > 0 else None

            body = until(f"the gateway on rules {rules} (published {published}) to load a rule set", 60, loaded, procs)
            m = re.search(r"^shareplane_gateway_rules_loaded (\S+)$", body, re.M)
            if m:
                test.assertEqual(float(m.group(1)), 1.0, "shareplane_gateway_rules_loaded")
            # And it checks by that rule set: a check of the first limit is admitted (the limit
            # known, its bucket in Redis full).
            limit = settings["limits"][0]["id"]
            status, text = get(f"http://127.0.0.1:{http_port}/v1/check?limit={limit}")
            test.assertEqual(status, 200, f"check of {limit}: {text}")
            status, body = get(metrics)
            test.assertEqual(status, 200, "/metrics")
            return body
        finally:
            for _, p, _ in reversed(procs):
                p.terminate()
            for _, p, _ in procs:
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()


def start(d: str, name: str, argv: list[str]):
    log = Path(d, re.sub(r"\W+", "-", name) + ".log")
    env = {**os.environ, "SHAREPLANE_API_TOKEN": TOKEN, "SHAREPLANE_DEMAND_TOKEN": TOKEN, "RUST_LOG": "info"}
    with log.open("w") as out:
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env)
    return name, p, log


def daemon_config(settings: dict, region: str, port: int) -> str:
    """The settings' Regions and limits, on the memory store (one process: this Region leads)."""
    lines = [f'region = "{region}"', 'store = "memory"', "period_ms = 1000", f'listen = "127.0.0.1:{port}"']
    for r in settings["regions"]:
        lines += ["[[regions]]", f'name = "{r}"']
    for limit in settings["limits"]:
        lines.append("[[limits]]")
        lines += [f"{k} = {json.dumps(v)}" for k, v in limit.items()]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    unittest.main()
