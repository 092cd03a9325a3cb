# Who may talk to whom. Every rule names its peer group; only the public endpoint admits
# addresses, and only those of Route 53's health checkers (the AWS-managed prefix list):
#
#   Route 53 health checkers --443--> lb ------8080--> daemon --443--> AWS APIs
#   gateway (+ existing groups) --443--> api_lb --8080--> daemon
#   gateway (+ existing groups) --6379-6380--> valkey
#
# Attach aws_security_group.gateway (output gateway_security_group_id) to the gateways, or list
# their existing groups in var.existing_vpc.gateway_security_group_ids.

data "aws_ec2_managed_prefix_list" "route53_healthchecks" {
  name = "com.amazonaws.${var.region}.route53-healthchecks"
}

resource "aws_security_group" "daemon" {
  name_prefix = "shareplane-daemon-"
  description = "shareplane daemon tasks"
  vpc_id      = local.vpc_id
  tags        = local.tags
}

resource "aws_security_group" "lb" {
  name_prefix = "shareplane-lb-"
  description = "shareplane endpoint: HTTPS from Route 53 health checkers"
  vpc_id      = local.vpc_id
  tags        = local.tags
}

resource "aws_security_group" "api_lb" {
  name_prefix = "shareplane-api-"
  description = "shareplane API inside the VPC: HTTPS from the gateways"
  vpc_id      = local.vpc_id
  tags        = local.tags
}

resource "aws_security_group" "gateway" {
  #checkov:skip=CKV2_AWS_5:attached by the operator to the gateways, which this module does not run
  name_prefix = "shareplane-gateway-"
  description = "shareplane gateways: attach to reach the daemon API and Valkey"
  vpc_id      = local.vpc_id
  tags        = local.tags
}

resource "aws_vpc_security_group_ingress_rule" "lb_https" {
  security_group_id = aws_security_group.lb.id
  description       = "HTTPS from Route 53 health checkers"
  prefix_list_id    = data.aws_ec2_managed_prefix_list.route53_healthchecks.id
  ip_protocol       = "tcp"
  from_port         = 443
  to_port           = 443
}

resource "aws_vpc_security_group_egress_rule" "lb_to_tasks" {
  security_group_id            = aws_security_group.lb.id
  description                  = "to the daemon tasks"
  referenced_security_group_id = aws_security_group.daemon.id
  ip_protocol                  = "tcp"
  from_port                    = local.daemon_port
  to_port                      = local.daemon_port
}

resource "aws_vpc_security_group_egress_rule" "api_lb_to_tasks" {
  security_group_id            = aws_security_group.api_lb.id
  description                  = "to the daemon tasks"
  referenced_security_group_id = aws_security_group.daemon.id
  ip_protocol                  = "tcp"
  from_port                    = local.daemon_port
  to_port                      = local.daemon_port
}

resource "aws_vpc_security_group_ingress_rule" "daemon_from_lb" {
  security_group_id            = aws_security_group.daemon.id
  description                  = "from the load balancer"
  referenced_security_group_id = aws_security_group.lb.id
  ip_protocol                  = "tcp"
  from_port                    = local.daemon_port
  to_port                      = local.daemon_port
}

resource "aws_vpc_security_group_ingress_rule" "daemon_from_api_lb" {
  security_group_id            = aws_security_group.daemon.id
  description                  = "from the load balancer"
  referenced_security_group_id = aws_security_group.api_lb.id
  ip_protocol                  = "tcp"
  from_port                    = local.daemon_port
  to_port                      = local.daemon_port
}

resource "aws_vpc_security_group_egress_rule" "daemon_https" {
  security_group_id = aws_security_group.daemon.id
  description       = "AWS APIs (DynamoDB, CloudWatch, SSM, S3, ECR, Logs)"
  cidr_ipv4         = "0.0.0.0/0"
  ip_protocol       = "tcp"
  from_port         = 443
  to_port           = 443
}

resource "aws_vpc_security_group_ingress_rule" "api_lb_from_gateway" {
  security_group_id            = aws_security_group.api_lb.id
  description                  = "HTTPS from the gateways"
  referenced_security_group_id = aws_security_group.gateway.id
  ip_protocol                  = "tcp"
  from_port                    = 443
  to_port                      = 443
}

resource "aws_vpc_security_group_ingress_rule" "api_lb_from_existing_gateways" {
  for_each                     = toset(local.gateway_groups)
  security_group_id            = aws_security_group.api_lb.id
  description                  = "HTTPS from the gateways"
  referenced_security_group_id = each.key
  ip_protocol                  = "tcp"
  from_port                    = 443
  to_port                      = 443
}

resource "aws_vpc_security_group_egress_rule" "gateway_to_api_lb" {
  security_group_id            = aws_security_group.gateway.id
  description                  = "to the daemon API"
  referenced_security_group_id = aws_security_group.api_lb.id
  ip_protocol                  = "tcp"
  from_port                    = 443
  to_port                      = 443
}
