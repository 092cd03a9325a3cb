# Test fixture: the region module with every option the example leaves at its default (an
# existing VPC with existing gateway groups, the config in S3, arm64, an image from elsewhere,
# Valkey with its own limits, the limits from the table), once with every default (no Valkey),
# and once without the ECS service (ecs_service = false), so that `terraform validate`
# (infra/test.sh, when an AWS provider is at hand offline) evaluates those paths too.
# Never applied.

terraform {
  required_version = ">= 1.6"
  required_providers {
    aws = {
      source  = "hashicorp/aws"
      version = ">= 6.0"
    }
  }
}

provider "aws" {
  region = "eu-west-1"
}

module "region" {
  source           = "../../terraform/modules/region"
  region           = "eu-west-1"
  regions          = ["us-east-1", "eu-west-1"]
  health_check_ids = { "us-east-1" = "hc-a", "eu-west-1" = "hc-b" }
  table_name       = "shareplane-records"
  hosted_zone_id   = "Z0123456789EXAMPLE"
  hosted_zone_name = "example.com"
  image_uri        = "123456789012.dkr.ecr.eu-west-1.amazonaws.com/shareplane:1.0.0"
  cpu_architecture = "arm64"
  config_source    = "s3"
  existing_vpc = {
    vpc_id                     = "vpc-0123456789abcdef0"
    public_subnet_ids          = ["subnet-0000000000000001a", "subnet-0000000000000002a"]
    private_subnet_ids         = ["subnet-0000000000000003a", "subnet-0000000000000004a"]
    gateway_security_group_ids = ["sg-0123456789abcdef0"]
  }
  valkey        = { enabled = true, data_storage_max_gb = 10, ecpu_per_second_max = 200000 }
  limits_source = "table"
  limits        = []
}

module "defaults" {
  source           = "../../terraform/modules/region"
  region           = "eu-west-1"
  regions          = ["us-east-1", "eu-west-1"]
  health_check_ids = { "us-east-1" = "hc-a", "eu-west-1" = "hc-b" }
  table_name       = "shareplane-records"
  hosted_zone_id   = "Z0123456789EXAMPLE"
  hosted_zone_name = "example.com"
  image_tag        = "1.0.0"
  limits           = [{ id = "k-big", rate = 10000 }]
}

# The daemon elsewhere (EKS): no ECS service, a managed policy and the target groups instead.
module "no_ecs" {
  source           = "../../terraform/modules/region"
  region           = "eu-west-1"
  regions          = ["us-east-1", "eu-west-1"]
  health_check_ids = { "us-east-1" = "hc-a", "eu-west-1" = "hc-b" }
  table_name       = "shareplane-records"
  hosted_zone_id   = "Z0123456789EXAMPLE"
  hosted_zone_name = "example.com"
  image_tag        = "1.0.0"
  limits           = [{ id = "k-big", rate = 10000 }]
  ecs_service      = false
}
