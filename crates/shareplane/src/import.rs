//! `shareplane limits import`: envoyproxy/ratelimit's descriptor configuration (YAML, one domain
//! per file) read into shareplane's limits file (`[[limits]]`, `[[templates]]`) and the gateway's
//! `[[descriptors]]` mappings, with the same meaning, or refused with located reasons.
//!
//! envoyproxy/ratelimit matches a request's descriptor against one path of its tree: as many
//! entries as levels, each level's key (and value, where the rule has one), the most specific
//! value first. Each rule becomes:
//!
//! - a rule whose path gives every entry a value: a **listed limit** (one bucket), mapped by an
//!   `exact` mapping with that `prefix`;
//! - a rule whose last entry has no value and whose other entries all have one: a **template**
//!   on that key (a bucket per value), mapped the same way. A key with no value never becomes one
//!   bucket shared by every value.
//!
//! Value-specific mappings come before key-only ones of the same path, as ratelimit tries them.
//! Refused, each with its file and path and what it would have meant: an entry without a value
//! above the last (each of its values would have its own buckets: a template selects its bucket
//! by one entry), `replaces` (shareplane applies every limit a request names), a rate of 0, a
//! rate below 0.001 requests/s, the unit `day` (a window's allowance at once would need a burst of
//! a day: at most an hour is allowed), a wildcard value, `unlimited` where a key-only rule of the
//! same path would limit the value instead, unknown fields. `detailed_metric` is noted (metrics
//! never name values); rates are totals across all Regions (ratelimit enforces one per cluster).

use std::collections::BTreeSet;

use sha2::{Digest, Sha256};
use yaml_rust2::{Yaml, YamlLoader};

/// What an import produced: the two files' text and notes for the operator.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Imported {
    /// `[[limits]]` and `[[templates]]`, for `shareplane limits apply` or a daemon's file.
    pub limits: String,
    /// `[[descriptors]]` mappings for the gateway's configuration.
    pub gateway: String,
    pub notes: Vec<String>,
}

/// One refused part of an input: `file: path: problem`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImportError {
    pub at: String,
    pub problem: String,
}

impl std::fmt::Display for ImportError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.at, self.problem)
    }
}

/// One rule found in the tree.
struct Rule {
    /// `(key, value)` from the top level to this rule.
    path: Vec<(String, Option<String>)>,
    rate: f64,
    burst_s: u64,
    shadow: bool,
}

const DESCRIPTOR_FIELDS: &[&str] = &[
    "key",
    "value",
    "rate_limit",
    "descriptors",
    "shadow_mode",
    "detailed_metric",
];
const RATE_LIMIT_FIELDS: &[&str] = &["unit", "requests_per_unit", "unlimited", "name", "replaces"];

/// Imports `files` (name, text); every problem of every file is reported at once.
pub fn import(files: &[(String, String)]) -> Result<Imported, Vec<ImportError>> {
    let mut out = Imported {
        notes: vec![
            "rates are taken as totals across all Regions (envoyproxy/ratelimit enforces each per \
             deployment)"
                .into(),
        ],
        ..Imported::default()
    };
    let mut errors = Vec::new();
    let mut ids = BTreeSet::new();
    out.limits
        .push_str("# Written by `shareplane limits import`.\n");
    out.gateway
        .push_str("# Written by `shareplane limits import`.\n");
    for (name, text) in files {
        let mut w = Walk {
            file: name,
            errors: &mut errors,
            notes: &mut out.notes,
            rules: Vec::new(),
        };
        let Some(domain) = w.file_doc(text) else {
            continue;
        };
        for r in w.rules {
            write_rule(&mut out, &domain, &r, &mut ids);
        }
    }
    if errors.is_empty() {
        // What was written must read back as a limits file: the same checks as `limits apply`.
        if let Err(e) = crate::config::parse_limits(&out.limits, &[]) {
            errors.extend(e.0.into_iter().map(|p| ImportError {
                at: "the limits written".into(),
                problem: p.to_string(),
            }));
        }
    }
    if errors.is_empty() {
        Ok(out)
    } else {
        Err(errors)
    }
}

struct Walk<'a> {
    file: &'a str,
    errors: &'a mut Vec<ImportError>,
    notes: &'a mut Vec<String>,
    rules: Vec<Rule>,
}

impl Walk<'_> {
    fn refuse(&mut self, path: &str, problem: impl Into<String>) {
        let at = if path.is_empty() {
            self.file.to_string()
        } else {
            format!("{}: {path}", self.file)
        };
        self.errors.push(ImportError {
            at,
            problem: problem.into(),
        });
    }

    /// The file's domain, its rules collected; `None` when it cannot be read at all.
    fn file_doc(&mut self, text: &str) -> Option<String> {
        let docs = match YamlLoader::load_from_str(text) {
            Ok(d) => d,
            Err(e) => {
                self.refuse("", format!("not YAML: {e}"));
                return None;
            }
        };
        let [doc] = docs.as_slice() else {
            self.refuse("", "one YAML document per file (one domain)");
            return None;
        };
        let Some(h) = doc.as_hash() else {
            self.refuse("", "expected a mapping with domain and descriptors");
            return None;
        };
        for k in h.keys() {
            if !matches!(k.as_str(), Some("domain" | "descriptors")) {
                self.refuse(&show(k), "unknown field (domain, descriptors)");
            }
        }
        let Some(domain) = doc["domain"].as_str().filter(|d| !d.is_empty()) else {
            self.refuse("domain", "a non-empty string is required");
            return None;
        };
        self.list(&doc["descriptors"], "descriptors", &[]);
        Some(domain.to_string())
    }

    fn list(&mut self, list: &Yaml, at: &str, above: &[(String, Option<String>)]) {
        let Some(items) = list.as_vec() else {
            self.refuse(at, "expected a list of descriptors");
            return;
        };
        // ratelimit tries key and value before key alone: the value-specific rules first.
        let mut order: Vec<usize> = (0..items.len()).collect();
        order.sort_by_key(|&i| items[i]["value"].is_badvalue());
        let key_only: BTreeSet<&str> = items
            .iter()
            .filter(|d| d["value"].is_badvalue())
            .filter_map(|d| d["key"].as_str())
            .collect();
        for i in order {
            self.descriptor(&items[i], &format!("{at}[{i}]"), above, &key_only);
        }
    }

    fn descriptor(
        &mut self,
        d: &Yaml,
        at: &str,
        above: &[(String, Option<String>)],
        key_only: &BTreeSet<&str>,
    ) {
        let Some(h) = d.as_hash() else {
            self.refuse(
                at,
                "expected a descriptor (key, value, rate_limit, descriptors)",
            );
            return;
        };
        for k in h.keys() {
            if !k.as_str().is_some_and(|k| DESCRIPTOR_FIELDS.contains(&k)) {
                self.refuse(&format!("{at}.{}", show(k)), "unknown field");
            }
        }
        let Some(key) = d["key"].as_str().filter(|k| !k.is_empty()) else {
            self.refuse(&format!("{at}.key"), "a non-empty string is required");
            return;
        };
        let value = match &d["value"] {
            Yaml::BadValue => None,
            v => match scalar(v) {
                Some(v) if v.ends_with('*') => {
                    self.refuse(&format!("{at}.value"), format!("{v:?}: a wildcard value (every value with that prefix) is not expressible: shareplane mappings match values exactly"));
                    return;
                }
                Some(v) => Some(v),
                None => {
                    self.refuse(&format!("{at}.value"), "a string is required");
                    return;
                }
            },
        };
        let mut path = above.to_vec();
        path.push((key.to_string(), value.clone()));
        if !d["rate_limit"].is_badvalue() {
            self.rate_limit(d, at, &path, key_only.contains(key));
        }
        if d["detailed_metric"].as_bool() == Some(true) {
            self.notes.push(format!(
                "{}: {at}.detailed_metric: shareplane's metrics name the limit or template, never a value (bounded series); ignored",
                self.file
            ));
        }
        if !d["descriptors"].is_badvalue() {
            if value.is_none() {
                self.refuse(&format!("{at}.descriptors"), format!("nested under {key:?} without a value: each value of {key:?} would have buckets of its own, and a shareplane template selects its bucket by one entry only"));
                return;
            }
            self.list(&d["descriptors"], &format!("{at}.descriptors"), &path);
        }
    }

    fn rate_limit(
        &mut self,
        d: &Yaml,
        at: &str,
        path: &[(String, Option<String>)],
        shadowed: bool,
    ) {
        let rl = &d["rate_limit"];
        let at_rl = format!("{at}.rate_limit");
        let Some(h) = rl.as_hash() else {
            self.refuse(&at_rl, "expected unit and requests_per_unit");
            return;
        };
        for k in h.keys() {
            if !k.as_str().is_some_and(|k| RATE_LIMIT_FIELDS.contains(&k)) {
                self.refuse(&format!("{at_rl}.{}", show(k)), "unknown field");
            }
        }
        if !rl["replaces"].is_badvalue() {
            self.refuse(&format!("{at_rl}.replaces"), "a rule that switches another off where both match is not expressible: shareplane applies every limit a request names");
            return;
        }
        let value_given = path.last().is_some_and(|(_, v)| v.is_some());
        if rl["unlimited"].as_bool() == Some(true) {
            if value_given && shadowed {
                self.refuse(&format!("{at_rl}.unlimited"), "this value would be exempt from the key-only rule of the same path, and a shareplane template has no exempt values");
            } else {
                self.notes.push(format!("{}: {at}: unlimited: no limit and no mapping (the gateway's unmapped = \"allow\", its default, lets it through)", self.file));
            }
            return;
        }
        if path.iter().rev().skip(1).any(|(_, v)| v.is_none()) {
            self.refuse(at, "an entry above this one has no value: each of its values would have buckets of their own");
            return;
        }
        let Some(rate) = self.rate(rl, &at_rl) else {
            return;
        };
        let shadow = match &d["shadow_mode"] {
            Yaml::BadValue => false,
            Yaml::Boolean(b) => *b,
            _ => {
                self.refuse(&format!("{at}.shadow_mode"), "true or false");
                return;
            }
        };
        self.rules.push(Rule {
            path: path.to_vec(),
            rate: rate.0,
            burst_s: rate.1,
            shadow,
        });
    }

    /// `(rate in requests/s, burst in s)`: a window's allowance at once, refilled over the unit.
    fn rate(&mut self, rl: &Yaml, at: &str) -> Option<(f64, u64)> {
        let unit_s = match rl["unit"].as_str().map(str::to_ascii_lowercase).as_deref() {
            Some("second") => 1,
            Some("minute") => 60,
            Some("hour") => 3_600,
            Some("day") => {
                self.refuse(&format!("{at}.unit"), "day: a day's allowance at once would need a burst of 86,400 s; shareplane's bursts are at most 3,600 s (split it into an hourly limit)");
                return None;
            }
            other => {
                self.refuse(
                    &format!("{at}.unit"),
                    format!("{other:?}: second, minute or hour"),
                );
                return None;
            }
        };
        let Some(n) = rl["requests_per_unit"].as_i64() else {
            self.refuse(
                &format!("{at}.requests_per_unit"),
                "a whole number is required",
            );
            return None;
        };
        if n <= 0 {
            self.refuse(&format!("{at}.requests_per_unit"), format!("{n}: it would refuse every request; shareplane's limits have positive rates (block it in the proxy instead)"));
            return None;
        }
        // Milli-requests per second, rounded down: too little, never too much.
        let milli = (n as u128 * 1000 / unit_s as u128) as u64;
        if milli == 0 {
            self.refuse(
                &format!("{at}.requests_per_unit"),
                format!("{n} per {unit_s} s is below shareplane's resolution of 0.001 requests/s"),
            );
            return None;
        }
        if milli as u128 * unit_s as u128 != n as u128 * 1000 {
            self.notes.push(format!(
                "{}: {at}: {n} per {unit_s} s rounded down to {}.{:03}/s",
                self.file,
                milli / 1000,
                milli % 1000
            ));
        }
        Some((milli as f64 / 1000.0, unit_s))
    }
}

/// A scalar as written (strings, numbers and booleans alike: ratelimit compares text).
fn scalar(v: &Yaml) -> Option<String> {
    match v {
        Yaml::String(s) | Yaml::Real(s) => Some(s.clone()),
        Yaml::Integer(i) => Some(i.to_string()),
        Yaml::Boolean(b) => Some(b.to_string()),
        _ => None,
    }
}

fn show(k: &Yaml) -> String {
    scalar(k).unwrap_or_else(|| format!("{k:?}"))
}

/// A TOML basic string.
fn quoted(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// An id for a rule: its domain and path, in the characters ids allow; a path too long or
/// already taken gets a hash of itself instead of its tail.
fn rule_id(
    domain: &str,
    path: &[(String, Option<String>)],
    taken: &mut BTreeSet<String>,
) -> String {
    let mut words = vec![domain.to_string()];
    for (k, v) in path {
        words.push(k.clone());
        words.extend(v.clone());
    }
    let clean: String = words
        .join(".")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-_.:".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    let mut id = clean.clone();
    if id.len() > 100 || taken.contains(&id) {
        let digest = Sha256::digest(words.join("\u{0}").as_bytes());
        let hash: String = digest[..6].iter().map(|b| format!("{b:02x}")).collect();
        id = format!("{}-{hash}", &clean[..clean.len().min(100)]);
    }
    taken.insert(id.clone());
    id
}

fn write_rule(out: &mut Imported, domain: &str, r: &Rule, taken: &mut BTreeSet<String>) {
    let id = rule_id(domain, &r.path, taken);
    let Some(((key, value), prefix)) = r.path.split_last() else {
        return;
    };
    let shadow = if r.shadow { "shadow = true\n" } else { "" };
    match value {
        Some(_) => out.limits.push_str(&format!(
            "\n[[limits]]\nid = {}\nrate = {}\nburst_s = {}\n{shadow}",
            quoted(&id),
            r.rate,
            r.burst_s
        )),
        None => out.limits.push_str(&format!(
            "\n[[templates]]\nid = {}\nentry = {}\nrate = {}\nburst_s = {}\n{shadow}",
            quoted(&id),
            quoted(key),
            r.rate,
            r.burst_s
        )),
    }
    let mut m = format!(
        "\n[[descriptors]]\ndomain = {}\nkey = {}\n",
        quoted(domain),
        quoted(key)
    );
    if let Some(v) = value {
        m.push_str(&format!("value = {}\n", quoted(v)));
    }
    m.push_str(&format!("limit = {}\nexact = true\n", quoted(&id)));
    for (k, v) in prefix {
        m.push_str(&format!("[[descriptors.prefix]]\nkey = {}\n", quoted(k)));
        if let Some(v) = v {
            m.push_str(&format!("value = {}\n", quoted(v)));
        }
    }
    out.gateway.push_str(&m);
}
