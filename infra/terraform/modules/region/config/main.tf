# Renders the daemon's config (crates/shareplane/src/config.rs) for one Region. Pure: no
# provider, no resource, so infra/test.sh can render it offline and compare it with the text
# the CDK app writes (infra/cdk/lib/config-toml.ts).

terraform {
  required_version = ">= 1.6"
}

variable "region" {
  description = "The Region whose daemon reads this config."
  type        = string
}

variable "regions" {
  description = "Every Region's name, home Region first."
  type        = list(string)
}

variable "health_check_ids" {
  description = "Region name => Route 53 health check id."
  type        = map(string)
}

variable "table_name" {
  description = "Name of the global table."
  type        = string
}

variable "metric_namespace" {
  description = "CloudWatch namespace of the daemon's metrics."
  type        = string
}

variable "listen" {
  description = "Address the daemon listens on inside its task."
  type        = string
}

variable "period_seconds" {
  description = "Rebalance period; Region i of n rebalances at i/n of it."
  type        = number
}

variable "limits" {
  description = "The limits: id, rate and other keys of the [[limits]] table."
  type = list(object({
    id       = string
    rate     = number
    settings = optional(any, {})
  }))
}

variable "daemon_settings" {
  description = "Extra top-level keys of the config, passed as is."
  type        = any
  default     = {}
}

locals {
  period_ms = var.period_seconds * 1000
}

output "toml" {
  description = "The config text."
  value = templatefile("${path.module}/config.toml.tftpl", {
    region            = var.region
    table             = var.table_name
    metrics_namespace = var.metric_namespace
    listen            = var.listen
    period_ms         = local.period_ms
    phase_ms          = floor(index(var.regions, var.region) * local.period_ms / length(var.regions))
    daemon            = var.daemon_settings
    regions           = [for r in var.regions : { name = r, health_check_id = var.health_check_ids[r] }]
    limits            = var.limits
  })
}
