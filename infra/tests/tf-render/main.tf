# Test fixture: renders every Region's daemon config with the Terraform config module, and the
# daemon URL the region module publishes (its urls module), from the example settings of
# infra/cdk/cdk.json (infra/test.sh writes them as a var file). No provider is involved, so
# `terraform init` and `apply` run offline; test_parity.py compares the configs with the text the
# CDK app synthesized, test_gateway_wiring.py starts a gateway on the URL.

terraform {
  required_version = ">= 1.6"
}

variable "regions" {
  type = list(string)
}

variable "table_name" {
  type = string
}

variable "metric_namespace" {
  type = string
}

variable "period_seconds" {
  type = number
}

variable "limits_source" {
  type    = string
  default = "file"
}

variable "limits" {
  type = list(object({
    id       = string
    rate     = number
    settings = optional(any, {})
  }))
}

variable "daemon_settings" {
  type = any
}

variable "endpoint_subdomain" {
  type    = string
  default = "shareplane"
}

variable "hosted_zone_name" {
  type = string
}

module "config" {
  source           = "../../terraform/modules/region/config"
  for_each         = toset(var.regions)
  region           = each.key
  regions          = var.regions
  health_check_ids = { for r in var.regions : r => "hc-${r}" }
  table_name       = var.table_name
  metric_namespace = var.metric_namespace
  listen           = "0.0.0.0:8080"
  period_seconds   = var.period_seconds
  limits_source    = var.limits_source
  limits           = var.limits
  daemon_settings  = var.daemon_settings
}

output "configs" {
  value = { for r, m in module.config : r => m.toml }
}

module "urls" {
  source             = "../../terraform/modules/region/urls"
  for_each           = toset(var.regions)
  region             = each.key
  endpoint_subdomain = var.endpoint_subdomain
  hosted_zone_name   = var.hosted_zone_name
}

output "daemon_urls" {
  value = { for r, m in module.urls : r => m.daemon_url }
}
