//! Where health verdicts about Regions come from (SPEC §6): an outside check per Region.
//! Missing or unreadable data is `Unknown`, which never counts as unhealthy.

use shareplane_core::{Health, PerRegion};
use std::future::Future;
use std::sync::{Arc, Mutex};

/// A source of health verdicts for every Region (the own one included, for fencing).
pub trait HealthSource: Send + Sync + 'static {
    /// The latest verdicts. Implementations return `Unknown` for what they cannot read; they
    /// never fail.
    fn read(&self) -> impl Future<Output = PerRegion<Health>> + Send;
}

/// Verdicts set by hand: the demo's buttons and tests. Cloning shares the verdicts.
#[derive(Clone, Default)]
pub struct SimHealth {
    verdicts: Arc<Mutex<PerRegion<Health>>>,
}

impl SimHealth {
    pub fn new(initial: PerRegion<Health>) -> SimHealth {
        SimHealth {
            verdicts: Arc::new(Mutex::new(initial)),
        }
    }

    pub fn set(&self, region: shareplane_core::RegionId, health: Health) {
        let mut v = self.verdicts.lock().unwrap_or_else(|e| e.into_inner());
        v[region] = health;
    }

    pub fn get(&self) -> PerRegion<Health> {
        *self.verdicts.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl HealthSource for SimHealth {
    async fn read(&self) -> PerRegion<Health> {
        self.get()
    }
}

/// No health data at all: every verdict is `Unknown`, so two-signals never reclaims.
#[derive(Clone, Copy, Default)]
pub struct NoHealth;

impl HealthSource for NoHealth {
    async fn read(&self) -> PerRegion<Health> {
        PerRegion::default()
    }
}
