# The daemon: an ECS Fargate service of var.desired_count tasks in the private subnets, its
# task role of least privilege, its execution role and its log group.

resource "aws_cloudwatch_log_group" "daemon" {
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
# (Route 53's HealthCheckStatus in us-east-1); put metrics only in shareplane's namespace.
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
}

resource "aws_iam_role" "task" {
  name_prefix        = "shareplane-task-"
  description        = "shareplane daemon: read the records, write its own Region items, read health, put metrics"
  assume_role_policy = data.aws_iam_policy_document.ecs_tasks_assume.json
  tags               = local.tags
}

resource "aws_iam_role_policy" "task" {
  name   = "shareplane"
  role   = aws_iam_role.task.id
  policy = data.aws_iam_policy_document.task.json
}

# The execution role: pull the image, write the log group, read the config and the token.
data "aws_iam_policy_document" "execution" {
  statement {
    sid       = "PullImage"
    actions   = ["ecr:BatchCheckLayerAvailability", "ecr:GetDownloadUrlForLayer", "ecr:BatchGetImage"]
    resources = ["arn:${data.aws_partition.current.partition}:ecr:*:${data.aws_caller_identity.current.account_id}:repository/*"]
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
    resources = ["${aws_cloudwatch_log_group.daemon.arn}:*"]
  }
  statement {
    sid       = "ReadConfig"
    actions   = ["ssm:GetParameters"]
    resources = [aws_ssm_parameter.config.arn]
  }
  statement {
    sid       = "ReadApiToken"
    actions   = ["secretsmanager:GetSecretValue"]
    resources = [aws_secretsmanager_secret.api_token.arn]
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
  name_prefix        = "shareplane-exec-"
  assume_role_policy = data.aws_iam_policy_document.ecs_tasks_assume.json
  tags               = local.tags
}

resource "aws_iam_role_policy" "execution" {
  name   = "shareplane-execution"
  role   = aws_iam_role.execution.id
  policy = data.aws_iam_policy_document.execution.json
}

resource "aws_ecs_cluster" "main" {
  name = "shareplane"
  setting {
    name  = "containerInsights"
    value = "enabled"
  }
  tags = local.tags
}

resource "aws_ecs_task_definition" "daemon" {
  family                   = "shareplane"
  requires_compatibilities = ["FARGATE"]
  network_mode             = "awsvpc"
  cpu                      = var.cpu
  memory                   = var.memory_mib
  task_role_arn            = aws_iam_role.task.arn
  execution_role_arn       = aws_iam_role.execution.arn
  runtime_platform {
    operating_system_family = "LINUX"
    cpu_architecture        = "X86_64"
  }
  volume {
    name = "tmp"
  }
  container_definitions = jsonencode([{
    name                   = "shareplane"
    image                  = var.image_uri
    essential              = true
    command                = ["run"] # without --config the daemon reads SHAREPLANE_CONFIG_TOML
    readonlyRootFilesystem = true
    portMappings           = [{ containerPort = local.daemon_port, protocol = "tcp" }]
    mountPoints            = [{ containerPath = "/tmp", sourceVolume = "tmp", readOnly = false }]
    secrets = [
      { name = "SHAREPLANE_CONFIG_TOML", valueFrom = aws_ssm_parameter.config.arn },
      { name = "SHAREPLANE_API_TOKEN", valueFrom = aws_secretsmanager_secret.api_token.arn },
    ]
    environment = [
      # Changes with the config, so that a new task definition rolls the service.
      { name = "SHAREPLANE_CONFIG_DIGEST", value = sha256(local.config_toml) },
      { name = "RUST_LOG", value = "info" },
    ]
    logConfiguration = {
      logDriver = "awslogs"
      options = {
        awslogs-group         = aws_cloudwatch_log_group.daemon.name
        awslogs-region        = var.region
        awslogs-stream-prefix = "daemon"
      }
    }
    stopTimeout = 30
  }])
  tags = local.tags
}

resource "aws_security_group" "daemon" {
  name_prefix = "shareplane-daemon-"
  description = "shareplane daemon tasks"
  vpc_id      = aws_vpc.main.id
  tags        = local.tags
}

resource "aws_vpc_security_group_ingress_rule" "daemon_from_lb" {
  security_group_id            = aws_security_group.daemon.id
  description                  = "health checks and requests from the load balancer"
  referenced_security_group_id = aws_security_group.lb.id
  ip_protocol                  = "tcp"
  from_port                    = local.daemon_port
  to_port                      = local.daemon_port
}

resource "aws_vpc_security_group_egress_rule" "daemon_https" {
  security_group_id = aws_security_group.daemon.id
  description       = "AWS APIs (DynamoDB, CloudWatch, SSM, ECR, Logs)"
  cidr_ipv4         = "0.0.0.0/0"
  ip_protocol       = "tcp"
  from_port         = 443
  to_port           = 443
}

resource "aws_ecs_service" "daemon" {
  name                               = "shareplane"
  cluster                            = aws_ecs_cluster.main.id
  task_definition                    = aws_ecs_task_definition.daemon.arn
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
    subnets          = aws_subnet.private[*].id
    security_groups  = [aws_security_group.daemon.id]
    assign_public_ip = false
  }
  load_balancer {
    target_group_arn = aws_lb_target_group.daemon.arn
    container_name   = "shareplane"
    container_port   = local.daemon_port
  }
  depends_on = [aws_lb_listener_rule.health]
  tags       = local.tags
}
