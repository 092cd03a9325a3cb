# An optional ElastiCache Serverless for Valkey per Region for the gateways' token buckets, in
# the private subnets, encrypted with the Region's key. Serverless caches accept TLS only; the
# gateways connect with the rediss:// URL of output valkey_url.

locals {
  valkey_enabled = var.valkey.enabled
  # ElastiCache names: 1-40 of a-z 0-9 -, starting with a letter, no "--", no trailing "-".
  valkey_name = replace(substr(replace(replace(lower("shareplane-${var.table_name}"), "/[^a-z0-9-]+/", "-"), "/-+/", "-"), 0, 40), "/-+$/", "")
  valkey_url  = join("", [for c in aws_elasticache_serverless_cache.valkey : "rediss://${c.endpoint[0].address}:${c.endpoint[0].port}"])
  # ElastiCache Serverless is cluster mode: what a gateway's redis_mode must say for it.
  redis_mode = local.valkey_enabled ? "cluster" : ""
  # The endpoint (6379) and the reader endpoint (6380).
  valkey_ports = { from = 6379, to = 6380 }
}

resource "aws_security_group" "valkey" {
  count       = local.valkey_enabled ? 1 : 0
  name_prefix = "shareplane-valkey-"
  description = "shareplane Valkey: TLS from the gateways only"
  vpc_id      = local.vpc_id
  tags        = local.tags
}

resource "aws_vpc_security_group_ingress_rule" "valkey_from_gateway" {
  count                        = local.valkey_enabled ? 1 : 0
  security_group_id            = aws_security_group.valkey[0].id
  description                  = "Valkey (TLS) from the gateways"
  referenced_security_group_id = aws_security_group.gateway.id
  ip_protocol                  = "tcp"
  from_port                    = local.valkey_ports.from
  to_port                      = local.valkey_ports.to
}

resource "aws_vpc_security_group_ingress_rule" "valkey_from_existing_gateways" {
  for_each                     = local.valkey_enabled ? toset(local.gateway_groups) : toset([])
  security_group_id            = aws_security_group.valkey[0].id
  description                  = "Valkey (TLS) from the gateways"
  referenced_security_group_id = each.key
  ip_protocol                  = "tcp"
  from_port                    = local.valkey_ports.from
  to_port                      = local.valkey_ports.to
}

resource "aws_vpc_security_group_egress_rule" "gateway_to_valkey" {
  count                        = local.valkey_enabled ? 1 : 0
  security_group_id            = aws_security_group.gateway.id
  description                  = "to Valkey (TLS)"
  referenced_security_group_id = aws_security_group.valkey[0].id
  ip_protocol                  = "tcp"
  from_port                    = local.valkey_ports.from
  to_port                      = local.valkey_ports.to
}

resource "aws_elasticache_serverless_cache" "valkey" {
  count                = local.valkey_enabled ? 1 : 0
  name                 = local.valkey_name
  description          = "shareplane: the gateways' token buckets"
  engine               = "valkey"
  major_engine_version = "8"
  kms_key_id           = aws_kms_key.main.arn
  security_group_ids   = [aws_security_group.valkey[0].id]
  subnet_ids           = local.private_subnet_ids
  cache_usage_limits {
    data_storage {
      maximum = var.valkey.data_storage_max_gb
      unit    = "GB"
    }
    ecpu_per_second {
      maximum = var.valkey.ecpu_per_second_max
    }
  }
  tags = local.tags
}
