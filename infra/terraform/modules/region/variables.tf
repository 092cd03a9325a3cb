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
  description = "The daemon's container image, if it lives elsewhere; empty: this Region's ECR repository (created here) at image_tag."
  type        = string
  default     = ""
}

variable "image_tag" {
  description = "The tag of the daemon's image in this Region's ECR repository (when image_uri is empty). Tags are immutable."
  type        = string
  default     = ""
}

variable "ecr_repository_name" {
  description = "Name of this Region's ECR repository for the daemon's image (when image_uri is empty)."
  type        = string
  default     = "shareplane"
}

variable "cpu_architecture" {
  description = "The tasks' CPU architecture: x86_64, or arm64 (Graviton; push an arm64 image)."
  type        = string
  default     = "x86_64"
  validation {
    condition     = contains(["x86_64", "arm64"], var.cpu_architecture)
    error_message = "cpu_architecture: x86_64 or arm64."
  }
}

variable "existing_vpc" {
  description = "An existing VPC to deploy into instead of creating one: its id, at least two public subnets (the public load balancer), at least two private subnets with a route to the AWS APIs (tasks, internal load balancer, Valkey), and optionally the security groups of existing gateways to admit."
  type = object({
    vpc_id                     = string
    public_subnet_ids          = list(string)
    private_subnet_ids         = list(string)
    gateway_security_group_ids = optional(list(string), [])
  })
  default = null
  validation {
    # Terraform's || evaluates both sides: the conditional skips the checks when there is no VPC.
    condition = var.existing_vpc == null ? true : (
      can(regex("^vpc-[0-9a-f]{8,17}$", var.existing_vpc.vpc_id)) &&
      length(var.existing_vpc.public_subnet_ids) >= 2 && length(var.existing_vpc.private_subnet_ids) >= 2 &&
      alltrue([for id in concat(var.existing_vpc.public_subnet_ids, var.existing_vpc.private_subnet_ids) : can(regex("^subnet-[0-9a-f]{8,17}$", id))]) &&
      alltrue([for id in var.existing_vpc.gateway_security_group_ids : can(regex("^sg-[0-9a-f]{8,17}$", id))])
    )
    error_message = "existing_vpc: a vpc-… id, at least two public and two private subnet-… ids, and sg-… ids."
  }
}

variable "config_source" {
  description = "Where the daemon's config travels: parameter (an SSM parameter, at most 8 KB, about 74 limits over three Regions) or s3 (an object in a bucket of the Region, copied by an init container)."
  type        = string
  default     = "parameter"
  validation {
    condition     = contains(["parameter", "s3"], var.config_source)
    error_message = "config_source: parameter or s3."
  }
}

variable "config_fetch_image" {
  description = "The init container that copies the config from S3 (config_source = s3): an AWS CLI v2 image."
  type        = string
  default     = "public.ecr.aws/aws-cli/aws-cli:2.22.0"
}

variable "valkey" {
  description = "An ElastiCache Serverless Valkey for the gateways' buckets (TLS only): enabled, its data storage limit (GB) and ECPU-per-second limit."
  type = object({
    enabled             = optional(bool, false)
    data_storage_max_gb = optional(number, 5)
    ecpu_per_second_max = optional(number, 100000)
  })
  default = {}
  validation {
    condition     = var.valkey.data_storage_max_gb >= 1 && var.valkey.data_storage_max_gb <= 5000 && var.valkey.ecpu_per_second_max >= 1000 && var.valkey.ecpu_per_second_max <= 15000000
    error_message = "valkey: data_storage_max_gb in [1, 5000], ecpu_per_second_max in [1000, 15000000]."
  }
}

variable "ecs_service" {
  description = "Whether the daemons run as this module's ECS Fargate service. false: the daemon runs elsewhere (e.g. on EKS with infra/helm/shareplane); the module then deploys no ECS cluster, task definition, service, ECS roles or task log group, but everything else (replica, endpoints, tokens, config, Valkey, alarms), the task role's statements as a managed policy (daemon_policy_arn) and the target groups' ARNs for the pods."
  type        = bool
  default     = true
  nullable    = false
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
  description = "CIDR block of this Region's VPC (/16), when the module creates it."
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
  validation {
    # Gateways' rule-set leases last up to 2 periods and must run out before Route 53 can call a
    # dead daemon's Region unhealthy: 20 s at the global module's 10 s interval and 3 failures
    # (docs/PROTOCOL.md, residual risk 5).
    condition     = var.period_seconds >= 1 && var.period_seconds <= 10
    error_message = "period_seconds must be 1 to 10: a longer period gives gateways a lease that could outlast the health check's 20 s detection (docs/PROTOCOL.md, residual risk 5)."
  }
}

variable "alarm_email" {
  description = "Address subscribed to this Region's alarm topic; empty for none."
  type        = string
  default     = ""
}

variable "limits_source" {
  description = "Where the daemon takes its limits from (limits_source in its config): file, the [[limits]] rendered from var.limits; or table, the one shared limits document in the global table that `shareplane limits apply` writes (var.limits must then be [])."
  type        = string
  default     = "file"
  validation {
    condition     = contains(["file", "table"], var.limits_source)
    error_message = "limits_source: file or table."
  }
}

variable "limits" {
  description = "The limits: id, global rate (requests/s) and any other keys of the daemon's [[limits]] table (floor, step_cap, burst_s, kind, ...). With limits_source = file, 1 to 200: more than 64 need config_source = s3; at most 200 (one alarm per limit per Region). With limits_source = table, [] (the daemon refuses [[limits]] then; the config module checks it)."
  type = list(object({
    id       = string
    rate     = number
    settings = optional(any, {})
  }))
  validation {
    condition     = length(var.limits) <= 200
    error_message = "limits: at most 200."
  }
}

variable "daemon_settings" {
  description = "Extra top-level keys of the daemon's config (policy, fence), passed as is (an object: values keep their types)."
  type        = any
  default     = {}
  validation {
    condition = length(setintersection(keys(var.daemon_settings), [
      "region", "table", "metrics_namespace", "listen", "period_ms", "phase_ms", "regions", "limits",
      "api_token", "store", "aws_endpoint", "replica_id", "limits_source",
    ])) == 0
    error_message = "daemon_settings: region, table, metrics_namespace, listen, period_ms, phase_ms, regions, limits, api_token, store, aws_endpoint, replica_id and limits_source (use var.limits_source) are set by the module."
  }
}

variable "tags" {
  description = "Tags added to every resource."
  type        = map(string)
  default     = {}
}
