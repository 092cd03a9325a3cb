# The daemon's image repository in this Region, unless var.image_uri names an image elsewhere.
# Each Region pulls from its own repository, so a task starting in one Region never depends on
# another. Push the same build to every Region's repository (infra/README.md, "Terraform").

resource "aws_ecr_repository" "daemon" {
  count                = var.image_uri == "" ? 1 : 0
  name                 = var.ecr_repository_name
  image_tag_mutability = "IMMUTABLE"
  image_scanning_configuration {
    scan_on_push = true
  }
  encryption_configuration {
    encryption_type = "KMS"
    kms_key         = aws_kms_key.main.arn
  }
  tags = local.tags
}

resource "aws_ecr_lifecycle_policy" "daemon" {
  count      = var.image_uri == "" ? 1 : 0
  repository = aws_ecr_repository.daemon[0].name
  policy = jsonencode({
    rules = [{
      rulePriority = 1
      description  = "keep the newest 30 images"
      selection    = { tagStatus = "any", countType = "imageCountMoreThan", countNumber = 30 }
      action       = { type = "expire" }
    }]
  })
}

locals {
  image = var.image_uri != "" ? var.image_uri : "${join("", aws_ecr_repository.daemon[*].repository_url)}:${var.image_tag}"
  # The execution role pulls from this Region's repository only (or, with var.image_uri, from
  # any repository of the account, which is where such an image usually lives).
  image_repository_arns = var.image_uri == "" ? aws_ecr_repository.daemon[*].arn : ["arn:${data.aws_partition.current.partition}:ecr:*:${data.aws_caller_identity.current.account_id}:repository/*"]
}
