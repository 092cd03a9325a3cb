//! The partition-test simulator (placeholder until it lands).

pub mod cli {
    use std::ffi::OsString;
    use std::process::ExitCode;

    /// `shareplane sim …`: parses its own arguments.
    pub fn main(_args: Vec<OsString>) -> ExitCode {
        eprintln!("shareplane sim: not built yet");
        ExitCode::from(1)
    }
}
