//! One configuration problem, naming its field: the constructor that the configuration's checks
//! (`config/`) and the templates' checks (`templates.rs`) share.

use shareplane_core::ConfigError;

pub(crate) fn problem(field: impl Into<String>, what: impl Into<String>) -> ConfigError {
    ConfigError {
        field: field.into(),
        problem: what.into(),
    }
}
