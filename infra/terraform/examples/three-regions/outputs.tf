output "table_name" {
  description = "Name of the global table."
  value       = module.global.table_name
}

output "health_check_ids" {
  description = "Region name => Route 53 health check id."
  value       = module.global.health_check_ids
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
