//! How every long-running binary writes its log lines: `shareplane run`, `demo`, `local` and
//! `gateway`, and `shareplane-loadgen`. One option, `--log-format text|json` ([`LogArgs`],
//! flattened into each command's arguments), and one set-up, [`init`], so that the spelling, the
//! default and the JSON shape are the same everywhere.
//!
//! The JSON shape is tracing-subscriber's: one object per line with `timestamp`, `level`,
//! `target` and `fields` (the event's message as `fields.message`, each key/value field beside
//! it). A field the code leaves out is absent from the line, never written empty.

/// How log lines are written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines (colours on a terminal).
    #[default]
    Text,
    /// One JSON object per line, every field of the event at the top level of `fields`.
    Json,
}

/// The `--log-format` option, the same for every binary.
#[derive(Clone, Copy, Debug, Default, clap::Args)]
pub struct LogArgs {
    /// How log lines are written: `text`, or `json` (one object per line on stderr).
    #[arg(long, value_enum, default_value = "text")]
    pub log_format: LogFormat,
}

/// Logs to stderr in `format`; `RUST_LOG` overrides `default_filter` (an `EnvFilter` directive
/// such as `info`). A second call keeps the first set-up.
pub fn init(format: LogFormat, default_filter: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_filter));
    use std::io::IsTerminal;
    let ansi = std::io::stderr().is_terminal();
    let fmt = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => fmt.with_ansi(ansi).try_init(),
        LogFormat::Json => fmt.json().with_ansi(false).try_init(),
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        log: LogArgs,
    }

    #[test]
    fn the_option_defaults_to_text_and_refuses_other_formats() {
        let parse = |args: &[&str]| Cli::try_parse_from(args).map(|c| c.log.log_format);
        assert_eq!(parse(&["x"]).ok(), Some(LogFormat::Text));
        assert_eq!(
            parse(&["x", "--log-format", "json"]).ok(),
            Some(LogFormat::Json)
        );
        assert_eq!(
            parse(&["x", "--log-format", "text"]).ok(),
            Some(LogFormat::Text)
        );
        let err = parse(&["x", "--log-format", "xml"])
            .err()
            .map(|e| e.to_string());
        assert!(
            err.as_deref()
                .is_some_and(|e| e.contains("text") && e.contains("json")),
            "{err:?}"
        );
    }
}
