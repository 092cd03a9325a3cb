# An example deployment over three Regions, home Region us-east-1. Copy this directory, set
# the variables (see terraform.tfvars.example) and run terraform init / plan / apply with
# credentials for the target account. A module instance cannot choose its provider from a
# variable, so every Region is one provider alias and one module block.

locals {
  regions = ["us-east-1", "eu-west-1", "ap-southeast-2"]
  # "table": every daemon takes its limits from the one document `shareplane limits apply` writes
  # to the table; then limits must be [] (infra/README.md, "Changing limits once for every Region").
  limits_source = "file"
  limits = [
    { id = "k-big", rate = 10000, settings = { floor = 500, step_cap = 1000, burst_s = 2, kind = "capacity" } },
  ]
  daemon_settings = { policy = "two-signals", fence = "own-unhealthy" }
  common = {
    regions            = local.regions
    hosted_zone_id     = var.hosted_zone_id
    hosted_zone_name   = var.hosted_zone_name
    endpoint_subdomain = "shareplane"
    metric_namespace   = "Shareplane"
  }
}

provider "aws" {
  alias  = "us_east_1"
  region = "us-east-1"
}

provider "aws" {
  alias  = "eu_west_1"
  region = "eu-west-1"
}

provider "aws" {
  alias  = "ap_southeast_2"
  region = "ap-southeast-2"
}

module "global" {
  source             = "../../modules/global"
  providers          = { aws = aws.us_east_1 }
  regions            = local.regions
  table_name         = "shareplane-records"
  billing            = { mode = "on-demand" }
  metric_namespace   = local.common.metric_namespace
  hosted_zone_name   = var.hosted_zone_name
  endpoint_subdomain = local.common.endpoint_subdomain
  limits             = local.limits
}

module "us_east_1" {
  source             = "../../modules/region"
  providers          = { aws = aws.us_east_1 }
  region             = "us-east-1"
  regions            = local.regions
  health_check_ids   = module.global.health_check_ids
  table_name         = module.global.table_name
  metric_namespace   = local.common.metric_namespace
  hosted_zone_id     = var.hosted_zone_id
  hosted_zone_name   = var.hosted_zone_name
  endpoint_subdomain = local.common.endpoint_subdomain
  image_tag          = var.image_tag
  valkey             = { enabled = true }
  alarm_email        = var.alarm_email
  limits_source      = local.limits_source
  limits             = local.limits
  daemon_settings    = local.daemon_settings
}

module "eu_west_1" {
  source             = "../../modules/region"
  providers          = { aws = aws.eu_west_1 }
  region             = "eu-west-1"
  regions            = local.regions
  health_check_ids   = module.global.health_check_ids
  table_name         = module.global.table_name
  metric_namespace   = local.common.metric_namespace
  hosted_zone_id     = var.hosted_zone_id
  hosted_zone_name   = var.hosted_zone_name
  endpoint_subdomain = local.common.endpoint_subdomain
  image_tag          = var.image_tag
  valkey             = { enabled = true }
  alarm_email        = var.alarm_email
  limits_source      = local.limits_source
  limits             = local.limits
  daemon_settings    = local.daemon_settings
}

module "ap_southeast_2" {
  source             = "../../modules/region"
  providers          = { aws = aws.ap_southeast_2 }
  region             = "ap-southeast-2"
  regions            = local.regions
  health_check_ids   = module.global.health_check_ids
  table_name         = module.global.table_name
  metric_namespace   = local.common.metric_namespace
  hosted_zone_id     = var.hosted_zone_id
  hosted_zone_name   = var.hosted_zone_name
  endpoint_subdomain = local.common.endpoint_subdomain
  image_tag          = var.image_tag
  valkey             = { enabled = true }
  alarm_email        = var.alarm_email
  limits_source      = local.limits_source
  limits             = local.limits
  daemon_settings    = local.daemon_settings
}
