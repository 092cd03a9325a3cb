output "endpoint_url" {
  description = "The public health endpoint Route 53 probes."
  value       = "https://${local.endpoint}/readyz"
}

output "config_parameter" {
  description = "Name of the SSM parameter holding the daemon's config."
  value       = aws_ssm_parameter.config.name
}

output "config_toml" {
  description = "The daemon's config as rendered (no secrets in it)."
  value       = local.config_toml
}

output "api_token_secret_arn" {
  description = "ARN of the Secrets Manager secret holding the daemon's API token."
  value       = aws_secretsmanager_secret.api_token.arn
}

output "alarm_topic_arn" {
  description = "SNS topic that receives this Region's alarms."
  value       = aws_sns_topic.alarms.arn
}

output "task_role_arn" {
  description = "ARN of the daemon's task role."
  value       = aws_iam_role.task.arn
}
