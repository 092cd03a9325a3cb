//! `shareplane`: the per-Region daemon and its tools.

use clap::{Parser, Subcommand};
use std::ffi::OsString;
use std::process::ExitCode;

#[derive(Parser)]
#[command(name = "shareplane", version, about = "Hold one rate limit true across several AWS Regions")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the partition-test simulator on a scenario file (see simulations/README.md).
    #[command(disable_help_flag = true)]
    Sim {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<OsString>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Sim { args } => shareplane_sim::cli::main(args),
    }
}
