output "table_name" {
  description = "Name of the global table."
  value       = aws_dynamodb_table.records.name
}

output "table_arn" {
  description = "ARN of the table in the home Region."
  value       = aws_dynamodb_table.records.arn
}

output "health_check_ids" {
  description = "Region name => id of the Route 53 health check of its endpoint; pass it to every region module."
  value       = { for r, c in aws_route53_health_check.endpoint : r => c.id }
}

output "limits_writer_policy_arn" {
  description = "Managed policy to attach to the role that runs `shareplane limits apply`: read and write only the shared limits (the \"#limits\" items) of the table in every Region."
  value       = aws_iam_policy.limits_writer.arn
}

output "endpoints" {
  description = "Region name => public name of its endpoint (the health checks probe https://<name>/readyz)."
  value       = local.endpoints
}
