//! `lakestream`: run Lakestream.
//!
//! - `lakestream dev` — every role in one process on the embedded metadata store and the
//!   local filesystem under `./lakestream-data`; prints its URLs.
//! - `lakestream serve --config FILE` — a deployable service configured by a TOML file
//!   (see `deploy/`), environment variables and flags, in that order of increasing precedence.
//! - `lakestream inspect KIND FILE` — decode a WAL object, an index value, a companion file or
//!   a compacted file's footer.
//! - `lakestream namespace|stream|produce|consume|describe|offsets|trim` — clients of a
//!   running service's HTTP API (`--url`, `--token`, `--ca-file` or a profile; see
//!   `docs/cli.md`, which also lists the exit codes).
//! - `lakestream bench produce|consume|compact|events|meta|all... --out DIR` — end-to-end
//!   benchmarks with same-run baselines (see `lakestream-bench`).

mod client;
mod config;
mod inspect;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use config::{Config, LogFormat};

#[derive(Debug, Parser)]
#[command(
    name = "lakestream",
    version,
    about = "Streams on object storage: the Lakestream storage format v3"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Log line format on stderr: `text` or `json` (one object per line, with the request's
    /// span fields). Overrides `[log] format` of a configuration file.
    #[arg(long, global = true, env = "LAKESTREAM_LOG_FORMAT")]
    log_format: Option<LogFormat>,
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
        /// Where the gRPC API listens, or `off`.
        #[arg(long, default_value = "127.0.0.1:9090", env = "LAKESTREAM_GRPC_ADDR")]
        grpc_addr: GrpcAddr,
        /// Where the Kafka wire protocol is served, or `off`.
        #[arg(long, default_value = "127.0.0.1:9092")]
        kafka_addr: GrpcAddr,
        /// How long CloudEvents ingest deduplicates retries (source + id), at most 24h.
        #[arg(long, env = "LAKESTREAM_CLOUDEVENTS_DEDUP_WINDOW", value_parser = config::parse_duration)]
        cloudevents_dedup_window: Option<std::time::Duration>,
    },
    /// Run a service from a configuration file, with the roles its `[roles]` section names.
    Serve(ServeArgs),
    /// Run the writer service (appends, soft trims) from a configuration file.
    Writer(ServeArgs),
    /// Run the reader service (fetches, offsets) from a configuration file.
    Reader(ServeArgs),
    /// Run the compactor service (background compaction and reclamation; health and
    /// metrics over HTTP) from a configuration file.
    Compactor(ServeArgs),
    /// Run the catalog service (namespaces and streams) from a configuration file.
    Catalog(ServeArgs),
    /// Create or list namespaces.
    Namespace {
        #[command(subcommand)]
        action: NamespaceAction,
        #[command(flatten)]
        target: Target,
    },
    /// Create, list, describe or drop streams.
    Stream {
        #[command(subcommand)]
        action: StreamAction,
        #[command(flatten)]
        target: Target,
    },
    /// Produce entries as the input is read: each line of standard input is one entry (or
    /// each `--delimiter`-ended record, or each length-prefixed frame); with FILES, each file
    /// is one entry. Exits 3 naming every entry that was not appended.
    Produce {
        /// The stream.
        stream: String,
        /// Files to produce, one entry each.
        files: Vec<PathBuf>,
        /// The partition.
        #[arg(long, short, default_value_t = 0)]
        partition: u32,
        /// Records per entry.
        #[arg(long, default_value_t = 1)]
        record_count: u32,
        /// What ends each entry on standard input (escapes: \n \t \r \0 \\).
        #[arg(long, short = 'D', default_value = "\\n", conflicts_with = "length_prefixed")]
        delimiter: String,
        /// Standard input is binary frames: a 4-byte big-endian length, then the entry.
        #[arg(long)]
        length_prefixed: bool,
        /// At most this many entries per request.
        #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u64).range(1..=10_000))]
        batch_entries: u64,
        /// At most this many payload bytes per request (a larger entry is sent alone).
        #[arg(long, default_value_t = 1 << 20, value_parser = clap::value_parser!(u64).range(1..=64 << 20))]
        batch_bytes: u64,
        /// How long a request waits for more input once it holds an entry.
        #[arg(long, default_value_t = 5)]
        linger_ms: u64,
        /// Print nothing for each appended entry.
        #[arg(long, short)]
        quiet: bool,
        /// Show a progress bar when producing files (default: when stderr is a terminal).
        #[arg(long, overrides_with = "no_progress")]
        progress: bool,
        /// Never show a progress bar.
        #[arg(long)]
        no_progress: bool,
        #[command(flatten)]
        target: Target,
    },
    /// Consume entries of a partition, printing each payload (or JSON, or a table).
    Consume {
        /// The stream.
        stream: String,
        /// The partition.
        #[arg(long, short, default_value_t = 0)]
        partition: u32,
        /// Start at this offset (default: the first entry).
        #[arg(long, conflicts_with_all = ["from_end", "from_time"])]
        offset: Option<u64>,
        /// Start after the last entry: only what is appended from now on.
        #[arg(long, conflicts_with = "from_time")]
        from_end: bool,
        /// Start at the first entry appended at or after this time: milliseconds since the
        /// epoch, RFC 3339 (2026-12-01T10:00:00Z), or -DURATION (-15m).
        #[arg(long)]
        from_time: Option<String>,
        /// Stop after this many entries.
        #[arg(long = "count", short = 'n')]
        count: Option<u64>,
        /// Keep waiting for new entries, and reconnect after a lost connection.
        #[arg(long, short)]
        follow: bool,
        /// How entries are printed.
        #[arg(long, value_enum, default_value = "raw")]
        format: client::consume::Format,
        /// The same as `--format json`.
        #[arg(long, hide = true, conflicts_with = "format")]
        json: bool,
        /// What follows each payload in the raw format (escapes: \n \t \r \0 \\).
        #[arg(long, short = 'D', default_value = "\\n")]
        delimiter: String,
        /// At most this many payload bytes per fetch.
        #[arg(long)]
        max_bytes: Option<usize>,
        /// Consume as this consumer group: start at its committed offset (unless a start is
        /// given) and commit after each batch printed.
        #[arg(long, short = 'g')]
        group: Option<String>,
        #[command(flatten)]
        target: Target,
    },
    /// Consumer groups: list them, or show a group's committed offsets and lag.
    Groups {
        #[command(subcommand)]
        action: GroupsAction,
        #[command(flatten)]
        target: Target,
    },
    /// Describe a stream: its settings and each partition's log and offsets.
    Describe {
        /// The stream.
        stream: String,
        #[command(flatten)]
        target: Target,
    },
    /// Print the first and next offsets and the trim marker of a stream's partitions.
    Offsets {
        /// The stream.
        stream: String,
        /// Only this partition.
        #[arg(long, short)]
        partition: Option<u32>,
        #[command(flatten)]
        target: Target,
    },
    /// Soft-trim a partition: entries through OFFSET (inclusive) are no longer read.
    Trim {
        /// The stream.
        stream: String,
        /// The partition.
        #[arg(long, short)]
        partition: u32,
        /// The last offset to trim.
        #[arg(long)]
        through: u64,
        #[command(flatten)]
        target: Target,
    },
    /// Decode a stored structure and print it (what an operator reaches for in an incident).
    Inspect {
        /// What the file holds.
        #[arg(value_enum)]
        kind: inspect::Kind,
        /// The file.
        file: PathBuf,
    },
    /// Benchmark a stack in process (produce, consume, compact, events or all) against
    /// baselines measured on the same stores; writes JSON, Markdown and PNG plots to --out.
    Bench(lakestream_bench::cli::BenchArgs),
}

impl Command {
    /// Whether this is a client of a running service's HTTP API.
    fn is_client(&self) -> bool {
        matches!(
            self,
            Command::Namespace { .. }
                | Command::Stream { .. }
                | Command::Produce { .. }
                | Command::Consume { .. }
                | Command::Groups { .. }
                | Command::Describe { .. }
                | Command::Offsets { .. }
                | Command::Trim { .. }
        )
    }
}

/// Which service and namespace a client command talks to, and how to authenticate; unset
/// values come from the profile file (see `docs/cli.md`).
#[derive(Debug, clap::Args)]
struct Target {
    /// The service's URL: http://host:port or https://host:port.
    #[arg(long, global = true, env = "LAKESTREAM_URL")]
    url: Option<String>,
    /// The bearer token the service requires.
    #[arg(long, global = true, env = "LAKESTREAM_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// A PEM file of CA certificates to trust for https:// (besides the system's).
    #[arg(long, global = true, env = "LAKESTREAM_CA_FILE")]
    ca_file: Option<PathBuf>,
    /// The namespace (default `default`).
    #[arg(long, short = 'N', global = true, env = "LAKESTREAM_NAMESPACE")]
    namespace: Option<String>,
    /// A profile of the profile file (default: its `default_profile`).
    #[arg(long, global = true, env = "LAKESTREAM_PROFILE")]
    profile: Option<String>,
}

impl Target {
    /// The connection and namespace, from the flags, the environment and the profile file.
    fn resolve(self) -> client::ClientResult<(client::Api, String)> {
        let env = |k: &str| std::env::var(k).ok();
        let given = client::profile::Given {
            url: self.url,
            token: self.token,
            ca_file: self.ca_file,
            namespace: self.namespace,
            profile: self.profile,
        };
        let file = client::profile::default_path(&env);
        let (connection, namespace) = client::profile::resolve(given, file.as_deref(), &env)?;
        Ok((client::Api::new(&connection)?, namespace))
    }
}

#[derive(Debug, Subcommand)]
enum GroupsAction {
    /// List the namespace's consumer groups.
    List,
    /// A group's committed offset, the next offset and the lag of each partition of a stream.
    Offsets {
        /// The group.
        group: String,
        /// The stream.
        stream: String,
    },
}

#[derive(Debug, Subcommand)]
enum NamespaceAction {
    /// Create a namespace.
    Create {
        /// Its name.
        name: String,
    },
    /// List namespaces.
    List,
    /// Delete a namespace that holds no live stream.
    Delete {
        /// Its name.
        name: String,
    },
}

#[derive(Debug, Subcommand)]
enum StreamAction {
    /// Create a stream.
    Create {
        /// Its name.
        name: String,
        /// How many partitions.
        #[arg(long, default_value_t = 1)]
        partitions: u32,
    },
    /// List the namespace's streams.
    List,
    /// Describe a stream (the same as `lakestream describe`).
    Describe {
        /// Its name.
        name: String,
    },
    /// Change a stream's properties, e.g. its retention.
    Update {
        /// Its name.
        name: String,
        /// Set a property (repeatable), e.g. `--set retention_ms=86400000`.
        #[arg(long, value_name = "KEY=VALUE")]
        set: Vec<String>,
        /// Remove a property (repeatable).
        #[arg(long, value_name = "KEY")]
        unset: Vec<String>,
    },
    /// Drop a stream (its identity cannot be created again).
    Drop {
        /// Its name.
        name: String,
    },
}

/// Runs a client command against a service's HTTP API.
async fn run_client(command: Command) -> client::ClientResult<()> {
    use client::{commands, consume, produce};
    use lakestream_format::Clock as _;
    match command {
        Command::Namespace { action, target } => {
            let (api, _) = target.resolve()?;
            match action {
                NamespaceAction::Create { name } => commands::create_namespace(&api, &name).await,
                NamespaceAction::List => commands::list_namespaces(&api).await,
                NamespaceAction::Delete { name } => commands::delete_namespace(&api, &name).await,
            }
        }
        Command::Stream { action, target } => {
            let (api, ns) = target.resolve()?;
            match action {
                StreamAction::Create { name, partitions } => {
                    commands::create_stream(&api, &ns, &name, partitions).await
                }
                StreamAction::List => commands::list_streams(&api, &ns).await,
                StreamAction::Describe { name } => commands::describe(&api, &ns, &name).await,
                StreamAction::Update { name, set, unset } => {
                    let mut changes = serde_json::Map::new();
                    for pair in set {
                        let Some((k, v)) = pair.split_once('=') else {
                            return Err(client::ClientError::usage(format!(
                                "--set {pair:?}: expected KEY=VALUE"
                            )));
                        };
                        changes.insert(k.to_string(), serde_json::Value::String(v.to_string()));
                    }
                    for k in unset {
                        changes.insert(k, serde_json::Value::Null);
                    }
                    if changes.is_empty() {
                        return Err(client::ClientError::usage("stream update: give --set or --unset"));
                    }
                    commands::update_stream(&api, &ns, &name, changes).await
                }
                StreamAction::Drop { name } => commands::drop_stream(&api, &ns, &name).await,
            }
        }
        Command::Produce {
            stream,
            files,
            partition,
            record_count,
            delimiter,
            length_prefixed,
            batch_entries,
            batch_bytes,
            linger_ms,
            quiet,
            progress,
            no_progress,
            target,
        } => {
            let input = if !files.is_empty() {
                produce::Input::Files(files)
            } else if length_prefixed {
                produce::Input::Stdin(produce::Framing::LengthPrefixed)
            } else {
                let d = produce::parse_delimiter(&delimiter).map_err(client::ClientError::usage)?;
                produce::Input::Stdin(produce::Framing::Delimited(d))
            };
            let options = produce::ProduceOptions {
                partition,
                record_count,
                batch_entries: batch_entries as usize,
                batch_bytes: batch_bytes as usize,
                linger: std::time::Duration::from_millis(linger_ms),
                quiet,
                progress: if no_progress { Some(false) } else { progress.then_some(true) },
            };
            let (api, ns) = target.resolve()?;
            produce::produce(&api, &ns, &stream, input, &options).await
        }
        Command::Consume {
            stream,
            partition,
            offset,
            from_end,
            from_time,
            count,
            follow,
            format,
            json,
            delimiter,
            max_bytes,
            group,
            target,
        } => {
            let start = match (offset, from_end, from_time) {
                (Some(o), _, _) => consume::Start::Offset(o),
                (None, true, _) => consume::Start::End,
                (None, false, Some(t)) => consume::Start::Time(
                    consume::parse_time(&t, lakestream_format::SystemClock.now_ms())
                        .map_err(client::ClientError::usage)?,
                ),
                (None, false, None) => consume::Start::Committed,
            };
            let options = consume::ConsumeOptions {
                partition,
                start,
                count,
                follow,
                format: if json { consume::Format::Json } else { format },
                delimiter: produce::parse_delimiter(&delimiter).map_err(client::ClientError::usage)?,
                max_bytes,
                group,
            };
            let (api, ns) = target.resolve()?;
            consume::consume(&api, &ns, &stream, &options).await
        }
        Command::Groups { action, target } => {
            let (api, ns) = target.resolve()?;
            match action {
                GroupsAction::List => commands::list_groups(&api, &ns).await,
                GroupsAction::Offsets { group, stream } => {
                    commands::group_offsets(&api, &ns, &group, &stream).await
                }
            }
        }
        Command::Describe { stream, target } => {
            let (api, ns) = target.resolve()?;
            commands::describe(&api, &ns, &stream).await
        }
        Command::Offsets { stream, partition, target } => {
            let (api, ns) = target.resolve()?;
            commands::print_offsets(&api, &ns, &stream, partition).await
        }
        Command::Trim { stream, partition, through, target } => {
            let (api, ns) = target.resolve()?;
            commands::trim(&api, &ns, &stream, partition, through).await
        }
        _ => Err(client::ClientError::usage("not a client command")),
    }
}

/// What must live as long as the process for its logs and traces: the span exporter, whose
/// pending batches are sent when it is dropped.
struct Telemetry {
    #[cfg(feature = "otlp")]
    provider: Option<opentelemetry_sdk::trace::SdkTracerProvider>,
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        #[cfg(feature = "otlp")]
        if let Some(provider) = self.provider.take() {
            let _ = provider.shutdown();
        }
    }
}

/// Logs to stderr in `format`, filtered by `RUST_LOG` (default `info`), and exports the same
/// spans to `otlp_endpoint` when one is given (feature `otlp`).
fn init_logging(format: LogFormat, otlp_endpoint: Option<&str>) -> Result<Telemetry, String> {
    use tracing_subscriber::Layer as _;
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let lines = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let lines = match format {
        // Colours only on a terminal: log files and collectors get plain text.
        LogFormat::Text => lines.with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr())).boxed(),
        // One object per line; the enclosing spans' fields (a request's id) in `span` and
        // `spans`.
        LogFormat::Json => lines.json().with_current_span(true).with_span_list(true).boxed(),
    };
    #[cfg(feature = "otlp")]
    {
        use opentelemetry::trace::TracerProvider as _;
        let provider = otlp_endpoint.map(otlp_provider).transpose()?;
        let spans =
            provider.as_ref().map(|p| tracing_opentelemetry::layer().with_tracer(p.tracer("lakestream")));
        tracing_subscriber::registry().with(filter).with(lines).with(spans).init();
        Ok(Telemetry { provider })
    }
    #[cfg(not(feature = "otlp"))]
    {
        if otlp_endpoint.is_some() {
            return Err("tracing.otlp_endpoint is set, but this lakestream was built without the `otlp` \
                 feature (cargo build -p lakestream-cli --features otlp)"
                .into());
        }
        tracing_subscriber::registry().with(filter).with(lines).init();
        Ok(Telemetry {})
    }
}

/// Batches of spans to an OTLP/HTTP collector at `endpoint`, from a thread of their own.
#[cfg(feature = "otlp")]
fn otlp_provider(endpoint: &str) -> Result<opentelemetry_sdk::trace::SdkTracerProvider, String> {
    use opentelemetry_otlp::WithExportConfig as _;
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_endpoint(endpoint)
        .build()
        .map_err(|e| format!("tracing.otlp_endpoint {endpoint:?}: {e}"))?;
    let resource = opentelemetry_sdk::Resource::builder().with_service_name("lakestream").build();
    Ok(opentelemetry_sdk::trace::SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource)
        .build())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // A service's format may come from its configuration file; every other command logs
    // as the flag (or LAKESTREAM_LOG_FORMAT) says.
    let config = match &cli.command {
        Command::Dev { .. }
        | Command::Serve(_)
        | Command::Writer(_)
        | Command::Reader(_)
        | Command::Compactor(_)
        | Command::Catalog(_) => match load_config(&cli.command) {
            Ok(c) => Some(c),
            Err(e) => {
                eprintln!("lakestream: {e}");
                return ExitCode::from(2);
            }
        },
        _ => None,
    };
    let configured = config.as_ref().map(|c| c.log.format);
    let otlp_endpoint = config.as_ref().and_then(|c| c.tracing.otlp_endpoint.as_deref());
    // Dropped when main returns: pending spans are exported then.
    let _telemetry = match init_logging(cli.log_format.or(configured).unwrap_or_default(), otlp_endpoint) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("lakestream: {e}");
            return ExitCode::from(2);
        }
    };
    if let Command::Bench(args) = cli.command {
        return lakestream_bench::cli::main(args, load_bench_config);
    }
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
    if cli.command.is_client() {
        let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
            Ok(r) => r,
            Err(e) => {
                eprintln!("lakestream: cannot start the async runtime: {e}");
                return ExitCode::FAILURE;
            }
        };
        return match runtime.block_on(run_client(cli.command)) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("lakestream: {e}");
                ExitCode::from(e.status as u8)
            }
        };
    }
    let Some(config) = config else {
        eprintln!("lakestream: this command needs no service configuration");
        return ExitCode::from(2);
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

fn load_config(command: &Command) -> Result<Config, String> {
    let config = match command {
        Command::Dev { data_dir, http_addr, grpc_addr, kafka_addr, cloudevents_dedup_window } => {
            // The dev defaults as a document, then the environment, then the flags.
            let text = Config::dev_toml(data_dir, *http_addr);
            let mut c =
                Config::from_toml_and_env(&text, Path::new("(lakestream dev defaults)"), process_env())
                    .map_err(|e| e.to_string())?;
            c.server.http.addr = *http_addr;
            c.server.grpc.addr = grpc_addr.0;
            c.kafka.addr = kafka_addr.0;
            if let Some(window) = cloudevents_dedup_window {
                c.service.cloudevents.dedup_window = *window;
            }
            c
        }
        Command::Serve(args) => args.load()?,
        Command::Writer(args) => args.load_role(|r| &mut r.writer)?,
        Command::Reader(args) => args.load_role(|r| &mut r.reader)?,
        Command::Compactor(args) => args.load_role(|r| &mut r.compactor)?,
        Command::Catalog(args) => args.load_role(|r| &mut r.catalog)?,
        // The clients, `inspect` and `bench`.
        _ => {
            return Err("this command needs no service configuration".into());
        }
    };
    config.validate().map_err(|e| e.to_string())?;
    Ok(config)
}

async fn run(config: Config, dev: bool) -> Result<(), String> {
    let service = lakestream_service::Service::start(&config.service).await.map_err(|e| e.to_string())?;
    let shutdown = async {
        shutdown_signal().await;
        tracing::info!("shutting down: publishing pending appends and releasing leases");
    };
    // The Kafka front end is bound first, so that a taken port fails the start.
    let mut front_ends: Vec<lakestream_server::FrontEnd> = Vec::new();
    let mut kafka_at = None;
    if config.kafka.addr.is_some() {
        let kafka = lakestream_kafka::KafkaFrontEnd::bind(&config.kafka, config.server.http.max_fetch_wait)
            .await
            .map_err(|e| format!("server: {e}"))?;
        kafka_at = Some(kafka.local_addr());
        front_ends.push(Box::new(move |api, stop| Box::pin(kafka.serve(api, stop))));
    }
    let tables_uri = config.service.roles.compactor.then_some(config.service.tables.uri.as_ref()).flatten();
    lakestream_server::run(
        &config.server,
        service,
        front_ends,
        |at| {
            let addr = at.http;
            if dev {
                println!("Lakestream dev is running (embedded metadata store and local files).");
            }
            println!("  HTTP API:  http://{addr}/v1/namespaces");
            if let Some(grpc) = at.grpc {
                println!("  gRPC API:  http://{grpc} (lakestream.v1.Lakestream)");
            }
            if let Some(kafka) = kafka_at {
                println!("  Kafka:     {kafka} (bootstrap.servers; see docs/kafka.md)");
            }
            if let Some(uri) = tables_uri {
                // Redacted: a PostgreSQL URI may carry a password.
                println!(
                    "  tables:    Iceberg catalog {} (streams with table=iceberg; see docs/tables.md)",
                    lakestream_iceberg::config::redact(uri)
                );
            }
            println!("  metrics:   http://{addr}/metrics");
            println!("  health:    http://{addr}/healthz");
            println!("Try: curl -X POST http://{addr}/v1/namespaces/default/streams -H 'content-type: application/json' -d '{{\"name\":\"events\"}}'");
            println!("Press Ctrl-C to stop.");
        },
        shutdown,
    )
    .await
    .map_err(|e| format!("server: {e}"))
}

/// How a service is started from a configuration file.
#[derive(Debug, clap::Args)]
struct ServeArgs {
    /// The TOML configuration file.
    #[arg(long, short)]
    config: PathBuf,
    /// Where the HTTP API listens (overrides the file, LAKESTREAM_HTTP__ADDR and
    /// LAKESTREAM_HTTP_ADDR).
    #[arg(long)]
    http_addr: Option<SocketAddr>,
    /// Where the gRPC API listens, or `off` (overrides the file, LAKESTREAM_GRPC__ADDR and
    /// LAKESTREAM_GRPC_ADDR).
    #[arg(long)]
    grpc_addr: Option<GrpcAddr>,
    /// Where the Kafka wire protocol is served, or `off` (overrides `[kafka] addr` and
    /// LAKESTREAM_KAFKA__ADDR).
    #[arg(long)]
    kafka_addr: Option<GrpcAddr>,
    /// How long CloudEvents ingest deduplicates retries, at most 24h (overrides
    /// `[cloudevents] dedup_window` and LAKESTREAM_CLOUDEVENTS_DEDUP_WINDOW).
    #[arg(long, value_parser = config::parse_duration)]
    cloudevents_dedup_window: Option<std::time::Duration>,
}

impl ServeArgs {
    fn load(&self) -> Result<Config, String> {
        self.load_with(process_env())
    }

    /// The file, then the environment `env` (`LAKESTREAM_SECTION__KEY` and the aliases),
    /// then the flags.
    fn load_with(&self, env: impl IntoIterator<Item = (String, String)>) -> Result<Config, String> {
        let mut c = Config::load(&self.config, env).map_err(|e| e.to_string())?;
        if let Some(addr) = self.http_addr {
            c.server.http.addr = addr;
        }
        if let Some(GrpcAddr(addr)) = self.grpc_addr {
            c.server.grpc.addr = addr;
        }
        if let Some(GrpcAddr(addr)) = self.kafka_addr {
            c.kafka.addr = addr;
        }
        if let Some(window) = self.cloudevents_dedup_window {
            c.service.cloudevents.dedup_window = window;
        }
        Ok(c)
    }

    /// [`ServeArgs::load`], serving only the role `only` (whatever `[roles]` says).
    fn load_role(
        &self,
        only: fn(&mut lakestream_service::config::RolesConfig) -> &mut bool,
    ) -> Result<Config, String> {
        let mut c = self.load()?;
        c.service.roles = lakestream_service::config::RolesConfig {
            writer: false,
            reader: false,
            catalog: false,
            compactor: false,
        };
        *only(&mut c.service.roles) = true;
        Ok(c)
    }
}

/// A configuration file as `serve` reads it (the process's environment included), for
/// `lakestream bench --config FILE`.
fn load_bench_config(path: &Path) -> Result<lakestream_bench::BenchConfig, String> {
    let config = Config::load(path, process_env()).map_err(|e| e.to_string())?;
    Ok(lakestream_bench::BenchConfig { service: config.service, server: config.server })
}

/// The process's environment variables whose names are Unicode (a value that is not is
/// passed lossily, so a setting's variable fails with its name rather than vanishing).
fn process_env() -> impl Iterator<Item = (String, String)> {
    std::env::vars_os()
        .filter_map(|(name, value)| Some((name.into_string().ok()?, value.to_string_lossy().into_owned())))
}

/// A `--grpc-addr` or `--kafka-addr` value: `host:port`, or `off` for no such listener.
#[derive(Debug, Clone, Copy)]
struct GrpcAddr(Option<SocketAddr>);

impl std::str::FromStr for GrpcAddr {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        if s.eq_ignore_ascii_case("off") {
            return Ok(GrpcAddr(None));
        }
        s.parse()
            .map(|a| GrpcAddr(Some(a)))
            .map_err(|e| format!("{s:?} is neither host:port nor `off` ({e})"))
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn serve(args: &[&str]) -> ServeArgs {
        let file = concat!(env!("CARGO_MANIFEST_DIR"), "/../../deploy/writer.toml");
        let argv: Vec<&str> =
            ["lakestream", "serve", "--config", file].into_iter().chain(args.iter().copied()).collect();
        match Cli::try_parse_from(argv).unwrap().command {
            Command::Serve(args) => args,
            other => panic!("{other:?}"),
        }
    }

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    /// Flags over the environment over the file over the defaults.
    #[test]
    fn flags_override_the_environment_which_overrides_the_file() {
        let file = serve(&[]).load_with([]).unwrap();
        assert_eq!(file.server.http.addr.port(), 8080);
        assert_eq!(file.service.writer.flush_window, std::time::Duration::from_millis(250));
        let vars = env(&[
            ("LAKESTREAM_HTTP__ADDR", "0.0.0.0:1111"),
            ("LAKESTREAM_WRITER__FLUSH_WINDOW", "20ms"),
            ("LAKESTREAM_CLOUDEVENTS_DEDUP_WINDOW", "30m"),
        ]);
        let from_env = serve(&[]).load_with(vars.clone()).unwrap();
        assert_eq!(from_env.server.http.addr.port(), 1111);
        assert_eq!(from_env.service.writer.flush_window, std::time::Duration::from_millis(20));
        assert_eq!(from_env.service.cloudevents.dedup_window, std::time::Duration::from_secs(1800));
        let flagged = serve(&["--http-addr", "0.0.0.0:2222", "--cloudevents-dedup-window", "2h"])
            .load_with(vars)
            .unwrap();
        assert_eq!(flagged.server.http.addr.port(), 2222);
        assert_eq!(flagged.service.cloudevents.dedup_window, std::time::Duration::from_secs(7200));
        assert_eq!(flagged.service.writer.flush_window, std::time::Duration::from_millis(20));
    }

    #[test]
    fn a_mistyped_setting_variable_stops_the_start_naming_it() {
        let err = serve(&[]).load_with(env(&[("LAKESTREAM_WRITER__FLUSH_WINDW", "1ms")])).unwrap_err();
        assert!(err.contains("LAKESTREAM_WRITER__FLUSH_WINDW"), "{err}");
    }
}
