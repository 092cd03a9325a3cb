output "table_name" {
  description = "Name of the global table."
  value       = module.global.table_name
}

output "health_check_ids" {
  description = "Region name => Route 53 health check id."
  value       = module.global.health_check_ids
}

output "limits_writer_policy_arn" {
  description = "Attach to the role that runs `shareplane limits apply` (the shared limits' items only)."
  value       = module.global.limits_writer_policy_arn
}

output "endpoints" {
  description = "Region name => health endpoint URL."
  value = {
    "us-east-1"      = module.us_east_1.endpoint_url
    "eu-west-1"      = module.eu_west_1.endpoint_url
    "ap-southeast-2" = module.ap_southeast_2.endpoint_url
  }
}

output "alarm_topics" {
  description = "Region name => SNS topic of its alarms."
  value = {
    "us-east-1"      = module.us_east_1.alarm_topic_arn
    "eu-west-1"      = module.eu_west_1.alarm_topic_arn
    "ap-southeast-2" = module.ap_southeast_2.alarm_topic_arn
  }
}

output "gateways" {
  description = "Region name => what its gateways need: the rules and demand URLs, the token's secret, the Valkey URL, the security group to attach, and the SSM parameter holding all of it."
  value = {
    for r, m in {
      "us-east-1"      = module.us_east_1
      "eu-west-1"      = module.eu_west_1
      "ap-southeast-2" = module.ap_southeast_2
      } : r => {
      rules_url                  = m.rules_url
      demand_url                 = m.demand_url
      api_token_secret_arn       = m.api_token_secret_arn
      valkey_url                 = m.valkey_url
      gateway_security_group_id  = m.gateway_security_group_id
      gateway_settings_parameter = m.gateway_settings_parameter
    }
  }
}

output "ecr_repositories" {
  description = "Region name => the repository to push the daemon's image to."
  value = {
    "us-east-1"      = module.us_east_1.ecr_repository_url
    "eu-west-1"      = module.eu_west_1.ecr_repository_url
    "ap-southeast-2" = module.ap_southeast_2.ecr_repository_url
  }
}
