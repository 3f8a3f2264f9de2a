//! Tests of broker config parsing and validation.

use super::*;

#[test]
fn defaults_are_a_zero_config_single_node() {
    let c = BrokerConfig::default();
    c.validate().expect("valid");
    assert_eq!(
        c.listener().expect("listener"),
        Listener {
            name: "PLAINTEXT".into(),
            host: "127.0.0.1".into(),
            port: 9092
        }
    );
    assert_eq!(c.data_dir(), PathBuf::from("./sluice-data"));
    assert_eq!(c.node_id(), 1);
    assert_eq!(c.str("broker.id"), "1");
    assert_eq!(c.log_config().expect("log").retention_ms, 604_800_000);
    assert!(c.unknown_keys().is_empty());
    assert!(c.keys_without_effect().is_empty());
}

#[test]
fn every_default_passes_its_own_validation() {
    let mut names = BTreeSet::new();
    for k in BROKER_KEYS {
        assert!(names.insert(k.name), "{} twice", k.name);
        if let Some(d) = k.default {
            check_value(k, k.name, d).unwrap_or_else(|e| panic!("{}={d}: {e}", k.name));
        }
        assert!(!k.doc.is_empty(), "{}", k.name);
    }
    assert!(BROKER_KEYS.len() > 280, "{} keys", BROKER_KEYS.len());
    // The keys other parts of Sluice read are in the table.
    for k in [
        "max.connections",
        "max.connections.per.ip",
        "queued.max.request.bytes",
        "metadata.log.segment.bytes",
        "metadata.log.segment.ms",
        "metadata.max.retention.bytes",
        "metadata.max.retention.ms",
        "metadata.log.max.record.bytes.between.snapshots",
        "transaction.state.log.replication.factor",
        "offsets.commit.timeout.ms",
        "share.coordinator.state.topic.min.isr",
    ] {
        assert!(key_def(k).is_some(), "{k}");
    }
    // Every topic config with a server default names a known key.
    for (topic_key, synonyms) in TOPIC_SYNONYMS {
        assert!(
            sluice_storage::config::KEYS.contains(topic_key),
            "{topic_key}"
        );
        for (k, _) in *synonyms {
            assert!(key_def(k).is_some(), "{k}");
        }
    }
}

#[test]
fn file_env_and_overrides_layer_and_errors_name_the_key() {
    let mut c = BrokerConfig::default();
    c.apply_properties(
        "# comment\nlog.retention.hours=1\nnum.partitions = 3\nlog.segment.bytes=2097152\n",
        "server.properties",
    )
    .expect("file");
    c.apply_env([("SLUICE_LOG_RETENTION_MS".to_string(), "5000".to_string())])
        .expect("env");
    let lc = c.log_config().expect("log");
    assert_eq!(lc.retention_ms, 5000);
    assert_eq!(lc.segment_bytes, 2_097_152);
    assert_eq!(c.int("num.partitions"), 3);
    let e = c.set("num.partitions", "many").expect_err("type");
    assert_eq!(
        e.to_string(),
        "Invalid value many for configuration num.partitions: Not a number of type INT"
    );
    let e = c.set("num.partitions", "0").expect_err("range");
    assert_eq!(
        e.to_string(),
        "Invalid value 0 for configuration num.partitions: Value must be at least 1"
    );
    // Kafka 4.0: log.segment.bytes is at least 1 MiB (KIP-1030).
    let e = c.set("log.segment.bytes", "2048").expect_err("range");
    assert!(e.to_string().contains("log.segment.bytes"), "{e}");
    let e = c.set("auto.create.topics.enable", "yes").expect_err("bool");
    assert_eq!(
        e.to_string(),
        "Invalid value yes for configuration auto.create.topics.enable: Expected value to be either true or false"
    );
    let e = c
        .set("log.cleanup.policy", "compact,remove")
        .expect_err("list");
    assert_eq!(
        e.to_string(),
        "Invalid value remove for configuration log.cleanup.policy: String must be one of: compact, delete"
    );
    let e = c
        .set("log.message.timestamp.type", "create")
        .expect_err("enum");
    assert!(e.to_string().contains("log.message.timestamp.type"), "{e}");
    let e = c.set("compression.zstd.level", "23").expect_err("range");
    assert!(e.to_string().contains("no more than 22"), "{e}");
    let e = c
        .set("offsets.topic.replication.factor", "40000")
        .expect_err("short");
    assert!(e.to_string().contains("SHORT"), "{e}");
    let e = c
        .set("log.cleaner.min.cleanable.ratio", "1.5")
        .expect_err("ratio");
    assert!(e.to_string().contains("no more than 1"), "{e}");
    c.set("group.consumer.migration.policy", "UPGRADE")
        .expect("case-insensitive");
    // SSL listeners are refused naming the key, at validation.
    c.set("listeners", "SSL://x:1").expect("well-formed");
    let e = c.validate().expect_err("ssl");
    assert!(e.to_string().contains("listeners"), "{e}");
    let e = c.set("listeners", "PLAINTEXT//x").expect_err("malformed");
    assert!(e.to_string().contains("listeners"), "{e}");
}

#[test]
fn unknown_and_removed_keys_warn_instead_of_failing() {
    let mut c = BrokerConfig::default();
    for (k, v) in [
        ("no.such.key", "1"),
        ("zookeeper.connect", "localhost:2181"),
        ("log.message.format.version", "2.8"),
        ("inter.broker.protocol.version", "3.9"),
        ("reserved.broker.max.id", "65536"),
        ("port", "9092"),
    ] {
        c.set(k, v).unwrap_or_else(|e| panic!("{k}: {e}"));
    }
    c.validate().expect("unknown keys do not stop start-up");
    assert_eq!(
        c.unknown_keys(),
        vec![
            "inter.broker.protocol.version",
            "log.message.format.version",
            "no.such.key",
            "port",
            "reserved.broker.max.id",
            "zookeeper.connect"
        ]
    );
    assert!(c.explicit_value("port").is_none());
    c.log_start_report();
}

#[test]
fn secrets_are_accepted_and_never_shown() {
    let mut c = BrokerConfig::default();
    c.set("ssl.keystore.password", "s3cret").expect("password");
    c.set(
        "listener.name.sasl_ssl.plain.sasl.jaas.config",
        "x required;",
    )
    .expect("listener override of a password key");
    c.set("sasl.jaas.config", "y required;").expect("password");
    assert_eq!(c.str("ssl.keystore.password"), "s3cret");
    assert!(c
        .keys_without_effect()
        .contains(&"ssl.keystore.password".to_string()));
    // A bad value of a listener override is checked as its base key.
    let e = c
        .set("listener.name.internal.ssl.client.auth", "always")
        .expect_err("bad value");
    assert!(
        e.to_string()
            .contains("listener.name.internal.ssl.client.auth"),
        "{e}"
    );
    let e = invalid("ssl.key.password", "s3cret", "whatever");
    assert!(!e.to_string().contains("s3cret"), "{e}");
    assert!(e.to_string().contains("[hidden]"), "{e}");
}

#[test]
fn java_properties_syntax() {
    let text = "\
! bang comment
   # indented comment
key.one = value one
key.two:value:with:colons
key.three    spaced value
key.four=multi\\
    line\\
    value
key\\=five=escaped\\tkey
key.six=\\u0041BC
key.seven=
";
    let got: Vec<(String, String)> = parse_properties(text).into_iter().map(|(_, e)| e).collect();
    assert_eq!(
        got,
        vec![
            ("key.one".to_string(), "value one".to_string()),
            ("key.two".to_string(), "value:with:colons".to_string()),
            ("key.three".to_string(), "spaced value".to_string()),
            ("key.four".to_string(), "multilinevalue".to_string()),
            ("key=five".to_string(), "escaped\tkey".to_string()),
            ("key.six".to_string(), "ABC".to_string()),
            ("key.seven".to_string(), String::new()),
        ]
    );
}

/// A broker config modelled on kafka-python's `servers/4.0.0/resources/
/// kafka.properties` test fixture, with its placeholders filled.
pub(crate) const KAFKA_PYTHON_FIXTURE: &str = "\
process.roles=broker,controller
node.id=0
controller.quorum.bootstrap.servers=localhost:19093
listeners=PLAINTEXT://localhost:19092,CONTROLLER://localhost:19093
inter.broker.listener.name=PLAINTEXT

authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
allow.everyone.if.no.acl.found=true
advertised.listeners=PLAINTEXT://localhost:19092,CONTROLLER://localhost:19093
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL
num.network.threads=3
num.io.threads=8
socket.send.buffer.bytes=102400
socket.receive.buffer.bytes=102400
socket.request.max.bytes=104857600
log.dirs=/tmp/fixture/kraft-combined-logs
num.partitions=4
default.replication.factor=1
replica.lag.time.max.ms=1000
replica.socket.timeout.ms=1000
num.recovery.threads.per.data.dir=1
offsets.topic.replication.factor=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
#log.flush.interval.messages=10000
#log.flush.interval.ms=1000
log.retention.hours=168
#log.retention.bytes=1073741824
log.segment.bytes=1073741824
log.retention.check.interval.ms=300000
log.cleaner.enable=false
offsets.commit.timeout.ms=500
offsets.topic.num.partitions=2
offsets.topic.replication.factor=1
group.min.session.timeout.ms=1000
group.initial.rebalance.delay.ms=0
";

/// A broker config modelled on confluent-kafka's trivup `KafkaBrokerApp`
/// (its template plus the KRaft lines it adds): several broker listeners,
/// `port`, `reserved.broker.max.id` and both `log.dir` and `log.dirs`.
pub(crate) const TRIVUP_FIXTURE: &str = "\
broker.id=1
port=29092
reserved.broker.max.id=65536
listeners=PLAINTEXT://0.0.0.0:29092,CONTROLLER://0.0.0.0:29093,DOCKER://0.0.0.0:29094
advertised.listeners=PLAINTEXT://localhost:29092,DOCKER://host.docker.internal:29094
log.dir=/tmp/trivup/logs
log.dirs=/tmp/trivup/logs
num.partitions=3
auto.create.topics.enable=true
delete.topic.enable=true
default.replication.factor=1
security.inter.broker.protocol=PLAINTEXT
process.roles=broker,controller
controller.listener.names=CONTROLLER
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL,DOCKER:PLAINTEXT,CONTROLLER:PLAINTEXT
controller.quorum.voters=1@localhost:29093
";

#[test]
fn kafka_client_fixture_server_properties_are_accepted() {
    let mut c = BrokerConfig::default();
    c.apply_properties(KAFKA_PYTHON_FIXTURE, "kafka.properties")
        .expect("kafka-python fixture");
    c.validate().expect("valid");
    assert_eq!(
        c.listener().expect("listener"),
        Listener {
            name: "PLAINTEXT".into(),
            host: "localhost".into(),
            port: 19092
        }
    );
    assert_eq!(c.advertised_listener().expect("advertised").port, 19092);
    assert_eq!(c.node_id(), 0);
    assert_eq!(
        c.data_dir(),
        PathBuf::from("/tmp/fixture/kraft-combined-logs")
    );
    assert_eq!(c.int("offsets.topic.num.partitions"), 2);
    assert_eq!(c.int("group.min.session.timeout.ms"), 1000);
    assert!(!c.bool("log.cleaner.enable"));
    assert_eq!(c.unknown_keys(), vec!["allow.everyone.if.no.acl.found"]);
    let idle = c.keys_without_effect();
    for k in [
        "share.coordinator.state.topic.min.isr",
        "num.io.threads",
        "controller.quorum.bootstrap.servers",
        "authorizer.class.name",
    ] {
        assert!(idle.contains(&k.to_string()), "{k} in {idle:?}");
    }
    assert!(!idle.contains(&"num.partitions".to_string()));
    assert!(c.unserved_listeners().is_empty());

    let mut c = BrokerConfig::default();
    c.apply_properties(TRIVUP_FIXTURE, "server.properties")
        .expect("trivup fixture");
    c.validate().expect("valid");
    let l = c.listener().expect("listener");
    assert_eq!(
        (l.name.as_str(), l.host.as_str(), l.port),
        ("PLAINTEXT", "0.0.0.0", 29092)
    );
    let a = c.advertised_listener().expect("advertised");
    assert_eq!((a.host.as_str(), a.port), ("localhost", 29092));
    assert_eq!(c.node_id(), 1);
    assert_eq!(c.str("node.id"), "1");
    assert_eq!(c.unserved_listeners(), vec!["DOCKER"]);
    assert_eq!(c.unknown_keys(), vec!["port", "reserved.broker.max.id"]);
}

#[test]
fn node_id_and_broker_id_are_synonyms() {
    let mut c = BrokerConfig::default();
    c.set("broker.id", "7").expect("set");
    assert_eq!(c.node_id(), 7);
    c.set("node.id", "7").expect("set");
    c.validate().expect("equal");
    c.set("node.id", "8").expect("set");
    let e = c.validate().expect_err("different");
    assert!(e.to_string().contains("node.id"), "{e}");
}

#[test]
fn topic_defaults_follow_kafkas_synonyms() {
    let mut c = BrokerConfig::default();
    for (k, v) in [
        ("log.roll.jitter.hours", "2"),
        ("log.segment.delete.delay.ms", "1234"),
        ("log.preallocate", "true"),
        ("compression.type", "lz4"),
        ("compression.lz4.level", "3"),
        ("unclean.leader.election.enable", "true"),
        ("log.cleaner.max.compaction.lag.ms", "60000"),
        ("log.message.timestamp.after.max.ms", "5000"),
        ("log.local.retention.ms", "-1"),
        ("log.flush.scheduler.interval.ms", "3000"),
        ("log.retention.minutes", "-3"),
    ] {
        c.set(k, v).unwrap_or_else(|e| panic!("{k}: {e}"));
    }
    let lc = c.log_config().expect("log");
    assert_eq!(lc.segment_jitter_ms, 2 * 3_600_000);
    assert_eq!(lc.file_delete_delay_ms, 1234);
    assert!(lc.preallocate);
    assert_eq!(lc.compression_type.name(), "lz4");
    assert_eq!(lc.compression_lz4_level, 3);
    assert!(lc.unclean_leader_election_enable);
    assert_eq!(lc.max_compaction_lag_ms, 60_000);
    assert_eq!(lc.message_timestamp_after_max_ms, 5000);
    assert_eq!(lc.local_retention_ms, -1);
    assert_eq!(lc.flush_ms, 3000);
    assert_eq!(lc.retention_ms, -1, "negative retention means forever");
    // log.roll.jitter.ms wins over hours; log.flush.interval.ms over the
    // scheduler interval.
    c.set("log.roll.jitter.ms", "10").expect("set");
    c.set("log.flush.interval.ms", "20").expect("set");
    let lc = c.log_config().expect("log");
    assert_eq!((lc.segment_jitter_ms, lc.flush_ms), (10, 20));
    // A conflict between two broker keys stops start-up naming a key.
    c.set("log.cleaner.min.compaction.lag.ms", "120000")
        .expect("set");
    let e = c.validate().expect_err("min > max");
    assert!(e.to_string().contains("compaction.lag.ms"), "{e}");
}

#[test]
fn every_log_dir_is_used_and_the_metadata_log_dir_defaults_to_the_first() {
    let mut c = BrokerConfig::default();
    assert_eq!(c.log_dirs(), vec![PathBuf::from("./sluice-data")]);
    c.set("log.dir", "/only").expect("set");
    assert_eq!(c.log_dirs(), vec![PathBuf::from("/only")]);
    c.set("log.dirs", " /a, /b ,,/a,/c").expect("set");
    assert_eq!(
        c.log_dirs(),
        vec![
            PathBuf::from("/a"),
            PathBuf::from("/b"),
            PathBuf::from("/c")
        ]
    );
    assert_eq!(c.data_dir(), PathBuf::from("/a"));
    assert_eq!(c.metadata_log_dir(), PathBuf::from("/a"));
    c.set("metadata.log.dir", "/meta").expect("set");
    assert_eq!(c.metadata_log_dir(), PathBuf::from("/meta"));
}
