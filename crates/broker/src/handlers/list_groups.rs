//! ListGroups (key 16): the groups of every loaded coordinator partition
//! (on one node, all of them). v4+ filter by state (case-insensitive, as
//! Kafka's group coordinator parses them) and return each group's state;
//! v5 filters by group type and returns it — every Sluice group is a
//! "classic" group. A partition still loading gives
//! COORDINATOR_LOAD_IN_PROGRESS with the groups of the others.

use std::sync::Arc;

use proto_kafka::messages::list_groups_response::ListedGroup;
use proto_kafka::messages::{GroupId, ListGroupsRequest, ListGroupsResponse};
use proto_kafka::protocol::StrBytes;
use proto_kafka::ResponseError;

use super::Ctx;
use crate::broker::Broker;
use crate::groups::lock;

pub(crate) const VERSIONS: (i16, i16) = (0, 5);

const CLASSIC: &str = "classic";

pub(crate) fn handle(
    broker: &Arc<Broker>,
    req: ListGroupsRequest,
    ctx: &Ctx,
) -> ListGroupsResponse {
    let mut r = ListGroupsResponse::default();
    let states: Vec<String> = if ctx.version >= 4 {
        req.states_filter.iter().map(|s| s.to_string()).collect()
    } else {
        Vec::new()
    };
    if ctx.version >= 5
        && !req.types_filter.is_empty()
        && !req
            .types_filter
            .iter()
            .any(|t| t.as_str().eq_ignore_ascii_case(CLASSIC))
    {
        return r;
    }
    let (shards, loading) = broker.groups.loaded_shards();
    if loading {
        r.error_code = ResponseError::CoordinatorLoadInProgress.code();
    }
    for shard in shards {
        let listed = lock(&shard).groups.list_groups(&states);
        match listed {
            Ok(groups) => {
                for g in groups {
                    let mut w = ListedGroup::default();
                    w.group_id = GroupId(StrBytes::from_string(g.group_id));
                    w.protocol_type = StrBytes::from_string(g.protocol_type);
                    if ctx.version >= 4 {
                        w.group_state = StrBytes::from_static_str(g.state.name());
                    }
                    if ctx.version >= 5 {
                        w.group_type = StrBytes::from_static_str(CLASSIC);
                    }
                    r.groups.push(w);
                }
            }
            Err(e) => r.error_code = e.code(),
        }
    }
    r
}

#[cfg(test)]
mod tests {
    use proto_kafka::messages::ApiKey;

    use super::super::join_group::testing::{join_alone, timers};
    use super::super::test_support::{ctx, open_broker, roundtrip};
    use super::*;

    #[tokio::test]
    async fn every_version_with_filters() {
        let dir = tempfile::tempdir().expect("tempdir");
        let broker = open_broker(
            dir.path(),
            &[
                ("offsets.topic.num.partitions", "3"),
                ("group.initial.rebalance.delay.ms", "0"),
            ],
        );
        // Nothing loaded yet: no groups, no error.
        let resp = roundtrip(
            &handle(
                &broker,
                ListGroupsRequest::default(),
                &ctx(ApiKey::ListGroups, 0),
            ),
            0,
        );
        assert!(resp.groups.is_empty());
        let timers = timers(&broker);
        join_alone(&broker, "alpha").await;
        join_alone(&broker, "beta").await;
        for v in VERSIONS.0..=VERSIONS.1 {
            let c = ctx(ApiKey::ListGroups, v);
            let resp = roundtrip(&handle(&broker, ListGroupsRequest::default(), &c), v);
            assert_eq!(resp.error_code, 0);
            let mut names: Vec<&str> = resp.groups.iter().map(|g| g.group_id.0.as_str()).collect();
            names.sort_unstable();
            assert_eq!(names, ["alpha", "beta"], "v{v}");
            for g in &resp.groups {
                assert_eq!(g.protocol_type.as_str(), "consumer");
                if v >= 4 {
                    assert_eq!(g.group_state.as_str(), "CompletingRebalance");
                }
                if v >= 5 {
                    assert_eq!(g.group_type.as_str(), "classic");
                }
            }
            if v >= 4 {
                let mut req = ListGroupsRequest::default();
                req.states_filter = vec![StrBytes::from_static_str("stable")];
                let resp = roundtrip(&handle(&broker, req, &c), v);
                assert!(resp.groups.is_empty());
                let mut req = ListGroupsRequest::default();
                req.states_filter = vec![StrBytes::from_static_str("completingrebalance")];
                let resp = roundtrip(&handle(&broker, req, &c), v);
                assert_eq!(resp.groups.len(), 2);
            }
            if v >= 5 {
                let mut req = ListGroupsRequest::default();
                req.types_filter = vec![StrBytes::from_static_str("consumer")];
                assert!(roundtrip(&handle(&broker, req, &c), v).groups.is_empty());
                let mut req = ListGroupsRequest::default();
                req.types_filter = vec![StrBytes::from_static_str("Classic")];
                assert_eq!(roundtrip(&handle(&broker, req, &c), v).groups.len(), 2);
            }
        }
        drop(timers);
        broker.shutdown().expect("shutdown");
    }
}
