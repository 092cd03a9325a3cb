{{/*
The gateway alerts, the same conditions as the CloudWatch alarms of the CDK app
(infra/cdk/lib/gateway-alarms.ts) and the Terraform module (gateway_alarms.tf): the worst gateway
of the Region, two one-minute periods in a row. As YAML: a list of
{alert, metric, aggregation, op, threshold, summary}.
*/}}
{{- define "shareplane.gateway.alerts" -}}
- alert: ShareplaneGatewayFenced
  metric: shareplane_gateway_fenced
  aggregation: max
  op: ">"
  threshold: 0
  summary: "A gateway is fenced (its rule set's lease ran out): it refuses capacity limits."
- alert: ShareplaneGatewayNoRules
  metric: shareplane_gateway_rules_loaded
  aggregation: min
  op: "<"
  threshold: 1
  summary: "A gateway has no rule set and limits nothing (check --rules, the daemon's base URL)."
- alert: ShareplaneGatewayNotReady
  metric: shareplane_gateway_ready
  aggregation: min
  op: "<"
  threshold: 1
  summary: "A gateway is not ready (no rule set, fenced, or Redis not reached)."
- alert: ShareplaneGatewayFallbackInUse
  metric: shareplane_gateway_fallback_in_use
  aggregation: max
  op: ">"
  threshold: 0
  summary: "A gateway cannot reach its Redis/Valkey; each limit's failure policy decides."
{{- end -}}
