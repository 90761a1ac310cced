//! `lakestream`: run Lakestream.
//!
//! - `lakestream dev` — every role in one process on the embedded metadata store and the
//!   local filesystem under `./lakestream-data`; prints its URLs.
//! - `lakestream serve --config FILE` — a deployable service configured by a TOML file
//!   (see `deploy/`), environment variables and flags, in that order of increasing precedence.
//! - `lakestream inspect KIND FILE` — decode a WAL object, an index value, a companion file or
//!   a compacted file's footer.

mod inspect;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use lakestream_server::{ServerConfig, Stack};

#[derive(Debug, Parser)]
#[command(
    name = "lakestream",
    version,
    about = "Streams on object storage: the Lakestream storage format v3"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run every role in one process on embedded defaults (zero setup).
    Dev {
        /// Where data lives.
        #[arg(long, default_value = "lakestream-data", env = "LAKESTREAM_DATA_DIR")]
        data_dir: PathBuf,
        /// Where the HTTP API listens.
        #[arg(long, default_value = "127.0.0.1:8080", env = "LAKESTREAM_HTTP_ADDR")]
        http_addr: SocketAddr,
    },
    /// Run a service from a configuration file.
    Serve {
        /// The TOML configuration file.
        #[arg(long, short)]
        config: PathBuf,
        /// Where the HTTP API listens (overrides the file and LAKESTREAM_HTTP_ADDR).
        #[arg(long)]
        http_addr: Option<SocketAddr>,
    },
    /// Decode a stored structure and print it (what an operator reaches for in an incident).
    Inspect {
        /// What the file holds.
        #[arg(value_enum)]
        kind: inspect::Kind,
        /// The file.
        file: PathBuf,
    },
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    if let Command::Inspect { kind, file } = &cli.command {
        return match inspect::inspect(*kind, file) {
            Ok(text) => {
                print!("{text}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("lakestream inspect: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let config = match load_config(&cli.command) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("lakestream: {e}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("lakestream: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let dev = matches!(cli.command, Command::Dev { .. });
    match runtime.block_on(run(config, dev)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("lakestream: {e}");
            ExitCode::FAILURE
        }
    }
}

fn load_config(command: &Command) -> Result<ServerConfig, String> {
    let config = match command {
        Command::Dev { data_dir, http_addr } => ServerConfig::dev(data_dir, *http_addr),
        Command::Serve { config, http_addr } => {
            let mut c = ServerConfig::from_file(config).map_err(|e| e.to_string())?;
            c.apply_env(|v| std::env::var(v).ok()).map_err(|e| e.to_string())?;
            if let Some(addr) = http_addr {
                c.http.addr = *addr;
            }
            c
        }
        Command::Inspect { .. } => return Err("inspect needs no configuration".into()),
    };
    config.validate().map_err(|e| e.to_string())?;
    Ok(config)
}

async fn run(config: ServerConfig, dev: bool) -> Result<(), String> {
    let stack = Stack::open(&config).await.map_err(|e| e.to_string())?;
    let shutdown = async {
        shutdown_signal().await;
        tracing::info!("shutting down: publishing pending appends and releasing leases");
    };
    lakestream_server::serve(
        &config,
        stack,
        |addr| {
            if dev {
                println!("Lakestream dev is running (embedded metadata store and local files).");
            }
            println!("  HTTP API:  http://{addr}/v1/namespaces");
            println!("  metrics:   http://{addr}/metrics");
            println!("  health:    http://{addr}/healthz");
            println!("Try: curl -X POST http://{addr}/v1/namespaces/default/streams -H 'content-type: application/json' -d '{{\"name\":\"events\"}}'");
            println!("Press Ctrl-C to stop.");
        },
        shutdown,
    )
    .await
    .map_err(|e| format!("HTTP server: {e}"))
}

/// Resolves on Ctrl-C (SIGINT) or, on Unix, SIGTERM (what `docker stop` sends).
async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
