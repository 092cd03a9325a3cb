//! What a reload (or `shareplane limits apply`) changes between two valid configurations, and
//! what it must refuse because it cannot change while the daemon runs.

use super::{problem, Config, ConfigErrors};
use crate::templates::TemplateSpec;
use shareplane_core::{ConfigError, LimitSpec, Room};
use shareplane_limiter::slots::slot_parts;
use std::collections::BTreeMap;

/// What a reload changes: the deployment to run next and, for the log, what differs.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LimitChanges {
    /// The running limits first, in their order, with their new settings, then the added ones
    /// in the order of the file.
    pub limits: Vec<LimitSpec>,
    /// Ids of limits that are new.
    pub added: Vec<String>,
    /// `(id, old version, new version, old rate, new rate)` of limits at a higher version.
    pub versioned: Vec<(String, u64, u64, Room, Room)>,
    /// Ids of limits whose floor, step cap, burst or shadow changed (live, at any version).
    pub tuned: Vec<String>,
}

impl LimitChanges {
    pub fn is_empty(&self) -> bool {
        self.added.is_empty() && self.versioned.is_empty() && self.tuned.is_empty()
    }
}

/// Checks what a reload from `old` to `new` (both already valid) would change, and refuses
/// anything that cannot change while the daemon runs, naming each field:
///
/// - every setting but the limits (Region, Regions, store, table, period, phase, listen address,
///   token, policy, fence, health checks, …): restart the daemon to change them;
/// - a limit's rate without a higher `version`, a lower `version`, its `kind` or `home`;
/// - a removed limit: records hold limits by position in the deployment, so removing one live
///   would make the limits after it read the wrong entries. Restart the daemon to remove one;
/// - a template's number of slots ([`crate::templates::slot_changes`]); a slotted template's
///   slot limits are limits, so its rate needs a higher `version` and its removal a restart.
///
/// A rate at a higher version goes through the core's limit-change protocol (room in static
/// parts, never above the larger of the old and new rate); an added limit is adopted in this
/// Region's static part, like a limit present from the start. Limits keep their position, so
/// added ones go last whatever their place in the file.
pub fn plan_reload(old: &Config, new: &Config) -> Result<LimitChanges, ConfigErrors> {
    let mut errors = Vec::new();
    fixed_fields(old, new, &mut errors);
    crate::templates::slot_changes(&old.templates, &new.templates, &mut errors);
    let changes = limit_changes(
        &old.deployment.limits,
        &new.deployment.limits,
        &new.templates,
        &mut errors,
    );
    if errors.is_empty() {
        Ok(changes)
    } else {
        Err(ConfigErrors(errors))
    }
}

fn fixed_fields(old: &Config, new: &Config, errors: &mut Vec<ConfigError>) {
    // The timeouts default to parts of the period: with a new period only the period is blamed.
    let timeouts = match old.period_ms == new.period_ms {
        true => new.timeouts,
        false => old.timeouts,
    };
    let same = |name: &'static str, f: &dyn Fn(&Config) -> String| (name, f(old), f(new));
    let fields = [
        (
            "store_timeout_ms",
            old.timeouts.store_ms.to_string(),
            timeouts.store_ms.to_string(),
        ),
        (
            "health_timeout_ms",
            old.timeouts.health_ms.to_string(),
            timeouts.health_ms.to_string(),
        ),
        same("limits_source", &|c| c.limits_source.name().to_string()),
        same("limits_rollout_periods", &|c| {
            c.limits_rollout_periods.to_string()
        }),
        same("region", &|c| c.region.clone()),
        same("regions", &|c| format!("{:?}", c.deployment.regions)),
        same("phase_ms", &|c| c.phase_ms.to_string()),
        same("period_ms", &|c| c.period_ms.to_string()),
        same("policy", &|c| format!("{:?}", c.deployment.policy)),
        same("fence", &|c| format!("{:?}", c.deployment.fence)),
        same("regions[].health_check_id", &|c| {
            format!("{:?}", c.health_check_ids)
        }),
        same("table", &|c| c.table.clone()),
        same("store", &|c| format!("{:?}", c.store)),
        same("aws_endpoint", &|c| format!("{:?}", c.aws_endpoint)),
        same("aws_region", &|c| c.aws_region.clone()),
        same("metrics_namespace", &|c| c.metrics_namespace.clone()),
        same("listen", &|c| c.listen.to_string()),
        same("replica_id", &|c| c.replica_id.clone()),
        same("test_store_delay_ms", &|c| {
            c.test_store_delay.as_millis().to_string()
        }),
    ];
    for (field, was, now) in fields.into_iter().filter(|(_, was, now)| was != now) {
        let what = format!(
            "cannot change while the daemon runs (running {was}, file {now}); restart it to change this"
        );
        errors.push(problem(field, what));
    }
    // A token is never printed, only said to have changed.
    for (field, changed) in [
        ("api_token", old.api_token != new.api_token),
        ("admin_token", old.admin_token != new.admin_token),
    ] {
        if changed {
            let what = "cannot change while the daemon runs; restart it to change the token";
            errors.push(problem(field, what.to_string()));
        }
    }
}

/// What running `new` instead of `old` changes, refusing what cannot change live (see
/// [`plan_reload`]). `shareplane limits apply` checks a document with it before writing, so
/// that what the table holds is what running daemons can adopt. The slot limits of `templates`
/// (the new ones) are checked and named once per template: `templates[j]` and `<id>#slot*`.
pub fn limit_changes(
    old: &[LimitSpec],
    new: &[LimitSpec],
    templates: &[TemplateSpec],
    errors: &mut Vec<ConfigError>,
) -> LimitChanges {
    let mut out = LimitChanges::default();
    let by_id: BTreeMap<&str, (usize, &LimitSpec)> = new
        .iter()
        .enumerate()
        .map(|(i, l)| (l.id.as_str(), (i, l)))
        .collect();
    // Slot limits a template lost, by template: one problem each, not one per slot.
    let mut lost: BTreeMap<&str, usize> = BTreeMap::new();
    for o in old {
        let Some(&(i, n)) = by_id.get(o.id.as_str()) else {
            match slot_parts(&o.id) {
                Some((t, _)) => *lost.entry(t).or_default() += 1,
                None => errors.push(problem(
                    "limits",
                    format!(
                        "limit {:?} was removed: a limit cannot be removed while the daemon runs \
                         (records hold limits by position); restart the daemon to remove it",
                        o.id
                    ),
                )),
            }
            continue;
        };
        if let Some((at, name)) = named(n, i, templates) {
            one_change(o, n, &at, &name, &mut out, errors);
        }
        out.limits.push(n.clone());
    }
    for (t, count) in lost {
        errors.push(problem(
            "limits",
            format!(
                "template {t:?} lost {count} slot limits (it was removed or has fewer slots): a \
                 limit cannot be removed while the daemon runs (records hold limits by \
                 position); restart the daemon to remove them"
            ),
        ));
    }
    let running: std::collections::BTreeSet<&str> = old.iter().map(|l| l.id.as_str()).collect();
    for (i, n) in new.iter().enumerate() {
        if running.contains(n.id.as_str()) {
            continue;
        }
        if let Some((_, name)) = named(n, i, templates) {
            out.added.push(name);
        }
        out.limits.push(n.clone());
    }
    out
}

/// Where a change of limit `n` (at `i` in the new limits) is reported and what it is called:
/// `limits[i]` and its id, or for a template's slot limits `templates[j]` and `<id>#slot*`, for
/// slot 0 only (the others are alike); `None` for another slot.
fn named(n: &LimitSpec, i: usize, templates: &[TemplateSpec]) -> Option<(String, String)> {
    let listed = || Some((format!("limits[{i}]"), n.id.clone()));
    let Some((t, k)) = slot_parts(&n.id) else {
        return listed();
    };
    let Some(j) = templates.iter().position(|x| x.id == t) else {
        return listed();
    };
    (k == 0).then(|| (format!("templates[{j}]"), format!("{t}#slot*")))
}

/// One kept limit's change from `o` to `n`, reported at `at` under `name`.
fn one_change(
    o: &LimitSpec,
    n: &LimitSpec,
    at: &str,
    name: &str,
    out: &mut LimitChanges,
    errors: &mut Vec<ConfigError>,
) {
    if n.kind != o.kind {
        errors.push(problem(
            format!("{at}.kind"),
            format!("{name:?}: a limit's kind or home cannot change while the daemon runs"),
        ));
    }
    if n.version < o.version {
        errors.push(problem(
            format!("{at}.version"),
            format!(
                "{name:?}: version {} is below the running version {}; versions only go up",
                n.version, o.version
            ),
        ));
    } else if n.version == o.version && n.rate != o.rate {
        errors.push(problem(
            format!("{at}.version"),
            format!(
                "{name:?}: the rate changed from {} to {} without a higher version; set version = {} or more",
                o.rate,
                n.rate,
                o.version + 1
            ),
        ));
    } else if n.version > o.version {
        out.versioned
            .push((name.to_string(), o.version, n.version, o.rate, n.rate));
    }
    let tuned =
        (n.floor, n.step_cap, n.burst_ms, n.shadow) != (o.floor, o.step_cap, o.burst_ms, o.shadow);
    if tuned {
        out.tuned.push(name.to_string());
    }
}
