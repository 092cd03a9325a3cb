{{/* Names and labels. */}}
{{- define "shareplane.name" -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}

{{/* Every object's labels, without the instance (the selectors below carry it). */}}
{{- define "shareplane.commonLabels" -}}
app.kubernetes.io/part-of: shareplane
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* The labels of an object that belongs to no one component. */}}
{{- define "shareplane.labels" -}}
{{ include "shareplane.commonLabels" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "shareplane.gateway.selector" -}}
app.kubernetes.io/name: shareplane-gateway
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "shareplane.daemon.selector" -}}
app.kubernetes.io/name: shareplane-daemon
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "shareplane.image" -}}
{{- $repo := required (printf "%s.image.repository is required" .component) .image.repository -}}
{{- printf "%s:%s" $repo (default .appVersion .image.tag) -}}
{{- end -}}

{{/* The daemon's base URL that the gateways take as --rules. */}}
{{- define "shareplane.daemonUrl" -}}
{{- if .Values.gateway.daemonUrl -}}
{{- .Values.gateway.daemonUrl -}}
{{- else if .Values.daemon.enabled -}}
{{- printf "http://%s-daemon.%s.svc:%d" (include "shareplane.name" .) .Release.Namespace (int .Values.daemon.port) -}}
{{- else -}}
{{- fail "gateway.daemonUrl is required (the DaemonUrl output: the daemon's base URL, what --rules takes), or daemon.enabled" -}}
{{- end -}}
{{- end -}}

{{/*
The daemon's config: the same text as the CDK app (infra/cdk/lib/config-toml.ts) and the
Terraform module (terraform/modules/region/config/config.toml.tftpl) render for this Region.
*/}}
{{- define "shareplane.daemon.config" -}}
{{- $d := .Values.daemon -}}
{{- $region := required "region is required" .Values.region -}}
{{- if not (has $region $d.regions) -}}
{{- fail (printf "region %q is not one of daemon.regions %v" $region $d.regions) -}}
{{- end -}}
{{- if and (eq $d.limitsSource "table") (gt (len $d.limits) 0) -}}
{{- fail "daemon.limitsSource table with daemon.limits: the daemon refuses that config" -}}
{{- end -}}
{{- $periodMs := mul $d.periodSeconds 1000 -}}
{{- $index := 0 -}}
{{- range $i, $r := $d.regions }}{{ if eq $r $region }}{{ $index = $i }}{{ end }}{{ end -}}
# Written by the shareplane infrastructure (infra/). Edit the deployment settings, not this text.
region = {{ $region | toJson }}
table = {{ $d.tableName | toJson }}
metrics_namespace = {{ .Values.metricNamespace | toJson }}
listen = {{ printf "0.0.0.0:%d" (int $d.port) | toJson }}
period_ms = {{ $periodMs }}
phase_ms = {{ div (mul $index $periodMs) (len $d.regions) }}
{{- if ne $d.limitsSource "file" }}
limits_source = {{ $d.limitsSource | toJson }}
{{- end }}
{{- range $k := keys $d.settings | sortAlpha }}
{{ $k }} = {{ get $d.settings $k | toJson }}
{{- end }}
{{- range $r := $d.regions }}

[[regions]]
name = {{ $r | toJson }}
health_check_id = {{ required (printf "daemon.healthCheckIds.%s is required" $r) (get $d.healthCheckIds $r) | toJson }}
{{- end }}
{{- range $l := $d.limits }}

[[limits]]
id = {{ $l.id | toJson }}
rate = {{ $l.rate | toJson }}
{{- range $k := omit $l "id" "rate" | keys | sortAlpha }}
{{ $k }} = {{ get $l $k | toJson }}
{{- end }}
{{- end }}
{{ end -}}

{{/* The container security context both workloads use: the image's nonroot user, read-only root. */}}
{{- define "shareplane.securityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: [ALL]
seccompProfile:
  type: RuntimeDefault
{{- end -}}
