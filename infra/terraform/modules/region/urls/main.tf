# One Region's names and the daemon's base URL. Pure (no provider, no resource), so that
# infra/test.sh renders them offline and starts a real gateway on the URL it publishes
# (infra/tests/test_gateway_wiring.py); the CDK app computes the same (endpointName, apiName).

terraform {
  required_version = ">= 1.6"
}

variable "region" {
  description = "The Region."
  type        = string
}

variable "endpoint_subdomain" {
  description = "This Region's endpoint is <region>.<endpoint_subdomain>.<hosted_zone_name>."
  type        = string
}

variable "hosted_zone_name" {
  description = "Name of the hosted zone, without trailing dot."
  type        = string
}

locals {
  endpoint = "${var.region}.${var.endpoint_subdomain}.${var.hosted_zone_name}"
  api_name = "api.${local.endpoint}"
}

output "endpoint" {
  description = "The public name Route 53 health-checks."
  value       = local.endpoint
}

output "api_name" {
  description = "The internal API's name (an internal load balancer, resolving to private addresses)."
  value       = local.api_name
}

output "daemon_url" {
  description = "The daemon's API base URL: what `shareplane gateway --rules` takes."
  value       = "https://${local.api_name}"
}
