# The two ways to the daemon: the public endpoint Route 53 health-checks (an internet-facing
# HTTPS load balancer that admits only Route 53's health checkers and forwards only /readyz and
# /healthz), and the gateways' API endpoint (an internal HTTPS load balancer in the private
# subnets that forwards /v1/*, admitting only the gateway security groups). One DNS-validated
# certificate names both; the API name lives in the public zone but resolves to private
# addresses. The security groups and their rules are in security.tf.

data "aws_elb_service_account" "current" {}

resource "aws_s3_bucket" "lb_logs" {
  #checkov:skip=CKV_AWS_18:this bucket holds access logs itself; logging it would need a bucket per bucket
  #checkov:skip=CKV_AWS_144:access logs are kept per Region on purpose; replicating them elsewhere adds nothing
  #checkov:skip=CKV_AWS_145:load balancer access logs support only SSE-S3, not SSE-KMS
  #checkov:skip=CKV2_AWS_62:nothing consumes events of this log bucket
  bucket_prefix = "shareplane-lb-logs-"
  tags          = local.tags
}

resource "aws_s3_bucket_public_access_block" "lb_logs" {
  bucket                  = aws_s3_bucket.lb_logs.id
  block_public_acls       = true
  block_public_policy     = true
  ignore_public_acls      = true
  restrict_public_buckets = true
}

resource "aws_s3_bucket_versioning" "lb_logs" {
  bucket = aws_s3_bucket.lb_logs.id
  versioning_configuration {
    status = "Enabled"
  }
}

resource "aws_s3_bucket_server_side_encryption_configuration" "lb_logs" {
  bucket = aws_s3_bucket.lb_logs.id
  rule {
    apply_server_side_encryption_by_default {
      sse_algorithm = "AES256"
    }
  }
}

resource "aws_s3_bucket_lifecycle_configuration" "lb_logs" {
  bucket = aws_s3_bucket.lb_logs.id
  rule {
    id     = "expire"
    status = "Enabled"
    filter {}
    expiration {
      days = var.log_retention_days
    }
    noncurrent_version_expiration {
      noncurrent_days = 30
    }
    abort_incomplete_multipart_upload {
      days_after_initiation = 7
    }
  }
}

data "aws_iam_policy_document" "lb_logs" {
  statement {
    sid       = "LoadBalancerLogDelivery"
    actions   = ["s3:PutObject"]
    resources = ["${aws_s3_bucket.lb_logs.arn}/alb/AWSLogs/${data.aws_caller_identity.current.account_id}/*"]
    principals {
      type        = "AWS"
      identifiers = [data.aws_elb_service_account.current.arn]
    }
  }
  statement {
    sid       = "TlsOnly"
    effect    = "Deny"
    actions   = ["s3:*"]
    resources = [aws_s3_bucket.lb_logs.arn, "${aws_s3_bucket.lb_logs.arn}/*"]
    principals {
      type        = "AWS"
      identifiers = ["*"]
    }
    condition {
      test     = "Bool"
      variable = "aws:SecureTransport"
      values   = ["false"]
    }
  }
}

resource "aws_s3_bucket_policy" "lb_logs" {
  bucket = aws_s3_bucket.lb_logs.id
  policy = data.aws_iam_policy_document.lb_logs.json
}

resource "aws_lb" "endpoint" {
  #checkov:skip=CKV2_AWS_28:the endpoint forwards only /readyz and /healthz (GET, no body); a WAF would guard nothing
  name_prefix                = "shrpl-"
  load_balancer_type         = "application"
  internal                   = false
  subnets                    = local.public_subnet_ids
  security_groups            = [aws_security_group.lb.id]
  drop_invalid_header_fields = true
  enable_deletion_protection = true
  access_logs {
    bucket  = aws_s3_bucket.lb_logs.id
    prefix  = "alb"
    enabled = true
  }
  tags       = local.tags
  depends_on = [aws_s3_bucket_policy.lb_logs]
}

resource "aws_acm_certificate" "endpoint" {
  domain_name               = local.endpoint
  subject_alternative_names = [local.api_name]
  validation_method         = "DNS"
  tags                      = local.tags
  lifecycle {
    create_before_destroy = true
  }
}

resource "aws_route53_record" "certificate_validation" {
  for_each = { for o in aws_acm_certificate.endpoint.domain_validation_options : o.domain_name => o }
  zone_id  = var.hosted_zone_id
  name     = each.value.resource_record_name
  type     = each.value.resource_record_type
  records  = [each.value.resource_record_value]
  ttl      = 300
}

resource "aws_acm_certificate_validation" "endpoint" {
  certificate_arn         = aws_acm_certificate.endpoint.arn
  validation_record_fqdns = [for r in aws_route53_record.certificate_validation : r.fqdn]
}

resource "aws_lb_target_group" "daemon" {
  #checkov:skip=CKV_AWS_378:TLS ends at the load balancer; the hop to the task stays inside the VPC and carries only health probes
  name_prefix          = "shrpl-"
  vpc_id               = local.vpc_id
  port                 = local.daemon_port
  protocol             = "HTTP"
  target_type          = "ip"
  deregistration_delay = 30
  health_check {
    path                = "/readyz"
    interval            = 10
    timeout             = 5
    healthy_threshold   = 2
    unhealthy_threshold = 3
    matcher             = "200"
  }
  tags = local.tags
}

resource "aws_lb_listener" "https" {
  load_balancer_arn = aws_lb.endpoint.arn
  port              = 443
  protocol          = "HTTPS"
  ssl_policy        = "ELBSecurityPolicy-TLS13-1-2-2021-06"
  certificate_arn   = aws_acm_certificate_validation.endpoint.certificate_arn
  # Only the health endpoints are public; everything else is answered here.
  default_action {
    type = "fixed-response"
    fixed_response {
      content_type = "text/plain"
      message_body = "not found"
      status_code  = "404"
    }
  }
  tags = local.tags
}

resource "aws_lb_listener_rule" "health" {
  listener_arn = aws_lb_listener.https.arn
  priority     = 10
  action {
    type             = "forward"
    target_group_arn = aws_lb_target_group.daemon.arn
  }
  condition {
    path_pattern {
      values = ["/readyz", "/healthz"]
    }
  }
  tags = local.tags
}

resource "aws_route53_record" "endpoint" {
  zone_id = var.hosted_zone_id
  name    = local.endpoint
  type    = "A"
  alias {
    name                   = aws_lb.endpoint.dns_name
    zone_id                = aws_lb.endpoint.zone_id
    evaluate_target_health = false
  }
}

# ---- The gateways' endpoint, inside the VPC -------------------------------------------------

resource "aws_lb" "api" {
  #checkov:skip=CKV2_AWS_28:internal; only the gateway security groups reach it, and the daemon checks the bearer token itself
  name_prefix                = "shrapi"
  load_balancer_type         = "application"
  internal                   = true
  subnets                    = local.private_subnet_ids
  security_groups            = [aws_security_group.api_lb.id]
  drop_invalid_header_fields = true
  enable_deletion_protection = true
  # Longer than the daemon's longest long-poll (30 s).
  idle_timeout = 60
  access_logs {
    bucket  = aws_s3_bucket.lb_logs.id
    prefix  = "api"
    enabled = true
  }
  tags       = local.tags
  depends_on = [aws_s3_bucket_policy.lb_logs]
}

resource "aws_lb_target_group" "api" {
  #checkov:skip=CKV_AWS_378:TLS ends at the internal load balancer; the hop to the task stays inside the VPC, between two security groups
  name_prefix          = "shrapi"
  vpc_id               = local.vpc_id
  port                 = local.daemon_port
  protocol             = "HTTP"
  target_type          = "ip"
  deregistration_delay = 30
  health_check {
    path                = "/readyz"
    interval            = 10
    timeout             = 5
    healthy_threshold   = 2
    unhealthy_threshold = 3
    matcher             = "200"
  }
  tags = local.tags
}

resource "aws_lb_listener" "api" {
  load_balancer_arn = aws_lb.api.arn
  port              = 443
  protocol          = "HTTPS"
  ssl_policy        = "ELBSecurityPolicy-TLS13-1-2-2021-06"
  certificate_arn   = aws_acm_certificate_validation.endpoint.certificate_arn
  default_action {
    type = "fixed-response"
    fixed_response {
      content_type = "text/plain"
      message_body = "not found"
      status_code  = "404"
    }
  }
  tags = local.tags
}

resource "aws_lb_listener_rule" "api" {
  listener_arn = aws_lb_listener.api.arn
  priority     = 10
  action {
    type             = "forward"
    target_group_arn = aws_lb_target_group.api.arn
  }
  condition {
    path_pattern {
      values = ["/v1/*", "/readyz", "/healthz"]
    }
  }
  tags = local.tags
}

resource "aws_route53_record" "api" {
  zone_id = var.hosted_zone_id
  name    = local.api_name
  type    = "A"
  alias {
    name                   = aws_lb.api.dns_name
    zone_id                = aws_lb.api.zone_id
    evaluate_target_health = false
  }
}
