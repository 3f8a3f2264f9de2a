//! [`CommitFuture`]: the outcome of `Consumer::commit_async`.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::sync::oneshot;

use crate::error::{ClientError, Result};

/// The outcome of [`Consumer::commit_async`](crate::consumer::Consumer::commit_async): await it for the result, or
/// drop it to ignore the result (the commit still completes).
#[derive(Debug)]
pub struct CommitFuture {
    pub(super) rx: Option<oneshot::Receiver<Result<()>>>,
}

impl Future for CommitFuture {
    type Output = Result<()>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        let Some(rx) = self.rx.as_mut() else {
            return Poll::Ready(Ok(()));
        };
        match Pin::new(rx).poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(r) => {
                self.rx = None;
                Poll::Ready(r.unwrap_or_else(|_| {
                    Err(ClientError::InvalidArgument(
                        "consumer dropped before the commit completed".into(),
                    ))
                }))
            }
        }
    }
}
