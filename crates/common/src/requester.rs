//! A client handle shaped as a channel: the network-function shell sends a
//! typed request and awaits the typed answer, while a protocol client task
//! (Diameter S6a, GTPv2-C S11) owns the socket, the sequence numbers and the
//! retransmissions. This keeps NF crates free of each other's codecs.

use tokio::sync::{mpsc, oneshot};

/// Why a request got no answer from the peer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, serde::Serialize, serde::Deserialize)]
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

    pub async fn request(&self, request: Req) -> Result<Ans, TransportError>
    where
        Ans: Send + 'static,
    {
        self.submit(request).await.await
    }

    /// Queues the request now and returns the future of its answer.
    /// Requests submitted one after another reach the client task (and so
    /// the wire) in that order, which spawning `request` calls would not
    /// guarantee (a Delete Session must not overtake a Modify Bearer).
    pub async fn submit(
        &self,
        request: Req,
    ) -> impl std::future::Future<Output = Result<Ans, TransportError>> + Send + 'static
    where
        Ans: Send + 'static,
    {
        let (reply, rx) = oneshot::channel();
        let sent = self.tx.send(Pending { request, reply }).await.map_err(|_| TransportError::Closed);
        async move {
            sent?;
            rx.await.map_err(|_| TransportError::Closed)?
        }
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
    async fn submitted_requests_arrive_in_order() {
        let (h, mut rx) = Requester::<u32, u32>::channel(64);
        let mut answers = Vec::new();
        for i in 0..10 {
            answers.push(tokio::spawn(h.submit(i).await));
        }
        let mut seen = Vec::new();
        for _ in 0..10 {
            let p = rx.recv().await.unwrap();
            seen.push(p.request);
            let _ = p.reply.send(Ok(p.request + 100));
        }
        assert_eq!(seen, (0..10).collect::<Vec<_>>());
        for (i, a) in answers.into_iter().enumerate() {
            assert_eq!(a.await.unwrap(), Ok(i as u32 + 100));
        }
    }

    #[tokio::test]
    async fn dropped_task_is_closed() {
        let (h, rx) = Requester::<u32, u32>::channel(4);
        drop(rx);
        assert_eq!(h.request(1).await, Err(TransportError::Closed));
    }
}
