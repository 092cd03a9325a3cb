variable "hosted_zone_id" {
  description = "Id of the public Route 53 hosted zone that holds the endpoints."
  type        = string
}

variable "hosted_zone_name" {
  description = "Name of that zone, without trailing dot (e.g. example.com)."
  type        = string
}

variable "image_uri" {
  description = "Region name => the daemon image URI pullable in that Region (e.g. an ECR repository with cross-Region replication)."
  type        = map(string)
}

variable "alarm_email" {
  description = "Address subscribed to every Region's alarm topic; empty for none."
  type        = string
  default     = ""
}
