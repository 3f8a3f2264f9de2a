//! DeleteTopics (key 20): by name (all versions) or topic id (v6+); the
//! metadata log records the removal, then the partitions' folders go.

use std::sync::Arc;

use proto_kafka::messages::delete_topics_response::DeletableTopicResult;
use proto_kafka::messages::{DeleteTopicsRequest, DeleteTopicsResponse, TopicName};
use proto_kafka::protocol::StrBytes;
use proto_kafka::ResponseError;

use super::Ctx;
use crate::broker::{validate_topic_name, Broker};

pub(crate) const VERSIONS: (i16, i16) = (1, 6);

pub(crate) fn handle(
    broker: &Arc<Broker>,
    req: DeleteTopicsRequest,
    ctx: &Ctx,
) -> DeleteTopicsResponse {
    // v0-5 name topics in `topic_names`; v6 in `topics` (name or id).
    let wanted: Vec<(Option<String>, uuid::Uuid)> = if ctx.version >= 6 {
        req.topics
            .iter()
            .map(|t| (t.name.as_ref().map(|n| n.0.to_string()), t.topic_id))
            .collect()
    } else {
        req.topic_names
            .iter()
            .map(|n| (Some(n.0.to_string()), uuid::Uuid::nil()))
            .collect()
    };
    let mut resp = DeleteTopicsResponse::default();
    for (name, id) in wanted {
        let mut r = DeletableTopicResult::default();
        r.error_message = None;
        let name = name.or_else(|| broker.image().topic_by_id(&id).map(|t| t.name.clone()));
        let result = match &name {
            None => Err(ResponseError::UnknownTopicId),
            Some(n) => match validate_topic_name(n) {
                Err(_) => Err(ResponseError::UnknownTopicOrPartition),
                Ok(()) => crate::internal_topics::check_client_may_alter(n)
                    .and_then(|()| broker.delete_topic(n))
                    .map_err(|e| e.code),
            },
        };
        match result {
            Ok(topic_id) if ctx.version >= 6 => r.topic_id = topic_id,
            Ok(_) => {}
            Err(code) => {
                r.error_code = code.code();
                if ctx.version >= 6 {
                    r.topic_id = id;
                }
            }
        }
        r.name = name.map(|n| TopicName(StrBytes::from_string(n)));
        resp.responses.push(r);
    }
    resp
}
