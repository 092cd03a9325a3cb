# One Region of a shareplane deployment, applied with that Region's provider: the table replica
# (outside the home Region), the network (new, or var.existing_vpc), the daemon as an ECS Fargate
# service behind a public load balancer whose name Route 53 health-checks and an internal one for
# the gateways, its config (an SSM parameter, or an object in S3), its task role, an optional
# Valkey for the gateways, the image repository and the alarms.

data "aws_caller_identity" "current" {}
data "aws_partition" "current" {}

data "aws_availability_zones" "available" {
  #checkov:skip=CKV_AWS_394:only the first two names are used; a zone added later sorts after them and changes nothing
  state = "available"
}

locals {
  tags        = merge({ application = "shareplane" }, var.tags)
  is_home     = var.region == var.regions[0]
  endpoint    = module.urls.endpoint
  api_name    = module.urls.api_name
  api_url     = module.urls.daemon_url
  daemon_port = 8080
  azs         = slice(data.aws_availability_zones.available.names, 0, 2)
  peers       = [for r in var.regions : r if r != var.region]
  table_arn   = "arn:${data.aws_partition.current.partition}:dynamodb:${var.region}:${data.aws_caller_identity.current.account_id}:table/${var.table_name}"
  config_toml = module.config.toml
}

# The names and the daemon's base URL, pure (infra/tests/tf-render renders them offline).
module "urls" {
  source             = "./urls"
  region             = var.region
  endpoint_subdomain = var.endpoint_subdomain
  hosted_zone_name   = var.hosted_zone_name
}

module "config" {
  source           = "./config"
  region           = var.region
  regions          = var.regions
  health_check_ids = var.health_check_ids
  table_name       = var.table_name
  metric_namespace = var.metric_namespace
  listen           = "0.0.0.0:${local.daemon_port}"
  period_seconds   = var.period_seconds
  limits_source    = var.limits_source
  limits           = var.limits
  daemon_settings  = var.daemon_settings
}

# ---- The table's replica in this Region ------------------------------------------------------

resource "aws_dynamodb_table_replica" "records" {
  #checkov:skip=CKV_AWS_271:encrypted with the AWS managed key like the table (see the table's CKV_AWS_119 skip)
  count                       = local.is_home ? 0 : 1
  global_table_arn            = "arn:${data.aws_partition.current.partition}:dynamodb:${var.regions[0]}:${data.aws_caller_identity.current.account_id}:table/${var.table_name}"
  point_in_time_recovery      = true
  deletion_protection_enabled = true
  tags                        = local.tags
}

resource "aws_appautoscaling_target" "table" {
  for_each           = var.billing.mode == "provisioned" ? { read = "ReadCapacityUnits", write = "WriteCapacityUnits" } : {}
  service_namespace  = "dynamodb"
  resource_id        = "table/${var.table_name}"
  scalable_dimension = "dynamodb:table:${each.value}"
  min_capacity       = each.key == "read" ? var.billing.read_min : var.billing.write_min
  max_capacity       = each.key == "read" ? var.billing.read_max : var.billing.write_max
  depends_on         = [aws_dynamodb_table_replica.records]
}

resource "aws_appautoscaling_policy" "table" {
  for_each           = aws_appautoscaling_target.table
  name               = "shareplane-${var.table_name}-${each.key}"
  policy_type        = "TargetTrackingScaling"
  service_namespace  = each.value.service_namespace
  resource_id        = each.value.resource_id
  scalable_dimension = each.value.scalable_dimension
  target_tracking_scaling_policy_configuration {
    target_value = var.billing.target_utilization_percent
    predefined_metric_specification {
      predefined_metric_type = each.key == "read" ? "DynamoDBReadCapacityUtilization" : "DynamoDBWriteCapacityUtilization"
    }
  }
}

# ---- Encryption key for logs, the alarm topic and the API token -----------------------------

data "aws_iam_policy_document" "key" {
  #checkov:skip=CKV_AWS_109:a key policy; "*" means this key, and the account statement is the standard root delegation to IAM
  #checkov:skip=CKV_AWS_111:a key policy; "*" means this key, and the account statement is the standard root delegation to IAM
  #checkov:skip=CKV_AWS_356:a key policy; "*" means this key, and the account statement is the standard root delegation to IAM
  statement {
    sid       = "Account"
    actions   = ["kms:*"]
    resources = ["*"]
    principals {
      type        = "AWS"
      identifiers = ["arn:${data.aws_partition.current.partition}:iam::${data.aws_caller_identity.current.account_id}:root"]
    }
  }
  statement {
    sid       = "CloudWatchLogs"
    actions   = ["kms:Encrypt*", "kms:Decrypt*", "kms:ReEncrypt*", "kms:GenerateDataKey*", "kms:Describe*"]
    resources = ["*"]
    principals {
      type        = "Service"
      identifiers = ["logs.${var.region}.amazonaws.com"]
    }
    condition {
      test     = "ArnLike"
      variable = "kms:EncryptionContext:aws:logs:arn"
      values   = ["arn:${data.aws_partition.current.partition}:logs:${var.region}:${data.aws_caller_identity.current.account_id}:log-group:*"]
    }
  }
  statement {
    sid       = "CloudWatchAlarms"
    actions   = ["kms:Decrypt", "kms:GenerateDataKey*"]
    resources = ["*"]
    principals {
      type        = "Service"
      identifiers = ["cloudwatch.amazonaws.com"]
    }
  }
}

resource "aws_kms_key" "main" {
  description         = "shareplane: encrypts the daemon logs, VPC flow logs, the alarm topic and the API token"
  enable_key_rotation = true
  policy              = data.aws_iam_policy_document.key.json
  tags                = local.tags
}

# ---- Config and API token ---------------------------------------------------------------------

resource "aws_ssm_parameter" "config" {
  #checkov:skip=CKV2_AWS_34:the config holds no secret (the API token is in Secrets Manager); String like the CDK app, as CloudFormation cannot create a SecureString
  count       = local.config_in_s3 ? 0 : 1
  name        = "/shareplane/${var.table_name}/config"
  description = "shareplane daemon config (TOML), passed to the tasks as SHAREPLANE_CONFIG_TOML"
  type        = "String"
  tier        = length(local.config_toml) > 4096 ? "Advanced" : "Standard"
  value       = local.config_toml
  tags        = local.tags
  lifecycle {
    precondition {
      condition     = length(local.config_toml) <= 8192
      error_message = "The daemon config is more than 8192 bytes, the most an SSM parameter holds: set config_source = \"s3\"."
    }
  }
}

# ---- Or the config as an object in S3 (config_source = "s3") ---------------------------------

resource "aws_s3_bucket" "config" {
  #checkov:skip=CKV_AWS_144:the config is rendered per Region by this module; another Region has its own bucket
  #checkov:skip=CKV2_AWS_62:nothing consumes events of the config bucket; the tasks read it at start
  count         = local.config_in_s3 ? 1 : 0
  bucket_prefix = "shareplane-config-"
  tags          = local.tags
}

resource "aws_s3_bucket_public_access_block" "config" {
  count                   = local.config_in_s3 ? 1 : 0
  bucket                  = aws_s3_bucket.config[0].id
  block_public_acls       = true
  block_public_policy     = true
  ignore_public_acls      = true
  restrict_public_buckets = true
}

resource "aws_s3_bucket_versioning" "config" {
  count  = local.config_in_s3 ? 1 : 0
  bucket = aws_s3_bucket.config[0].id
  versioning_configuration {
    status = "Enabled"
  }
}

resource "aws_s3_bucket_server_side_encryption_configuration" "config" {
  count  = local.config_in_s3 ? 1 : 0
  bucket = aws_s3_bucket.config[0].id
  rule {
    apply_server_side_encryption_by_default {
      sse_algorithm     = "aws:kms"
      kms_master_key_id = aws_kms_key.main.arn
    }
    bucket_key_enabled = true
  }
}

resource "aws_s3_bucket_logging" "config" {
  count         = local.config_in_s3 ? 1 : 0
  bucket        = aws_s3_bucket.config[0].id
  target_bucket = aws_s3_bucket.lb_logs.id
  target_prefix = "config-access/"
}

resource "aws_s3_bucket_lifecycle_configuration" "config" {
  count  = local.config_in_s3 ? 1 : 0
  bucket = aws_s3_bucket.config[0].id
  rule {
    id     = "expire-old-versions"
    status = "Enabled"
    filter {}
    noncurrent_version_expiration {
      noncurrent_days = 90
    }
    abort_incomplete_multipart_upload {
      days_after_initiation = 7
    }
  }
}

data "aws_iam_policy_document" "config_bucket" {
  count = local.config_in_s3 ? 1 : 0
  statement {
    sid       = "TlsOnly"
    effect    = "Deny"
    actions   = ["s3:*"]
    resources = [aws_s3_bucket.config[0].arn, "${aws_s3_bucket.config[0].arn}/*"]
    principals {
      type        = "AWS"
      identifiers = ["*"]
    }
    condition {
      test     = "Bool"
      variable = "aws:SecureTransport"
      values   = ["false"]
    }
  }
}

resource "aws_s3_bucket_policy" "config" {
  count  = local.config_in_s3 ? 1 : 0
  bucket = aws_s3_bucket.config[0].id
  policy = data.aws_iam_policy_document.config_bucket[0].json
}

resource "aws_s3_object" "config" {
  count                  = local.config_in_s3 ? 1 : 0
  bucket                 = aws_s3_bucket.config[0].id
  key                    = local.config_object_key
  content                = local.config_toml
  content_type           = "application/toml"
  server_side_encryption = "aws:kms"
  kms_key_id             = aws_kms_key.main.arn
  tags                   = local.tags
  depends_on             = [aws_s3_bucket_server_side_encryption_configuration.config]
}

# ---- What the gateways need, in one place ----------------------------------------------------

resource "aws_ssm_parameter" "gateway" {
  #checkov:skip=CKV2_AWS_34:URLs, a secret's ARN (not its value) and a group id: nothing secret
  name        = "/shareplane/${var.table_name}/gateway"
  description = "shareplane: what a gateway in this Region needs (JSON: daemon base URL for --rules, token secret, Valkey URL)"
  type        = "String"
  value = jsonencode({
    daemonUrl              = local.api_url
    rulesUrl               = "${local.api_url}/v1/rules"
    demandUrl              = "${local.api_url}/v1/demand"
    apiTokenSecretArn      = aws_secretsmanager_secret.api_token.arn
    redisUrl               = local.valkey_url
    redisMode              = local.redis_mode
    gatewaySecurityGroupId = aws_security_group.gateway.id
  })
  tags = local.tags
}

resource "aws_secretsmanager_secret" "api_token" {
  #checkov:skip=CKV2_AWS_57:the token is generated once; rotating it means restarting the daemons and updating every client, done by hand (README "API token")
  name_prefix = "shareplane-api-token-"
  description = "shareplane daemon API token (bearer token of the write endpoints)"
  kms_key_id  = aws_kms_key.main.arn
  tags        = local.tags
}

data "aws_secretsmanager_random_password" "api_token" {
  password_length     = 48
  exclude_punctuation = true
}

# The operator's token (abandon and other actions beyond demand): given to the daemon tasks only,
# never in the gateways' settings above.
resource "aws_secretsmanager_secret" "admin_token" {
  #checkov:skip=CKV2_AWS_57:the token is generated once; rotating it means restarting the daemons, done by hand (README "API token")
  name_prefix = "shareplane-admin-token-"
  description = "shareplane daemon admin token (bearer token of the operator endpoints, e.g. abandon)"
  kms_key_id  = aws_kms_key.main.arn
  tags        = local.tags
}

data "aws_secretsmanager_random_password" "admin_token" {
  password_length     = 48
  exclude_punctuation = true
}

resource "aws_secretsmanager_secret_version" "admin_token" {
  secret_id     = aws_secretsmanager_secret.admin_token.id
  secret_string = data.aws_secretsmanager_random_password.admin_token.random_password
  lifecycle {
    ignore_changes = [secret_string]
  }
}

resource "aws_secretsmanager_secret_version" "api_token" {
  secret_id     = aws_secretsmanager_secret.api_token.id
  secret_string = data.aws_secretsmanager_random_password.api_token.random_password
  lifecycle {
    # The data source draws a new password on every plan; keep the first one.
    ignore_changes = [secret_string]
  }
}
