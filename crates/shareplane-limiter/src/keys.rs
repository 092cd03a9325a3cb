//! Where each limit's bucket lives: its key, and the hash tag that places the key in one slot of
//! a cluster-mode Redis or Valkey.
//!
//! A bucket is one key per limit, whatever request names it: a key that depended on the request
//! (say, a tag per set of limits) would split one limit's tokens over several buckets and admit
//! more than its rate. One script call must keep all its keys in one hash slot on a cluster, so
//! the tag is a property of the limit and limits that are named together must share it. The
//! gateway therefore puts every limit under its *key group*: `rl:{<group>}:<limit id>`. A
//! limit's group is the one configured for it ([`KeyPlan::groups`]), else the scheme's
//! ([`KeyScheme::SharedTag`]: one tag for all; [`KeyScheme::PerLimit`]: the limit's own id, as
//! `rl:{<limit id>}:global`). Different groups hash to different slots, and so spread over the
//! cluster's masters; one group lives on one master.
//!
//! On a cluster, a check whose limits fall in different groups cannot be one call: the limiter
//! decides it by the local fallback and says why ([`KeyPlan::split`]). Repayments are batched by
//! group.
//!
//! A template's per-value buckets ([`crate::templates`]) follow the same rule with the template
//! in the limit's place: the bucket of a value is `rl:{<group>}:<template>#<hash>`, its group the
//! template's (configured for the template id, else the scheme's; [`KeyScheme::PerLimit`]: the
//! template id). So every value of a template lives in one slot, with the limits of its group,
//! and a request checking a value together with listed limits of the same group is one call.

use std::borrow::Cow;
use std::collections::BTreeMap;

use crate::store::{KeyScheme, RedisMode};

/// The keys of a limiter's buckets (see the module doc).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeyPlan {
    pub scheme: KeyScheme,
    /// Per limit id: its key group (a hash tag), overriding the scheme.
    pub groups: BTreeMap<String, String>,
    pub mode: RedisMode,
}

impl KeyPlan {
    /// The bucket key of limit `id` (or of a per-value id `<template>#<hash>`).
    pub fn key(&self, id: &str) -> String {
        if crate::templates::instance_parts(id).is_some() {
            return format!("rl:{{{}}}:{id}", self.tag(id));
        }
        match self.groups.get(id) {
            Some(group) => format!("rl:{{{group}}}:{id}"),
            None => self.scheme.key(id),
        }
    }

    /// The hash tag of limit `id`'s key: the part between the braces.
    pub fn tag<'a>(&'a self, id: &'a str) -> Cow<'a, str> {
        // A value's bucket is in its template's group.
        let id = crate::templates::base_id(id);
        match (self.groups.get(id), &self.scheme) {
            (Some(group), _) => Cow::Borrowed(group),
            (None, KeyScheme::SharedTag(tag)) => Cow::Borrowed(tag),
            (None, KeyScheme::PerLimit) => Cow::Borrowed(id),
        }
    }

    /// On a cluster, why a check of `ids` cannot be one script call: the first two whose keys
    /// carry different tags (and so, in general, hash to different slots). `None` on a standalone
    /// server, where any keys can be in one call.
    pub fn split<'a>(&self, ids: impl IntoIterator<Item = &'a str>) -> Option<String> {
        if self.mode == RedisMode::Standalone {
            return None;
        }
        let mut ids = ids.into_iter();
        let a = ids.next()?;
        let tag = self.tag(a);
        let b = ids.find(|id| self.tag(id) != tag)?;
        Some(format!(
            "limits {a:?} and {b:?} are in different key groups ({tag:?}, {:?}) of a Redis \
             cluster: put limits that are checked together in one key group",
            self.tag(b)
        ))
    }

    /// `items` in batches of at most `max` that each fit one script call: on a cluster, one tag
    /// per batch (batches in tag order); on a standalone server, in order.
    pub fn batches<T>(&self, items: Vec<(String, T)>, max: usize) -> Vec<Vec<(String, T)>> {
        let max = max.max(1);
        let mut by_tag: BTreeMap<String, Vec<(String, T)>> = BTreeMap::new();
        for (id, item) in items {
            let tag = match self.mode {
                RedisMode::Standalone => String::new(),
                RedisMode::Cluster => self.tag(&id).into_owned(),
            };
            by_tag.entry(tag).or_default().push((id, item));
        }
        let mut out = Vec::new();
        for (_, mut group) in by_tag {
            while group.len() > max {
                let rest = group.split_off(max);
                out.push(std::mem::replace(&mut group, rest));
            }
            if !group.is_empty() {
                out.push(group);
            }
        }
        out
    }

    /// Problems with the groups, with their field.
    pub fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (id, group) in &self.groups {
            if !crate::rules::valid_limit_id(group) {
                out.push(format!(
                    "key_groups.{id:?}: a group is 1 to 128 printable ASCII characters without braces"
                ));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(scheme: KeyScheme, mode: RedisMode) -> KeyPlan {
        KeyPlan {
            scheme,
            groups: [("a", "t1"), ("b", "t1"), ("c", "t2")]
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect(),
            mode,
        }
    }

    #[test]
    fn a_group_overrides_the_scheme_and_the_key_names_the_limit() {
        let p = plan(KeyScheme::PerLimit, RedisMode::Cluster);
        assert_eq!(p.key("a"), "rl:{t1}:a");
        assert_eq!(p.key("z"), "rl:{z}:global");
        assert_eq!(p.tag("z"), "z");
        let p = plan(KeyScheme::SharedTag("gw".into()), RedisMode::Cluster);
        assert_eq!(p.key("z"), "rl:{gw}:z");
        assert_eq!(p.tag("z"), "gw");
        assert_eq!(p.tag("c"), "t2");
    }

    #[test]
    fn a_values_bucket_is_in_its_templates_group() {
        let id = crate::templates::instance_id("a", "some key");
        let hash = crate::templates::value_hash("some key");
        let p = plan(KeyScheme::PerLimit, RedisMode::Cluster);
        assert_eq!(p.key(&id), format!("rl:{{t1}}:a#{hash}"));
        assert_eq!(p.split([id.as_str(), "b"]), None, "same group as b");
        assert!(p.split([id.as_str(), "c"]).is_some());
        let other = crate::templates::instance_id("z", "some key");
        assert_eq!(p.key(&other), format!("rl:{{z}}:z#{hash}"));
        let p = plan(KeyScheme::SharedTag("gw".into()), RedisMode::Cluster);
        assert_eq!(p.key(&other), format!("rl:{{gw}}:z#{hash}"));
        assert_eq!(p.split([other.as_str(), "y"]), None);
    }

    #[test]
    fn only_a_cluster_splits_checks_across_groups() {
        let p = plan(KeyScheme::SharedTag("gw".into()), RedisMode::Cluster);
        assert_eq!(p.split(["a", "b"]), None);
        let why = p.split(["a", "b", "c"]).unwrap_or_default();
        assert!(why.starts_with(r#"limits "a" and "c" are in different key groups ("t1", "t2")"#));
        assert_eq!(p.split(["y", "z"]), None, "both under the shared tag");
        assert!(p
            .split(["y", "a"])
            .is_some_and(|w| w.contains(r#"("gw", "t1")"#)));
        let p = plan(KeyScheme::PerLimit, RedisMode::Standalone);
        assert_eq!(p.split(["a", "c", "y"]), None);
    }

    #[test]
    fn batches_keep_one_tag_each_on_a_cluster() {
        let items = |ids: &[&str]| ids.iter().map(|i| (i.to_string(), ())).collect::<Vec<_>>();
        let ids = |b: &Vec<Vec<(String, ())>>| {
            b.iter()
                .map(|v| {
                    v.iter()
                        .map(|(i, _)| i.as_str())
                        .collect::<Vec<_>>()
                        .join(",")
                })
                .collect::<Vec<_>>()
        };
        let p = plan(KeyScheme::PerLimit, RedisMode::Cluster);
        let b = p.batches(items(&["c", "a", "y", "b"]), 32);
        assert_eq!(ids(&b), ["a,b", "c", "y"]);
        let b = p.batches(items(&["a", "b"]), 1);
        assert_eq!(ids(&b), ["a", "b"]);
        let p = plan(KeyScheme::PerLimit, RedisMode::Standalone);
        let b = p.batches(items(&["c", "a", "y"]), 2);
        assert_eq!(ids(&b), ["c,a", "y"]);
    }
}
