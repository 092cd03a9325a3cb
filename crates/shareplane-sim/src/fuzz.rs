//! placeholder
use crate::scenario::Scenario;
#[derive(Default)]
pub struct Totals {}
pub struct Report {}
impl Totals {
    pub fn add(&mut self, _r: &Report) {}
    pub fn report(&self, _n: u64, _f: u64) -> String {
        String::new()
    }
}
pub fn generate(_seed: u64) -> Scenario {
    todo!()
}
pub fn to_toml(_sc: &Scenario) -> String {
    String::new()
}
pub fn check(_sc: &Scenario) -> Result<Report, String> {
    Ok(Report {})
}
