
#[cfg(test)]
mod tests {
    use super::*;
    use crate::handlers::test_support::open_broker;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_single_node_has_nothing_to_hand_over() {
        let dir = tempfile::tempdir().expect("tempdir");
        let broker = open_broker(dir.path(), &[]);
        let b = Arc::clone(&broker);
        tokio::task::spawn_blocking(move || b.create_topic("t", 2, 1, &[], false))
            .await
            .expect("task")
            .expect("topic");
        let before = broker.image();
        assert_eq!(
            broker.controlled_shutdown(Duration::from_secs(5)).await,
            Outcome::NotNeeded
        );
        // Unchanged: it still leads its partitions, nothing was written.
        assert_eq!(broker.partitions.all().len(), 2);
        assert_eq!(*broker.image(), *before);
        let b = Arc::clone(&broker);
        tokio::task::spawn_blocking(move || b.shutdown())
            .await
            .expect("task")
            .expect("shutdown");
    }
}
