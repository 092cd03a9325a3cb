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

variable "limits_source" {
  description = "file: the limits are var.limits, rendered as [[limits]]; table: the daemon reads them from the table (limits_source = \"table\"), and var.limits must be []."
  type        = string
  default     = "file"
  validation {
    condition     = contains(["file", "table"], var.limits_source)
    error_message = "limits_source: file or table."
  }
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
  # As the daemon does (crates/shareplane/src/config.rs) and the CDK settings do (settings.ts).
  precondition {
    condition     = var.limits_source == "table" ? length(var.limits) == 0 : length(var.limits) >= 1
    error_message = var.limits_source == "table" ? "limits: must be [] with limits_source = \"table\": the daemons then take their limits from the table (write them with `shareplane limits apply`) and refuse a config with [[limits]]; remove these ${length(var.limits)} limits (put them in the limits file), or set limits_source = \"file\"." : "limits: at least one limit with limits_source = \"file\"."
  }
  value = templatefile("${path.module}/config.toml.tftpl", {
    region            = var.region
    table             = var.table_name
    metrics_namespace = var.metric_namespace
    listen            = var.listen
    period_ms         = local.period_ms
    phase_ms          = floor(index(var.regions, var.region) * local.period_ms / length(var.regions))
    limits_source     = var.limits_source
    daemon            = var.daemon_settings
    regions           = [for r in var.regions : { name = r, health_check_id = var.health_check_ids[r] }]
    limits            = var.limits
  })
}
