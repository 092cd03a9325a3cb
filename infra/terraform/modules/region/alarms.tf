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

resource "aws_cloudwatch_metric_alarm" "rejected_records" {
  alarm_name          = "shareplane-${var.region}-RejectedRecords"
  alarm_description   = "${var.region} rejected a peer record that failed validation. See infra/README.md, \"Alarms\"."
  namespace           = var.metric_namespace
  metric_name         = "RejectedRecords"
  dimensions          = { Region = var.region }
  statistic           = "Sum"
  period              = 60
  comparison_operator = "GreaterThanThreshold"
  threshold           = 0
  evaluation_periods  = 1
  treat_missing_data  = "notBreaching"
  alarm_actions       = [aws_sns_topic.alarms.arn]
  ok_actions          = [aws_sns_topic.alarms.arn]
  tags                = local.tags
}

resource "aws_cloudwatch_metric_alarm" "rebalances_without_fresh_data" {
  alarm_name          = "shareplane-${var.region}-RebalancesWithoutFreshData"
  alarm_description   = "${var.region} rebalanced while some peer's record was not fresh. See infra/README.md, \"Alarms\"."
  namespace           = var.metric_namespace
  metric_name         = "RebalancesWithoutFreshData"
  dimensions          = { Region = var.region }
  statistic           = "Sum"
  period              = 60
  comparison_operator = "GreaterThanThreshold"
  threshold           = 0
  evaluation_periods  = 1
  treat_missing_data  = "notBreaching"
  alarm_actions       = [aws_sns_topic.alarms.arn]
  ok_actions          = [aws_sns_topic.alarms.arn]
  tags                = local.tags
}

resource "aws_cloudwatch_metric_alarm" "not_ready" {
  alarm_name          = "shareplane-${var.region}-NotReady"
  alarm_description   = "A shareplane daemon in ${var.region} is not ready, or publishes no metrics at all. See infra/README.md, \"Alarms\"."
  namespace           = var.metric_namespace
  metric_name         = "Ready"
  dimensions          = { Region = var.region }
  statistic           = "Minimum"
  period              = 60
  comparison_operator = "LessThanThreshold"
  threshold           = 1
  evaluation_periods  = 2
  datapoints_to_alarm = 2
  # No datapoint means no daemon publishes: that is not ready either.
  treat_missing_data = "breaching"
  alarm_actions      = [aws_sns_topic.alarms.arn]
  ok_actions         = [aws_sns_topic.alarms.arn]
  tags               = local.tags
}
