//! DescribeTransactions and ListTransactions (v0 filters, v1 duration).

use super::*;

#[test]
fn describe_reports_each_id() {
    let mut h = Harness::new();
    h.ready("empty");
    h.advance(10);
    let pe = h.ongoing("open", &[tp("b", 2), tp("a", 1), tp("a", 0)]);
    let ids: Vec<String> = ["open", "empty", "missing", ""]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let d = h.c.describe_transactions(&ids);
    assert_eq!(
        d[0],
        DescribedTxn {
            transactional_id: "open".into(),
            error: None,
            state: "Ongoing".into(),
            transaction_timeout_ms: TIMEOUT,
            transaction_start_time_ms: START + 10,
            producer_id: pe.0,
            producer_epoch: pe.1,
            topics: vec![
                DescribedTopic {
                    topic: "a".into(),
                    partitions: vec![0, 1]
                },
                DescribedTopic {
                    topic: "b".into(),
                    partitions: vec![2]
                },
            ],
        }
    );
    assert_eq!(d[1].state, "Empty");
    assert_eq!(d[1].transaction_start_time_ms, -1);
    assert!(d[1].topics.is_empty());
    assert_eq!(
        d[2],
        DescribedTxn {
            transactional_id: "missing".into(),
            error: Some(KafkaError::TransactionalIdNotFound),
            state: String::new(),
            transaction_timeout_ms: 0,
            transaction_start_time_ms: 0,
            producer_id: 0,
            producer_epoch: 0,
            topics: vec![],
        }
    );
    assert_eq!(d[3].error, Some(KafkaError::InvalidRequest));
}

#[test]
fn describe_shows_the_confirmed_state() {
    let mut h = Harness::new();
    let pe = h.ongoing(T, &[tp("a", 0)]);
    h.end(T, pe, TxnResult::Commit);
    let d = h.c.describe_transactions(&[T.to_string()]);
    assert_eq!(d[0].state, "Ongoing", "PrepareCommit is not in the log yet");
    h.confirm_all();
    let d = h.c.describe_transactions(&[T.to_string()]);
    assert_eq!(d[0].state, "PrepareCommit");
    h.settle();
    let d = h.c.describe_transactions(&[T.to_string()]);
    assert_eq!(d[0].state, "CompleteCommit");
    assert!(d[0].topics.is_empty());
    assert_eq!(d[0].transaction_start_time_ms, START);
}

fn listed(h: &Harness, f: ListTransactionsFilter) -> (Vec<String>, Vec<String>) {
    let r = h.c.list_transactions(h.now, &f).unwrap();
    (
        r.transactions
            .iter()
            .map(|t| format!("{}:{}:{}", t.transactional_id, t.producer_id, t.state))
            .collect(),
        r.unknown_state_filters,
    )
}

#[test]
fn list_filters_by_state_producer_and_duration() {
    let mut h = Harness::new();
    h.ready("e"); // pid 1000
    let pe = h.ongoing("o1", &[tp("a", 0)]); // pid 1001, started START
    h.advance(5_000);
    h.ongoing("o2", &[tp("a", 1)]); // pid 1002, started START + 5s
    h.end("o1", pe, TxnResult::Commit);
    h.confirm_all(); // o1 PrepareCommit, markers pending
    h.advance(5_000); // now START + 10s
    let none = ListTransactionsFilter {
        duration_ms: -1,
        ..Default::default()
    };
    assert_eq!(
        listed(&h, none.clone()),
        (
            vec![
                "e:1000:Empty".to_string(),
                "o1:1001:PrepareCommit".into(),
                "o2:1002:Ongoing".into()
            ],
            vec![]
        )
    );
    let states = ListTransactionsFilter {
        states: vec!["Ongoing".into(), "PrepareCommit".into(), "Bogus".into()],
        ..none.clone()
    };
    assert_eq!(
        listed(&h, states),
        (
            vec![
                "o1:1001:PrepareCommit".to_string(),
                "o2:1002:Ongoing".into()
            ],
            vec!["Bogus".to_string()]
        )
    );
    // Only unknown states: nothing matches.
    let bogus = ListTransactionsFilter {
        states: vec!["ongoing".into()],
        ..none.clone()
    };
    assert_eq!(listed(&h, bogus), (vec![], vec!["ongoing".to_string()]));
    let pids = ListTransactionsFilter {
        producer_ids: vec![1000, 1002, 7],
        ..none.clone()
    };
    assert_eq!(
        listed(&h, pids),
        (
            vec!["e:1000:Empty".to_string(), "o2:1002:Ongoing".into()],
            vec![]
        )
    );
    // Running longer than 6s: o1 (10s); o2 (5s) is not. An Empty id has
    // start -1 and so always passes the duration filter, as in Kafka.
    let long = ListTransactionsFilter {
        duration_ms: 6_000,
        ..none.clone()
    };
    assert_eq!(
        listed(&h, long),
        (
            vec!["e:1000:Empty".to_string(), "o1:1001:PrepareCommit".into()],
            vec![]
        )
    );
    // The boundary is exclusive: exactly 5s is not "longer than 5s".
    let five = ListTransactionsFilter {
        duration_ms: 5_000,
        states: vec!["Ongoing".into()],
        ..none
    };
    assert_eq!(listed(&h, five), (vec![], vec![]));
}

#[test]
fn list_hides_ids_that_are_not_loaded_here() {
    let c = TransactionCoordinator::new(cfg(), 0);
    let f = ListTransactionsFilter {
        states: vec!["Nope".into()],
        producer_ids: vec![],
        duration_ms: -1,
    };
    assert_eq!(
        c.list_transactions(0, &f),
        Ok(ListedTxns {
            unknown_state_filters: vec!["Nope".into()],
            transactions: vec![],
        })
    );
}
