//! The MME's admin endpoint: JSON over HTTP (axum), versioned under
//! `/v1`, a bearer token on every request, small bodies only. Handlers
//! parse and check, then hand an [`OperatorCommand`] to the shell's task,
//! which owns the core ([`crate::shell::OperatorRequest`]).
//!
//! `POST /v1/ues/{imsi}/detach` with `{"reattachRequired": bool}` (an
//! empty body: false) starts a network-initiated detach (TS 24.301
//! 5.5.2.3, TS 23.401 5.3.8.3): 202 once started (DETACH REQUEST sent, or
//! the idle UE paged first), 404 for an IMSI no UE context has, 400 for a
//! malformed IMSI or body, 401 without the token, 413 for a body over
//! [`MAX_BODY_BYTES`], 503 while the MME stops or when the commands
//! waiting for it fill their channel.

use crate::mme::{OperatorCommand, OperatorOutcome};
use crate::shell::OperatorRequest;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Path, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use mobicore_common::counters::Counters;
use mobicore_common::peers::bearer_token_matches;
use mobicore_common::Imsi;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot, watch};

/// The largest request body taken, octets: a detach's is about 30.
pub const MAX_BODY_BYTES: usize = 1024;

/// The body of `POST /v1/ues/{imsi}/detach`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DetachRequest {
    /// Detach type "re-attach required" (TS 24.301 9.9.3.7), else
    /// "re-attach not required".
    #[serde(default)]
    pub reattach_required: bool,
}

/// The answer to a detach that started.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DetachAnswer {
    pub imsi: String,
    /// "detach-requested" (the connected UE got DETACH REQUEST), "paging"
    /// (the idle UE is paged first, TS 24.301 5.5.2.3.1), "detaching" (a
    /// detach runs already) or "attach-aborted" (the UE was still
    /// attaching).
    pub state: String,
}

/// Every error answer: what was wrong.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
pub struct AdminError {
    pub error: String,
}

#[derive(Clone)]
struct AdminState {
    commands: mpsc::Sender<OperatorRequest>,
    token: Arc<str>,
    counters: Counters,
}

/// The admin router: commands go to `commands`, every request needs
/// `Authorization: Bearer <token>`; outcomes are counted in `counters`
/// (`admin_*`).
pub fn router(commands: mpsc::Sender<OperatorRequest>, token: &str, counters: Counters) -> Router {
    let state = AdminState { commands, token: token.into(), counters };
    Router::new()
        .route("/v1/ues/{imsi}/detach", post(detach))
        .fallback(|| async { error(StatusCode::NOT_FOUND, "no such path (POST /v1/ues/{imsi}/detach)") })
        .layer(middleware::from_fn_with_state(state.clone(), authenticate))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(state)
}

/// Serve `router` on `listener` until `shutdown` turns true.
pub async fn serve(
    listener: tokio::net::TcpListener,
    router: Router,
    mut shutdown: watch::Receiver<bool>,
) -> std::io::Result<()> {
    let stop = async move {
        while !*shutdown.borrow() {
            if shutdown.changed().await.is_err() {
                break;
            }
        }
    };
    axum::serve(listener, router).with_graceful_shutdown(stop).await
}

async fn authenticate(State(s): State<AdminState>, req: Request, next: Next) -> Response {
    let given = req.headers().get(header::AUTHORIZATION).and_then(|v| v.to_str().ok());
    if !bearer_token_matches(given, &s.token) {
        s.counters.incr("admin_unauthorized");
        return error(StatusCode::UNAUTHORIZED, "needs Authorization: Bearer <token> ([mme] admin_token)");
    }
    next.run(req).await
}

fn error(status: StatusCode, msg: impl Into<String>) -> Response {
    (status, Json(AdminError { error: msg.into() })).into_response()
}

async fn detach(
    State(s): State<AdminState>,
    Path(imsi): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let bad = |msg: String| {
        s.counters.incr("admin_bad_request");
        error(StatusCode::BAD_REQUEST, msg)
    };
    let Ok(imsi) = imsi.parse::<Imsi>() else {
        return bad(format!("{imsi:?} is not an IMSI (6-15 digits)"));
    };
    let body = match body {
        Ok(b) => b,
        Err(r) => {
            s.counters.incr("admin_bad_request");
            return error(r.status(), r.body_text());
        }
    };
    let expected = "expected {\"reattachRequired\": true|false}";
    let req = match body.iter().find(|b| !b.is_ascii_whitespace()) {
        None => DetachRequest::default(),
        // An object only (serde would also take a JSON array for a struct).
        Some(b'{') => match serde_json::from_slice::<DetachRequest>(&body) {
            Ok(r) => r,
            Err(e) => return bad(format!("body: {e} ({expected})")),
        },
        Some(_) => return bad(format!("body: not a JSON object ({expected})")),
    };
    let command = OperatorCommand::Detach { imsi: imsi.clone(), reattach_required: req.reattach_required };
    let (reply, outcome) = oneshot::channel();
    let gone = || error(StatusCode::SERVICE_UNAVAILABLE, "the MME is shutting down");
    // Commands waiting for the core are bounded by the channel: a full
    // one is answered at once rather than held.
    match s.commands.try_send(OperatorRequest { command, reply }) {
        Ok(()) => {}
        Err(mpsc::error::TrySendError::Full(_)) => {
            s.counters.incr("admin_busy");
            return error(StatusCode::SERVICE_UNAVAILABLE, "the MME has too many commands waiting; try again");
        }
        Err(mpsc::error::TrySendError::Closed(_)) => return gone(),
    }
    let Ok(outcome) = outcome.await else { return gone() };
    let state = match outcome {
        OperatorOutcome::UnknownImsi => {
            s.counters.incr("admin_detach_unknown_imsi");
            return error(StatusCode::NOT_FOUND, format!("no UE with IMSI {imsi} is attached"));
        }
        OperatorOutcome::DetachStarted { paged: false } => "detach-requested",
        OperatorOutcome::DetachStarted { paged: true } => "paging",
        OperatorOutcome::AttachAborted => "attach-aborted",
        OperatorOutcome::DetachInProgress => "detaching",
    };
    s.counters.incr("admin_detach_started");
    (StatusCode::ACCEPTED, Json(DetachAnswer { imsi: imsi.to_string(), state: state.into() })).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// The router on a loopback socket, against a stand-in for the
    /// shell that knows one IMSI; its address.
    async fn serve_app(counters: &Counters, shell: bool) -> std::net::SocketAddr {
        let (tx, mut rx) = mpsc::channel::<OperatorRequest>(4);
        if shell {
            tokio::spawn(async move {
                while let Some(r) = rx.recv().await {
                    let OperatorCommand::Detach { imsi, reattach_required } = r.command;
                    let outcome = match imsi.as_str() {
                        "001010000000001" => OperatorOutcome::DetachStarted { paged: reattach_required },
                        _ => OperatorOutcome::UnknownImsi,
                    };
                    let _ = r.reply.send(outcome);
                }
            });
        }
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = watch::channel(false);
        let app = router(tx, "t0ken", counters.clone());
        tokio::spawn(async move {
            let _running = stop; // serves until the test's runtime ends
            serve(listener, app, stopped).await
        });
        addr
    }

    /// One HTTP/1.0 POST; the status and the body.
    async fn call(addr: std::net::SocketAddr, path: &str, token: Option<&str>, body: &str) -> (u16, String) {
        let mut c = tokio::net::TcpStream::connect(addr).await.unwrap();
        let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
        let head = format!("POST {path} HTTP/1.0\r\n{auth}Content-Length: {}\r\n\r\n", body.len());
        c.write_all(head.as_bytes()).await.unwrap();
        let _ = c.write_all(body.as_bytes()).await;
        let mut out = Vec::new();
        let _ = c.read_to_end(&mut out).await;
        let text = String::from_utf8_lossy(&out);
        let status = text.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
        (status, text.split_once("\r\n\r\n").map_or(String::new(), |(_, b)| b.to_string()))
    }

    #[tokio::test]
    async fn answers_each_request_with_its_status() {
        let c = Counters::new();
        let a = serve_app(&c, true).await;
        let path = "/v1/ues/001010000000001/detach";
        let (st, body) = call(a, path, Some("t0ken"), r#"{"reattachRequired": true}"#).await;
        assert_eq!(st, 202, "{body}");
        let answer: DetachAnswer = serde_json::from_str(&body).unwrap();
        assert_eq!((answer.imsi.as_str(), answer.state.as_str()), ("001010000000001", "paging"));
        assert_eq!(call(a, path, Some("t0ken"), "").await.0, 202, "an empty body");
        assert_eq!(call(a, "/v1/ues/001010000000002/detach", Some("t0ken"), "{}").await.0, 404);
        for bad_path in ["/v1/ues/00101x/detach", "/v1/ues/12345/detach", "/v1/ues/0010100000000011/detach"] {
            assert_eq!(call(a, bad_path, Some("t0ken"), "{}").await.0, 400, "{bad_path}");
        }
        for bad_body in ["{", "[]", r#"{"reattachRequired": 1}"#, r#"{"reattach": true}"#] {
            assert_eq!(call(a, path, Some("t0ken"), bad_body).await.0, 400, "{bad_body}");
        }
        let big = format!(r#"{{"reattachRequired": true{}}}"#, " ".repeat(MAX_BODY_BYTES));
        assert_eq!(call(a, path, Some("t0ken"), &big).await.0, 413);
        for token in [None, Some("wrong")] {
            assert_eq!(call(a, path, token, "{}").await.0, 401);
        }
        assert_eq!(call(a, "/v1/nope", Some("t0ken"), "").await.0, 404);
        assert_eq!(call(a, "/v1/nope", None, "").await.0, 401, "no path probing without the token");
        assert_eq!(
            (c.value("admin_detach_started"), c.value("admin_detach_unknown_imsi"), c.value("admin_unauthorized")),
            (2, 1, 3)
        );
        assert_eq!(c.value("admin_bad_request"), 8);
    }

    #[tokio::test]
    async fn a_full_command_queue_is_503_at_once() {
        let (tx, _rx) = mpsc::channel::<OperatorRequest>(1);
        let (reply, _) = oneshot::channel();
        let command = OperatorCommand::Detach { imsi: "001010000000001".parse().unwrap(), reattach_required: false };
        tx.try_send(OperatorRequest { command, reply }).unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let a = listener.local_addr().unwrap();
        let c = Counters::new();
        let (_stop, stopped) = watch::channel(false);
        tokio::spawn(serve(listener, router(tx, "t0ken", c.clone()), stopped));
        assert_eq!(call(a, "/v1/ues/001010000000001/detach", Some("t0ken"), "{}").await.0, 503);
        assert_eq!(c.value("admin_busy"), 1);
    }

    #[tokio::test]
    async fn a_stopped_mme_is_503() {
        let a = serve_app(&Counters::new(), false).await;
        assert_eq!(call(a, "/v1/ues/001010000000001/detach", Some("t0ken"), "{}").await.0, 503);
    }
}
