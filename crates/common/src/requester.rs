//! A client handle shaped as a channel: the network-function shell sends a
//! typed request and awaits the typed answer, while a protocol client task
//! (Diameter S6a, GTPv2-C S11) owns the socket, the sequence numbers and the
//! retransmissions. This keeps NF crates free of each other's codecs.

use tokio::sync::{mpsc, oneshot};

/// Why a request got no answer from the peer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TransportError {
    #[error("no answer from the peer after all retransmissions")]
    Timeout,
    #[error("the peer connection is down: {0}")]
    Down(String),
    #[error("the peer's answer could not be decoded: {0}")]
    Malformed(String),
    #[error("the client task has stopped")]
    Closed,
}

/// One request in flight, as the client task receives it.
pub struct Pending<Req, Ans> {
    pub request: Req,
    pub reply: oneshot::Sender<Result<Ans, TransportError>>,
}

/// The handle the NF shell holds. Cheap to clone.
pub struct Requester<Req, Ans> {
    tx: mpsc::Sender<Pending<Req, Ans>>,
}

impl<Req, Ans> Clone for Requester<Req, Ans> {
    fn clone(&self) -> Self {
        Requester { tx: self.tx.clone() }
    }
}

impl<Req, Ans> Requester<Req, Ans> {
    /// A handle and the receiving end the client task reads.
    pub fn channel(depth: usize) -> (Self, mpsc::Receiver<Pending<Req, Ans>>) {
        let (tx, rx) = mpsc::channel(depth);
        (Requester { tx }, rx)
    }

    pub async fn request(&self, request: Req) -> Result<Ans, TransportError> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(Pending { request, reply })
            .await
            .map_err(|_| TransportError::Closed)?;
        rx.await.map_err(|_| TransportError::Closed)?
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn request_reaches_task_and_answer_returns() {
        let (h, mut rx) = Requester::<u32, u32>::channel(4);
        tokio::spawn(async move {
            while let Some(p) = rx.recv().await {
                let _ = p.reply.send(Ok(p.request * 2));
            }
        });
        assert_eq!(h.request(21).await, Ok(42));
    }

    #[tokio::test]
    async fn dropped_task_is_closed() {
        let (h, rx) = Requester::<u32, u32>::channel(4);
        drop(rx);
        assert_eq!(h.request(1).await, Err(TransportError::Closed));
    }
}
