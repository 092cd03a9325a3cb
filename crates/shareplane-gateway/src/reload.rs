//! Reloading the gateway's configuration while it serves (SIGHUP in `shareplane gateway`, as the
//! daemon does).
//!
//! What a request is mapped and answered by changes live: the `[[descriptors]]` mappings, the
//! `unmapped` and `template_value` policies ([`Live`]). Everything else (the daemon and Redis
//! URLs, listeners, key groups and key tag, failure policies, the Region, costs, timeouts, the
//! demand settings, `ratelimit_headers`) is held by running tasks and by the names of Redis keys:
//! a reload that changes any of it is refused with every such field named, and the running
//! configuration stays. A file that does not load is refused the same way. Each outcome is
//! logged and counted (`shareplane_gateway_config_reloads_total{result}`).

use std::sync::{Arc, PoisonError, RwLock};

use crate::config::GatewayConfig;
use crate::mapping::{Mapper, UnmappedPolicy, ValuePolicy};

/// What a reload may change.
#[derive(Debug)]
pub struct Live {
    pub mapper: Mapper,
    pub unmapped: UnmappedPolicy,
    pub template_value: ValuePolicy,
}

impl Live {
    pub fn of(cfg: &GatewayConfig) -> Live {
        Live {
            mapper: Mapper::new(cfg.descriptors.clone()),
            unmapped: cfg.unmapped,
            template_value: cfg.template_value,
        }
    }
}

/// The running [`Live`] part, swapped whole by a reload.
#[derive(Debug)]
pub struct LiveCell(RwLock<Arc<Live>>);

impl LiveCell {
    pub fn new(live: Live) -> LiveCell {
        LiveCell(RwLock::new(Arc::new(live)))
    }

    /// The running part (one snapshot per request).
    pub fn get(&self) -> Arc<Live> {
        self.0
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn set(&self, live: Live) {
        *self.0.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(live);
    }
}

/// Every setting a reload may not change, by name, as its value reads.
fn fixed(c: &GatewayConfig) -> Vec<(&'static str, String)> {
    let l = &c.limiter;
    vec![
        ("rules", c.rules_url.clone()),
        ("redis", l.redis_url.clone()),
        ("redis_ca", format!("{:?}", l.redis_ca_pem)),
        ("redis_mode", format!("{:?}", l.redis_mode)),
        ("region", format!("{:?}", l.region)),
        ("gateways_per_region", l.gateways_per_region.to_string()),
        ("max_cost", l.max_cost.to_string()),
        ("redis_timeout_ms", format!("{:?}", l.redis_timeout)),
        ("key_tag", format!("{:?}", l.key_scheme)),
        ("limits (key_group)", format!("{:?}", l.key_groups)),
        ("limits (failure)", format!("{:?}", l.failure)),
        ("grpc_listen", format!("{:?}", c.grpc_listen)),
        ("http_listen", format!("{:?}", c.http_listen)),
        ("demand_token", format!("{:?}", c.demand_token)),
        ("gateway_id", c.gateway_id.clone()),
        ("demand_every_ms", format!("{:?}", c.demand_every)),
        ("rules_timeout_ms", format!("{:?}", c.rules_timeout)),
        ("ratelimit_headers", c.ratelimit_headers.to_string()),
    ]
}

/// What one reload did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Applied,
    Unchanged,
    /// The running configuration stays; every problem, each naming its field.
    Refused(Vec<String>),
}

impl Outcome {
    pub fn name(&self) -> &'static str {
        match self {
            Outcome::Applied => "applied",
            Outcome::Unchanged => "unchanged",
            Outcome::Refused(_) => "refused",
        }
    }
}

/// Adopts `new` (a loaded configuration, or why it did not load) in place of `running` where only
/// the [`Live`] part changed; returns what it did.
pub fn reload(
    running: &mut GatewayConfig,
    cell: &LiveCell,
    new: Result<GatewayConfig, Vec<String>>,
) -> Outcome {
    let outcome = match new {
        Err(errors) => Outcome::Refused(errors),
        Ok(new) => {
            let changed: Vec<String> = fixed(running)
                .into_iter()
                .zip(fixed(&new))
                .filter(|(a, b)| a.1 != b.1)
                .map(|(a, _)| {
                    format!(
                        "{}: changed, but it takes a restart; the running value stays",
                        a.0
                    )
                })
                .collect();
            if !changed.is_empty() {
                Outcome::Refused(changed)
            } else if (new.descriptors == running.descriptors)
                && new.unmapped == running.unmapped
                && new.template_value == running.template_value
            {
                Outcome::Unchanged
            } else {
                cell.set(Live::of(&new));
                *running = new;
                Outcome::Applied
            }
        }
    };
    match &outcome {
        Outcome::Refused(es) => tracing::error!(
            problems = %es.join("; "),
            "configuration reload refused: the running configuration stays"
        ),
        Outcome::Applied => tracing::info!(
            mappings = running.descriptors.len(),
            unmapped = running.unmapped.as_str(),
            template_value = running.template_value.as_str(),
            "configuration reloaded"
        ),
        Outcome::Unchanged => tracing::info!("configuration reloaded: nothing changed"),
    }
    outcome
}
