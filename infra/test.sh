#!/usr/bin/env bash
# The infrastructure's offline tests (tests/run-all.sh calls this). Installs what it needs on
# first run: the npm packages pinned in cdk/package-lock.json, cfn-lint and python-hcl2 in
# infra/.venv-cfnlint, checkov in infra/.venv-checkov (separate: checkov pins an old boto3).
# Then: TypeScript build, cdk synth of the example, of a variant with the other options
# (cdk/test/variant.json) and of the example without the ECS service ("ecsService": false), the
# CDK assertion tests, cfn-lint and checkov on the three, checkov on the
# Terraform modules, terraform fmt -check and validate (when terraform and an AWS provider are at
# hand offline), the test that the Terraform modules declare the same resources, rules and IAM
# conditions as the CDK app (and render the same daemon config, also with limits from the
# table), the Helm chart (infra/.venv-helm: rendered and linted by the Helm v4 SDK, validated
# against the Kubernetes schemas, with the same settings as CDK and Terraform), the chart's
# CloudWatch agent config against both apps' gateway alarms and a real gateway's /metrics
# (tests/test_cloudwatch_agent.py), a real gateway started on the daemon URL both publish
# (tests/test_gateway_wiring.py), and the image test: the
# context the CDK asset stages is the one `docker build` sends, the workspace loads there with
# --locked --offline, its files are the repository's, and (as root with buildah) the daemon's
# and the gateway's images are built from the binary tests/run-all.sh built, target/debug/shareplane
# (never compiled again here: tests/image-build.sh says what that leaves out), and run.
#
# Nothing here talks to AWS: synth runs with every AWS credential unset, so the CDK CLI cannot
# even look up a default account, and checkov runs with --skip-download.
set -euo pipefail
cd "$(dirname "$0")"
INFRA=$PWD
ROOT=$(dirname "$INFRA")
WORK=$INFRA/.work
mkdir -p "$WORK"
PROGRESS_MARK="--> infra"
# shellcheck source=tests/lib/progress.sh
. "$ROOT/tests/lib/progress.sh"
trap 'timing_summary "infra/test.sh"' EXIT

CFN_LINT_VERSION=1.58.0
PYTHON_HCL2_VERSION=8.1.4
CHECKOV_VERSION=3.3.30
# The Helm v4 SDK (Go, through its C ABI: no helm binary) and the Kubernetes schemas, for the chart.
HELM_PYTHON_SDK_VERSION=0.2.2
KUBERNETES_VALIDATE_VERSION=1.37.0
PYYAML_VERSION=6.0.4

# A venv at $1 with the pip requirements $2...; reinstalled only when the requirements change.
venv() {
  local dir=$1
  shift
  local want="$*"
  if [ ! -f "$dir/.requirements" ] || [ "$(cat "$dir/.requirements")" != "$want" ]; then
    step "installing $want into ${dir#"$INFRA"/}"
    rm -rf "$dir"
    python3 -m venv "$dir"
    long "pip install $want" "$dir/bin/pip" install --disable-pip-version-check --progress-bar off "$@"
    echo "$want" >"$dir/.requirements"
  fi
}

step "npm packages (package-lock.json)"
cd "$INFRA/cdk"
if [ ! -f node_modules/.package-lock.json ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  long "npm ci (infra/cdk)" npm ci --no-audit --no-fund
fi
venv "$INFRA/.venv-cfnlint" "cfn-lint==$CFN_LINT_VERSION" "python-hcl2==$PYTHON_HCL2_VERSION"
venv "$INFRA/.venv-checkov" "checkov==$CHECKOV_VERSION"
# python-hcl2 there too: the chart's CloudWatch agent config is checked against Terraform's alarms.
venv "$INFRA/.venv-helm" "helm-python-sdk==$HELM_PYTHON_SDK_VERSION" "kubernetes-validate==$KUBERNETES_VALIDATE_VERSION" "PyYAML==$PYYAML_VERSION" \
  "python-hcl2==$PYTHON_HCL2_VERSION"

# No AWS credentials or config for anything below: nothing can reach an account.
unset AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY AWS_SESSION_TOKEN AWS_PROFILE AWS_DEFAULT_PROFILE
export AWS_CONFIG_FILE=/dev/null AWS_SHARED_CREDENTIALS_FILE=/dev/null AWS_EC2_METADATA_DISABLED=true
export CDK_DISABLE_CLI_TELEMETRY=true
# Terraform otherwise asks checkpoint-api.hashicorp.com whether a newer version exists.
export CHECKPOINT_DISABLE=1

step "tsc"
rm -rf dist
npx tsc -p .

step "cdk synth (offline: --no-lookups, availability zones and prefix lists from cdk.json)"
rm -rf cdk.out cdk.out.variant cdk.out.noecs
npx cdk synth --quiet --no-lookups >/dev/null
ls cdk.out/*.template.json
step "cdk synth of the variant (existing VPC, config in S3, arm64: cdk/test/variant.json)"
npx cdk synth --quiet --no-lookups -o cdk.out.variant \
  --context shareplane="$(python3 -c 'import json, sys; print(json.dumps(json.load(open(sys.argv[1]))))' test/variant.json)" >/dev/null
ls cdk.out.variant/*.template.json
step "cdk synth without the ECS service (cdk.json's settings with \"ecsService\": false: the daemon on EKS)"
npx cdk synth --quiet --no-lookups -o cdk.out.noecs \
  --context shareplane="$(python3 -c 'import json, sys; s = json.load(open(sys.argv[1]))["context"]["shareplane"]; s["ecsService"] = False; print(json.dumps(s))' cdk.json)" >/dev/null
ls cdk.out.noecs/*.template.json

step "CDK assertion tests (node --test)"
node --test dist/test/*.test.js

step "cfn-lint on the synthesized templates"
"$INFRA/.venv-cfnlint/bin/cfn-lint" cdk.out/*.template.json cdk.out.variant/*.template.json cdk.out.noecs/*.template.json

step "checkov on the synthesized templates (skips are justified in each resource's Metadata)"
"$INFRA/.venv-checkov/bin/checkov" -d cdk.out --framework cloudformation --skip-download --quiet --compact
"$INFRA/.venv-checkov/bin/checkov" -d cdk.out.variant --framework cloudformation --skip-download --quiet --compact
"$INFRA/.venv-checkov/bin/checkov" -d cdk.out.noecs --framework cloudformation --skip-download --quiet --compact

step "checkov on the Terraform modules and example (skips are justified in #checkov:skip comments)"
"$INFRA/.venv-checkov/bin/checkov" -d "$INFRA/terraform" --framework terraform --skip-download --quiet --compact

step "terraform fmt -check"
TERRAFORM=${TERRAFORM:-/usr/local/bin/terraform}
if [ -x "$TERRAFORM" ]; then
  TF_CLI_CONFIG_FILE=/dev/null "$TERRAFORM" fmt -check -recursive -diff "$INFRA/terraform"
  TF_CLI_CONFIG_FILE=/dev/null "$TERRAFORM" fmt -check -recursive -diff "$INFRA/tests"
  echo "terraform fmt: clean"
else
  echo "terraform not found at $TERRAFORM: fmt check NOT run (the HCL parity test below still runs)"
fi

# The settings of cdk.json, and the same with limitsSource "table" (no limits), which the example
# synth does not cover: CDK renders those with the functions its stacks use (dist/test/render-configs.js).
TF_CONFIGS=
TF_CONFIGS_TABLE=
TF_DAEMON_URLS=
CDK_CONFIGS=$WORK/cdk-configs.json
CDK_CONFIGS_TABLE=$WORK/cdk-configs-table.json
step "every Region's daemon config, as CDK renders it, also with limitsSource \"table\" (for the parity tests)"
python3 -c 'import json, sys; print(json.dumps(json.load(open(sys.argv[1]))["context"]["shareplane"]))' \
  "$INFRA/cdk/cdk.json" >"$WORK/settings.json"
node "$INFRA/cdk/dist/test/render-configs.js" "$WORK/settings.json" >"$CDK_CONFIGS"
python3 - "$INFRA/cdk/cdk.json" >"$WORK/settings-table.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))["context"]["shareplane"]
s["limitsSource"] = "table"
s.pop("limits", None)
print(json.dumps(s))
PY
node "$INFRA/cdk/dist/test/render-configs.js" "$WORK/settings-table.json" >"$CDK_CONFIGS_TABLE"
if [ -x "$TERRAFORM" ]; then
  step "render every Region's daemon config with the Terraform config module (no provider: offline)"
  RENDER=$WORK/tf-render
  rm -rf "$RENDER"
  mkdir -p "$RENDER"
  python3 - "$INFRA/cdk/cdk.json" >"$RENDER/settings.json" <<'PY'
import json, sys
print(json.dumps(json.load(open(sys.argv[1]))["context"]["shareplane"]))
PY
  export TF_CLI_CONFIG_FILE=/dev/null TF_DATA_DIR="$RENDER/.terraform" TF_IN_AUTOMATION=1
  "$TERRAFORM" -chdir="$INFRA/tests/tf-render" init -input=false -backend=false >/dev/null
  for variant in settings settings-table; do
    settings=$RENDER/settings.json
    [ "$variant" = settings ] || settings=$WORK/$variant.json
    python3 - "$settings" >"$RENDER/$variant.vars.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
print(json.dumps({
    "regions": s["regions"],
    "table_name": s.get("tableName", "shareplane-records"),
    "metric_namespace": s.get("metricNamespace", "Shareplane"),
    "period_seconds": s.get("periodSeconds", 5),
    "limits_source": s.get("limitsSource", "file"),
    "limits": [{"id": l["id"], "rate": l["rate"], "settings": {k: v for k, v in l.items() if k not in ("id", "rate")}}
               for l in s.get("limits", [])],
    "daemon_settings": s.get("daemon", {}),
    "endpoint_subdomain": s.get("endpointSubdomain", "shareplane"),
    "hosted_zone_name": s["hostedZoneName"],
}))
PY
    "$TERRAFORM" -chdir="$INFRA/tests/tf-render" apply -input=false -auto-approve -state="$RENDER/$variant.state" \
      -var-file="$RENDER/$variant.vars.json" >/dev/null
    "$TERRAFORM" -chdir="$INFRA/tests/tf-render" output -state="$RENDER/$variant.state" -json configs >"$RENDER/$variant.configs.json"
  done
  "$TERRAFORM" -chdir="$INFRA/tests/tf-render" output -state="$RENDER/settings.state" -json daemon_urls >"$RENDER/daemon-urls.json"
  TF_DAEMON_URLS="$RENDER/daemon-urls.json"
  TF_CONFIGS="$RENDER/settings.configs.json"
  TF_CONFIGS_TABLE="$RENDER/settings-table.configs.json"
  echo "    rendered the example's configs and those with limits_source = \"table\""
else
  echo "terraform not found at $TERRAFORM: the Terraform config module is NOT rendered (its keys are still compared)"
fi

step "terraform validate of the example and of every option (tests/tf-validate), offline"
# No provider can be downloaded here; a machine may carry one in a local mirror. Validation then
# runs on a copy whose version constraint names the mirror's version (the modules ask for >= 6.0;
# the resources they use have the same schema in 5.100).
MIRROR=${SHAREPLANE_TF_PROVIDER_MIRROR:-/opt/tf-plugins}
PROVIDER_DIR=$(ls -d "$MIRROR"/registry.terraform.io/hashicorp/aws/*/ 2>/dev/null | sort -V | tail -n 1 || true)
if [ -x "$TERRAFORM" ] && [ -n "$PROVIDER_DIR" ]; then
  VERSION=$(basename "$PROVIDER_DIR")
  VALIDATE=$(mktemp -d)
  mkdir -p "$VALIDATE/infra"
  cp -r "$INFRA/terraform" "$INFRA/tests" "$VALIDATE/infra/"
  grep -rl 'version = ">= 6.0"' "$VALIDATE" | xargs -r sed -i "s/version = \">= 6.0\"/version = \"$VERSION\"/"
  printf 'provider_installation {\n  filesystem_mirror {\n    path = "%s"\n  }\n}\n' "$MIRROR" >"$VALIDATE/tfrc"
  for dir in terraform/examples/three-regions tests/tf-validate; do
    (cd "$VALIDATE/infra/$dir" && TF_CLI_CONFIG_FILE="$VALIDATE/tfrc" TF_DATA_DIR="$VALIDATE/$(basename "$dir").terraform" \
      "$TERRAFORM" init -input=false -backend=false >/dev/null &&
      TF_CLI_CONFIG_FILE="$VALIDATE/tfrc" TF_DATA_DIR="$VALIDATE/$(basename "$dir").terraform" "$TERRAFORM" validate -no-color |
      sed -n "s|^\(..*\)|    $dir (aws provider $VERSION): \1|p")
  done
  rm -rf "$VALIDATE"
else
  echo "terraform or an AWS provider in $MIRROR missing: terraform validate NOT run (the HCL parity test below still runs)"
fi

step "Terraform declares the same resources, rules, IAM conditions and config as the CDK app (HCL parse)"
cd "$INFRA"
SHAREPLANE_CDK_OUT="$INFRA/cdk/cdk.out" SHAREPLANE_CDK_OUT_VARIANT="$INFRA/cdk/cdk.out.variant" SHAREPLANE_CDK_OUT_NOECS="$INFRA/cdk/cdk.out.noecs" \
  SHAREPLANE_TF_CONFIGS="$TF_CONFIGS" \
  SHAREPLANE_TF_CONFIGS_TABLE="$TF_CONFIGS_TABLE" SHAREPLANE_CDK_CONFIGS_TABLE="$CDK_CONFIGS_TABLE" \
  "$INFRA/.venv-cfnlint/bin/python" -m unittest -v tests/test_parity.py tests/test_ecs_switch.py

step "Helm chart: render and lint (Helm v4 SDK), validate (Kubernetes 1.33 schemas of kubernetes-validate $KUBERNETES_VALIDATE_VERSION), same settings as CDK and Terraform"
SHAREPLANE_CDK_OUT="$INFRA/cdk/cdk.out" SHAREPLANE_CDK_OUT_NOECS="$INFRA/cdk/cdk.out.noecs" SHAREPLANE_CDK_CONFIGS="$CDK_CONFIGS" SHAREPLANE_TF_CONFIGS="$TF_CONFIGS" \
  SHAREPLANE_CDK_CONFIGS_TABLE="$CDK_CONFIGS_TABLE" SHAREPLANE_TF_CONFIGS_TABLE="$TF_CONFIGS_TABLE" \
  SHAREPLANE_BIN="$ROOT/target/debug/shareplane" "$INFRA/.venv-helm/bin/python" -m unittest -v tests/test_helm_chart.py

step "the gateways' gauges reach the CloudWatch alarms: the chart's CloudWatch agent config against CDK's and Terraform's alarms and a real gateway's /metrics"
SHAREPLANE_CDK_OUT="$INFRA/cdk/cdk.out" SHAREPLANE_BIN="$ROOT/target/debug/shareplane" \
  "$INFRA/.venv-helm/bin/python" -m unittest -v tests/test_cloudwatch_agent.py

step "a real gateway on the daemon URL that CDK and Terraform publish loads the rule set (target/debug/shareplane)"
SHAREPLANE_CDK_OUT="$INFRA/cdk/cdk.out" SHAREPLANE_TF_DAEMON_URLS="$TF_DAEMON_URLS" SHAREPLANE_BIN="$ROOT/target/debug/shareplane" \
  python3 -m unittest -v tests/test_gateway_wiring.py

step "image context: what the CDK asset stages is what docker build sends"
ASSET=$(python3 - "$INFRA/cdk/cdk.out" <<'PY'
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
dirs = set()
for manifest in out.glob("Shareplane-*.assets.json"):
    for image in json.loads(manifest.read_text()).get("dockerImages", {}).values():
        assert image["source"]["dockerFile"] == "infra/Dockerfile", image
        assert image["source"].get("dockerBuildTarget") == "daemon", image
        dirs.add(image["source"]["directory"])
assert len(dirs) == 1, f"expected one image asset for every Region, found {sorted(dirs)}"
print(out / dirs.pop())
PY
)
(cd "$ASSET" && find . -type f ! -name .dockerignore | sed 's|^\./||' | LC_ALL=C sort) >"$WORK/context-cdk.txt"
echo "    the CDK asset stages $(wc -l <"$WORK/context-cdk.txt") files: $(cut -d/ -f1 "$WORK/context-cdk.txt" | sort -u | tr '\n' ' ')"
grep -qx 'tests/e2e/Cargo.toml' "$WORK/context-cdk.txt" || { echo "the image context lacks tests/e2e/Cargo.toml" >&2; exit 1; }
if command -v buildah >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  # buildah reads /.dockerignore as docker does: copy the context into an empty image and list it.
  printf 'FROM scratch\nCOPY . /context\n' >"$WORK/Context.Dockerfile"
  buildah --storage-driver vfs bud --quiet --layers=false -f "$WORK/Context.Dockerfile" -t localhost/shareplane-test/context "$ROOT" >/dev/null
  c=$(buildah --storage-driver vfs from localhost/shareplane-test/context)
  (cd "$(buildah --storage-driver vfs mount "$c")/context" && find . -type f | sed 's|^\./||' | LC_ALL=C sort) >"$WORK/context-docker.txt"
  buildah --storage-driver vfs rm "$c" >/dev/null
  diff -u "$WORK/context-docker.txt" "$WORK/context-cdk.txt" || { echo "the CDK asset and docker build send different contexts" >&2; exit 1; }
  echo "    docker build (as buildah reads /.dockerignore) sends the same $(wc -l <"$WORK/context-docker.txt") files"
else
  echo "    buildah not installed (or not root): docker build's own reading of /.dockerignore NOT compared (the CDK test checks the staged files)"
fi

step "image context: the workspace loads there with --locked --offline, and is the source of this run's binary"
CTX=$WORK/image-context
rm -rf "$CTX"
cp -a "$ASSET" "$CTX"
(cd "$CTX" && cargo metadata --locked --offline --format-version 1 --filter-platform "$(rustc -vV | sed -n "s/^host: //p")" >/dev/null)
echo "    cargo metadata --locked --offline: every workspace member loads from the staged context"
# The images are built from the one binary this run built (tests/run-all.sh: cargo build -p
# shareplane), not compiled again: so the staged sources must be the repository's, byte for
# byte, and the binary newer than every one of them.
(cd "$CTX" && find . -type f ! -name .dockerignore | sed 's|^\./||') | while read -r f; do
  cmp -s "$CTX/$f" "$ROOT/$f" || { echo "the staged context's $f differs from the repository's" >&2; exit 1; }
done
echo "    the staged sources are the repository's files"
BIN=$ROOT/target/debug/shareplane
if [ ! -x "$BIN" ]; then
  if [ "${SHAREPLANE_REQUIRE_SERVICES:-0}" = 1 ]; then
    echo "$BIN is missing: tests/run-all.sh builds it (cargo build -p shareplane)" >&2
    exit 1
  fi
  echo "    $BIN is missing (cargo build -p shareplane): the images are NOT built"
else
  stale=$(find "$ROOT/Cargo.toml" "$ROOT/Cargo.lock" "$ROOT/crates" -type f -newer "$BIN" ! -path '*/target/*' | head -n 5)
  [ -z "$stale" ] || { echo "$BIN is older than $stale: build it again (cargo build -p shareplane)" >&2; exit 1; }
  echo "    $BIN ($("$BIN" --version)) is newer than every source"
  case "$("$BIN" --version)" in
    *"without AWS"*) echo "$BIN was built without AWS support (--no-default-features); the daemon's image needs it: cargo build -p shareplane" >&2; exit 1 ;;
  esac
  step "images (infra/Dockerfile, targets daemon and gateway) from that binary, with buildah, and run"
  if [ "$(id -u)" = 0 ] && command -v buildah >/dev/null 2>&1 && [ "${SHAREPLANE_IMAGE_BUILD:-1}" != 0 ]; then
    "$INFRA/tests/image-build.sh" "$CTX" "$BIN"
  elif [ "${SHAREPLANE_REQUIRE_SERVICES:-0}" = 1 ] && [ "$(id -u)" = 0 ] && [ "${SHAREPLANE_IMAGE_BUILD:-1}" != 0 ]; then
    echo "buildah is missing (tests/run-all.sh installs it as root)" >&2
    exit 1
  else
    echo "    no buildah as root (or SHAREPLANE_IMAGE_BUILD=0): the images are NOT built"
  fi
fi

step "all infra tests passed"
