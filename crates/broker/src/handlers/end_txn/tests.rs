//! EndTxn v0-v4 through the whole dispatch path: whole responses per
//! version.

use proto_kafka::messages::ApiKey;
use proto_kafka::ResponseError;
use sluice_coordinator::txn::TransactionState;

use super::*;
use crate::handlers::test_support::{call, open_broker};
use crate::txn_coordinator::testing::{
    add, end_request, init, markers, produce, start, state, wait_state,
};

async fn end_at(broker: &Arc<Broker>, v: i16, req: &EndTxnRequest) -> EndTxnResponse {
    call(broker, ApiKey::EndTxn, v, req)
        .await
        .expect("response")
}

fn answer(code: i16) -> EndTxnResponse {
    EndTxnResponse::default().with_error_code(code)
}

/// Commit and abort at every version: the answer once Prepare* is in the
/// log, then the markers on every partition and Complete*; a retry of the
/// same end is NONE, the other end INVALID_TXN_STATE.
#[tokio::test]
async fn every_version_commits_and_aborts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = open_broker(dir.path(), &[("transaction.state.log.num.partitions", "2")]);
    broker.create_topic("t", 2, 1, &[], false).expect("topic");
    let runner = start(&broker);
    for v in VERSIONS.0..=VERSIONS.1 {
        for commit in [true, false] {
            let id = format!("tx-{v}-{commit}");
            let (pid, epoch) = init(&broker, &id, 60_000).await;
            assert_eq!(add(&broker, &id, pid, epoch, &[("t", &[0, 1])]).await, 0);
            produce(&broker, "t", 0, pid, epoch, 0, 2)
                .await
                .expect("produce");
            let r = end_at(&broker, v, &end_request(&id, pid, epoch, commit)).await;
            assert_eq!(r, answer(0), "v{v} commit {commit}");
            let done = if commit {
                TransactionState::CompleteCommit
            } else {
                TransactionState::CompleteAbort
            };
            wait_state(&broker, &id, Some(done)).await;
            for p in [0, 1] {
                let written: Vec<_> = markers(&broker, "t", p)
                    .into_iter()
                    .filter(|m| m.0 == pid)
                    .collect();
                assert_eq!(written, vec![(pid, epoch, commit, 0)], "v{v} t-{p}");
            }
            let r = end_at(&broker, v, &end_request(&id, pid, epoch, commit)).await;
            assert_eq!(r, answer(0), "v{v}: a retry");
            let r = end_at(&broker, v, &end_request(&id, pid, epoch, !commit)).await;
            assert_eq!(
                r,
                answer(ResponseError::InvalidTxnState.code()),
                "v{v}: the other end"
            );
        }
    }
    runner.stop().await;
    broker.shutdown().expect("shutdown");
}

/// An old epoch is PRODUCER_FENCED (INVALID_PRODUCER_EPOCH below v2); an
/// unknown id or producer id INVALID_PRODUCER_ID_MAPPING; ending again
/// (commit or abort) while the markers are being written
/// CONCURRENT_TRANSACTIONS; ending
/// without a transaction INVALID_TXN_STATE; NOT_COORDINATOR before
/// `__transaction_state` exists.
#[tokio::test]
async fn errors_per_version() {
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = open_broker(dir.path(), &[("transaction.state.log.num.partitions", "1")]);
    broker.create_topic("t", 1, 1, &[], false).expect("topic");
    for v in VERSIONS.0..=VERSIONS.1 {
        let r = end_at(&broker, v, &end_request("tx", 0, 0, true)).await;
        assert_eq!(r, answer(ResponseError::NotCoordinator.code()), "v{v}");
    }
    let (pid, _) = init(&broker, "tx", 60_000).await;
    let (_, epoch) = init(&broker, "tx", 60_000).await;
    for v in VERSIONS.0..=VERSIONS.1 {
        let fenced = if v >= 2 {
            ResponseError::ProducerFenced
        } else {
            ResponseError::InvalidProducerEpoch
        };
        let r = end_at(&broker, v, &end_request("tx", pid, epoch - 1, true)).await;
        assert_eq!(r, answer(fenced.code()), "v{v} old epoch");
        let mapping = answer(ResponseError::InvalidProducerIdMapping.code());
        let r = end_at(&broker, v, &end_request("tx", pid + 1, epoch, true)).await;
        assert_eq!(r, mapping, "v{v} other producer id");
        let r = end_at(&broker, v, &end_request("nobody", pid, epoch, true)).await;
        assert_eq!(r, mapping, "v{v} unknown id");
        let r = end_at(&broker, v, &end_request("tx", pid, epoch, false)).await;
        assert_eq!(
            r,
            answer(ResponseError::InvalidTxnState.code()),
            "v{v} no transaction"
        );
    }
    // No background task: the markers wait.
    assert_eq!(add(&broker, "tx", pid, epoch, &[("t", &[0])]).await, 0);
    let r = end_at(&broker, 0, &end_request("tx", pid, epoch, true)).await;
    assert_eq!(r, answer(0));
    assert_eq!(state(&broker, "tx"), Some(TransactionState::PrepareCommit));
    for v in VERSIONS.0..=VERSIONS.1 {
        for commit in [true, false] {
            let r = end_at(&broker, v, &end_request("tx", pid, epoch, commit)).await;
            let code = ResponseError::ConcurrentTransactions.code();
            assert_eq!(r, answer(code), "v{v} commit {commit} while completing");
        }
    }
    let runner = start(&broker);
    wait_state(&broker, "tx", Some(TransactionState::CompleteCommit)).await;
    runner.stop().await;
    broker.shutdown().expect("shutdown");
}
