# The daemon: an ECS Fargate service of var.desired_count tasks in the private subnets behind
# both load balancers, its task role of least privilege, its execution role and its log group.
# With var.config_source = "s3" an init container copies the config from S3 into a volume the
# daemon reads with --config. With var.ecs_service = false none of these exists (the daemon runs
# elsewhere, e.g. on EKS): the task role's statements become a managed policy for the pods' role.

locals {
  ecs               = var.ecs_service
  config_in_s3      = var.config_source == "s3"
  config_object_key = "daemon.toml"
  config_file       = "/etc/shareplane/config.toml"
  config_bucket     = join("", aws_s3_bucket.config[*].id)
}

resource "aws_cloudwatch_log_group" "daemon" {
  count             = local.ecs ? 1 : 0
  name              = "/shareplane/${var.table_name}/daemon"
  retention_in_days = var.log_retention_days
  kms_key_id        = aws_kms_key.main.arn
  tags              = local.tags
}

data "aws_iam_policy_document" "ecs_tasks_assume" {
  statement {
    actions = ["sts:AssumeRole"]
    principals {
      type        = "Service"
      identifiers = ["ecs-tasks.amazonaws.com"]
    }
  }
}

# The task role: read the table; write only this Region's own items; read CloudWatch metrics
# (Route 53's HealthCheckStatus in us-east-1); put metrics only in shareplane's namespace; with
# the config in S3, read that one object (the init container runs with the same role).
data "aws_iam_policy_document" "task" {
  statement {
    sid       = "ReadAllRegionsRecords"
    actions   = ["dynamodb:GetItem", "dynamodb:Query", "dynamodb:BatchGetItem", "dynamodb:Scan"]
    resources = [local.table_arn]
  }
  statement {
    sid       = "WriteOwnRegionItemsOnly"
    actions   = ["dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem", "dynamodb:ConditionCheckItem"]
    resources = [local.table_arn]
    condition {
      test     = "ForAllValues:StringEquals"
      variable = "dynamodb:LeadingKeys"
      values   = [var.region]
    }
  }
  # CloudWatch's read actions cannot be scoped to a resource: "*" is the only valid value.
  # The daemon reads AWS/Route53 HealthCheckStatus, which lives in us-east-1.
  statement {
    sid       = "ReadHealthCheckMetrics"
    actions   = ["cloudwatch:GetMetricData", "cloudwatch:GetMetricStatistics"]
    resources = ["*"]
  }
  statement {
    sid       = "PutMetricsInOwnNamespaceOnly"
    actions   = ["cloudwatch:PutMetricData"]
    resources = ["*"]
    condition {
      test     = "StringEquals"
      variable = "cloudwatch:namespace"
      values   = [var.metric_namespace]
    }
  }
  dynamic "statement" {
    for_each = local.config_in_s3 ? ["ReadOwnConfigObject"] : []
    content {
      sid       = statement.value
      actions   = ["s3:GetObject"]
      resources = ["${aws_s3_bucket.config[0].arn}/${local.config_object_key}"]
    }
  }
  dynamic "statement" {
    for_each = local.config_in_s3 ? ["DecryptOwnConfigObject"] : []
    content {
      sid       = statement.value
      actions   = ["kms:Decrypt"]
      resources = [aws_kms_key.main.arn]
      condition {
        test     = "StringEquals"
        variable = "kms:ViaService"
        values   = ["s3.${var.region}.amazonaws.com"]
      }
    }
  }
}

resource "aws_iam_role" "task" {
  count              = local.ecs ? 1 : 0
  name_prefix        = "shareplane-task-"
  description        = "shareplane daemon: read the records, write its own Region items, read health, put metrics, read its config"
  assume_role_policy = data.aws_iam_policy_document.ecs_tasks_assume.json
  tags               = local.tags
}

resource "aws_iam_role_policy" "task" {
  count  = local.ecs ? 1 : 0
  name   = "shareplane"
  role   = aws_iam_role.task[0].id
  policy = data.aws_iam_policy_document.task.json
}

# Without the ECS service: the same statements, attached to nothing; the team attaches the policy
# to the daemon pods' role (IRSA or EKS Pod Identity), output daemon_policy_arn.
resource "aws_iam_policy" "daemon" {
  count       = local.ecs ? 0 : 1
  name_prefix = "shareplane-daemon-"
  description = "shareplane daemon: read the records, write its own Region items, read health, put metrics, read its config"
  policy      = data.aws_iam_policy_document.task.json
  tags        = local.tags
}

# The execution role: pull the image, write the log group, read the config and the token.
data "aws_iam_policy_document" "execution" {
  count = local.ecs ? 1 : 0
  statement {
    sid       = "PullImage"
    actions   = ["ecr:BatchCheckLayerAvailability", "ecr:GetDownloadUrlForLayer", "ecr:BatchGetImage"]
    resources = local.image_repository_arns
  }
  # GetAuthorizationToken cannot be scoped to a resource.
  statement {
    sid       = "RegistryLogin"
    actions   = ["ecr:GetAuthorizationToken"]
    resources = ["*"]
  }
  statement {
    sid       = "WriteLogs"
    actions   = ["logs:CreateLogStream", "logs:PutLogEvents"]
    resources = ["${aws_cloudwatch_log_group.daemon[0].arn}:*"]
  }
  dynamic "statement" {
    for_each = local.config_in_s3 ? [] : ["ReadConfig"]
    content {
      sid       = statement.value
      actions   = ["ssm:GetParameters"]
      resources = [aws_ssm_parameter.config[0].arn]
    }
  }
  statement {
    sid       = "ReadApiToken"
    actions   = ["secretsmanager:GetSecretValue"]
    resources = [aws_secretsmanager_secret.api_token.arn, aws_secretsmanager_secret.admin_token.arn]
  }
  statement {
    sid       = "DecryptApiToken"
    actions   = ["kms:Decrypt"]
    resources = [aws_kms_key.main.arn]
    condition {
      test     = "StringEquals"
      variable = "kms:ViaService"
      values   = ["secretsmanager.${var.region}.amazonaws.com"]
    }
  }
}

resource "aws_iam_role" "execution" {
  count              = local.ecs ? 1 : 0
  name_prefix        = "shareplane-exec-"
  assume_role_policy = data.aws_iam_policy_document.ecs_tasks_assume.json
  tags               = local.tags
}

resource "aws_iam_role_policy" "execution" {
  count  = local.ecs ? 1 : 0
  name   = "shareplane-execution"
  role   = aws_iam_role.execution[0].id
  policy = data.aws_iam_policy_document.execution[0].json
}

resource "aws_ecs_cluster" "main" {
  count = local.ecs ? 1 : 0
  name  = "shareplane"
  setting {
    name  = "containerInsights"
    value = "enabled"
  }
  tags = local.tags
}

locals {
  daemon_container = {
    name                   = "shareplane"
    image                  = local.image
    essential              = true
    readonlyRootFilesystem = true
    portMappings           = [{ containerPort = local.daemon_port, protocol = "tcp" }]
    environment = [
      # Changes with the config, so that a new task definition rolls the service.
      { name = "SHAREPLANE_CONFIG_DIGEST", value = sha256(local.config_toml) },
      { name = "RUST_LOG", value = "info" },
    ]
    logConfiguration = {
      logDriver = "awslogs"
      options = {
        awslogs-group         = join("", aws_cloudwatch_log_group.daemon[*].name)
        awslogs-region        = var.region
        awslogs-stream-prefix = "daemon"
      }
    }
    stopTimeout = 30
  }
  api_token_secret = { name = "SHAREPLANE_API_TOKEN", valueFrom = aws_secretsmanager_secret.api_token.arn }
  # The daemon tasks only: the gateways' settings name the API token, never this one.
  admin_token_secret = { name = "SHAREPLANE_ADMIN_TOKEN", valueFrom = aws_secretsmanager_secret.admin_token.arn }
  tmp_mount          = { containerPath = "/tmp", sourceVolume = "tmp", readOnly = false }

  # The config in an SSM parameter: without --config the daemon reads SHAREPLANE_CONFIG_TOML.
  containers_parameter = [merge(local.daemon_container, {
    command     = ["run"]
    mountPoints = [local.tmp_mount]
    secrets = [
      { name = "SHAREPLANE_CONFIG_TOML", valueFrom = join("", aws_ssm_parameter.config[*].arn) },
      local.api_token_secret,
      local.admin_token_secret,
    ]
  })]

  # The config in S3: copied before the daemon starts into a volume only these two containers
  # share; the daemon mounts it read-only. A failed copy fails the task.
  containers_s3 = [
    merge(local.daemon_container, {
      command     = ["run", "--config", local.config_file]
      mountPoints = [local.tmp_mount, { containerPath = dirname(local.config_file), sourceVolume = "config", readOnly = true }]
      secrets     = [local.api_token_secret, local.admin_token_secret]
      dependsOn   = [{ containerName = "fetch-config", condition = "SUCCESS" }]
    }),
    {
      name                   = "fetch-config"
      image                  = var.config_fetch_image
      essential              = false
      readonlyRootFilesystem = true
      command                = ["s3", "cp", "s3://${local.config_bucket}/${local.config_object_key}", "/config/config.toml", "--only-show-errors"]
      environment            = [{ name = "AWS_REGION", value = var.region }, { name = "HOME", value = "/tmp" }]
      mountPoints = [
        { containerPath = "/config", sourceVolume = "config", readOnly = false },
        { containerPath = "/tmp", sourceVolume = "fetch-tmp", readOnly = false },
      ]
      logConfiguration = {
        logDriver = "awslogs"
        options = {
          awslogs-group         = join("", aws_cloudwatch_log_group.daemon[*].name)
          awslogs-region        = var.region
          awslogs-stream-prefix = "fetch-config"
        }
      }
    },
  ]
}

resource "aws_ecs_task_definition" "daemon" {
  count                    = local.ecs ? 1 : 0
  family                   = "shareplane"
  requires_compatibilities = ["FARGATE"]
  network_mode             = "awsvpc"
  cpu                      = var.cpu
  memory                   = var.memory_mib
  task_role_arn            = aws_iam_role.task[0].arn
  execution_role_arn       = aws_iam_role.execution[0].arn
  runtime_platform {
    operating_system_family = "LINUX"
    cpu_architecture        = upper(var.cpu_architecture)
  }
  dynamic "volume" {
    for_each = local.config_in_s3 ? ["tmp", "config", "fetch-tmp"] : ["tmp"]
    content {
      name = volume.value
    }
  }
  container_definitions = local.config_in_s3 ? jsonencode(local.containers_s3) : jsonencode(local.containers_parameter)
  tags                  = local.tags
  lifecycle {
    precondition {
      condition     = var.image_uri != "" || var.image_tag != ""
      error_message = "Set image_tag (a tag pushed to this Region's repository, output ecr_repository_url) or image_uri."
    }
  }
}

resource "aws_ecs_service" "daemon" {
  count                              = local.ecs ? 1 : 0
  name                               = "shareplane"
  cluster                            = aws_ecs_cluster.main[0].id
  task_definition                    = aws_ecs_task_definition.daemon[0].arn
  desired_count                      = var.desired_count
  launch_type                        = "FARGATE"
  deployment_minimum_healthy_percent = 100
  deployment_maximum_percent         = 200
  health_check_grace_period_seconds  = 60
  propagate_tags                     = "SERVICE"
  deployment_circuit_breaker {
    enable   = true
    rollback = true
  }
  network_configuration {
    subnets          = local.private_subnet_ids
    security_groups  = [aws_security_group.daemon.id]
    assign_public_ip = false
  }
  load_balancer {
    target_group_arn = aws_lb_target_group.daemon.arn
    container_name   = "shareplane"
    container_port   = local.daemon_port
  }
  load_balancer {
    target_group_arn = aws_lb_target_group.api.arn
    container_name   = "shareplane"
    container_port   = local.daemon_port
  }
  depends_on = [aws_lb_listener_rule.health, aws_lb_listener_rule.api, aws_s3_object.config]
  tags       = local.tags
}

# These resources took a count with var.ecs_service: a deployment made before keeps them (an
# address without [0] becomes [0]), rather than Terraform replacing the running service.
moved {
  from = aws_cloudwatch_log_group.daemon
  to   = aws_cloudwatch_log_group.daemon[0]
}

moved {
  from = aws_iam_role.task
  to   = aws_iam_role.task[0]
}

moved {
  from = aws_iam_role_policy.task
  to   = aws_iam_role_policy.task[0]
}

moved {
  from = aws_iam_role.execution
  to   = aws_iam_role.execution[0]
}

moved {
  from = aws_iam_role_policy.execution
  to   = aws_iam_role_policy.execution[0]
}

moved {
  from = aws_ecs_cluster.main
  to   = aws_ecs_cluster.main[0]
}

moved {
  from = aws_ecs_task_definition.daemon
  to   = aws_ecs_task_definition.daemon[0]
}

moved {
  from = aws_ecs_service.daemon
  to   = aws_ecs_service.daemon[0]
}
