//! Stand-alone load generator: `cargo run --release -p srvprof-loadgen --example load -- URL [options] [--json] [--out FILE]`.

use clap::Parser;
use srvprof_loadgen::cli::{LoadArgs, run_load_command};

#[derive(Parser)]
#[command(name = "load", about = "HTTP/1.1 load generator (srvprof-loadgen)")]
struct Cli {
    /// Target URL, e.g. http://127.0.0.1:8080/
    url: String,
    #[command(flatten)]
    load: LoadArgs,
    /// Print the report as JSON instead of text.
    #[arg(long)]
    json: bool,
    /// Also write the JSON report to this file.
    #[arg(long)]
    out: Option<std::path::PathBuf>,
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    run_load_command(&cli.url, &cli.load, cli.json, cli.out.as_deref())
}
