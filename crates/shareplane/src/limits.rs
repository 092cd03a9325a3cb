//! `shareplane limits`: one source of limits for every Region.
//!
//! With `limits_source = "table"` in every Region's configuration, the limits live in one
//! document in the global table (see `shareplane_store::LimitsDoc`): `shareplane limits apply`
//! checks a limits file whole and writes it there once, versioned, and every Region's daemon
//! reads it within a period (`reload::follow_table_limits`) and adopts it through the same checks
//! and limit-change protocol as a reloaded file. A plan change is then made once, not once per
//! Region, and no Region can be left running a different file.
//!
//! [`plan`] refuses what a running daemon would refuse ([`config::limit_changes`]: a rate
//! changed without a higher `version`, a lower `version`, a changed `kind` or `home`), so that
//! what the table holds is what the daemons can adopt. A removed limit is refused too unless the
//! operator says `--allow-removal`: running daemons cannot drop a limit live (their records hold
//! limits by position), so they keep running it, and say so in `GET /v1/state`, until each is
//! restarted and starts from the new document.

use crate::config::{self, Config, ConfigErrors, LimitChanges};
use shareplane_core::LimitSpec;
use shareplane_store::{LimitsDoc, LimitsRead, RecordStore, StoreError};

/// What `limits apply` is asked to do besides writing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ApplyOptions {
    /// Check and print the plan, write nothing.
    pub dry_run: bool,
    /// Write a document that leaves out limits the table's current one has.
    pub allow_removal: bool,
}

/// What applying a limits file does to the table's document.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// The version the table holds now (0: none).
    pub current: u64,
    /// What changes for daemons that run the current version.
    pub changes: LimitChanges,
    /// Ids of limits the current version has and the file does not.
    pub removed: Vec<String>,
    /// How many limits the file holds.
    pub limits: usize,
    /// Ids of templates added, changed or removed (each Region publishes its part of the new
    /// ones with its next rule set: templates need no version).
    pub templates: Vec<String>,
    /// Ids this apply retires: removed limits, and removed templates that had slots.
    pub retired: Vec<String>,
    /// The document's text as written: the file, with a `retired` line first when the file does
    /// not list every retired id itself.
    pub text: String,
}

impl Plan {
    pub fn is_empty(&self) -> bool {
        self.changes.is_empty() && self.removed.is_empty() && self.templates.is_empty()
    }

    /// One line per kind of change, for the operator.
    pub fn describe(&self) -> String {
        let versioned: Vec<String> = self
            .changes
            .versioned
            .iter()
            .map(|(id, v0, v1, r0, r1)| format!("{id} v{v0}→v{v1} {r0}→{r1}"))
            .collect();
        let list = |ids: &[String]| {
            if ids.is_empty() {
                "none".to_string()
            } else {
                ids.join(", ")
            }
        };
        let templates = if self.templates.is_empty() {
            String::new()
        } else {
            format!("; templates changed: {}", self.templates.join(", "))
        };
        format!(
            "{} limits; added: {}; new versions: {}; tuned: {}; removed: {}{templates}{retired}",
            self.limits,
            list(&self.changes.added),
            list(&versioned),
            list(&self.changes.tuned),
            list(&crate::templates::compact_ids(&self.removed)),
            retired = if self.retired.is_empty() {
                String::new()
            } else {
                format!("; retired for good: {}", self.retired.join(", "))
            }
        )
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LimitsError {
    /// The file (or its change against the table's document) is refused; exit 2.
    #[error("{0}")]
    Invalid(ConfigErrors),
    #[error("the table's limits version {version} does not parse with this configuration, so a change cannot be checked against it: {errors}")]
    StoredInvalid { version: u64, errors: ConfigErrors },
    #[error("the table's newest limits (version {0}) have not fully arrived at this Region's replica yet; try again in a few seconds")]
    Replicating(u64),
    #[error("another apply wrote the table's limits meanwhile ({0}); check the new version with `shareplane limits show` and apply again")]
    Raced(String),
    #[error("{0}")]
    Store(StoreError),
}

impl LimitsError {
    /// 2 for a file that is refused, 1 for anything else (as `validate` and `run`).
    pub fn exit_code(&self) -> u8 {
        match self {
            LimitsError::Invalid(_) => 2,
            _ => 1,
        }
    }
}

/// The table's current document, if any.
pub async fn current<S: RecordStore>(store: &S) -> Result<Option<LimitsDoc>, LimitsError> {
    match store.read_limits().await.map_err(LimitsError::Store)? {
        LimitsRead::Absent => Ok(None),
        LimitsRead::Complete(doc) => Ok(Some(doc)),
        LimitsRead::Incomplete { version } => Err(LimitsError::Replicating(version)),
    }
}

/// Checks `text` whole, on its own and against `current`, and says what applying it changes.
pub fn plan(
    cfg: &Config,
    current: Option<&LimitsDoc>,
    text: &str,
    opts: ApplyOptions,
) -> Result<Plan, LimitsError> {
    let regions = &cfg.deployment.regions;
    let file = config::parse_limits(text, regions).map_err(LimitsError::Invalid)?;
    let in_file = file.retired.clone();
    let running = config::with_limits(cfg, file, 0).map_err(LimitsError::Invalid)?;
    let new = running.deployment.limits.clone();
    let (old, old_templates, old_retired) = match current {
        None => (Vec::new(), Vec::new(), Vec::new()),
        Some(doc) => {
            let f = config::parse_limits(&doc.text, regions).map_err(|errors| {
                LimitsError::StoredInvalid {
                    version: doc.version,
                    errors,
                }
            })?;
            (f.limits, f.templates, f.retired.unwrap_or_default())
        }
    };
    let templates = changed_templates(&old_templates, &running.templates);
    // By set, not by scanning: 100,000 limits against 100,000 took 18 s scanned.
    let new_ids: std::collections::HashSet<&str> = new.iter().map(|n| n.id.as_str()).collect();
    let removed: Vec<String> = old
        .iter()
        .filter(|o| !new_ids.contains(o.id.as_str()))
        .map(|o| o.id.clone())
        .collect();
    let mut errors = Vec::new();
    if !removed.is_empty() && !opts.allow_removal {
        errors.push(shareplane_core::ConfigError {
            field: "limits".into(),
            problem: format!(
                "the table's limits version {} has {} that this file leaves out ({}): running \
                 daemons cannot drop a limit live and keep running it until each restarts; to \
                 write it anyway, add --allow-removal",
                current.map_or(0, |d| d.version),
                removed.len(),
                crate::templates::compact_ids(&removed).join(", ")
            ),
        });
    }
    let kept: Vec<LimitSpec> = old
        .into_iter()
        .filter(|o| new_ids.contains(o.id.as_str()))
        .collect();
    crate::templates::slot_changes(&old_templates, &running.templates, &mut errors);
    let version = current.map_or(0, |d| d.version);
    no_retired_id(&new, &running.templates, &old_retired, &mut errors);
    let changes = config::limit_changes(&kept, &new, &running.templates, &mut errors);
    let retiring = retiring(&removed, &old_templates, &running.templates);
    let text = retired_text(text, in_file.as_deref(), &old_retired, &retiring, version)
        .map_err(|e| errors.push(e));
    if !errors.is_empty() {
        return Err(LimitsError::Invalid(ConfigErrors(errors)));
    }
    Ok(Plan {
        current: version,
        changes,
        removed,
        limits: new.len(),
        templates,
        retired: retiring,
        text: text.unwrap_or_default(),
    })
}

/// Refuses every limit and template of a file (`new`, `templates`) whose id the table's document
/// retired ([`config::check_retired`]). The listed limits come first in `new`, then the slot
/// limits, whose ids are never a user's.
fn no_retired_id(
    new: &[LimitSpec],
    templates: &[crate::templates::TemplateSpec],
    retired: &[String],
    errors: &mut Vec<shareplane_core::ConfigError>,
) {
    let listed = new
        .iter()
        .map(|l| l.id.as_str())
        .filter(|id| !id.contains('#'));
    config::check_retired(
        listed,
        templates.iter().map(|t| t.id.as_str()),
        retired,
        errors,
    );
}

/// The ids an apply that removes `removed` retires: the removed listed limits, and the
/// removed templates that had slots (their slot limits are among `removed`). A static template's
/// parts never move, so one removed may come back.
fn retiring(
    removed: &[String],
    old: &[crate::templates::TemplateSpec],
    new: &[crate::templates::TemplateSpec],
) -> Vec<String> {
    let slotted_gone = old
        .iter()
        .filter(|o| o.slots > 0 && !new.iter().any(|n| n.id == o.id))
        .map(|o| o.id.clone());
    removed
        .iter()
        .filter(|id| !id.contains('#')) // a slot's id: its template's is retired
        .cloned()
        .chain(slotted_gone)
        .collect()
}

/// The document's text: `text` as is when its own `retired` (`in_file`) lists every id retired
/// before (`before`, of the table's `version`) and now (`now`); a `retired` line put first when
/// the file has none; a problem when the file's list leaves one out (an id once retired stays so).
fn retired_text(
    text: &str,
    in_file: Option<&[String]>,
    before: &[String],
    now: &[String],
    version: u64,
) -> Result<String, shareplane_core::ConfigError> {
    let all: std::collections::BTreeSet<&str> =
        before.iter().chain(now).map(String::as_str).collect();
    let Some(listed) = in_file else {
        if all.is_empty() {
            return Ok(text.to_string());
        }
        let ids: Vec<String> = all.iter().map(|id| format!("{id:?}")).collect();
        return Ok(format!(
            "# Ids removed by `shareplane limits apply`: never taken again (kept by it).\n\
             retired = [{}]\n{text}",
            ids.join(", ")
        ));
    };
    let listed: std::collections::HashSet<&str> = listed.iter().map(String::as_str).collect();
    let missing: Vec<&str> = all.into_iter().filter(|id| !listed.contains(id)).collect();
    if missing.is_empty() {
        return Ok(text.to_string());
    }
    Err(shareplane_core::ConfigError {
        field: "retired".into(),
        problem: format!(
            "leaves out {} that the table's limits version {version} retired or this apply \
             retires ({}): an id once retired stays retired; list them, or leave `retired` out \
             and `limits apply` writes it",
            missing.len(),
            missing.join(", ")
        ),
    })
}

/// Ids of templates that are new, changed or gone.
fn changed_templates(
    old: &[crate::templates::TemplateSpec],
    new: &[crate::templates::TemplateSpec],
) -> Vec<String> {
    let mut ids: Vec<String> = new
        .iter()
        .filter(|n| !old.contains(n))
        .map(|n| n.id.clone())
        .chain(
            old.iter()
                .filter(|o| !new.iter().any(|n| n.id == o.id))
                .map(|o| o.id.clone()),
        )
        .collect();
    ids.sort();
    ids.dedup();
    ids
}

/// Plans `text` against the table's current document and, unless the plan is empty or
/// `opts.dry_run`, writes it as the next version. Returns the plan and the version written.
pub async fn apply<S: RecordStore>(
    store: &S,
    cfg: &Config,
    text: String,
    applied_by: String,
    applied_at_ms: u64,
    opts: ApplyOptions,
) -> Result<(Plan, Option<u64>), LimitsError> {
    let current = current(store).await?;
    let plan = plan(cfg, current.as_ref(), &text, opts)?;
    if plan.is_empty() || opts.dry_run {
        return Ok((plan, None));
    }
    let doc = LimitsDoc {
        version: plan.current + 1,
        text: plan.text.clone(),
        applied_by,
        applied_at_ms,
    };
    match store.write_limits(&doc).await {
        Ok(()) => Ok((plan, Some(doc.version))),
        Err(StoreError::Conflict(why)) => Err(LimitsError::Raced(why)),
        Err(e) => Err(LimitsError::Store(e)),
    }
}

/// What a document's `applied_by` says when `limits apply` cannot tell who ran it.
pub const UNNAMED_OPERATOR: &str = "an unnamed operator";

/// Who runs `limits apply`, for the document's `applied_by`: `user@host` from the environment
/// (`USER` or `LOGNAME`; `HOSTNAME` or the kernel's host name), whichever of the two is known,
/// or [`UNNAMED_OPERATOR`], never a made-up name. Control characters are dropped, 128 at most.
pub fn applied_by() -> String {
    let env = |k: &str| std::env::var(k).ok();
    let user = env("USER").or_else(|| env("LOGNAME"));
    let host = env("HOSTNAME").or_else(|| {
        let h = std::fs::read_to_string("/proc/sys/kernel/hostname").ok()?;
        Some(h.trim().to_string())
    });
    operator_name(user.as_deref(), host.as_deref())
}

/// `user@host`, `user` or `@host` from what is known (blank counts as unknown), else
/// [`UNNAMED_OPERATOR`].
pub fn operator_name(user: Option<&str>, host: Option<&str>) -> String {
    let clean = |s: Option<&str>| -> Option<String> {
        let s: String = s?.chars().filter(|c| !c.is_control()).take(64).collect();
        let s = s.trim().to_string();
        (!s.is_empty()).then_some(s)
    };
    match (clean(user), clean(host)) {
        (Some(u), Some(h)) => format!("{u}@{h}"),
        (Some(u), None) => u,
        (None, Some(h)) => format!("an unnamed operator on {h}"),
        (None, None) => UNNAMED_OPERATOR.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_operator_is_named_from_what_is_known_and_never_made_up() {
        assert_eq!(operator_name(Some("alice"), Some("ops-1")), "alice@ops-1");
        assert_eq!(operator_name(Some("alice"), None), "alice");
        assert_eq!(
            operator_name(Some(" "), Some("ops-1")),
            "an unnamed operator on ops-1"
        );
        assert_eq!(operator_name(None, Some("")), UNNAMED_OPERATOR);
        assert_eq!(operator_name(Some("al\u{7}ice"), Some("h\n")), "alice@h");
        assert!(operator_name(Some(&"u".repeat(500)), Some(&"h".repeat(500))).len() <= 129);
    }
    use shareplane_store::memory::MemoryStore;
    use std::collections::BTreeMap;

    fn cfg() -> Config {
        let text = "region = \"A\"\nstore = \"dynamodb\"\ntable = \"t\"\nlimits_source = \"table\"\n\
                    api_token = \"0123456789abcdef\"\n[[regions]]\nname = \"A\"\nhealth_check_id = \"a\"\n\
                    [[regions]]\nname = \"B\"\nhealth_check_id = \"b\"\n";
        config::parse(text, &BTreeMap::new()).unwrap_or_else(|e| panic!("{e}"))
    }

    const V1: &str = "[[limits]]\nid = \"k\"\nrate = 100\n[[limits]]\nid = \"s\"\nrate = 1\nkind = \"security\"\n";

    async fn apply_text(
        store: &MemoryStore,
        text: &str,
        opts: ApplyOptions,
    ) -> Result<(Plan, Option<u64>), LimitsError> {
        apply(store, &cfg(), text.to_string(), "test".into(), 1, opts).await
    }

    #[tokio::test]
    async fn apply_writes_the_next_version_only_when_something_changes_and_refuses_what_daemons_would(
    ) {
        let store = MemoryStore::new();
        let dry = ApplyOptions {
            dry_run: true,
            ..ApplyOptions::default()
        };
        let (plan, written) = apply_text(&store, V1, dry)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            (plan.current, written, plan.changes.added.len()),
            (0, None, 2)
        );
        assert_eq!(
            current(&store).await.ok(),
            Some(None),
            "a dry run writes nothing"
        );
        let (_, written) = apply_text(&store, V1, ApplyOptions::default())
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(written, Some(1));
        let (plan, written) = apply_text(&store, V1, ApplyOptions::default())
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(
            plan.is_empty() && written.is_none(),
            "the same limits write nothing"
        );

        let v2 = V1.replace("rate = 100", "rate = 80\nversion = 2");
        let (plan, written) = apply_text(&store, &v2, ApplyOptions::default())
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(written, Some(2));
        assert_eq!(
            plan.describe(),
            "2 limits; added: none; new versions: k v1→v2 100→80; tuned: k; removed: none",
            "the default floor and step cap follow the rate"
        );

        // What a running daemon would refuse is refused here, and the table keeps version 2.
        for (text, field) in [
            (
                V1.replace("rate = 100", "rate = 60\nversion = 2"),
                "limits[0].version",
            ),
            (V1.to_string(), "limits[0].version"),
            (
                V1.replace("kind = \"security\"", "kind = \"capacity\""),
                "limits[1].kind",
            ),
            (
                "[[limits]]\nid = \"k\"\nrate = 80\nversion = 2\n".to_string(),
                "limits",
            ),
            (
                "[[limits]]\nid = \"k\"\nrate = -80\nversion = 3\n".to_string(),
                "limits[0].rate",
            ),
        ] {
            match apply_text(&store, &text, ApplyOptions::default()).await {
                Err(e @ LimitsError::Invalid(_)) => {
                    assert_eq!(e.exit_code(), 2);
                    assert!(e.to_string().contains(&format!("{field}:")), "{field}: {e}");
                }
                other => panic!("{text:?} gave {other:?}"),
            }
        }
        assert_eq!(
            current(&store).await.ok().flatten().map(|d| d.version),
            Some(2)
        );

        // A removal goes through only when asked for, and says what it removes.
        let only_k = "[[limits]]\nid = \"k\"\nrate = 80\nversion = 2\n";
        let removal = ApplyOptions {
            allow_removal: true,
            ..ApplyOptions::default()
        };
        let (plan, written) = apply_text(&store, only_k, removal)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            (plan.removed.clone(), written),
            (vec!["s".to_string()], Some(3))
        );
    }

    #[tokio::test]
    async fn a_change_of_templates_alone_is_written_and_says_which() {
        let store = MemoryStore::new();
        let with = |rate: u32| {
            format!("{V1}[[templates]]\nid = \"per_key\"\nentry = \"api_key\"\nrate = {rate}\n")
        };
        let (plan, written) = apply_text(&store, &with(100), ApplyOptions::default())
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            (written, plan.templates),
            (Some(1), vec!["per_key".to_string()])
        );
        let (plan, written) = apply_text(&store, &with(100), ApplyOptions::default())
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((written, plan.is_empty()), (None, true), "nothing changed");
        let (plan, written) = apply_text(&store, &with(50), ApplyOptions::default())
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(written, Some(2), "{}", plan.describe());
        assert!(
            plan.describe().ends_with("templates changed: per_key"),
            "{}",
            plan.describe()
        );
        let (plan, written) = apply_text(&store, V1, ApplyOptions::default())
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            (written, plan.templates),
            (Some(3), vec!["per_key".to_string()]),
            "removed"
        );
    }

    #[tokio::test]
    async fn a_slotted_template_keeps_its_slots_and_leaves_only_with_a_removal() {
        let store = MemoryStore::new();
        let with = |slots: u32| {
            format!("{V1}[[templates]]\nid = \"per_key\"\nentry = \"api_key\"\nrate = 100\nslots = {slots}\n")
        };
        let (plan, written) = apply_text(&store, &with(4), ApplyOptions::default())
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(written, Some(1));
        assert_eq!(plan.limits, 6, "two listed limits and four slots");
        assert!(
            plan.describe().contains("added: k, s, per_key#slot*;"),
            "{}",
            plan.describe()
        );
        match apply_text(&store, &with(8), ApplyOptions::default()).await {
            Err(e @ LimitsError::Invalid(_)) => {
                assert!(e.to_string().contains("templates[0].slots:"), "{e}");
                assert!(e.to_string().contains("new template id"), "{e}");
            }
            other => panic!("another number of slots gave {other:?}"),
        }
        let e = apply_text(&store, V1, ApplyOptions::default()).await.err();
        assert!(
            e.is_some_and(|e| e
                .to_string()
                .contains("4 that this file leaves out (per_key#slot* (4 slots))")),
            "the removal names the slots once"
        );
        let removal = ApplyOptions {
            allow_removal: true,
            ..ApplyOptions::default()
        };
        let (plan, written) = apply_text(&store, V1, removal)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(written, Some(2));
        assert!(
            plan.describe().contains("removed: per_key#slot* (4 slots)"),
            "{}",
            plan.describe()
        );
    }

    /// The refusal of `text`, which must be of a file (exit 2) and name `field`.
    async fn refused(store: &MemoryStore, text: &str, field: &str) -> String {
        match apply_text(store, text, ApplyOptions::default()).await {
            Err(e @ LimitsError::Invalid(_)) => {
                let e = e.to_string();
                assert!(e.contains(&format!("{field}:")), "{field}: {e}");
                e
            }
            other => panic!("{text:?} gave {other:?}"),
        }
    }

    #[tokio::test]
    async fn a_removed_id_is_retired_for_good_and_never_taken_again() {
        let store = MemoryStore::new();
        let slotted =
            "[[templates]]\nid = \"per_key\"\nentry = \"api_key\"\nrate = 100\nslots = 4\n";
        let fixed = "[[templates]]\nid = \"per_ip\"\nentry = \"ip\"\nrate = 10\n";
        let all = format!("{V1}{slotted}{fixed}");
        apply_text(&store, &all, ApplyOptions::default())
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let removal = ApplyOptions {
            allow_removal: true,
            ..ApplyOptions::default()
        };
        let only_k = "[[limits]]\nid = \"k\"\nrate = 100\n";
        let (plan, written) = apply_text(&store, only_k, removal)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(written, Some(2));
        // The listed limit and the slotted template; a static template's parts never move.
        assert_eq!(plan.retired, ["s", "per_key"]);
        assert!(
            plan.describe().ends_with("retired for good: s, per_key"),
            "{}",
            plan.describe()
        );
        let doc = current(&store)
            .await
            .ok()
            .flatten()
            .unwrap_or_else(|| panic!("no document"));
        assert!(
            doc.text.ends_with(only_k),
            "the file follows: {:?}",
            doc.text
        );
        let stored = config::parse_limits(&doc.text, &cfg().deployment.regions)
            .unwrap_or_else(|e| panic!("daemons read the document: {e}"));
        assert_eq!(
            stored.retired,
            Some(vec!["per_key".to_string(), "s".to_string()])
        );

        // Neither comes back, as a limit or a template of either kind, by any later apply.
        // Each refusal names the entry.
        let e = refused(&store, V1, "limits[1].id").await;
        assert!(e.contains("\"s\" is retired"), "{e}");
        let static_again = slotted.replace("slots = 4\n", "");
        let e = refused(
            &store,
            &format!("{only_k}{static_again}"),
            "templates[0].id",
        )
        .await;
        assert!(e.contains("\"per_key\" is retired"), "{e}");
        // A file that lists retired ids must list them all; one that lists them all is kept as is.
        refused(&store, &format!("retired = [\"s\"]\n{only_k}"), "retired").await;
        let listed = format!("retired = [\"s\", \"per_key\"]\n{only_k}{fixed}");
        let (_, written) = apply_text(&store, &listed, ApplyOptions::default())
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(written, Some(3));
        let doc = current(&store).await.ok().flatten().map(|d| d.text);
        assert_eq!(doc.as_deref(), Some(listed.as_str()));
        // And a file that retires an id it runs is refused on its own, with the entry named.
        let e = config::parse_limits(&format!("retired = [\"k\"]\n{only_k}"), &[]).err();
        assert!(
            e.is_some_and(|e| e.to_string().contains("limits[0].id:")),
            "a retired id in the file's own list"
        );
    }

    #[tokio::test]
    async fn a_store_that_fails_or_a_table_still_replicating_is_an_error_not_a_write() {
        let store = MemoryStore::new();
        store.set_down(true);
        let e = apply_text(&store, V1, ApplyOptions::default()).await.err();
        assert!(matches!(e, Some(LimitsError::Store(_))), "{e:?}");
        assert_eq!(e.map(|e| e.exit_code()), Some(1));
    }
}
