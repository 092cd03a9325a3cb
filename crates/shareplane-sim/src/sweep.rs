//! placeholder
use serde::Serialize;
#[derive(Debug, thiserror::Error)]
pub enum SweepError {
    #[error("{0}")]
    Offsets(String),
}
#[derive(Serialize)]
pub struct SweepResult {}
impl SweepResult {
    pub fn report(&self) -> String {
        String::new()
    }
}
pub fn sweep(_sc: &crate::scenario::Scenario, _o: &[f64]) -> Result<SweepResult, SweepError> {
    Err(SweepError::Offsets("todo".into()))
}
