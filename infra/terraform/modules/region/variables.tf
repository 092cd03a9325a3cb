variable "region" {
  description = "This Region's name; must equal the provider's Region and be one of var.regions."
  type        = string
}

variable "regions" {
  description = "Every Region's name, home Region first, in the same order as in the global module."
  type        = list(string)
}

variable "health_check_ids" {
  description = "Region name => Route 53 health check id (the global module's health_check_ids output)."
  type        = map(string)
}

variable "table_name" {
  description = "Name of the global table (the global module's table_name output)."
  type        = string
}

variable "billing" {
  description = "The same billing object as given to the global module; provisioned mode autoscales this Region's replica."
  type = object({
    mode                       = string
    read_min                   = optional(number, 5)
    read_max                   = optional(number, 50)
    write_min                  = optional(number, 5)
    write_max                  = optional(number, 50)
    target_utilization_percent = optional(number, 70)
  })
  default = { mode = "on-demand" }
}

variable "metric_namespace" {
  description = "CloudWatch namespace of the daemon's metrics; the task role may put metrics only here."
  type        = string
  default     = "Shareplane"
}

variable "hosted_zone_id" {
  description = "Id of the public hosted zone holding the endpoints."
  type        = string
}

variable "hosted_zone_name" {
  description = "Name of that zone, without trailing dot."
  type        = string
}

variable "endpoint_subdomain" {
  description = "This Region's endpoint is <region>.<endpoint_subdomain>.<hosted_zone_name>."
  type        = string
  default     = "shareplane"
}

variable "image_uri" {
  description = "The daemon's container image (build infra/Dockerfile and push it to a registry this Region can pull from)."
  type        = string
}

variable "desired_count" {
  description = "Number of daemon tasks (one holds the Region's lease, the others stand by)."
  type        = number
  default     = 2
}

variable "cpu" {
  description = "Fargate CPU units of a task."
  type        = number
  default     = 256
}

variable "memory_mib" {
  description = "Fargate memory of a task, MiB."
  type        = number
  default     = 512
}

variable "nat_gateways" {
  description = "NAT gateways (1 or 2); 2 keeps the tasks' egress up when one Availability Zone fails."
  type        = number
  default     = 1
  validation {
    condition     = var.nat_gateways == 1 || var.nat_gateways == 2
    error_message = "nat_gateways: 1 or 2."
  }
}

variable "vpc_cidr" {
  description = "CIDR block of this Region's VPC (/16)."
  type        = string
  default     = "10.0.0.0/16"
}

variable "log_retention_days" {
  description = "Retention of the daemon logs, VPC flow logs and load balancer access logs, days."
  type        = number
  default     = 365
}

variable "period_seconds" {
  description = "The daemon's rebalance period; Region i of n rebalances at i/n of it; a peer record older than 3 periods raises the stale alarm."
  type        = number
  default     = 5
}

variable "alarm_email" {
  description = "Address subscribed to this Region's alarm topic; empty for none."
  type        = string
  default     = ""
}

variable "limits" {
  description = "The limits: id, global rate (requests/s) and any other keys of the daemon's [[limits]] table (floor, step_cap, burst_s, kind, ...)."
  type = list(object({
    id       = string
    rate     = number
    settings = optional(any, {})
  }))
}

variable "daemon_settings" {
  description = "Extra top-level keys of the daemon's config (policy, fence), passed as is (an object: values keep their types)."
  type        = any
  default     = {}
  validation {
    condition = length(setintersection(keys(var.daemon_settings), [
      "region", "table", "metrics_namespace", "listen", "period_ms", "phase_ms", "regions", "limits",
      "api_token", "store", "aws_endpoint", "replica_id",
    ])) == 0
    error_message = "daemon_settings: region, table, metrics_namespace, listen, period_ms, phase_ms, regions, limits, api_token, store, aws_endpoint and replica_id are set by the module."
  }
}

variable "tags" {
  description = "Tags added to every resource."
  type        = map(string)
  default     = {}
}
