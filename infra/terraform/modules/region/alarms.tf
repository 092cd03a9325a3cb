# Alarms on the daemon's metrics in this Region (see infra/README.md, "Alarms"), to an
# encrypted SNS topic.

resource "aws_sns_topic" "alarms" {
  name_prefix       = "shareplane-alarms-"
  display_name      = "shareplane alarms (${var.region})"
  kms_master_key_id = aws_kms_key.main.arn
  tags              = local.tags
}

resource "aws_sns_topic_subscription" "email" {
  count     = var.alarm_email == "" ? 0 : 1
  topic_arn = aws_sns_topic.alarms.arn
  protocol  = "email"
  endpoint  = var.alarm_email
}

resource "aws_cloudwatch_metric_alarm" "record_stale" {
  for_each            = toset(local.peers)
  alarm_name          = "shareplane-${var.region}-RecordStale-${each.key}"
  alarm_description   = "${var.region} has seen no new record from ${each.key} for more than 3 periods. See infra/README.md, \"Alarms\"."
  namespace           = var.metric_namespace
  metric_name         = "PeerRecordAgeSeconds"
  dimensions          = { Region = var.region, Peer = each.key }
  statistic           = "Maximum"
  period              = 60
  comparison_operator = "GreaterThanThreshold"
  threshold           = 3 * var.period_seconds
  evaluation_periods  = 2
  datapoints_to_alarm = 2
  treat_missing_data  = "notBreaching"
  alarm_actions       = [aws_sns_topic.alarms.arn]
  ok_actions          = [aws_sns_topic.alarms.arn]
  tags                = local.tags
}

resource "aws_cloudwatch_metric_alarm" "sum_of_shares_above_limit" {
  for_each            = { for l in var.limits : l.id => l }
  alarm_name          = "shareplane-${var.region}-SumOfSharesAboveLimit-${each.key}"
  alarm_description   = "The sum of shares of ${each.key} seen by ${var.region} is above the limit ${each.value.rate}/s. See infra/README.md, \"Alarms\"."
  namespace           = var.metric_namespace
  metric_name         = "SeenSumOfShares"
  dimensions          = { Region = var.region, Limit = each.key }
  statistic           = "Maximum"
  period              = 60
  comparison_operator = "GreaterThanThreshold"
  threshold           = each.value.rate
  evaluation_periods  = 1
  treat_missing_data  = "notBreaching"
  alarm_actions       = [aws_sns_topic.alarms.arn]
  ok_actions          = [aws_sns_topic.alarms.arn]
  tags                = local.tags
}

# The alarms on this Region's own daemon, one per entry.
locals {
  daemon_alarms = {
    RejectedRecords = {
      description         = "${var.region} rejected a peer record that failed validation."
      metric_name         = "RejectedRecords"
      statistic           = "Sum"
      comparison_operator = "GreaterThanThreshold"
      threshold           = 0
      evaluation_periods  = 1
      datapoints_to_alarm = null
      treat_missing_data  = "notBreaching"
    }
    RebalancesWithoutFreshData = {
      description         = "${var.region} rebalanced while some peer's record was not fresh."
      metric_name         = "RebalancesWithoutFreshData"
      statistic           = "Sum"
      comparison_operator = "GreaterThanThreshold"
      threshold           = 0
      evaluation_periods  = 1
      datapoints_to_alarm = null
      treat_missing_data  = "notBreaching"
    }
    StrandedRoom = {
      description         = "${var.region} has been unable to close a peer's ended epoch for want of its last record for more than 300 s: that room is held by nobody."
      metric_name         = "LongestWaitForRecordSeconds"
      statistic           = "Maximum"
      comparison_operator = "GreaterThanThreshold"
      threshold           = 300
      evaluation_periods  = 1
      datapoints_to_alarm = null
      treat_missing_data  = "notBreaching"
    }
    RaiseHeldBack = {
      description         = "A limit's raise in ${var.region} has waited more than 300 s for a peer to account with ${var.region}'s new epoch: the raise's room is unused."
      metric_name         = "LongestRaiseWaitSeconds"
      statistic           = "Maximum"
      comparison_operator = "GreaterThanThreshold"
      threshold           = 300
      evaluation_periods  = 1
      datapoints_to_alarm = null
      treat_missing_data  = "notBreaching"
    }
    HealthUnknown = {
      description         = "The health verdict of some Region, as ${var.region} reads it, has been unknown for more than 300 s: were that Region lost, it would never be reclaimed. Check its health check and its CloudWatch data."
      metric_name         = "LongestHealthUnknownSeconds"
      statistic           = "Maximum"
      comparison_operator = "GreaterThanThreshold"
      threshold           = 300
      evaluation_periods  = 1
      datapoints_to_alarm = null
      treat_missing_data  = "notBreaching"
    }
    LimitsAboveRate = {
      description         = "Some limit's shares, as ${var.region} sees them, add up to more than its rate (every limit counted)."
      metric_name         = "LimitsAboveRate"
      statistic           = "Maximum"
      comparison_operator = "GreaterThanThreshold"
      threshold           = 0
      evaluation_periods  = 1
      datapoints_to_alarm = null
      treat_missing_data  = "notBreaching"
    }
    LimitsMismatch = {
      description         = "${var.region} runs other limits than some peer, for longer than the daemon's rollout window: the Regions do not hold one limit."
      metric_name         = "LimitsMismatchPeers"
      statistic           = "Maximum"
      comparison_operator = "GreaterThanThreshold"
      threshold           = 0
      evaluation_periods  = 1
      datapoints_to_alarm = null
      treat_missing_data  = "notBreaching"
    }
    NotReady = {
      description         = "A shareplane daemon in ${var.region} is not ready, or publishes no metrics at all."
      metric_name         = "Ready"
      statistic           = "Minimum"
      comparison_operator = "LessThanThreshold"
      threshold           = 1
      evaluation_periods  = 2
      datapoints_to_alarm = 2
      # No datapoint means no daemon publishes: that is not ready either.
      treat_missing_data = "breaching"
    }
  }
}

resource "aws_cloudwatch_metric_alarm" "daemon" {
  for_each            = local.daemon_alarms
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
