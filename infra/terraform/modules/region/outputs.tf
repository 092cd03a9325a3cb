output "endpoint_url" {
  description = "The public health endpoint Route 53 probes."
  value       = "https://${local.endpoint}/readyz"
}

output "config_parameter" {
  description = "Name of the SSM parameter holding the daemon's config (config_source = parameter), else null."
  value       = one(aws_ssm_parameter.config[*].name)
}

output "config_object" {
  description = "S3 URI of the object holding the daemon's config (config_source = s3), else null."
  value       = local.config_in_s3 ? "s3://${local.config_bucket}/${local.config_object_key}" : null
}

output "daemon_url" {
  description = "The daemon API base URL inside the VPC: pass it as `shareplane gateway --rules` (the gateway GETs <it>/v1/rules and POSTs <it>/v1/demand)."
  value       = local.api_url
}

output "rules_url" {
  description = "The rule set's endpoint (GET, long-poll; for curl): a gateway takes daemon_url as --rules."
  value       = "${local.api_url}/v1/rules"
}

output "demand_url" {
  description = "POST demand totals, with the API token as bearer token."
  value       = "${local.api_url}/v1/demand"
}

output "gateway_security_group_id" {
  description = "Attach to the gateways: it reaches the daemon's API and Valkey."
  value       = aws_security_group.gateway.id
}

output "gateway_settings_parameter" {
  description = "SSM parameter holding the gateways' settings as JSON (daemonUrl, rulesUrl, demandUrl, apiTokenSecretArn, redisUrl, gatewaySecurityGroupId)."
  value       = aws_ssm_parameter.gateway.name
}

output "valkey_url" {
  description = "The gateways' Valkey, rediss:// (TLS only); empty without Valkey."
  value       = local.valkey_url
}

output "ecr_repository_url" {
  description = "This Region's repository for the daemon's image (push image_tag there), or null with image_uri."
  value       = one(aws_ecr_repository.daemon[*].repository_url)
}

output "config_toml" {
  description = "The daemon's config as rendered (no secrets in it)."
  value       = local.config_toml
}

output "api_token_secret_arn" {
  description = "ARN of the Secrets Manager secret holding the daemon's API token (daemons, and gateways as SHAREPLANE_DEMAND_TOKEN)."
  value       = aws_secretsmanager_secret.api_token.arn
}

output "admin_token_secret_arn" {
  description = "ARN of the Secrets Manager secret holding the daemon's admin token (daemons only, SHAREPLANE_ADMIN_TOKEN)."
  value       = aws_secretsmanager_secret.admin_token.arn
}

output "alarm_topic_arn" {
  description = "SNS topic that receives this Region's alarms."
  value       = aws_sns_topic.alarms.arn
}

output "task_role_arn" {
  description = "ARN of the daemon's task role, or null with ecs_service = false."
  value       = one(aws_iam_role.task[*].arn)
}

output "daemon_policy_arn" {
  description = "With ecs_service = false: the task role's statements as a managed policy, to attach to the daemon pods' role (IRSA or Pod Identity); else null."
  value       = one(aws_iam_policy.daemon[*].arn)
}

output "daemon_target_group_arn" {
  description = "With ecs_service = false: register the daemon pods here (IP targets, port 8080), the public endpoint Route 53 probes; else null."
  value       = local.ecs ? null : aws_lb_target_group.daemon.arn
}

output "daemon_api_target_group_arn" {
  description = "With ecs_service = false: register the daemon pods here (IP targets, port 8080), the internal API load balancer of daemon_url; else null."
  value       = local.ecs ? null : aws_lb_target_group.api.arn
}

output "daemon_security_group_id" {
  description = "With ecs_service = false: attach to the daemon pods (security groups for pods), both load balancers reach them on 8080; else null."
  value       = local.ecs ? null : aws_security_group.daemon.id
}
