# Alarms on the gateways' gauges (the same as the CDK app's, infra/cdk/lib/gateway-alarms.ts). A
# gateway exports Prometheus gauges only; the CloudWatch agent's Prometheus scraping writes them
# into var.metric_namespace with the dimension Region (the chart's cloudwatchAgent ConfigMap,
# infra/helm/shareplane). The worst gateway of the Region counts; no datapoint (no agent, no
# gateway) is not breaching (infra/README.md, "Alarms").

locals {
  gateway_alarms = {
    GatewayFenced = {
      description         = "A shareplane gateway in ${var.region} is fenced: its rule set's lease ran out and it refuses capacity limits."
      metric_name         = "shareplane_gateway_fenced"
      statistic           = "Maximum"
      comparison_operator = "GreaterThanThreshold"
      threshold           = 0
      evaluation_periods  = 2
      datapoints_to_alarm = 2
      treat_missing_data  = "notBreaching"
    }
    GatewayNoRules = {
      description         = "A shareplane gateway in ${var.region} has no rule set: it limits nothing (check its --rules, the daemon URL)."
      metric_name         = "shareplane_gateway_rules_loaded"
      statistic           = "Minimum"
      comparison_operator = "LessThanThreshold"
      threshold           = 1
      evaluation_periods  = 2
      datapoints_to_alarm = 2
      treat_missing_data  = "notBreaching"
    }
    GatewayNotReady = {
      description         = "A shareplane gateway in ${var.region} is not ready (no rule set, fenced, or Redis not reached)."
      metric_name         = "shareplane_gateway_ready"
      statistic           = "Minimum"
      comparison_operator = "LessThanThreshold"
      threshold           = 1
      evaluation_periods  = 2
      datapoints_to_alarm = 2
      treat_missing_data  = "notBreaching"
    }
    GatewayFallbackInUse = {
      description         = "A shareplane gateway in ${var.region} cannot reach its Redis/Valkey: each limit's failure policy decides."
      metric_name         = "shareplane_gateway_fallback_in_use"
      statistic           = "Maximum"
      comparison_operator = "GreaterThanThreshold"
      threshold           = 0
      evaluation_periods  = 2
      datapoints_to_alarm = 2
      treat_missing_data  = "notBreaching"
    }
  }
}

resource "aws_cloudwatch_metric_alarm" "gateway" {
  for_each            = local.gateway_alarms
  alarm_name          = "shareplane-${var.region}-${each.key}"
  alarm_description   = "${each.value.description} See infra/README.md, \"Alarms\"."
  namespace           = var.metric_namespace
  metric_name         = each.value.metric_name
  dimensions          = { Region = var.region }
  statistic           = each.value.statistic
  period              = 60
  comparison_operator = each.value.comparison_operator
  threshold           = each.value.threshold
  evaluation_periods  = each.value.evaluation_periods
  datapoints_to_alarm = each.value.datapoints_to_alarm
  treat_missing_data  = each.value.treat_missing_data
  alarm_actions       = [aws_sns_topic.alarms.arn]
  ok_actions          = [aws_sns_topic.alarms.arn]
  tags                = local.tags
}
