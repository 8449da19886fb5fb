use std::process::ExitCode;

use clap::FromArgMatches;
use srvprof::cli::{Cli, Command};
use srvprof::commands;

fn main() -> ExitCode {
    one_malloc_arena();
    let matches = Cli::command_line().get_matches();
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    // Under sudo, what needs no privilege runs as the user who ran sudo, before it reads a file.
    let unprivileged = matches!(
        cli.command,
        Command::Load(_)
            | Command::Compare { .. }
            | Command::Report(_)
            | Command::Merge { .. }
            | Command::Plan(_)
            | Command::Completions { .. }
            | Command::Explain { .. }
            | Command::Man
    );
    if unprivileged && let Err(e) = srvprof::privilege::drop_to_invoking_user() {
        eprintln!("srvprof: {e}");
        return ExitCode::from(2);
    }
    let result = match &cli.command {
        Command::Probe(args) => commands::probe::run(args).map(|_| ExitCode::SUCCESS),
        Command::Check(args) => commands::check::run(args.json).map(|ok| {
            if ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(3)
            }
        }),
        Command::Load(args) => load(args),
        Command::Compare { a, b, out } => {
            commands::compare::run(a, b, out.as_deref()).map(|_| ExitCode::SUCCESS)
        }
        Command::Run(args) => commands::run::run(args),
        Command::Report(args) => commands::report::run(args).map(|_| ExitCode::SUCCESS),
        Command::Merge { dirs, out, force } => {
            commands::merge::run(dirs, out, *force).map(|_| ExitCode::SUCCESS)
        }
        Command::Plan(args) => {
            let plan = matches
                .subcommand_matches("plan")
                .expect("the plan command's options");
            commands::plan::run(args, plan).map(|_| ExitCode::SUCCESS)
        }
        Command::Completions { shell } => {
            print!("{}", srvprof::cli::completions(*shell));
            Ok(ExitCode::SUCCESS)
        }
        Command::Explain { kind } => commands::explain::text(kind.as_deref()).map(|t| {
            print!("{t}");
            ExitCode::SUCCESS
        }),
        Command::Man => {
            print!("{}", srvprof::cli::man_page());
            Ok(ExitCode::SUCCESS)
        }
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("srvprof: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}

/// `srvprof load`: with `--out DIR`, its report also to DIR/load.json and its latency to
/// DIR/latency.hlog (unless `--hdr-log` puts it elsewhere): the folder a split run's merge reads.
fn load(args: &srvprof::cli::LoadCmdArgs) -> Result<ExitCode, srvprof::error::SrvprofError> {
    let mut load = args.load.clone();
    let mut out_dir = None;
    let file = match &args.out {
        Some(dir) => {
            // Made (private) now: a folder that cannot hold the results stops the load first.
            let opened = srvprof::output::open_dir(dir)?;
            for name in ["load.json", "latency.hlog"] {
                srvprof::output::check_writable(&opened, name, true)?;
            }
            out_dir = Some(opened);
            if load.hdr_log.is_none() {
                load.hdr_log = Some(dir.join("latency.hlog"));
            }
            Some(dir.join("load.json"))
        }
        None => None,
    };
    let code = srvprof_loadgen::cli::run_load_command(&args.url, &load, args.json, file.as_deref());
    if let Some(dir) = out_dir {
        dir.finish()
            .map_err(|e| srvprof::output::write_err(dir.path(), e))?;
    }
    Ok(code)
}

/// One malloc arena for all threads (each keeps its small-block cache in front of it): with an
/// arena per thread, a run's RSS grew about 1 MB a minute for as long as it lasted, as each
/// thread's arena fragmented; with one it stays flat, 20 MB lower (docs/benchmarks.md, long runs).
fn one_malloc_arena() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets an allocator parameter; no other thread runs yet.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
    }
}
