// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//! The natrix binary: daemon and CLI in one.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use natrix::config::{Config, ConfigError};
use natrix::{daemon, dataplane, lookup, show, tables::Tables};

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
    ///
    /// A restart of the same build (the running programs pinned under daemon.pin_path are
    /// this build's) reuses them: nothing is loaded or verified. Another build, or a config
    /// change only a new program instance can carry ([[exclude]], fib_cache.entries), loads
    /// and verifies the programs and switches the links to them. Either way the tables and
    /// every mapping are kept.
    ///
    /// When the verifier refuses a program, natrix prints one line (the program, the
    /// verifier's reason and statistics, the kernel) and exits 1; the full verifier log
    /// goes to a file only when asked (--verifier-log, or NATRIX_VERIFIER_LOG=FILE).
    Run {
        #[arg(short, long)]
        config: PathBuf,
        /// Load and verify a new program instance even when the running one is this build's
        /// (the tables and mappings are kept).
        #[arg(long)]
        reload: bool,
        /// Write every program's full verifier log into FILE (default: the environment's
        /// NATRIX_VERIFIER_LOG). Slow: the verifier logs every instruction's state, tens of
        /// MB for a large program; implies a new program instance.
        #[arg(long, value_name = "FILE")]
        verifier_log: Option<PathBuf>,
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
    /// Who holds an outside endpoint: the subscriber, its block and since when (exit 1:
    /// nobody; 2: bad arguments; 3: the tables could not be read).
    Lookup {
        /// The outside endpoint: a pool address and a port (for icmp an echo identifier).
        #[arg(value_name = "IP:PORT", value_parser = lookup::parse_endpoint)]
        outside: std::net::SocketAddrV4,
        /// Only this protocol's mapping: tcp, udp or icmp (default: every protocol's).
        #[arg(long, value_parser = lookup::parse_proto)]
        proto: Option<u8>,
        /// The time the question is about: RFC 3339 (2026-11-26T14:02:11Z) or Unix seconds.
        /// Dynamic mode answers only while the live tables cover it.
        #[arg(long, value_name = "TIME", value_parser = lookup::parse_time)]
        at: Option<lookup::Time>,
        /// The answer as one JSON object (also when nobody holds the endpoint).
        #[arg(long)]
        json: bool,
        /// Pin directory (daemon.pin_path of the config).
        #[arg(long, default_value = DEFAULT_PIN)]
        pin: PathBuf,
    },
    /// Capture packets from the XDP fast path into pcapng: each packet as received and as
    /// sent, with its verdict and reason (exit 2: bad filter or flags).
    Capture {
        /// Only this interface of natrix's (repeatable; default: all of them).
        #[arg(short = 'i', value_name = "IFACE")]
        iface: Vec<String>,
        /// Stop after COUNT records.
        #[arg(short = 'c', value_name = "COUNT")]
        count: Option<u64>,
        /// Stop after SECONDS.
        #[arg(short = 'G', value_name = "SECONDS")]
        seconds: Option<f64>,
        /// Bytes of each packet to keep (default and 0: the whole packet; 128: headers).
        #[arg(short = 's', value_name = "SNAPLEN", default_value_t = 0)]
        snaplen: u32,
        /// Only packets natrix drops, with their reason.
        #[arg(long)]
        drops: bool,
        /// Only the received form of each packet.
        #[arg(long)]
        no_pair: bool,
        /// Where the pcapng goes: a file, or - for standard output.
        #[arg(short = 'w', value_name = "FILE")]
        write: PathBuf,
        /// Pin directory (daemon.pin_path of the config).
        #[arg(long, default_value = DEFAULT_PIN)]
        pin: PathBuf,
        /// A tcpdump/libpcap filter expression (default: every packet).
        #[arg(value_name = "FILTER", trailing_var_arg = true, allow_hyphen_values = true)]
        filter: Vec<String>,
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
        Cmd::Run { config, reload, verifier_log } => {
            let cfg = match config_or_exit(&config) {
                Ok(c) => c,
                Err(code) => return code,
            };
            let mut opts = dataplane::LoadOptions::from_env();
            opts.reload = reload;
            if verifier_log.is_some() {
                opts.verifier_log = verifier_log;
            }
            daemon::run_with(&cfg, &config, &opts)
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
        Cmd::Lookup { outside, proto, at, json, pin } => {
            return lookup_cmd(&lookup::Query { outside, proto, at }, json, &pin);
        }
        Cmd::Capture { iface, count, seconds, snaplen, drops, no_pair, write, pin, filter } => {
            return capture_cmd(
                natrix::capture::Options {
                    pin,
                    ifaces: iface,
                    count,
                    duration: match seconds {
                        Some(s) if !(s.is_finite() && s > 0.0) => {
                            eprintln!("natrix capture: -G {s}: a positive number of seconds");
                            return ExitCode::from(2);
                        }
                        s => s.map(std::time::Duration::from_secs_f64),
                    },
                    snaplen,
                    drops,
                    no_pair,
                    filter: filter.join(" "),
                },
                &write,
            );
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

/// `natrix capture`: exit 0 when it ran (its summary on stderr), 2 for a bad filter or
/// flag, 1 for anything else (another capture running, natrix not loaded).
fn capture_cmd(opts: natrix::capture::Options, write: &std::path::Path) -> ExitCode {
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        if let Err(e) = signal_hook::flag::register(sig, Arc::clone(&stop)) {
            eprintln!("natrix capture: cannot handle signal {sig}: {e}");
            return ExitCode::FAILURE;
        }
    }
    let ready = |names: &[String]| eprintln!("natrix capture: listening on {}", names.join(", "));
    let res = if write == std::path::Path::new("-") {
        natrix::capture::run(&opts, std::io::BufWriter::new(std::io::stdout().lock()), &stop, ready)
    } else {
        match std::fs::File::create(write) {
            Ok(f) => natrix::capture::run(&opts, std::io::BufWriter::new(f), &stop, ready),
            Err(e) => {
                eprintln!("natrix capture: {}: {e}", write.display());
                return ExitCode::FAILURE;
            }
        }
    };
    match res {
        Ok(s) => {
            eprintln!("natrix capture: {} records written, {} records lost", s.written, s.lost);
            if s.stage_fail > 0 {
                eprintln!(
                    "natrix capture: {} packets went past the capture while natrix was reloaded",
                    s.stage_fail
                );
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("natrix capture: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}

/// `natrix lookup`: exit 0 when someone holds the endpoint, 1 when nobody does (the reason
/// on stderr; --json prints the answer still, `inside` null), 3 when the tables could not
/// be read. Argument errors are clap's: exit 2.
fn lookup_cmd(q: &lookup::Query, json: bool, pin: &std::path::Path) -> ExitCode {
    let answer = match Tables::open_pinned(pin).and_then(|t| lookup::lookup(&t, q, &lookup::Clock::now())) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("natrix lookup: {e}");
            return ExitCode::from(3);
        }
    };
    if json {
        match serde_json::to_string_pretty(&answer) {
            Ok(s) => println!("{s}"),
            Err(e) => {
                eprintln!("natrix lookup: {e}");
                return ExitCode::from(3);
            }
        }
    } else if answer.found() {
        print!("{}", answer.text());
    }
    match &answer.reason {
        Some(why) if !answer.found() => {
            eprintln!("natrix lookup: {why}");
            ExitCode::from(1)
        }
        _ => ExitCode::SUCCESS,
    }
}
