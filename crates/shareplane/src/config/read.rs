//! Reading a configuration's TOML into [`RawConfig`] one field at a time, so that one field of
//! the wrong type does not hide the others: only a syntax error stops the reading. Every problem
//! found here, and every problem found later against a field that was written in the file, is
//! reported with the line the field is on ([`Located::annotate`]).
//!
//! The parser keeps no serde layer between the text and the fields: a 5 MB file of 100,000
//! limits is parsed into span-keeping documents and read straight from them, its `[[limits]]`
//! entries a batch at a time ([`super::batches`]) so that no document of them all is ever held.

use super::batches::{self, Split, LIMITS_PER_BATCH};
use super::{problem, ConfigErrors};
use crate::templates::RawTemplate;
use shareplane_core::ConfigError;
use std::collections::HashMap;
use toml_edit::{ImDocument, Item, TableLike, Value};

/// The file as written, before checks (a field of the wrong type reads as unset; its problem is
/// reported by the reader).
#[derive(Clone, Debug, Default)]
pub struct RawConfig {
    pub region: Option<String>,
    pub phase_ms: u64,
    pub period_ms: Option<u64>,
    pub regions: Vec<RawRegion>,
    pub table: Option<String>,
    pub store: Option<String>,
    pub aws_endpoint: Option<String>,
    /// Tests only: a local endpoint for the Route 53 health metrics (CloudWatch in us-east-1),
    /// when it is not `aws_endpoint` (one local server per Region, one us-east-1 for all).
    pub health_endpoint: Option<String>,
    /// The AWS Region of this daemon's table replica; default: the `region` name.
    pub aws_region: Option<String>,
    pub metrics_namespace: Option<String>,
    pub limits: Vec<RawLimit>,
    /// `[[templates]]`: limits per value of a descriptor entry (see [`crate::templates`]).
    pub templates: Vec<RawTemplate>,
    /// `retired`: ids no limit or template may take (as `shareplane limits apply` keeps them in
    /// the table's document, so that its text can be a file's limits again).
    pub retired: Option<Vec<String>>,
    pub policy: Option<String>,
    pub fence: Option<String>,
    pub listen: Option<String>,
    pub api_token: Option<String>,
    /// The operator's token (see [`crate::tokens`]); `SHAREPLANE_ADMIN_TOKEN` is preferred.
    pub admin_token: Option<String>,
    pub replica_id: Option<String>,
    /// Phase ticks a peer may run other limits (a different digest) before the
    /// `limits_mismatch:<peer>` alarm; default 10.
    pub limits_rollout_periods: Option<u32>,
    /// Tests only: every store call waits this long first (see [`crate::slow_store`]).
    pub test_store_delay_ms: Option<u64>,
    /// Where the limits come from: `"file"` (the `[[limits]]` here, the default) or `"table"`
    /// (the shared document `shareplane limits apply` writes to the global table).
    pub limits_source: Option<String>,
    /// The bound on every store call (see [`super::timeouts`]); default: half a period.
    pub store_timeout_ms: Option<u64>,
    /// The bound on every health read (see [`super::timeouts`]); default: half a period.
    pub health_timeout_ms: Option<u64>,
}

#[derive(Clone, Debug, Default)]
pub struct RawRegion {
    pub name: String,
    pub health_check_id: Option<String>,
}

#[derive(Clone, Debug)]
pub struct RawLimit {
    pub id: String,
    /// Requests per second across all Regions (NaN when missing or not a number: reported).
    pub rate: f64,
    pub burst_s: f64,
    /// Requests per second; default 5% of the rate.
    pub floor: Option<f64>,
    /// Requests per second; default 10% of the rate.
    pub step_cap: Option<f64>,
    pub kind: String,
    /// For `kind = "security"`: the one Region that holds the whole limit (else an even split).
    pub home: Option<String>,
    pub shadow: bool,
    pub version: u64,
}

impl Default for RawLimit {
    fn default() -> RawLimit {
        RawLimit {
            id: String::new(),
            rate: f64::NAN,
            burst_s: 2.0,
            floor: None,
            step_cap: None,
            kind: "capacity".into(),
            home: None,
            shadow: false,
            version: 1,
        }
    }
}

/// Where each field of a file was written, and the problems found while reading it.
#[derive(Debug, Default)]
pub struct Located {
    /// Byte offset of each field's value outside `[[limits]]`, by its name in problems
    /// (`regions[1].name`).
    at: HashMap<String, usize>,
    /// Byte offsets in each `[[limits]]` entry: where it starts, then each of [`LIMIT_FIELDS`]
    /// (kept apart from `at`: 100,000 limits would make a million names to hash).
    limit_at: Vec<[Option<usize>; LIMIT_FIELDS.len() + 1]>,
    /// Byte offset of the start of every line after the first.
    line_starts: Vec<usize>,
    /// Where each piece of the document being read starts, in it and in the file (a batch of
    /// `[[limits]]` entries and the rest of a file are parsed on their own); empty when the
    /// document is the whole file.
    pieces: Vec<(usize, usize)>,
    /// Type problems and unknown fields, already with their lines.
    pub errors: Vec<ConfigError>,
}

impl Located {
    fn new(text: &str) -> Located {
        let line_starts = text
            .bytes()
            .enumerate()
            .filter(|&(_, b)| b == b'\n')
            .map(|(i, _)| i + 1)
            .collect();
        Located {
            line_starts,
            ..Located::default()
        }
    }

    /// The line (from 1) that byte `offset` is on: an error at the start of a line is on that
    /// line, not the one before.
    pub fn line(&self, offset: usize) -> usize {
        self.line_starts.partition_point(|&s| s <= offset) + 1
    }

    /// Where `field` (`period_ms`, `regions[1].name`, `limits[3]` or `limits[3].rate`) was
    /// written, if it was.
    fn offset(&self, field: &str) -> Option<usize> {
        let Some(rest) = field.strip_prefix("limits[") else {
            return self.at.get(field).copied();
        };
        let (index, key) = rest.split_once(']')?;
        let spans = self.limit_at.get(index.parse::<usize>().ok()?)?;
        match key.strip_prefix('.') {
            None => spans[0],
            Some(k) => spans[1 + LIMIT_FIELDS.iter().position(|f| *f == k)?],
        }
    }

    /// Where `item` starts in the file.
    fn start(&self, item: &Item) -> Option<usize> {
        let at = item.span()?.start;
        let i = self.pieces.partition_point(|&(d, _)| d <= at);
        match i.checked_sub(1).and_then(|i| self.pieces.get(i)) {
            Some(&(d, f)) => Some(f + (at - d)),
            None => Some(at),
        }
    }

    /// Forgets where `field` was written (an environment variable overrode it).
    pub fn forget(&mut self, field: &str) {
        self.at.remove(field);
    }

    /// Fields that had a problem while reading (their later problems would only repeat it).
    pub fn misread(&self) -> std::collections::HashSet<String> {
        self.errors.iter().map(|e| e.field.clone()).collect()
    }

    /// Adds `(at line N)` to every problem whose field (or, for `limits[3].burst`, whose
    /// entry `limits[3]`) was written in the file and has no line yet.
    pub fn annotate(&self, errors: &mut [ConfigError]) {
        for e in errors.iter_mut() {
            if e.problem.contains("(at line ") {
                continue;
            }
            let entry = e.field.rsplit_once('.').map(|(head, _)| head);
            let at = self
                .offset(&e.field)
                .or_else(|| entry.and_then(|h| self.offset(h)));
            if let Some(at) = at {
                e.problem = format!("{} (at line {})", e.problem, self.line(at));
            }
        }
    }

    fn wrong(&mut self, field: &str, item: &Item, want: &str) {
        let found = shown(item);
        let line = self.start(item).map(|s| self.line(s));
        let at = line.map(|l| format!(" (at line {l})")).unwrap_or_default();
        self.errors
            .push(problem(field, format!("{found}: expected {want}{at}")));
    }
}

/// A value as written, for a problem (long ones cut), or its type for a table.
fn shown(item: &Item) -> String {
    match item.as_value() {
        Some(v) => {
            let s = v.to_string();
            let s = s.trim();
            if s.chars().count() > 60 {
                format!("{}…", s.chars().take(60).collect::<String>())
            } else {
                s.to_string()
            }
        }
        None => format!("a {}", item.type_name()),
    }
}

/// Parses `text`; only a syntax error (with its line) is an `Err`.
fn parse_document(text: &str) -> Result<ImDocument<&str>, ConfigErrors> {
    ImDocument::parse(text).map_err(|e| {
        let located = Located::new(text);
        let at = e
            .span()
            .map(|s| format!(" (at line {})", located.line(s.start)))
            .unwrap_or_default();
        let message = e.message().trim_end().to_string();
        ConfigErrors(vec![problem("config", format!("{message}{at}"))])
    })
}

/// Reads a daemon configuration: every field of the right type, every problem with its line.
pub fn read_config(text: &str) -> Result<(RawConfig, Located), ConfigErrors> {
    read_config_by(text, LIMITS_PER_BATCH)
}

/// [`read_config`] with `per_batch` `[[limits]]` entries parsed at a time (0: the whole file
/// at once).
pub(super) fn read_config_by(
    text: &str,
    per_batch: usize,
) -> Result<(RawConfig, Located), ConfigErrors> {
    read_by(text, per_batch, |r, t, from| r.config(t, from))
}

/// How the `[[limits]]` entries of a file are read: from the document of the whole file, or a
/// batch at a time from `text` as split.
enum LimitsFrom<'a> {
    Whole,
    Batches(&'a str, &'a Split),
}

/// Reads `text` by `read` from its root table: first split into batches of `per_batch`
/// `[[limits]]` entries (0: never), then whole when that split could read otherwise than the
/// whole file (`read` says so with `None`) or does not parse.
fn read_by<T>(
    text: &str,
    per_batch: usize,
    read: impl Fn(&mut Reader, &dyn TableLike, &LimitsFrom<'_>) -> Option<T>,
) -> Result<(T, Located), ConfigErrors> {
    let split = (per_batch > 0)
        .then(|| batches::split(text, per_batch))
        .flatten();
    if let Some(split) = split {
        if let Ok(rest) = ImDocument::parse(split.rest.as_str()) {
            let mut r = Reader(Located::new(text), None);
            r.0.pieces = split.pieces.clone();
            let from = LimitsFrom::Batches(text, &split);
            if let Some(v) = read(&mut r, rest.as_table(), &from) {
                return Ok((v, r.0));
            }
        }
    }
    let doc = parse_document(text)?;
    let mut r = Reader(Located::new(text), None);
    match read(&mut r, doc.as_table(), &LimitsFrom::Whole) {
        Some(v) => Ok((v, r.0)),
        // Reading a whole file always gives its fields.
        None => Err(ConfigErrors(vec![problem("config", "could not be read")])),
    }
}

impl Reader {
    /// Every field of a configuration from its root table `t` (`None`: its `[[limits]]` entries
    /// cannot be read `from` there, see [`Reader::limits_from`]).
    fn config(&mut self, t: &dyn TableLike, from: &LimitsFrom<'_>) -> Option<RawConfig> {
        let r = self;
        r.unknown(t, "", CONFIG_FIELDS);
        Some(RawConfig {
            region: r.string(t, "", "region"),
            phase_ms: r.whole(t, "", "phase_ms").unwrap_or(0),
            period_ms: r.whole(t, "", "period_ms"),
            regions: r
                .entries(t, "", "regions")
                .into_iter()
                .map(|(at, e)| r.region(e, &at))
                .collect(),
            table: r.string(t, "", "table"),
            store: r.string(t, "", "store"),
            aws_endpoint: r.string(t, "", "aws_endpoint"),
            health_endpoint: r.string(t, "", "health_endpoint"),
            aws_region: r.string(t, "", "aws_region"),
            metrics_namespace: r.string(t, "", "metrics_namespace"),
            policy: r.string(t, "", "policy"),
            fence: r.string(t, "", "fence"),
            listen: r.string(t, "", "listen"),
            api_token: r.string(t, "", "api_token"),
            admin_token: r.string(t, "", "admin_token"),
            replica_id: r.string(t, "", "replica_id"),
            limits_rollout_periods: r.whole(t, "", "limits_rollout_periods").map(clamp_u32),
            test_store_delay_ms: r.whole(t, "", "test_store_delay_ms"),
            limits_source: r.string(t, "", "limits_source"),
            store_timeout_ms: r.whole(t, "", "store_timeout_ms"),
            health_timeout_ms: r.whole(t, "", "health_timeout_ms"),
            limits: r.limits_from(t, from)?,
            templates: r.templates(t),
            retired: r.strings(t, "", "retired"),
        })
    }
}

/// A limits file as read: its `[[limits]]`, its `[[templates]]` and its `retired` ids (`None`:
/// the key is not written).
pub type RawLimitsFile = (
    Vec<RawLimit>,
    Vec<RawTemplate>,
    Option<Vec<String>>,
    Located,
);

/// Reads a limits file: `[[limits]]` and `[[templates]]` entries, the `retired` ids and nothing
/// else.
pub fn read_limits(text: &str) -> Result<RawLimitsFile, ConfigErrors> {
    let read = read_by(text, LIMITS_PER_BATCH, |r, t, from| {
        r.unknown(t, "", &["limits", "templates", "retired"]);
        let limits = r.limits_from(t, from)?;
        Some((limits, r.templates(t), r.strings(t, "", "retired")))
    });
    read.map(|((limits, templates, retired), located)| (limits, templates, retired, located))
}

/// Above `u32::MAX` reads as `u32::MAX`, which every range check refuses by its value.
fn clamp_u32(v: u64) -> u32 {
    u32::try_from(v).unwrap_or(u32::MAX)
}

const CONFIG_FIELDS: &[&str] = &[
    "region",
    "phase_ms",
    "period_ms",
    "regions",
    "table",
    "store",
    "aws_endpoint",
    "health_endpoint",
    "aws_region",
    "metrics_namespace",
    "limits",
    "templates",
    "retired",
    "policy",
    "fence",
    "listen",
    "api_token",
    "admin_token",
    "replica_id",
    "limits_rollout_periods",
    "test_store_delay_ms",
    "limits_source",
    "store_timeout_ms",
    "health_timeout_ms",
];
const REGION_FIELDS: &[&str] = &["name", "health_check_id"];
const TEMPLATE_FIELDS: &[&str] = &[
    "id",
    "entry",
    "rate",
    "burst_s",
    "kind",
    "shadow",
    "slots",
    "version",
    "overrides",
];
const OVERRIDE_FIELDS: &[&str] = &["value", "rate"];
const LIMIT_FIELDS: &[&str] = &[
    "id", "rate", "burst_s", "floor", "step_cap", "kind", "home", "shadow", "version",
];

/// Reads fields into their types, noting where each was written; `limit` is the index of the
/// `[[limits]]` entry being read, if one is.
struct Reader(Located, Option<usize>);

impl Reader {
    fn field(at: &str, key: &str) -> String {
        if at.is_empty() {
            key.to_string()
        } else {
            format!("{at}.{key}")
        }
    }

    /// Reports every key of `t` not in `known`, with its line.
    fn unknown(&mut self, t: &dyn TableLike, at: &str, known: &[&str]) {
        for (key, item) in t.iter() {
            if !known.contains(&key) {
                let line = self.0.start(item).map(|s| self.0.line(s));
                let line = line.map(|l| format!(" (at line {l})")).unwrap_or_default();
                self.0.errors.push(problem(
                    Self::field(at, key),
                    format!(
                        "unknown field `{key}`: not a setting here (the settings are listed in \
                         crates/shareplane/config.example.toml){line}"
                    ),
                ));
            }
        }
    }

    /// The value of `key` if it is written, its place noted.
    fn value<'a>(&mut self, t: &'a dyn TableLike, at: &str, key: &str) -> Option<&'a Item> {
        let item = t.get(key)?;
        let start = self.0.start(item)?;
        let in_limit = self.1.and_then(|i| {
            let k = LIMIT_FIELDS.iter().position(|f| *f == key)?;
            self.0.limit_at.get_mut(i).map(|spans| (spans, k))
        });
        match in_limit {
            Some((spans, k)) => spans[1 + k] = Some(start),
            None => {
                self.0.at.insert(Self::field(at, key), start);
            }
        }
        Some(item)
    }

    fn string(&mut self, t: &dyn TableLike, at: &str, key: &str) -> Option<String> {
        let item = self.value(t, at, key)?;
        let s = item.as_str().map(str::to_string);
        if s.is_none() {
            self.0.wrong(&Self::field(at, key), item, "a string");
        }
        s
    }

    /// A whole number, zero or more.
    fn whole(&mut self, t: &dyn TableLike, at: &str, key: &str) -> Option<u64> {
        let item = self.value(t, at, key)?;
        let v = item.as_integer().and_then(|i| u64::try_from(i).ok());
        if v.is_none() {
            let want = match item.as_integer() {
                Some(_) => "a whole number of 0 or more",
                None => "a whole number",
            };
            self.0.wrong(&Self::field(at, key), item, want);
        }
        v
    }

    /// A number (whole or not): `NaN`, reported, when it is something else.
    fn number(&mut self, t: &dyn TableLike, at: &str, key: &str) -> Option<f64> {
        let item = self.value(t, at, key)?;
        let v = match item.as_value() {
            Some(Value::Float(f)) => Some(*f.value()),
            Some(Value::Integer(i)) => Some(*i.value() as f64),
            _ => None,
        };
        if v.is_none() {
            self.0.wrong(&Self::field(at, key), item, "a number");
        }
        Some(v.unwrap_or(f64::NAN))
    }

    /// An array of strings; any other value is reported and reads as empty.
    fn strings(&mut self, t: &dyn TableLike, at: &str, key: &str) -> Option<Vec<String>> {
        let item = self.value(t, at, key)?;
        let v: Option<Vec<String>> = item
            .as_array()
            .and_then(|a| a.iter().map(|v| v.as_str().map(str::to_string)).collect());
        if v.is_none() {
            self.0
                .wrong(&Self::field(at, key), item, "an array of strings");
        }
        Some(v.unwrap_or_default())
    }

    fn boolean(&mut self, t: &dyn TableLike, at: &str, key: &str) -> Option<bool> {
        let item = self.value(t, at, key)?;
        let v = item.as_bool();
        if v.is_none() {
            self.0.wrong(&Self::field(at, key), item, "true or false");
        }
        v
    }

    /// The entries of `[[key]]` (or of `key = [{…}, …]`), each with its name (`key[3]`).
    fn entries<'a>(
        &mut self,
        t: &'a dyn TableLike,
        at: &str,
        key: &str,
    ) -> Vec<(String, &'a dyn TableLike)> {
        let Some(item) = self.value(t, at, key) else {
            return Vec::new();
        };
        let field = Self::field(at, key);
        let tables: Vec<(&'a dyn TableLike, &'a Item)> = match item {
            Item::ArrayOfTables(a) => a.iter().map(|t| (t as &dyn TableLike, item)).collect(),
            Item::Value(Value::Array(a)) if a.iter().all(|v| v.as_inline_table().is_some()) => a
                .iter()
                .filter_map(|v| v.as_inline_table())
                .map(|t| (t as &dyn TableLike, item))
                .collect(),
            _ => {
                let want = format!("[[{key}]] entries (an array of tables)");
                self.0.wrong(&field, item, &want);
                return Vec::new();
            }
        };
        tables
            .into_iter()
            .enumerate()
            .map(|(i, (t, _))| (format!("{field}[{i}]"), t))
            .collect()
    }

    /// A required string: missing or of the wrong type, it reads as empty and is reported
    /// (a missing one on the line its entry starts on).
    fn required(&mut self, t: &dyn TableLike, at: &str, key: &str) -> String {
        if t.get(key).is_none() {
            (self.0.errors).push(problem(Self::field(at, key), "missing in this entry"));
        }
        self.string(t, at, key).unwrap_or_default()
    }

    fn region(&mut self, t: &dyn TableLike, at: &str) -> RawRegion {
        self.note_entry(t, at);
        self.unknown(t, at, REGION_FIELDS);
        RawRegion {
            name: self.required(t, at, "name"),
            health_check_id: self.string(t, at, "health_check_id"),
        }
    }

    fn limits(&mut self, t: &dyn TableLike) -> Vec<RawLimit> {
        let entries = self.entries(t, "", "limits");
        let mut out = Vec::with_capacity(entries.len());
        self.0.limit_at = vec![[None; LIMIT_FIELDS.len() + 1]; entries.len()];
        for (i, (at, e)) in entries.into_iter().enumerate() {
            self.1 = Some(i);
            out.push(self.limit(e, &at));
        }
        self.1 = None;
        out
    }

    /// The `[[limits]]` entries of the file whose root (or, split, the rest's root) is `t`.
    fn limits_from(&mut self, t: &dyn TableLike, from: &LimitsFrom<'_>) -> Option<Vec<RawLimit>> {
        match from {
            LimitsFrom::Whole => Some(self.limits(t)),
            LimitsFrom::Batches(text, split) => self.limits_in_batches(text, split, t),
        }
    }

    /// The `[[limits]]` entries of `split`, a batch at a time, read as [`Reader::limits`] reads
    /// them from the whole file; `rest` is the root of the rest of the file. `None` when the
    /// split could read otherwise than the whole file (see [`super::batches`]): the file is then
    /// read whole.
    fn limits_in_batches(
        &mut self,
        text: &str,
        split: &Split,
        rest: &dyn TableLike,
    ) -> Option<Vec<RawLimit>> {
        if !split.rest_is_whole(rest) {
            return None;
        }
        let mut out = Vec::with_capacity(split.entries);
        self.0.limit_at = vec![[None; LIMIT_FIELDS.len() + 1]; split.entries];
        let rest_pieces = std::mem::take(&mut self.0.pieces);
        for b in &split.batches {
            let doc = ImDocument::parse(text.get(b.start..b.end)?).ok()?;
            let t = doc.as_table();
            let Some(Item::ArrayOfTables(entries)) = t.get("limits") else {
                return None;
            };
            if t.len() != 1 || entries.len() != b.entries {
                return None;
            }
            self.0.pieces = vec![(0, b.start)];
            if b.first == 0 {
                // Where the whole file's `limits` starts, as [`Reader::entries`] notes it.
                self.value(t, "", "limits");
            }
            for (k, e) in entries.iter().enumerate() {
                let i = b.first + k;
                self.1 = Some(i);
                out.push(self.limit(e, &format!("limits[{i}]")));
            }
            self.1 = None;
        }
        self.0.pieces = rest_pieces;
        Some(out)
    }

    fn limit(&mut self, t: &dyn TableLike, at: &str) -> RawLimit {
        self.note_entry(t, at);
        self.unknown(t, at, LIMIT_FIELDS);
        let d = RawLimit::default();
        let id = self.required(t, at, "id");
        if t.get("rate").is_none() {
            (self.0.errors).push(problem(format!("{at}.rate"), "missing in this entry"));
        }
        RawLimit {
            id,
            rate: self.number(t, at, "rate").unwrap_or(f64::NAN),
            burst_s: self.number(t, at, "burst_s").unwrap_or(d.burst_s),
            floor: self.number(t, at, "floor"),
            step_cap: self.number(t, at, "step_cap"),
            kind: self.string(t, at, "kind").unwrap_or(d.kind),
            home: self.string(t, at, "home"),
            shadow: self.boolean(t, at, "shadow").unwrap_or(d.shadow),
            version: self.whole(t, at, "version").unwrap_or(d.version),
        }
    }

    /// `[[templates]]`, each with its `[[templates.overrides]]` (few: their fields' places are
    /// kept by name, as the configuration's other fields are).
    fn templates(&mut self, t: &dyn TableLike) -> Vec<RawTemplate> {
        let entries = self.entries(t, "", "templates");
        let mut out = Vec::with_capacity(entries.len());
        for (at, e) in entries {
            self.note_entry(e, &at);
            self.unknown(e, &at, TEMPLATE_FIELDS);
            let id = self.required(e, &at, "id");
            let entry = self.required(e, &at, "entry");
            if e.get("rate").is_none() {
                (self.0.errors).push(problem(format!("{at}.rate"), "missing in this entry"));
            }
            let mut overrides = Vec::new();
            for (o_at, o) in self.entries(e, &at, "overrides") {
                self.note_entry(o, &o_at);
                self.unknown(o, &o_at, OVERRIDE_FIELDS);
                let value = self.required(o, &o_at, "value");
                if o.get("rate").is_none() {
                    (self.0.errors).push(problem(format!("{o_at}.rate"), "missing in this entry"));
                }
                overrides.push((value, self.number(o, &o_at, "rate").unwrap_or(f64::NAN)));
            }
            out.push(RawTemplate {
                id,
                entry,
                rate: self.number(e, &at, "rate").unwrap_or(f64::NAN),
                burst_s: self.number(e, &at, "burst_s"),
                kind: self.string(e, &at, "kind"),
                shadow: self.boolean(e, &at, "shadow").unwrap_or(false),
                slots: self.whole(e, &at, "slots"),
                version: self.whole(e, &at, "version"),
                overrides,
            });
        }
        out
    }

    /// Notes where an entry starts: its first field's line (a `[[limits]]` header has no span
    /// of its own in every form).
    fn note_entry(&mut self, t: &dyn TableLike, at: &str) {
        let first = t.iter().filter_map(|(_, i)| self.0.start(i)).min();
        let limit = self.1.and_then(|i| self.0.limit_at.get_mut(i));
        match (first, limit) {
            (Some(start), Some(spans)) => spans[0] = Some(start),
            (Some(start), None) => {
                self.0.at.insert(at.to_string(), start);
            }
            (None, _) => {}
        }
    }
}

#[cfg(test)]
impl Located {
    /// Everything noted, in a fixed order: two reads of one file compare by it.
    pub(super) fn noted(&self) -> String {
        let at: std::collections::BTreeMap<_, _> = self.at.iter().collect();
        format!("{at:?} {:?} {:?}", self.limit_at, self.errors)
    }
}

/// Whether a configuration is read a batch of `per_batch` `[[limits]]` entries at a time, rather
/// than whole.
#[cfg(test)]
pub(super) fn read_in_batches(text: &str, per_batch: usize) -> bool {
    let Some(split) = batches::split(text, per_batch) else {
        return false;
    };
    let Ok(rest) = ImDocument::parse(split.rest.as_str()) else {
        return false;
    };
    let mut r = Reader(Located::new(text), None);
    r.0.pieces = split.pieces.clone();
    let from = LimitsFrom::Batches(text, &split);
    r.config(rest.as_table(), &from).is_some()
}
