//! Committed offsets over TCP against a running server: OffsetCommit,
//! OffsetFetch and OffsetDelete, and offsets (with their metadata) coming
//! back after the server is restarted on the same data directory.

use std::net::SocketAddr;
use std::path::Path;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use proto_kafka::messages::create_topics_request::CreatableTopic;
use proto_kafka::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use proto_kafka::messages::offset_delete_request::{
    OffsetDeleteRequestPartition, OffsetDeleteRequestTopic,
};
use proto_kafka::messages::offset_fetch_request::{
    OffsetFetchRequestGroup, OffsetFetchRequestTopic,
};
use proto_kafka::messages::{
    ApiKey, ApiVersionsRequest, ApiVersionsResponse, CreateTopicsRequest, CreateTopicsResponse,
    GroupId, OffsetCommitRequest, OffsetCommitResponse, OffsetDeleteRequest, OffsetDeleteResponse,
    OffsetFetchRequest, OffsetFetchResponse, RequestHeader, ResponseHeader, TopicName,
};
use proto_kafka::protocol::{Decodable, Encodable, StrBytes};
use sluice_broker::{BrokerConfig, Server};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::oneshot;

struct TestServer {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

async fn start(data: &Path, overrides: &[(&str, &str)]) -> TestServer {
    let mut c = BrokerConfig::default();
    c.set("log.dirs", &data.display().to_string())
        .expect("log.dirs");
    c.set("listeners", "PLAINTEXT://127.0.0.1:0")
        .expect("listeners");
    c.set("offsets.topic.num.partitions", "3")
        .expect("partitions");
    for (k, v) in overrides {
        c.set(k, v).expect("override");
    }
    let server = Server::bind(c).await.expect("bind");
    let addr = server.local_addr().expect("addr");
    let (tx, rx) = oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        server
            .run(async {
                let _ = rx.await;
            })
            .await
            .expect("server run");
    });
    TestServer {
        addr,
        stop: Some(tx),
        task,
    }
}

impl TestServer {
    async fn stop(mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        (&mut self.task).await.expect("server task");
    }

    async fn client(&self) -> Client {
        Client {
            stream: TcpStream::connect(self.addr).await.expect("connect"),
            correlation: 0,
            retention_time_ms: -1,
        }
    }
}

struct Client {
    stream: TcpStream,
    correlation: i32,
    /// Sent with OffsetCommit v2-v4.
    retention_time_ms: i64,
}

impl Client {
    async fn call<Req: Encodable, Resp: Decodable>(
        &mut self,
        key: ApiKey,
        version: i16,
        req: &Req,
    ) -> Resp {
        self.correlation += 1;
        let mut header = RequestHeader::default();
        header.request_api_key = key as i16;
        header.request_api_version = version;
        header.correlation_id = self.correlation;
        header.client_id = Some(StrBytes::from_static_str("offsets-test"));
        let mut buf = BytesMut::new();
        buf.put_i32(0);
        header
            .encode(&mut buf, key.request_header_version(version))
            .expect("encode header");
        req.encode(&mut buf, version).expect("encode request");
        let size = (buf.len() - 4) as i32;
        buf[..4].copy_from_slice(&size.to_be_bytes());
        self.stream.write_all(&buf).await.expect("send");
        let mut len = [0u8; 4];
        self.stream
            .read_exact(&mut len)
            .await
            .expect("response size");
        let mut frame = vec![0u8; i32::from_be_bytes(len) as usize];
        self.stream
            .read_exact(&mut frame)
            .await
            .expect("response body");
        let mut body = Bytes::from(frame);
        let header = ResponseHeader::decode(&mut body, key.response_header_version(version))
            .expect("response header");
        assert_eq!(header.correlation_id, self.correlation);
        let resp = Resp::decode(&mut body, version).expect("response body");
        assert!(
            !body.has_remaining(),
            "trailing bytes in {key:?} v{version}"
        );
        resp
    }

    async fn create_topic(&mut self, name: &str, partitions: i32) {
        let mut t = CreatableTopic::default();
        t.name = topic_name(name);
        t.num_partitions = partitions;
        t.replication_factor = 1;
        let mut req = CreateTopicsRequest::default();
        req.topics = vec![t];
        req.timeout_ms = 10_000;
        let resp: CreateTopicsResponse = self.call(ApiKey::CreateTopics, 7, &req).await;
        assert_eq!(resp.topics[0].error_code, 0, "create {name}");
    }

    /// Commits as a simple consumer; returns the partition error codes.
    async fn commit(
        &mut self,
        version: i16,
        group: &str,
        topic: &str,
        offsets: &[(i32, i64, &str)],
    ) -> Vec<i16> {
        let mut t = OffsetCommitRequestTopic::default();
        t.name = topic_name(topic);
        t.partitions = offsets
            .iter()
            .map(|&(p, o, m)| {
                let mut rp = OffsetCommitRequestPartition::default();
                rp.partition_index = p;
                rp.committed_offset = o;
                rp.committed_metadata = Some(StrBytes::from_string(m.into()));
                rp
            })
            .collect();
        let mut req = OffsetCommitRequest::default();
        req.group_id = group_id(group);
        req.generation_id_or_member_epoch = -1;
        req.retention_time_ms = self.retention_time_ms;
        req.topics = vec![t];
        let resp: OffsetCommitResponse = self.call(ApiKey::OffsetCommit, version, &req).await;
        resp.topics[0]
            .partitions
            .iter()
            .map(|p| p.error_code)
            .collect()
    }

    /// All committed offsets of a group: (topic, partition, offset, metadata).
    async fn fetch_all(&mut self, version: i16, group: &str) -> Vec<(String, i32, i64, String)> {
        let mut req = OffsetFetchRequest::default();
        if version >= 8 {
            let mut g = OffsetFetchRequestGroup::default();
            g.group_id = group_id(group);
            g.topics = None;
            req.groups = vec![g];
        } else {
            req.group_id = group_id(group);
            req.topics = None;
        }
        let resp: OffsetFetchResponse = self.call(ApiKey::OffsetFetch, version, &req).await;
        if version >= 8 {
            assert_eq!(resp.groups[0].error_code, 0);
            resp.groups[0]
                .topics
                .iter()
                .flat_map(|t| {
                    t.partitions.iter().map(|p| {
                        (
                            t.name.0.to_string(),
                            p.partition_index,
                            p.committed_offset,
                            p.metadata
                                .as_ref()
                                .map(|m| m.to_string())
                                .unwrap_or_default(),
                        )
                    })
                })
                .collect()
        } else {
            assert_eq!(resp.error_code, 0);
            resp.topics
                .iter()
                .flat_map(|t| {
                    t.partitions.iter().map(|p| {
                        (
                            t.name.0.to_string(),
                            p.partition_index,
                            p.committed_offset,
                            p.metadata
                                .as_ref()
                                .map(|m| m.to_string())
                                .unwrap_or_default(),
                        )
                    })
                })
                .collect()
        }
    }

    /// Specific partitions at OffsetFetch v1 (no null topics there).
    async fn fetch_v1(&mut self, group: &str, topic: &str, partitions: &[i32]) -> Vec<i64> {
        let mut t = OffsetFetchRequestTopic::default();
        t.name = topic_name(topic);
        t.partition_indexes = partitions.to_vec();
        let mut req = OffsetFetchRequest::default();
        req.group_id = group_id(group);
        req.topics = Some(vec![t]);
        let resp: OffsetFetchResponse = self.call(ApiKey::OffsetFetch, 1, &req).await;
        resp.topics[0]
            .partitions
            .iter()
            .map(|p| p.committed_offset)
            .collect()
    }
}

fn topic_name(name: &str) -> TopicName {
    TopicName(StrBytes::from_string(name.to_string()))
}

fn group_id(name: &str) -> GroupId {
    GroupId(StrBytes::from_string(name.to_string()))
}

fn row(t: &str, p: i32, o: i64, m: &str) -> (String, i32, i64, String) {
    (t.into(), p, o, m.into())
}

#[tokio::test]
async fn offsets_are_advertised_and_survive_a_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let server = start(&data, &[]).await;
    let mut c = server.client().await;
    let versions: ApiVersionsResponse = c
        .call(ApiKey::ApiVersions, 3, &ApiVersionsRequest::default())
        .await;
    let range = |key: ApiKey| {
        versions
            .api_keys
            .iter()
            .find(|k| k.api_key == key as i16)
            .map(|k| (k.min_version, k.max_version))
    };
    assert_eq!(range(ApiKey::OffsetCommit), Some((2, 9)));
    assert_eq!(range(ApiKey::OffsetFetch), Some((1, 9)));
    assert_eq!(range(ApiKey::OffsetDelete), Some((0, 0)));

    c.create_topic("t", 3).await;
    assert_eq!(
        c.commit(9, "g1", "t", &[(0, 10, "first"), (1, 11, ""), (2, 12, "x")])
            .await,
        vec![0, 0, 0]
    );
    assert_eq!(c.commit(2, "g2", "t", &[(0, 20, "v2")]).await, vec![0]);
    // A later commit replaces the earlier one.
    assert_eq!(c.commit(8, "g1", "t", &[(2, 42, "again")]).await, vec![0]);

    // OffsetDelete of an Empty simple group.
    let mut dt = OffsetDeleteRequestTopic::default();
    dt.name = topic_name("t");
    let mut dp = OffsetDeleteRequestPartition::default();
    dp.partition_index = 1;
    dt.partitions = vec![dp];
    let mut del = OffsetDeleteRequest::default();
    del.group_id = group_id("g1");
    del.topics = vec![dt];
    let resp: OffsetDeleteResponse = c.call(ApiKey::OffsetDelete, 0, &del).await;
    assert_eq!(resp.error_code, 0);
    assert_eq!(resp.topics[0].partitions[0].error_code, 0);

    let expected_g1 = vec![row("t", 0, 10, "first"), row("t", 2, 42, "again")];
    assert_eq!(c.fetch_all(9, "g1").await, expected_g1);
    drop(c);
    server.stop().await;

    let server = start(&data, &[]).await;
    let mut c = server.client().await;
    assert_eq!(c.fetch_all(9, "g1").await, expected_g1);
    assert_eq!(c.fetch_all(7, "g1").await, expected_g1);
    assert_eq!(c.fetch_all(3, "g2").await, vec![row("t", 0, 20, "v2")]);
    assert_eq!(c.fetch_v1("g1", "t", &[0, 1, 2]).await, vec![10, -1, 42]);
    // The group still exists (Empty) and accepts further simple commits.
    assert_eq!(c.commit(9, "g2", "t", &[(0, 21, "v9")]).await, vec![0]);
    assert_eq!(c.fetch_all(8, "g2").await, vec![row("t", 0, 21, "v9")]);
    drop(c);
    server.stop().await;
}

#[tokio::test]
async fn the_expiry_pass_runs_at_its_interval() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let server = start(&data, &[("offsets.retention.check.interval.ms", "100")]).await;
    let mut c = server.client().await;
    c.create_topic("t", 1).await;
    // A v2 commit with a 1 ms retention time expires at the next pass.
    c.retention_time_ms = 1;
    assert_eq!(c.commit(2, "short", "t", &[(0, 5, "")]).await, vec![0]);
    c.retention_time_ms = -1;
    assert_eq!(c.commit(9, "kept", "t", &[(0, 6, "")]).await, vec![0]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !c.fetch_all(9, "short").await.is_empty() {
        assert!(std::time::Instant::now() < deadline, "offset never expired");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(c.fetch_all(9, "kept").await, vec![row("t", 0, 6, "")]);
    drop(c);
    server.stop().await;
}
