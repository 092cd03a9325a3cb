#!/usr/bin/env bash
# The infrastructure's offline tests (tests/run-all.sh calls this). Installs what it needs on
# first run: the npm packages pinned in cdk/package-lock.json, cfn-lint and python-hcl2 in
# infra/.venv-cfnlint, checkov in infra/.venv-checkov (separate: checkov pins an old boto3).
# Then: TypeScript build, cdk synth, the CDK assertion tests, cfn-lint, checkov on the templates
# and the Terraform modules, terraform fmt -check (when terraform is installed), and the test that
# the Terraform modules declare the same resources and IAM conditions as the CDK app.
#
# Nothing here talks to AWS: synth runs with every AWS credential unset, so the CDK CLI cannot
# even look up a default account, and checkov runs with --skip-download.
set -euo pipefail
cd "$(dirname "$0")"
INFRA=$PWD

CFN_LINT_VERSION=1.58.0
PYTHON_HCL2_VERSION=8.1.4
CHECKOV_VERSION=3.3.30

step() { printf '\n--> infra: %s\n' "$*"; }

# A venv at $1 with the pip requirements $2...; reinstalled only when the requirements change.
venv() {
  local dir=$1
  shift
  local want="$*"
  if [ ! -f "$dir/.requirements" ] || [ "$(cat "$dir/.requirements")" != "$want" ]; then
    step "installing $want into ${dir#"$INFRA"/}"
    rm -rf "$dir"
    python3 -m venv "$dir"
    "$dir/bin/pip" install -q --disable-pip-version-check "$@"
    echo "$want" >"$dir/.requirements"
  fi
}

step "npm packages (package-lock.json)"
cd "$INFRA/cdk"
if [ ! -f node_modules/.package-lock.json ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  npm ci --no-audit --no-fund --loglevel=error
fi
venv "$INFRA/.venv-cfnlint" "cfn-lint==$CFN_LINT_VERSION" "python-hcl2==$PYTHON_HCL2_VERSION"
venv "$INFRA/.venv-checkov" "checkov==$CHECKOV_VERSION"

# No AWS credentials or config for anything below: nothing can reach an account.
unset AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY AWS_SESSION_TOKEN AWS_PROFILE AWS_DEFAULT_PROFILE
export AWS_CONFIG_FILE=/dev/null AWS_SHARED_CREDENTIALS_FILE=/dev/null AWS_EC2_METADATA_DISABLED=true
export CDK_DISABLE_CLI_TELEMETRY=true
# Terraform otherwise asks checkpoint-api.hashicorp.com whether a newer version exists.
export CHECKPOINT_DISABLE=1

step "tsc"
rm -rf dist
npx tsc -p .

step "cdk synth (offline: --no-lookups, availability zones from cdk.json)"
rm -rf cdk.out
npx cdk synth --quiet --no-lookups >/dev/null
ls cdk.out/*.template.json

step "CDK assertion tests (node --test)"
node --test dist/test/*.test.js

step "cfn-lint on the synthesized templates"
"$INFRA/.venv-cfnlint/bin/cfn-lint" cdk.out/*.template.json

step "checkov on the synthesized templates (skips are justified in each resource's Metadata)"
"$INFRA/.venv-checkov/bin/checkov" -d cdk.out --framework cloudformation --skip-download --quiet --compact

step "checkov on the Terraform modules and example (skips are justified in #checkov:skip comments)"
"$INFRA/.venv-checkov/bin/checkov" -d "$INFRA/terraform" --framework terraform --skip-download --quiet --compact

step "terraform fmt -check"
TERRAFORM=${TERRAFORM:-/usr/local/bin/terraform}
if [ -x "$TERRAFORM" ]; then
  TF_CLI_CONFIG_FILE=/dev/null "$TERRAFORM" fmt -check -recursive -diff "$INFRA/terraform"
  echo "terraform fmt: clean"
else
  echo "terraform not found at $TERRAFORM: fmt check NOT run (the HCL parity test below still runs)"
fi

TF_CONFIGS=
if [ -x "$TERRAFORM" ]; then
  step "render every Region's daemon config with the Terraform config module (no provider: offline)"
  WORK=$(mktemp -d)
  trap 'rm -rf "$WORK"' EXIT
  python3 - "$INFRA/cdk/cdk.json" >"$WORK/vars.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))["context"]["shareplane"]
print(json.dumps({
    "regions": s["regions"],
    "table_name": s.get("tableName", "shareplane-records"),
    "metric_namespace": s.get("metricNamespace", "Shareplane"),
    "period_seconds": s.get("periodSeconds", 5),
    "limits": [{"id": l["id"], "rate": l["rate"], "settings": {k: v for k, v in l.items() if k not in ("id", "rate")}}
               for l in s["limits"]],
    "daemon_settings": s.get("daemon", {}),
}))
PY
  export TF_CLI_CONFIG_FILE=/dev/null TF_DATA_DIR="$WORK/.terraform" TF_IN_AUTOMATION=1
  "$TERRAFORM" -chdir="$INFRA/tests/tf-render" init -input=false -backend=false >/dev/null
  "$TERRAFORM" -chdir="$INFRA/tests/tf-render" apply -input=false -auto-approve -state="$WORK/state" \
    -var-file="$WORK/vars.json" >/dev/null
  "$TERRAFORM" -chdir="$INFRA/tests/tf-render" output -state="$WORK/state" -json configs >"$WORK/configs.json"
  TF_CONFIGS="$WORK/configs.json"
else
  echo "terraform not found at $TERRAFORM: the Terraform config module is NOT rendered (its keys are still compared)"
fi

step "Terraform declares the same resources, IAM conditions and config as the CDK app (HCL parse)"
cd "$INFRA"
SHAREPLANE_CDK_OUT="$INFRA/cdk/cdk.out" SHAREPLANE_TF_CONFIGS="$TF_CONFIGS" \
  "$INFRA/.venv-cfnlint/bin/python" -m unittest -v tests/test_parity.py

step "all infra tests passed"
