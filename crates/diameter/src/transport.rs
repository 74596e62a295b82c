//! The thin tokio pieces shared by the S6a client and the HSS server: a
//! writer task that coalesces queued frames into one write, and the reading
//! of a stream into a [`Peer`].

use crate::framing::FrameDecoder;
use crate::peer::Peer;
use std::time::Instant;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::mpsc;

/// Largest batch one write carries.
const MAX_BATCH: usize = 1 << 20;

/// Spawns the writer of a connection. Each `Vec<u8>` sent is one or more
/// whole messages; everything queued is written with one `write_all`.
/// Dropping the sender flushes what is queued and shuts the write side.
pub fn spawn_writer(mut w: OwnedWriteHalf) -> mpsc::UnboundedSender<Vec<u8>> {
    let (tx, mut rx) = mpsc::unbounded_channel::<Vec<u8>>();
    tokio::spawn(async move {
        while let Some(mut buf) = rx.recv().await {
            while buf.len() < MAX_BATCH {
                match rx.try_recv() {
                    Ok(more) => buf.extend_from_slice(&more),
                    Err(_) => break,
                }
            }
            if w.write_all(&buf).await.is_err() {
                break;
            }
        }
        let _ = w.shutdown().await;
    });
    tx
}

/// What one read did.
#[derive(Debug, PartialEq, Eq)]
pub enum ReadOutcome {
    /// Octets were read and fed to the peer.
    Data,
    /// The peer closed the stream, or reading failed.
    Closed,
}

/// Reads once from the stream into the decoder, at most its
/// [`room`](FrameDecoder::room). Cancel-safe (it is one `read_buf`), so it
/// can sit in a `select!`. Take the frames out ([`feed`]) between reads: a
/// decoder without room reads nothing and reports `Closed`.
pub async fn read_into(rd: &mut OwnedReadHalf, decoder: &mut FrameDecoder) -> ReadOutcome {
    if decoder.room() == 0 {
        return ReadOutcome::Closed;
    }
    match rd.read_buf(&mut decoder.read_buf()).await {
        Ok(0) | Err(_) => ReadOutcome::Closed,
        Ok(_) => ReadOutcome::Data,
    }
}

/// Hands the frames the decoder holds to the peer; a framing error closes
/// the peer (after its answer).
pub fn feed(peer: &mut Peer, decoder: &mut FrameDecoder, now: Instant) {
    loop {
        match decoder.next_frame() {
            Ok(Some(frame)) => peer.handle_frame(now, &frame),
            Ok(None) => return,
            Err(e) => {
                peer.handle_framing_error(e);
                return;
            }
        }
        if peer.is_closed() {
            return;
        }
    }
}

/// Sleeps until `deadline`, or forever when there is none.
pub async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(tokio::time::Instant::from_std(d)).await,
        None => std::future::pending().await,
    }
}
