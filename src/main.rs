// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! The natrix binary: daemon and CLI in one.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use natrix::config::{Config, ConfigError};
use natrix::{daemon, dataplane, show, tables::Tables};

const DEFAULT_PIN: &str = "/sys/fs/bpf/natrix";

#[derive(Parser)]
#[command(name = "natrix", version, about = "Carrier-grade NAT44 with an XDP data plane")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run the daemon: validate the config, load or take over the data plane, attach, sweep.
    Run {
        #[arg(short, long)]
        config: PathBuf,
    },
    /// Check a config file and exit (status 2 on error).
    Check {
        #[arg(short, long)]
        config: PathBuf,
    },
    /// Detach from every interface and remove all pinned state.
    Down {
        /// Pin directory (daemon.pin_path of the config).
        #[arg(long, default_value = DEFAULT_PIN)]
        pin: PathBuf,
    },
    /// Show sessions.
    Sessions {
        #[arg(long)]
        json: bool,
        #[arg(long, default_value = DEFAULT_PIN)]
        pin: PathBuf,
    },
    /// Check the live tables' invariants (read-only); exit 1 when any is broken.
    CheckTables {
        #[arg(long)]
        json: bool,
        #[arg(long, default_value = DEFAULT_PIN)]
        pin: PathBuf,
        /// The daemon's sweep interval in seconds (daemon.sweep_interval): how late a
        /// hold-down may end.
        #[arg(long, default_value_t = 1)]
        sweep_interval: u64,
    },
    /// Show counters, drops by reason, and table occupancy.
    Stats {
        #[arg(long)]
        json: bool,
        #[arg(long, default_value = DEFAULT_PIN)]
        pin: PathBuf,
    },
}

fn config_or_exit(path: &std::path::Path) -> Result<Config, ExitCode> {
    Config::load(path).map_err(|e| {
        eprintln!("natrix: {}: {e}", path.display());
        ExitCode::from(match e {
            ConfigError::Io { .. } => 1,
            _ => 2,
        })
    })
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("NATRIX_LOG").unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let res: anyhow::Result<()> = match cli.cmd {
        Cmd::Run { config } => {
            let cfg = match config_or_exit(&config) {
                Ok(c) => c,
                Err(code) => return code,
            };
            daemon::run(&cfg, &config)
        }
        Cmd::Check { config } => match config_or_exit(&config) {
            Ok(c) => {
                for w in &c.warnings {
                    eprintln!("warning: {w}");
                }
                println!("{}: ok", config.display());
                Ok(())
            }
            Err(code) => return code,
        },
        Cmd::Down { pin } => dataplane::down(&pin)
            .map(|n| println!("natrix down: removed {n} pinned object(s)"))
            .map_err(Into::into),
        Cmd::Sessions { json, pin } => (|| {
            let rows = show::sessions(&Tables::open_pinned(&pin)?)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&rows)?);
            } else {
                print!("{}", show::sessions_table(&rows));
            }
            Ok(())
        })(),
        Cmd::CheckTables { json, pin, sweep_interval } => {
            let opts = natrix::check::Options {
                sweep_interval: std::time::Duration::from_secs(sweep_interval),
                ..Default::default()
            };
            let report =
                match Tables::open_pinned(&pin).and_then(|t| natrix::check::check_tables_with(&t, &opts)) {
                    Ok(r) => r,
                    Err(e) => {
                        eprintln!("natrix: {e:#}");
                        return ExitCode::from(2);
                    }
                };
            if json {
                match serde_json::to_string_pretty(&report) {
                    Ok(s) => println!("{s}"),
                    Err(e) => {
                        eprintln!("natrix: {e:#}");
                        return ExitCode::from(2);
                    }
                }
            } else {
                print!("{}", report.text());
            }
            return ExitCode::from(if report.healthy() { 0 } else { 1 });
        }
        Cmd::Stats { json, pin } => (|| {
            let s = show::stats(&Tables::open_pinned(&pin)?)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&s)?);
            } else {
                print!("{}", show::stats_table(&s));
            }
            Ok(())
        })(),
    };
    match res {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("natrix: {e:#}");
            ExitCode::FAILURE
        }
    }
}
