//! CreateTopics (key 19): validate name, partitions, replication factor and
//! configs, then record the topic in the metadata log and create its logs.
//! `validate_only` checks without creating. v5+ answers with the topic's
//! effective configs.
//!
//! KRaft's limits come first (design 007): more than 10,000 partitions
//! asked for in one request, or more than 10,000 metadata records (topic,
//! configs, partitions) for the valid topics, refuses every topic with
//! POLICY_VIOLATION before anything is built or created.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use proto_kafka::messages::create_topics_request::CreatableTopic;
use proto_kafka::messages::create_topics_response::{CreatableTopicConfigs, CreatableTopicResult};
use proto_kafka::messages::{CreateTopicsRequest, CreateTopicsResponse};
use proto_kafka::protocol::StrBytes;
use proto_kafka::ResponseError;

use sluice_controller::TopicImage;

use super::Ctx;
use crate::broker::{ApiError, Broker};
use crate::limits::{
    MAX_PARTITIONS_PER_REQUEST, MAX_RECORDS_PER_REQUEST, TOO_MANY_PARTITIONS, TOO_MANY_RECORDS,
};

pub(crate) const VERSIONS: (i16, i16) = (2, 7);

pub(crate) fn handle(
    broker: &Arc<Broker>,
    req: CreateTopicsRequest,
    ctx: &Ctx,
) -> CreateTopicsResponse {
    // A name given more than once is refused (once) and takes no further
    // part, as Kafka's `ControllerApis.createTopics` does.
    let mut names: HashMap<&str, usize> = HashMap::new();
    for t in &req.topics {
        *names.entry(t.name.0.as_str()).or_default() += 1;
    }
    // KRaft refuses the whole request, before looking at any topic, when
    // it asks for too many partitions (validate_only too).
    if requested_partitions(broker, &req.topics, &names) > MAX_PARTITIONS_PER_REQUEST {
        return refuse_all(&req, TOO_MANY_PARTITIONS);
    }
    // Validate every topic first; nothing is created unless the records
    // of all valid topics fit in one metadata batch (KRaft's bound).
    let mut reported = HashSet::new();
    let mut results: Vec<Option<Result<TopicImage, ApiError>>> = req
        .topics
        .iter()
        .map(|t| {
            let name = t.name.0.as_str();
            if names.get(name) != Some(&1) {
                return reported.insert(name).then(|| {
                    Err(ApiError::new(
                        ResponseError::InvalidRequest,
                        "Duplicate topic name.",
                    ))
                });
            }
            Some(create(broker, t, true))
        })
        .collect();
    let records: usize = results
        .iter()
        .filter_map(|r| r.as_ref()?.as_ref().ok())
        .map(|t| 1 + t.configs.len() + t.partitions.len())
        .sum();
    if records > MAX_RECORDS_PER_REQUEST {
        return refuse_all(&req, TOO_MANY_RECORDS);
    }
    if !req.validate_only {
        for (t, r) in req.topics.iter().zip(results.iter_mut()) {
            if let Some(r @ Ok(_)) = r {
                *r = create(broker, t, false);
            }
        }
    }
    let mut resp = CreateTopicsResponse::default();
    for (t, result) in req.topics.iter().zip(results) {
        let Some(result) = result else { continue };
        let mut r = CreatableTopicResult::default();
        r.name = t.name.clone();
        r.num_partitions = -1;
        r.replication_factor = -1;
        r.configs = None;
        r.error_message = None;
        match result {
            Ok(topic) if ctx.version < 5 => {
                let _ = topic;
            }
            Ok(topic) => {
                if ctx.version >= 7 {
                    r.topic_id = topic.id;
                }
                r.num_partitions = topic.partitions.len() as i32;
                r.replication_factor = topic
                    .partitions
                    .values()
                    .next()
                    .map_or(1, |p| p.replicas.len() as i16);
                if let Ok(entries) = super::describe_configs::topic_entries(broker, &topic) {
                    r.configs = Some(
                        entries
                            .into_iter()
                            .map(|e| {
                                let mut c = CreatableTopicConfigs::default();
                                c.name = StrBytes::from_string(e.name);
                                c.value = e.value.map(StrBytes::from_string);
                                c.read_only = e.read_only;
                                c.config_source = e.source;
                                c.is_sensitive = e.sensitive;
                                c
                            })
                            .collect(),
                    );
                }
            }
            Err(e) => {
                r.error_code = e.code.code();
                r.error_message = e.message.map(StrBytes::from_string);
            }
        }
        resp.topics.push(r);
    }
    resp
}

/// Validates one topic and, unless `validate_only`, creates it.
fn create(
    broker: &Broker,
    t: &CreatableTopic,
    validate_only: bool,
) -> Result<TopicImage, ApiError> {
    let name = t.name.0.as_str();
    if !t.assignments.is_empty() {
        let partitions = check_assignments(broker, &t.assignments)?;
        let configs = configs(&t.configs)?;
        broker.create_topic(name, partitions, 1, &configs, validate_only)
    } else {
        let configs = configs(&t.configs)?;
        broker.create_topic(
            name,
            t.num_partitions,
            t.replication_factor,
            &configs,
            validate_only,
        )
    }
}

/// Partitions the request asks for, counted as KRaft's
/// `validateTotalNumberOfPartitions` does: a manual assignment counts its
/// entries, -1 the broker default, a positive count itself, anything else
/// nothing. Names given more than once are left out (Kafka refuses them
/// before the controller counts).
fn requested_partitions(
    broker: &Broker,
    topics: &[CreatableTopic],
    names: &HashMap<&str, usize>,
) -> i64 {
    topics
        .iter()
        .filter(|t| names.get(t.name.0.as_str()) == Some(&1))
        .map(|t| {
            if !t.assignments.is_empty() {
                t.assignments.len() as i64
            } else if t.num_partitions == -1 {
                i64::from(broker.settings.num_partitions)
            } else {
                i64::from(t.num_partitions.max(0))
            }
        })
        .sum()
}

/// The answer KRaft gives when a limit refuses the whole request: every
/// topic named gets POLICY_VIOLATION with the limit's message.
fn refuse_all(req: &CreateTopicsRequest, message: &str) -> CreateTopicsResponse {
    tracing::info!(
        topics = req.topics.len(),
        validate_only = req.validate_only,
        "refusing CreateTopics: {message}"
    );
    let mut resp = CreateTopicsResponse::default();
    resp.topics = req
        .topics
        .iter()
        .map(|t| {
            let mut r = CreatableTopicResult::default();
            r.name = t.name.clone();
            r.num_partitions = -1;
            r.replication_factor = -1;
            r.configs = None;
            r.error_code = ResponseError::PolicyViolation.code();
            r.error_message = Some(StrBytes::from_string(message.to_string()));
            r
        })
        .collect();
    resp
}

/// The topic's config overrides, one per name (the last value given for a
/// name wins, as in KRaft's `computeConfigChanges`): a name repeated in the
/// request does not become repeated metadata records.
fn configs(
    configs: &[proto_kafka::messages::create_topics_request::CreatableTopicConfig],
) -> Result<Vec<(String, String)>, ApiError> {
    let given: Vec<(String, String)> = configs
        .iter()
        .map(|c| match &c.value {
            Some(v) => Ok((c.name.to_string(), v.to_string())),
            None => Err(ApiError::new(
                ResponseError::InvalidConfig,
                format!(
                    "Null value not supported for topic config {}",
                    c.name.as_str()
                ),
            )),
        })
        .collect::<Result<_, _>>()?;
    let mut last: HashMap<&str, usize> = HashMap::new();
    for (i, (k, _)) in given.iter().enumerate() {
        last.insert(k.as_str(), i);
    }
    Ok(given
        .iter()
        .enumerate()
        .filter(|(i, (k, _))| last.get(k.as_str()) == Some(i))
        .map(|(_, kv)| kv.clone())
        .collect())
}

/// Manual assignments must put every partition on this node, numbered
/// 0..n; returns n.
fn check_assignments(
    broker: &Broker,
    assignments: &[proto_kafka::messages::create_topics_request::CreatableReplicaAssignment],
) -> Result<i32, ApiError> {
    let mut indexes: Vec<i32> = assignments.iter().map(|a| a.partition_index).collect();
    indexes.sort_unstable();
    if indexes.iter().enumerate().any(|(i, &p)| p != i as i32) {
        return Err(ApiError::new(
            ResponseError::InvalidReplicaAssignment,
            "Partitions should be a consecutive 0-based integer sequence",
        ));
    }
    for a in assignments {
        if a.broker_ids.len() != 1 || a.broker_ids[0].0 != broker.node_id {
            return Err(ApiError::new(
                ResponseError::InvalidReplicaAssignment,
                format!(
                    "Replica assignment must be [{}] on this single node",
                    broker.node_id
                ),
            ));
        }
    }
    Ok(assignments.len() as i32)
}

#[cfg(test)]
mod tests {
    use proto_kafka::messages::create_topics_request::{
        CreatableReplicaAssignment, CreatableTopicConfig,
    };
    use proto_kafka::messages::{ApiKey, BrokerId, TopicName};

    use super::super::test_support::{ctx, open_broker, roundtrip};
    use super::*;

    const POLICY_VIOLATION: i16 = 44;

    fn topic(name: &str, partitions: i32) -> CreatableTopic {
        let mut t = CreatableTopic::default();
        t.name = TopicName(StrBytes::from_string(name.to_string()));
        t.num_partitions = partitions;
        t.replication_factor = 1;
        t
    }

    fn request(topics: Vec<CreatableTopic>, validate_only: bool) -> CreateTopicsRequest {
        let mut req = CreateTopicsRequest::default();
        req.topics = topics;
        req.validate_only = validate_only;
        req.timeout_ms = 10_000;
        req
    }

    /// Error codes and messages of a response.
    fn errors(resp: &CreateTopicsResponse) -> Vec<(i16, Option<String>)> {
        resp.topics
            .iter()
            .map(|t| {
                (
                    t.error_code,
                    t.error_message.as_ref().map(|m| m.to_string()),
                )
            })
            .collect()
    }

    fn refused(message: &str, n: usize) -> Vec<(i16, Option<String>)> {
        vec![(POLICY_VIOLATION, Some(message.to_string())); n]
    }

    #[test]
    fn requests_over_kraft_limits_are_refused_whole_in_every_version() {
        let dir = tempfile::tempdir().expect("tempdir");
        let broker = open_broker(dir.path(), &[]);
        for v in VERSIONS.0..=VERSIONS.1 {
            let call = |req: CreateTopicsRequest| {
                roundtrip(&handle(&broker, req, &ctx(ApiKey::CreateTopics, v)), v)
            };
            for validate_only in [false, true] {
                // One topic over 10,000 partitions, with a valid neighbour.
                let resp = call(request(
                    vec![
                        topic(&format!("ok{v}"), 1),
                        topic(&format!("big{v}"), 10_001),
                    ],
                    validate_only,
                ));
                assert_eq!(errors(&resp), refused(TOO_MANY_PARTITIONS, 2), "v{v}");
                assert_eq!(resp.topics[1].num_partitions, -1);
                // Counts that would overflow an i32 sum, and a huge manual
                // assignment.
                let mut assigned = topic(&format!("assigned{v}"), -1);
                assigned.assignments = (0..10_001)
                    .map(|i| {
                        let mut a = CreatableReplicaAssignment::default();
                        a.partition_index = i;
                        a.broker_ids = vec![BrokerId(1)];
                        a
                    })
                    .collect();
                for topics in [
                    vec![topic("max-a", i32::MAX), topic("max-b", i32::MAX)],
                    vec![assigned],
                    vec![topic("half-a", 5_000), topic("half-b", 5_001)],
                ] {
                    let n = topics.len();
                    let resp = call(request(topics, validate_only));
                    assert_eq!(errors(&resp), refused(TOO_MANY_PARTITIONS, n), "v{v}");
                }
                // 10,000 partitions pass the partition limit but, with their
                // topic records, not the metadata batch limit.
                let resp = call(request(
                    vec![topic("even-a", 5_000), topic("even-b", 5_000)],
                    validate_only,
                ));
                assert_eq!(errors(&resp), refused(TOO_MANY_RECORDS, 2), "v{v}");
                // Names given twice are refused by name (once, as Kafka
                // does) and not counted.
                let resp = call(request(
                    vec![
                        topic("twice", 6_000),
                        topic("once", 1),
                        topic("twice", 6_000),
                    ],
                    validate_only,
                ));
                assert_eq!(
                    errors(&resp),
                    vec![
                        (
                            ResponseError::InvalidRequest.code(),
                            Some("Duplicate topic name.".to_string())
                        ),
                        (0, None)
                    ]
                );
                assert_eq!(resp.topics[0].name.as_str(), "twice");
                if !validate_only {
                    let deleted = broker.delete_topic("once");
                    assert!(deleted.is_ok());
                }
            }
            // The largest request that fits: 9,999 partitions and its topic
            // record, validated only (creating them would take a while).
            let resp = call(request(vec![topic(&format!("fits{v}"), 9_999)], true));
            assert_eq!(errors(&resp), vec![(0, None)], "v{v}");
            if v >= 5 {
                assert_eq!(resp.topics[0].num_partitions, 9_999);
            }
        }
        // Nothing was created by any of it.
        let names: Vec<String> = broker
            .image()
            .topics()
            .map(|t| t.name.clone())
            .filter(|n| !n.starts_with("__"))
            .collect();
        assert!(names.is_empty(), "{names:?}");
        assert!(broker.log("big2", 0).is_none());
        broker.shutdown().expect("shutdown");
    }

    #[test]
    fn a_config_named_many_times_is_one_record_with_the_last_value() {
        let dir = tempfile::tempdir().expect("tempdir");
        let broker = open_broker(dir.path(), &[]);
        let mut t = topic("configured", 1);
        t.configs = (0..20_000)
            .map(|i| {
                let mut c = CreatableTopicConfig::default();
                c.name = StrBytes::from_static_str("retention.ms");
                c.value = Some(StrBytes::from_string((1000 + i).to_string()));
                c
            })
            .collect();
        let resp = handle(
            &broker,
            request(vec![t], false),
            &ctx(ApiKey::CreateTopics, 7),
        );
        assert_eq!(errors(&resp), vec![(0, None)]);
        let image = broker.image();
        let created = image.topic("configured").expect("created");
        assert_eq!(created.configs.len(), 1);
        assert_eq!(
            created.configs.get("retention.ms").map(String::as_str),
            Some("20999")
        );
        broker.shutdown().expect("shutdown");
    }
}
