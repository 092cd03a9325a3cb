variable "hosted_zone_id" {
  description = "Id of the public Route 53 hosted zone that holds the endpoints."
  type        = string
}

variable "hosted_zone_name" {
  description = "Name of that zone, without trailing dot (e.g. example.com)."
  type        = string
}

variable "image_tag" {
  description = "The daemon image's tag, pushed to every Region's ECR repository (output ecr_repositories)."
  type        = string
}

variable "alarm_email" {
  description = "Address subscribed to every Region's alarm topic; empty for none."
  type        = string
  default     = ""
}
