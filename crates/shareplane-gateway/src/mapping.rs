//! Which limit a descriptor names.
//!
//! Envoy sends a `domain` and a list of descriptors, each a list of (key, value) entries. The
//! configured mappings are tried in order: a mapping matches a descriptor when its `domain` (if
//! set) is the request's and the descriptor has an entry with its `key` (and its `value`, if
//! set). Then, in any domain, an entry `shareplane_limit=<limit id>` names the limit itself.
//!
//! A name may be a template's ([`shareplane_limiter::templates`]): the descriptor's entry whose
//! key is the template's `entry` then selects the bucket, one per value. A descriptor that names
//! a template but carries no such entry (or an empty value), or a value longer than
//! [`shareplane_limiter::templates::MAX_VALUE_LEN`], never falls back to one bucket shared by
//! every caller: it is answered by a [`ValuePolicy`].

use serde::Deserialize;
use shareplane_limiter::rules::valid_limit_id;

/// The entry key that names a limit directly.
pub const LIMIT_KEY: &str = "shareplane_limit";

/// One (domain, descriptor entry) → limit mapping of the configuration.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DescriptorMapping {
    /// The request's domain; absent: any domain.
    pub domain: Option<String>,
    pub key: String,
    /// The entry's value; absent: any value.
    pub value: Option<String>,
    pub limit: String,
    /// With `exact`: the entries that come before this one, in order (as envoyproxy/ratelimit's
    /// nested descriptors); a prefix entry without a value matches any value.
    #[serde(default)]
    pub prefix: Vec<PrefixEntry>,
    /// Match only a descriptor that is exactly `prefix` then this entry, as envoyproxy/ratelimit
    /// matches (what `shareplane limits import` writes). Default: any descriptor with an entry
    /// of this key (and value).
    #[serde(default)]
    pub exact: bool,
}

/// One entry of a mapping's `prefix`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PrefixEntry {
    pub key: String,
    pub value: Option<String>,
}

impl DescriptorMapping {
    /// Problems with this mapping, each starting with its field.
    pub fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.key.is_empty() {
            out.push("key: must not be empty".to_owned());
        }
        if !self.prefix.is_empty() && !self.exact {
            out.push("prefix: only with exact = true".to_owned());
        }
        if !valid_limit_id(&self.limit) {
            out.push(format!(
                "limit: {:?} is not a limit id (1 to 128 printable ASCII characters, no braces)",
                self.limit
            ));
        }
        out
    }

    fn matches(&self, domain: &str, entries: &[(&str, &str)]) -> bool {
        let entry = |key: &str, value: Option<&str>, (k, v): &(&str, &str)| {
            *k == key && value.is_none_or(|want| want == *v)
        };
        if self.domain.as_deref().is_some_and(|d| d != domain) {
            return false;
        }
        if !self.exact {
            return entries
                .iter()
                .any(|e| entry(&self.key, self.value.as_deref(), e));
        }
        entries.len() == self.prefix.len() + 1
            && self
                .prefix
                .iter()
                .zip(entries)
                .all(|(p, e)| entry(&p.key, p.value.as_deref(), e))
            && entries
                .last()
                .is_some_and(|e| entry(&self.key, self.value.as_deref(), e))
    }
}

/// What a descriptor that names no limit gets.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UnmappedPolicy {
    /// Its status is OK; the request is decided by its other descriptors.
    #[default]
    Allow,
    /// Its status is OVER_LIMIT, and so is the request.
    Deny,
    /// The whole request is answered with an error (gRPC INVALID_ARGUMENT, HTTP 400).
    Error,
}

/// What a descriptor gets that names a template but whose value cannot select a bucket
/// (missing, empty or too long). Never a shared bucket, never a cut value.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ValuePolicy {
    /// The request is refused (OVER_LIMIT / 429), nothing spent, without a Retry-After.
    #[default]
    Deny,
    /// The whole request is answered with an error (gRPC INVALID_ARGUMENT, HTTP 400). Envoy's
    /// `failure_mode_deny` decides what the client gets.
    Error,
}

impl ValuePolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Deny => "deny",
            Self::Error => "error",
        }
    }
}

impl UnmappedPolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Allow => "allow",
            Self::Deny => "deny",
            Self::Error => "error",
        }
    }
}

/// The mappings in configuration order.
#[derive(Debug, Clone, Default)]
pub struct Mapper {
    mappings: Vec<DescriptorMapping>,
}

impl Mapper {
    pub fn new(mappings: Vec<DescriptorMapping>) -> Self {
        Self { mappings }
    }

    /// The limit `entries` name in `domain`, if any.
    pub fn limit_for<'a>(
        &'a self,
        domain: &str,
        entries: &[(&'a str, &'a str)],
    ) -> Option<&'a str> {
        if let Some(m) = self.mappings.iter().find(|m| m.matches(domain, entries)) {
            return Some(&m.limit);
        }
        entries
            .iter()
            .find(|(k, _)| *k == LIMIT_KEY)
            .map(|(_, v)| *v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mapping(
        domain: Option<&str>,
        key: &str,
        value: Option<&str>,
        limit: &str,
    ) -> DescriptorMapping {
        DescriptorMapping {
            domain: domain.map(str::to_owned),
            key: key.to_owned(),
            value: value.map(str::to_owned),
            limit: limit.to_owned(),
            prefix: Vec::new(),
            exact: false,
        }
    }

    #[test]
    fn an_exact_mapping_matches_only_its_whole_path() {
        let nested = DescriptorMapping {
            prefix: vec![PrefixEntry {
                key: "message_type".into(),
                value: Some("marketing".into()),
            }],
            exact: true,
            ..mapping(Some("messaging"), "to_number", None, "marketing-per-number")
        };
        let top = DescriptorMapping {
            exact: true,
            ..mapping(Some("messaging"), "to_number", None, "per-number")
        };
        let m = Mapper::new(vec![nested, top]);
        let both = [("message_type", "marketing"), ("to_number", "206")];
        assert_eq!(
            m.limit_for("messaging", &both),
            Some("marketing-per-number")
        );
        assert_eq!(
            m.limit_for("messaging", &[("to_number", "206")]),
            Some("per-number")
        );
        // Another message type: no rule has that path.
        let other = [("message_type", "receipt"), ("to_number", "206")];
        assert_eq!(m.limit_for("messaging", &other), None);
        let reversed = [("to_number", "206"), ("message_type", "marketing")];
        assert_eq!(m.limit_for("messaging", &reversed), None);
    }

    #[test]
    fn mappings_are_tried_in_order_then_the_limit_key_in_any_domain() {
        let m = Mapper::new(vec![
            mapping(Some("edge"), "generic_key", Some("partner-x"), "k-big"),
            mapping(None, "remote_address", None, "per-ip"),
        ]);
        let px = [("generic_key", "partner-x")];
        assert_eq!(m.limit_for("edge", &px), Some("k-big"));
        assert_eq!(m.limit_for("other", &px), None);
        assert_eq!(
            m.limit_for("x", &[("remote_address", "10.0.0.1")]),
            Some("per-ip")
        );
        assert_eq!(
            m.limit_for("any", &[(LIMIT_KEY, "k-small")]),
            Some("k-small")
        );
        let both = [("remote_address", "1.2.3.4"), (LIMIT_KEY, "k-small")];
        assert_eq!(m.limit_for("any", &both), Some("per-ip"));
        assert_eq!(m.limit_for("any", &[("generic_key", "partner-y")]), None);
        assert_eq!(m.limit_for("any", &[]), None);
    }
}
