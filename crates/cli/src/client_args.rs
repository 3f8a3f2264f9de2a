//! Flags shared by the client subcommands: where to connect
//! ([`ClientArgs`]: `--bootstrap-server`, `--timeout-ms`) and how to produce
//! ([`ProducerArgs`]: `--acks`, `--compression`, `--linger-ms`,
//! `--batch-size`, `--buffer-memory`, `--enable-idempotence`,
//! `--max-in-flight`, `--transactional-id`), plus the connect helpers
//! built on them.

use std::future::Future;
use std::time::Duration;

use anyhow::{bail, Context};
use sluice_client::{ClientConfig, ClientError, Producer, ProducerConfig};
use sluice_protocol::record::Compression;

/// `--bootstrap-server` and `--timeout-ms`.
#[derive(Debug, Clone, clap::Args)]
pub struct ClientArgs {
    /// Comma-separated `host:port` list of brokers to bootstrap from.
    #[arg(
        long,
        value_name = "HOST:PORT",
        default_value = "127.0.0.1:9092",
        global = true
    )]
    pub bootstrap_server: String,
    /// Connect and request timeout in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 30_000, global = true)]
    pub timeout_ms: u64,
}

impl ClientArgs {
    /// The connect/request timeout (at least 1 ms).
    pub fn timeout(&self) -> Duration {
        Duration::from_millis(self.timeout_ms.max(1))
    }

    /// A client configuration for these flags (client id `sluice-cli`).
    pub fn client_config(&self) -> anyhow::Result<ClientConfig> {
        let mut config = ClientConfig::new(&self.bootstrap_server);
        if config.bootstrap_servers.is_empty() {
            bail!("--bootstrap-server is empty");
        }
        config.connection.connect_timeout = self.timeout();
        config.connection.request_timeout = self.timeout();
        config.connection.client_id = "sluice-cli".into();
        Ok(config)
    }

    /// Runs a connect future (e.g. `Admin::connect`), bounded by twice the
    /// timeout plus a second (connecting retries a few times), and names
    /// the bootstrap server in errors.
    pub async fn connecting<T, E, F>(&self, fut: F) -> anyhow::Result<T>
    where
        F: Future<Output = Result<T, E>>,
        E: std::error::Error + Send + Sync + 'static,
    {
        let overall = self.timeout().saturating_mul(2) + Duration::from_secs(1);
        match tokio::time::timeout(overall, fut).await {
            Ok(r) => r.with_context(|| format!("cannot connect to {}", self.bootstrap_server)),
            Err(_) => bail!(
                "cannot connect to {}: timed out after {} ms",
                self.bootstrap_server,
                self.timeout_ms
            ),
        }
    }
}

/// Producer tuning flags shared by `sluice produce` and `sluice perf
/// produce`.
#[derive(Debug, Clone, clap::Args)]
pub struct ProducerArgs {
    /// Acknowledgements the leader waits for: all (= -1), 0 or 1.
    #[arg(long, value_name = "all|-1|0|1", default_value = "all", value_parser = parse_acks, allow_hyphen_values = true)]
    pub acks: i16,
    /// Batch compression codec.
    #[arg(long, value_name = "none|gzip|snappy|lz4|zstd", default_value = "none", value_parser = parse_compression)]
    pub compression: Compression,
    /// How long to wait for more records before sending a batch (`linger.ms`).
    #[arg(long, value_name = "MS", default_value_t = 5)]
    pub linger_ms: u64,
    /// Maximum batch size in bytes per partition (`batch.size`).
    #[arg(long, value_name = "BYTES", default_value_t = 16_384, value_parser = clap::value_parser!(u32).range(1..))]
    pub batch_size: u32,
    /// Memory for records waiting to be sent (`buffer.memory`); `send`
    /// blocks when it is full.
    #[arg(long, value_name = "BYTES", default_value_t = 33_554_432, value_parser = clap::value_parser!(u64).range(1..))]
    pub buffer_memory: u64,
    /// `enable.idempotence`. Default: on when --acks is all, as Kafka's
    /// producer; `true` with --acks 0 or 1 is an error.
    #[arg(long, value_name = "true|false")]
    pub enable_idempotence: Option<bool>,
    /// Produce requests outstanding per broker
    /// (`max.in.flight.requests.per.connection`; at most 5 with
    /// idempotence).
    #[arg(long, value_name = "N", default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_in_flight: u32,
    /// `transactional.id`: everything is sent in one transaction, committed
    /// at the end (aborted on an error), so read_committed consumers see all
    /// of it or nothing. With several producer instances each uses ID-N.
    #[arg(long, value_name = "ID")]
    pub transactional_id: Option<String>,
}

impl ProducerArgs {
    /// A producer configuration for these flags on `client`.
    pub fn producer_config(&self, client: &ClientArgs) -> anyhow::Result<ProducerConfig> {
        let mut config = ProducerConfig::new(client.client_config()?);
        config.acks = self.acks;
        config.compression = self.compression;
        config.linger_ms = self.linger_ms;
        config.batch_size = self.batch_size as usize;
        config.buffer_memory = usize::try_from(self.buffer_memory).unwrap_or(usize::MAX);
        config.request_timeout = client.timeout();
        config.enable_idempotence = self.enable_idempotence;
        config.max_in_flight = self.max_in_flight as usize;
        config.transactional_id = self.transactional_id.clone();
        config.validate().context(
            "invalid producer settings (--acks, --enable-idempotence, --max-in-flight, \
             --transactional-id)",
        )?;
        Ok(config)
    }

    /// Connects a producer (bounded like [`ClientArgs::connecting`]); with
    /// `--transactional-id` it initializes transactions and opens the
    /// transaction [`commit`] ends.
    pub async fn connect(&self, client: &ClientArgs) -> anyhow::Result<Producer> {
        self.connect_instance(client, None).await
    }

    /// [`Self::connect`] for producer instance `instance` of several: its
    /// transactional id gets the suffix `-N`.
    pub async fn connect_instance(
        &self,
        client: &ClientArgs,
        instance: Option<u32>,
    ) -> anyhow::Result<Producer> {
        let mut config = self.producer_config(client)?;
        if let (Some(id), Some(n)) = (config.transactional_id.as_mut(), instance) {
            *id = format!("{id}-{n}");
        }
        let id = config.transactional_id.clone();
        let producer = client.connecting(Producer::new(config)).await?;
        if let Some(id) = id {
            producer
                .init_transactions()
                .await
                .with_context(|| format!("cannot initialize transactions for {id}"))?;
            producer.begin_transaction()?;
        }
        Ok(producer)
    }
}

/// Commits the transaction [`ProducerArgs::connect`] opened for a
/// transactional producer (flushing its records first); nothing otherwise.
pub async fn commit(producer: &Producer) -> anyhow::Result<()> {
    if producer.is_transactional() {
        producer
            .commit_transaction()
            .await
            .context("cannot commit the transaction")?;
    }
    Ok(())
}

/// The error for a produce to `topic` that failed because the broker
/// neither has nor creates the topic: producers' metadata requests ask for
/// auto-creation, so UNKNOWN_TOPIC_OR_PARTITION means the broker does not
/// create topics on first use. Other errors get `context`.
pub fn produce_error(topic: &str, e: ClientError, context: String) -> anyhow::Error {
    if e.code() == Some(UNKNOWN_TOPIC_OR_PARTITION) {
        anyhow::anyhow!(
            "topic {topic} does not exist and the broker does not create topics on first use \
             (auto.create.topics.enable=false); create it with `sluice topic create {topic}`"
        )
    } else {
        anyhow::Error::new(e).context(context)
    }
}

const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;

/// `--acks`: `all` or `-1`, `0`, `1`.
pub fn parse_acks(s: &str) -> Result<i16, String> {
    match s.trim().to_ascii_lowercase().as_str() {
        "all" | "-1" => Ok(-1),
        "0" => Ok(0),
        "1" => Ok(1),
        _ => Err(format!("expected all, -1, 0 or 1, got {s:?}")),
    }
}

/// `--compression`: Kafka's `compression.type` names.
pub fn parse_compression(s: &str) -> Result<Compression, String> {
    Compression::from_name(&s.trim().to_ascii_lowercase())
        .ok_or_else(|| format!("expected none, gzip, snappy, lz4 or zstd, got {s:?}"))
}

/// `KEY=VALUE` (the key must not be blank; the value may be empty).
pub fn parse_kv(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_string(), v.to_string())),
        _ => Err(format!("expected KEY=VALUE, got {s:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn acks_values() {
        assert_eq!(parse_acks("all"), Ok(-1));
        assert_eq!(parse_acks("ALL"), Ok(-1));
        assert_eq!(parse_acks("-1"), Ok(-1));
        assert_eq!(parse_acks("0"), Ok(0));
        assert_eq!(parse_acks("1"), Ok(1));
        assert!(parse_acks("2").is_err());
        assert!(parse_acks("some").is_err());
    }

    #[test]
    fn compression_names() {
        assert_eq!(parse_compression("zstd"), Ok(Compression::Zstd));
        assert_eq!(parse_compression("LZ4"), Ok(Compression::Lz4));
        assert_eq!(parse_compression("none"), Ok(Compression::None));
        assert!(parse_compression("brotli").is_err());
    }

    #[test]
    fn kv_parsing() {
        assert_eq!(parse_kv("a=b=c"), Ok(("a".into(), "b=c".into())));
        assert_eq!(parse_kv("a="), Ok(("a".into(), String::new())));
        assert!(parse_kv("novalue").is_err());
        assert!(parse_kv("=x").is_err());
    }
}
