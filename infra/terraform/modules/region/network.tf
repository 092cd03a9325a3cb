# A VPC over two Availability Zones: public subnets for the load balancer and NAT, private
# subnets for the tasks, the internal load balancer and Valkey; flow logs to an encrypted log
# group. With var.existing_vpc none of this is created: the module uses that VPC and its subnets
# (its flow logs, routes and endpoints are the operator's).

locals {
  create_vpc = var.existing_vpc == null
  existing_vpc = local.create_vpc ? {
    vpc_id = "", public_subnet_ids = [], private_subnet_ids = [], gateway_security_group_ids = []
  } : var.existing_vpc
  vpc_id             = local.create_vpc ? one(aws_vpc.main[*].id) : local.existing_vpc.vpc_id
  public_subnet_ids  = local.create_vpc ? aws_subnet.public[*].id : local.existing_vpc.public_subnet_ids
  private_subnet_ids = local.create_vpc ? aws_subnet.private[*].id : local.existing_vpc.private_subnet_ids
  # Existing gateways' security groups, admitted like the module's own gateway group.
  gateway_groups = local.existing_vpc.gateway_security_group_ids
  subnet_count   = local.create_vpc ? 2 : 0
}

resource "aws_vpc" "main" {
  count                = local.create_vpc ? 1 : 0
  cidr_block           = var.vpc_cidr
  enable_dns_support   = true
  enable_dns_hostnames = true
  tags                 = merge(local.tags, { Name = "shareplane-${var.region}" })
}

# Nothing uses the default security group; with no rules it admits nothing.
resource "aws_default_security_group" "default" {
  count  = local.create_vpc ? 1 : 0
  vpc_id = aws_vpc.main[0].id
  tags   = local.tags
}

resource "aws_subnet" "public" {
  count             = local.subnet_count
  vpc_id            = aws_vpc.main[0].id
  availability_zone = local.azs[count.index]
  cidr_block        = cidrsubnet(var.vpc_cidr, 8, count.index)
  tags              = merge(local.tags, { Name = "shareplane-public-${count.index}" })
}

resource "aws_subnet" "private" {
  count             = local.subnet_count
  vpc_id            = aws_vpc.main[0].id
  availability_zone = local.azs[count.index]
  cidr_block        = cidrsubnet(var.vpc_cidr, 8, count.index + 2)
  tags              = merge(local.tags, { Name = "shareplane-private-${count.index}" })
}

resource "aws_internet_gateway" "main" {
  count  = local.create_vpc ? 1 : 0
  vpc_id = aws_vpc.main[0].id
  tags   = local.tags
}

resource "aws_eip" "nat" {
  count  = local.create_vpc ? var.nat_gateways : 0
  domain = "vpc"
  tags   = local.tags
}

resource "aws_nat_gateway" "main" {
  count         = local.create_vpc ? var.nat_gateways : 0
  allocation_id = aws_eip.nat[count.index].id
  subnet_id     = aws_subnet.public[count.index].id
  tags          = local.tags
  depends_on    = [aws_internet_gateway.main]
}

resource "aws_route_table" "public" {
  count  = local.create_vpc ? 1 : 0
  vpc_id = aws_vpc.main[0].id
  tags   = local.tags
}

resource "aws_route" "public_internet" {
  count                  = local.create_vpc ? 1 : 0
  route_table_id         = aws_route_table.public[0].id
  destination_cidr_block = "0.0.0.0/0"
  gateway_id             = aws_internet_gateway.main[0].id
}

resource "aws_route_table_association" "public" {
  count          = local.subnet_count
  subnet_id      = aws_subnet.public[count.index].id
  route_table_id = aws_route_table.public[0].id
}

resource "aws_route_table" "private" {
  count  = local.subnet_count
  vpc_id = aws_vpc.main[0].id
  tags   = local.tags
}

resource "aws_route" "private_nat" {
  count                  = local.subnet_count
  route_table_id         = aws_route_table.private[count.index].id
  destination_cidr_block = "0.0.0.0/0"
  nat_gateway_id         = aws_nat_gateway.main[count.index % var.nat_gateways].id
}

resource "aws_route_table_association" "private" {
  count          = local.subnet_count
  subnet_id      = aws_subnet.private[count.index].id
  route_table_id = aws_route_table.private[count.index].id
}

resource "aws_cloudwatch_log_group" "flow" {
  count             = local.create_vpc ? 1 : 0
  name              = "/shareplane/${var.table_name}/vpc-flow"
  retention_in_days = var.log_retention_days
  kms_key_id        = aws_kms_key.main.arn
  tags              = local.tags
}

data "aws_iam_policy_document" "flow_assume" {
  statement {
    actions = ["sts:AssumeRole"]
    principals {
      type        = "Service"
      identifiers = ["vpc-flow-logs.amazonaws.com"]
    }
  }
}

resource "aws_iam_role" "flow" {
  count              = local.create_vpc ? 1 : 0
  name_prefix        = "shareplane-flow-"
  assume_role_policy = data.aws_iam_policy_document.flow_assume.json
  tags               = local.tags
}

data "aws_iam_policy_document" "flow" {
  count = local.create_vpc ? 1 : 0
  statement {
    actions   = ["logs:CreateLogStream", "logs:PutLogEvents", "logs:DescribeLogStreams"]
    resources = [aws_cloudwatch_log_group.flow[0].arn]
  }
}

resource "aws_iam_role_policy" "flow" {
  count  = local.create_vpc ? 1 : 0
  name   = "flow-logs"
  role   = aws_iam_role.flow[0].id
  policy = data.aws_iam_policy_document.flow[0].json
}

resource "aws_flow_log" "vpc" {
  count           = local.create_vpc ? 1 : 0
  vpc_id          = aws_vpc.main[0].id
  traffic_type    = "ALL"
  log_destination = aws_cloudwatch_log_group.flow[0].arn
  iam_role_arn    = aws_iam_role.flow[0].arn
  tags            = local.tags
}
