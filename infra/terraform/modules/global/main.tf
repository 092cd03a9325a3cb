# The global part of a shareplane deployment, applied with the home Region's provider: the
# DynamoDB global table, one Route 53 health check per Region's endpoint, the dashboard, and the
# managed policy for whoever writes the shared limits (`shareplane limits apply`).
# Route 53 publishes HealthCheckStatus only in us-east-1, wherever the check was created.

data "aws_caller_identity" "current" {}
data "aws_partition" "current" {}

locals {
  endpoints = { for r in var.regions : r => "${r}.${var.endpoint_subdomain}.${var.hosted_zone_name}" }
  tags      = merge({ application = "shareplane" }, var.tags)
  # The table's ARN in every Region, as each Region's task role names it (modules/region, local.table_arn).
  table_arns = [for r in var.regions : "arn:${data.aws_partition.current.partition}:dynamodb:${r}:${data.aws_caller_identity.current.account_id}:table/${var.table_name}"]
  # The partition key of the shared limits' items (crates/shareplane-aws/src/limits.rs, LIMITS_PK).
  # No Region's name starts with "#", so no task role's dynamodb:LeadingKeys admits a write of them.
  limits_partition_key = "#limits"
}

resource "aws_dynamodb_table" "records" {
  #checkov:skip=CKV_AWS_119:encrypted with the AWS managed key (as in the CDK app); a customer key would be needed in every replica Region, and the records hold no secret
  name         = var.table_name
  billing_mode = var.billing.mode == "on-demand" ? "PAY_PER_REQUEST" : "PROVISIONED"
  # Each Region writes only items whose pk is its own Region name (see the task role).
  hash_key       = "pk"
  range_key      = "sk"
  read_capacity  = var.billing.mode == "provisioned" ? var.billing.read_min : null
  write_capacity = var.billing.mode == "provisioned" ? var.billing.write_min : null

  attribute {
    name = "pk"
    type = "S"
  }
  attribute {
    name = "sk"
    type = "S"
  }

  # Replicas need the stream; they are aws_dynamodb_table_replica resources of the region module.
  stream_enabled              = true
  stream_view_type            = "NEW_AND_OLD_IMAGES"
  deletion_protection_enabled = true

  point_in_time_recovery {
    enabled = true
  }

  server_side_encryption {
    enabled = true
  }

  lifecycle {
    # Replicas are managed by aws_dynamodb_table_replica; autoscaling moves the capacity.
    ignore_changes = [replica, read_capacity, write_capacity]
  }

  tags = local.tags
}

resource "aws_route53_health_check" "endpoint" {
  for_each          = local.endpoints
  type              = "HTTPS"
  fqdn              = each.value
  port              = 443
  resource_path     = "/readyz"
  enable_sni        = true
  request_interval  = 10
  failure_threshold = 3
  tags              = merge(local.tags, { Name = "shareplane ${each.key}" })
}

# ---- The limits writer: whoever runs `shareplane limits apply` -------------------------------

# The shared limits are written once, from any Region's replica (the config given to
# `shareplane limits apply` names the Region), so the policy names the table in every Region,
# and only its "#limits" items: GetItem of the head, Query of the parts, PutItem of parts and
# head, DeleteItem of refused or collected parts; BatchWriteItem grants nothing beyond PutItem
# and DeleteItem of the same items (the condition covers each item of a batch).
data "aws_iam_policy_document" "limits_writer" {
  statement {
    sid       = "ReadWriteSharedLimitsOnly"
    actions   = ["dynamodb:GetItem", "dynamodb:Query", "dynamodb:PutItem", "dynamodb:DeleteItem", "dynamodb:BatchWriteItem"]
    resources = local.table_arns
    condition {
      test     = "ForAllValues:StringEquals"
      variable = "dynamodb:LeadingKeys"
      values   = [local.limits_partition_key]
    }
  }
}

resource "aws_iam_policy" "limits_writer" {
  name_prefix = "shareplane-limits-writer-"
  description = "shareplane: read and write only the shared limits (items with pk ${local.limits_partition_key}) of table ${var.table_name} in every Region; attach to whoever runs shareplane limits apply"
  policy      = data.aws_iam_policy_document.limits_writer.json
  tags        = local.tags
}

resource "aws_cloudwatch_dashboard" "shares" {
  dashboard_name = "shareplane-${var.table_name}"
  dashboard_body = jsonencode({
    widgets = concat(
      flatten([for i, l in var.limits : [
        {
          type = "metric", x = 0, y = i * 6, width = 12, height = 6
          properties = {
            title       = "Share of ${l.id} per Region (requests/s)"
            view        = "timeSeries", stacked = true, region = var.regions[0], period = 60
            metrics     = [for r in var.regions : [var.metric_namespace, "Share", "Region", r, "Limit", l.id, { region = r, stat = "Average", label = r }]]
            annotations = { horizontal = [{ value = l.rate, label = "limit ${l.rate}", color = "#d62728" }] }
          }
        },
        {
          type = "metric", x = 12, y = i * 6, width = 12, height = 6
          properties = {
            title       = "Sum of shares of ${l.id} as each Region sees it (requests/s)"
            view        = "timeSeries", stacked = false, region = var.regions[0], period = 60
            metrics     = [for r in var.regions : [var.metric_namespace, "SeenSumOfShares", "Region", r, "Limit", l.id, { region = r, stat = "Maximum", label = r }]]
            annotations = { horizontal = [{ value = l.rate, label = "limit ${l.rate}", color = "#d62728" }] }
          }
        },
      ]]),
      [
        {
          type = "metric", x = 0, y = length(var.limits) * 6, width = 12, height = 6
          properties = {
            title   = "Daemon ready (1) per Region"
            view    = "timeSeries", stacked = false, region = var.regions[0], period = 60
            metrics = [for r in var.regions : [var.metric_namespace, "Ready", "Region", r, { region = r, stat = "Minimum", label = r }]]
          }
        },
        {
          type = "metric", x = 12, y = length(var.limits) * 6, width = 12, height = 6
          properties = {
            title = "Rejected records and rebalances without fresh data per Region"
            view  = "timeSeries", stacked = false, region = var.regions[0], period = 60
            metrics = flatten([for r in var.regions : [
              [var.metric_namespace, "RejectedRecords", "Region", r, { region = r, stat = "Sum", label = "${r} rejected" }],
              [var.metric_namespace, "RebalancesWithoutFreshData", "Region", r, { region = r, stat = "Sum", label = "${r} without fresh data" }],
            ]])
          }
        },
      ],
    )
  })
}
