use std::process::ExitCode;

use clap::Parser;
use srvprof::cli::{Cli, Command};
use srvprof::commands;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match &cli.command {
        Command::Probe(args) => commands::probe::run(args).map(|_| ExitCode::SUCCESS),
        Command::Check(args) => commands::check::run(args.json).map(|ok| {
            if ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(3)
            }
        }),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("srvprof: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}
