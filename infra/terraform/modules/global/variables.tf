variable "regions" {
  description = "Region names, home Region first (2 to 8). The home Region holds the table; the region module adds a replica in each other Region."
  type        = list(string)
  validation {
    condition     = length(var.regions) >= 2 && length(var.regions) <= 8 && length(distinct(var.regions)) == length(var.regions)
    error_message = "regions: 2 to 8 distinct Region names."
  }
}

variable "table_name" {
  description = "Name of the DynamoDB global table holding every Region's record."
  type        = string
  default     = "shareplane-records"
}

variable "billing" {
  description = "Table billing: mode \"on-demand\", or \"provisioned\" with autoscaling bounds (the region module scales each replica)."
  type = object({
    mode                       = string
    read_min                   = optional(number, 5)
    read_max                   = optional(number, 50)
    write_min                  = optional(number, 5)
    write_max                  = optional(number, 50)
    target_utilization_percent = optional(number, 70)
  })
  default = { mode = "on-demand" }
  validation {
    condition     = contains(["on-demand", "provisioned"], var.billing.mode)
    error_message = "billing.mode: \"on-demand\" or \"provisioned\"."
  }
}

variable "metric_namespace" {
  description = "CloudWatch namespace the daemons publish to (shown on the dashboard)."
  type        = string
  default     = "Shareplane"
}

variable "hosted_zone_name" {
  description = "Public hosted zone holding the endpoints, without trailing dot (e.g. example.com)."
  type        = string
}

variable "endpoint_subdomain" {
  description = "Endpoint of Region r is <r>.<endpoint_subdomain>.<hosted_zone_name>."
  type        = string
  default     = "shareplane"
}

variable "limits" {
  description = "The limits (id and global rate in requests/s) drawn on the dashboard; [] with limits_source = \"table\" (the limits live in the table)."
  type = list(object({
    id       = string
    rate     = number
    settings = optional(any, {})
  }))
}

variable "tags" {
  description = "Tags added to every resource."
  type        = map(string)
  default     = {}
}
