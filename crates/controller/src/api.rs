//! The northbound REST API: JSON over HTTP, versioned under `/v1`, its
//! OpenAPI 3 document generated from the same types
//! (`/v1/openapi.json`), a bearer token on every write, Prometheus text on
//! `/metrics`. Handlers only parse, check and forward a [`Command`] to the
//! shell's task, which owns the core.

use std::sync::Arc;

use axum::extract::rejection::JsonRejection;
use axum::extract::{DefaultBodyLimit, Path, Request, State};
use axum::http::{header, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use mobicore_common::counters::Counters;
use mobicore_common::peers::bearer_token_matches;
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, oneshot};
use utoipa::OpenApi;

use crate::context::{Anchor, Mode, ReplicaSession};
use crate::core::{CoreError, FlowSpec, MovedSession, Relocation, RelocationState, Timing};
use crate::mec::{
    Action, DestinationInterface, FilterType, InterfaceType, Overlap, RuleAnswer, RuleError, RuleState, TrafficFilter,
    TrafficRule, TunnelInfo,
};

/// `POST /v1/relocations`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RelocationRequest {
    /// The UE: its IMSI, or its IPv4 address.
    pub ue: String,
    /// Move only this flow (inner 5-tuple); the whole UE when absent.
    #[serde(default)]
    pub flow: Option<FlowSpec>,
    /// The target anchor's name.
    pub anchor: String,
    /// Naive or selective replication (default selective).
    #[serde(default = "selective")]
    pub mode: Mode,
    /// Selective: ask the replica for the UE's own address (static address,
    /// TS 29.274 8.14), so servers keep seeing it (default true); false, or
    /// a replica that gives another, and the steering switch translates.
    #[serde(default = "yes")]
    pub keep_address: bool,
}

fn yes() -> bool {
    true
}

fn selective() -> Mode {
    Mode::Selective
}

/// Every error answer: a message saying what was wrong.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, utoipa::ToSchema)]
pub struct ApiError {
    pub error: String,
    /// The relocation as it ended, when one failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub relocation: Option<Relocation>,
}

/// `GET /v1/stats`: what the relay holds.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize, utoipa::ToSchema)]
pub struct Stats {
    pub sessions: usize,
    /// Octets of recorded GTP-C for selective replication.
    pub selective_bytes: usize,
    /// Octets of the naive log.
    pub naive_log_bytes: usize,
    /// Whether the naive log overflowed its bound.
    pub naive_log_full: bool,
    pub relocations_active: usize,
}

/// What a handler asks of the shell's task.
pub enum Command {
    Relocate(RelocationRequest, oneshot::Sender<Result<Relocation, Failure>>),
    MoveBack(u64, oneshot::Sender<Result<Relocation, Failure>>),
    AddAnchor(Anchor, oneshot::Sender<Result<(), CoreError>>),
    Anchors(oneshot::Sender<Vec<Anchor>>),
    Relocations(oneshot::Sender<Vec<Relocation>>),
    Relocation(u64, oneshot::Sender<Option<Relocation>>),
    Stats(oneshot::Sender<Stats>),
    Mec(MecOp, oneshot::Sender<Result<MecAnswer, RuleError>>),
}

/// A traffic-rule operation on a MEC router.
pub enum MecOp {
    Routers,
    List(String),
    Get(String, String),
    /// Create (`false`) or replace (`true`).
    Put(String, TrafficRule, bool),
    Delete(String, String),
}

pub enum MecAnswer {
    Routers(Vec<String>),
    Rules(Vec<TrafficRule>),
    Rule(TrafficRule),
    Put(RuleAnswer),
}

/// Why a relocation call did not succeed.
#[derive(Debug)]
pub enum Failure {
    Refused(CoreError),
    /// Started, then failed and rolled back.
    Failed(Relocation),
    /// Still running when the call's time ran out.
    TimedOut(Relocation),
}

#[derive(Clone)]
pub struct AppState {
    pub commands: mpsc::Sender<Command>,
    pub token: Arc<str>,
    pub counters: Counters,
}

#[derive(OpenApi)]
#[openapi(
    info(title = "mobicore controller", description = "Edge relocation by GTP-C replay (seed 000)"),
    paths(list_relocations, create_relocation, get_relocation, delete_relocation, list_anchors, create_anchor, stats,
        list_mec_routers, list_rules, create_rule, get_rule, replace_rule, delete_rule),
    components(schemas(
        RelocationRequest, Relocation, RelocationState, MovedSession, ReplicaSession, FlowSpec, Timing, Mode,
        Anchor, ApiError, Stats, TrafficRule, TrafficFilter, DestinationInterface, TunnelInfo, FilterType, Action,
        RuleState, InterfaceType, RuleAnswer, Overlap
    )),
    modifiers(&BearerAuth)
)]
pub struct ApiDoc;

struct BearerAuth;

impl utoipa::Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
        let c = openapi.components.get_or_insert_with(Default::default);
        let scheme = HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build();
        c.add_security_scheme("token", SecurityScheme::Http(scheme));
    }
}

/// The router, with body limit and write authentication.
pub fn router(state: AppState, max_body_bytes: usize) -> Router {
    Router::new()
        .route("/v1/relocations", get(list_relocations).post(create_relocation))
        .route("/v1/relocations/{id}", get(get_relocation).delete(delete_relocation))
        .route("/v1/anchors", get(list_anchors).post(create_anchor))
        .route("/v1/stats", get(stats))
        .route("/v1/mec/routers", get(list_mec_routers))
        .route("/v1/mec/routers/{router}/traffic-rules", get(list_rules).post(create_rule))
        .route("/v1/mec/routers/{router}/traffic-rules/{id}", get(get_rule).put(replace_rule).delete(delete_rule))
        .route("/v1/openapi.json", get(|| async { Json(ApiDoc::openapi()) }))
        .route("/metrics", get(metrics))
        .fallback(|| async { error(StatusCode::NOT_FOUND, "no such path (the API is under /v1)") })
        .layer(middleware::from_fn_with_state(state.clone(), authenticate))
        .layer(DefaultBodyLimit::max(max_body_bytes))
        .with_state(state)
}

/// Writes need `Authorization: Bearer <token>`.
async fn authenticate(State(s): State<AppState>, req: Request, next: Next) -> Response {
    if matches!(*req.method(), Method::GET | Method::HEAD) {
        return next.run(req).await;
    }
    let given = req.headers().get(header::AUTHORIZATION).and_then(|v| v.to_str().ok());
    if !bearer_token_matches(given, &s.token) {
        s.counters.incr("rest_unauthorized");
        return error(StatusCode::UNAUTHORIZED, "writes need Authorization: Bearer <token> ([controller] token)");
    }
    next.run(req).await
}

fn error(status: StatusCode, msg: impl Into<String>) -> Response {
    (status, Json(ApiError { error: msg.into(), relocation: None })).into_response()
}

fn core_error(e: CoreError) -> Response {
    let status = match e {
        CoreError::UnknownUe(_) | CoreError::UnknownAnchor(_) | CoreError::UnknownRelocation(_) => {
            StatusCode::NOT_FOUND
        }
        CoreError::Conflict(_) => StatusCode::CONFLICT,
        CoreError::Invalid(_) => StatusCode::BAD_REQUEST,
        CoreError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
    };
    error(status, e.to_string())
}

fn failure(f: Failure) -> Response {
    match f {
        Failure::Refused(e) => core_error(e),
        Failure::Failed(r) => {
            let msg = match &r.state {
                RelocationState::Failed(why) => format!("relocation {} failed and was rolled back: {why}", r.id),
                s => format!("relocation {} ended {s:?}", r.id),
            };
            (StatusCode::BAD_GATEWAY, Json(ApiError { error: msg, relocation: Some(r) })).into_response()
        }
        Failure::TimedOut(r) => {
            let msg = format!("relocation {} still {:?}; GET /v1/relocations/{}", r.id, r.state, r.id);
            (StatusCode::GATEWAY_TIMEOUT, Json(ApiError { error: msg, relocation: Some(r) })).into_response()
        }
    }
}

/// Bad JSON, unknown fields, a body over the limit: the extractor's own
/// status (400, 413, 415 or 422) and message.
fn rejected(s: &AppState, r: JsonRejection) -> Response {
    s.counters.incr("rest_bad_request");
    error(r.status(), r.body_text())
}

async fn ask<T>(s: &AppState, cmd: impl FnOnce(oneshot::Sender<T>) -> Command) -> Result<T, Response> {
    let (tx, rx) = oneshot::channel();
    let gone = || error(StatusCode::SERVICE_UNAVAILABLE, "the controller is shutting down");
    s.commands.send(cmd(tx)).await.map_err(|_| gone())?;
    rx.await.map_err(|_| gone())
}

#[utoipa::path(get, path = "/v1/relocations", responses((status = 200, body = [Relocation])))]
async fn list_relocations(State(s): State<AppState>) -> Response {
    match ask(&s, Command::Relocations).await {
        Ok(v) => Json(v).into_response(),
        Err(r) => r,
    }
}

/// Moves a UE (or one flow) to an anchor: replicate, then divert. Answers
/// once the relocation is in force, with its timing breakdown.
#[utoipa::path(post, path = "/v1/relocations", request_body = RelocationRequest,
    security(("token" = [])),
    responses((status = 201, body = Relocation), (status = 400, body = ApiError), (status = 401, body = ApiError),
        (status = 404, body = ApiError), (status = 409, body = ApiError), (status = 502, body = ApiError)))]
async fn create_relocation(
    State(s): State<AppState>,
    body: Result<Json<RelocationRequest>, JsonRejection>,
) -> Response {
    let req = match body {
        Ok(Json(r)) => r,
        Err(e) => return rejected(&s, e),
    };
    if let Some(f) = req.flow {
        if f.remote_prefix.is_some_and(|p| p > 32) {
            return error(StatusCode::BAD_REQUEST, "flow.remote_prefix must be 0-32");
        }
    }
    match ask(&s, |tx| Command::Relocate(req, tx)).await {
        Ok(Ok(r)) => (StatusCode::CREATED, Json(r)).into_response(),
        Ok(Err(f)) => failure(f),
        Err(r) => r,
    }
}

#[utoipa::path(get, path = "/v1/relocations/{id}", params(("id" = u64, Path)),
    responses((status = 200, body = Relocation), (status = 404, body = ApiError)))]
async fn get_relocation(State(s): State<AppState>, Path(id): Path<String>) -> Response {
    let Ok(id) = id.parse::<u64>() else { return error(StatusCode::BAD_REQUEST, "a relocation id is a number") };
    match ask(&s, |tx| Command::Relocation(id, tx)).await {
        Ok(Some(r)) => Json(r).into_response(),
        Ok(None) => core_error(CoreError::UnknownRelocation(id)),
        Err(r) => r,
    }
}

/// Moves the UE back to its original anchor.
#[utoipa::path(delete, path = "/v1/relocations/{id}", params(("id" = u64, Path)), security(("token" = [])),
    responses((status = 200, body = Relocation), (status = 404, body = ApiError), (status = 409, body = ApiError)))]
async fn delete_relocation(State(s): State<AppState>, Path(id): Path<String>) -> Response {
    let Ok(id) = id.parse::<u64>() else { return error(StatusCode::BAD_REQUEST, "a relocation id is a number") };
    match ask(&s, |tx| Command::MoveBack(id, tx)).await {
        Ok(Ok(r)) => Json(r).into_response(),
        Ok(Err(f)) => failure(f),
        Err(r) => r,
    }
}

#[utoipa::path(get, path = "/v1/anchors", responses((status = 200, body = [Anchor])))]
async fn list_anchors(State(s): State<AppState>) -> Response {
    match ask(&s, Command::Anchors).await {
        Ok(v) => Json(v).into_response(),
        Err(r) => r,
    }
}

/// Registers an anchor that already runs.
#[utoipa::path(post, path = "/v1/anchors", request_body = Anchor, security(("token" = [])),
    responses((status = 201, body = Anchor), (status = 400, body = ApiError), (status = 409, body = ApiError)))]
async fn create_anchor(State(s): State<AppState>, body: Result<Json<Anchor>, JsonRejection>) -> Response {
    let a = match body {
        Ok(Json(a)) => a,
        Err(e) => return rejected(&s, e),
    };
    let valid = !a.name.is_empty() && a.name.len() <= 64;
    if !valid || !a.name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_') {
        return error(StatusCode::BAD_REQUEST, "an anchor name is 1-64 letters, digits, '-' or '_'");
    }
    match ask(&s, |tx| Command::AddAnchor(a.clone(), tx)).await {
        Ok(Ok(())) => (StatusCode::CREATED, Json(a)).into_response(),
        Ok(Err(e)) => core_error(e),
        Err(r) => r,
    }
}

#[utoipa::path(get, path = "/v1/stats", responses((status = 200, body = Stats)))]
async fn stats(State(s): State<AppState>) -> Response {
    match ask(&s, Command::Stats).await {
        Ok(v) => Json(v).into_response(),
        Err(r) => r,
    }
}

async fn metrics(State(s): State<AppState>) -> Response {
    let mut text = s.counters.prometheus("controller");
    if let Ok(st) = ask(&s, Command::Stats).await {
        text.push_str(&format!(
            "mobicore_controller_sessions {}\nmobicore_controller_selective_bytes {}\n\
             mobicore_controller_naive_log_bytes {}\nmobicore_controller_relocations_active {}\n",
            st.sessions, st.selective_bytes, st.naive_log_bytes, st.relocations_active
        ));
    }
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response()
}

fn rule_error(e: RuleError) -> Response {
    let status = match e {
        RuleError::UnknownRouter(_) | RuleError::UnknownRule(_) => StatusCode::NOT_FOUND,
        RuleError::Invalid(_) => StatusCode::BAD_REQUEST,
        RuleError::Conflict(_) => StatusCode::CONFLICT,
        RuleError::Refused(_) => StatusCode::UNPROCESSABLE_ENTITY,
        RuleError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
    };
    error(status, e.to_string())
}

async fn mec(s: &AppState, op: MecOp) -> Result<MecAnswer, Response> {
    match ask(s, |tx| Command::Mec(op, tx)).await? {
        Ok(a) => Ok(a),
        Err(e) => Err(rule_error(e)),
    }
}

fn mec_answer(status: StatusCode, r: Result<MecAnswer, Response>) -> Response {
    match r {
        Ok(MecAnswer::Routers(v)) => (status, Json(v)).into_response(),
        Ok(MecAnswer::Rules(v)) => (status, Json(v)).into_response(),
        Ok(MecAnswer::Rule(v)) => (status, Json(v)).into_response(),
        Ok(MecAnswer::Put(v)) => (status, Json(v)).into_response(),
        Err(r) => r,
    }
}

/// The virtual MEC routers.
#[utoipa::path(get, path = "/v1/mec/routers", responses((status = 200, body = [String])))]
async fn list_mec_routers(State(s): State<AppState>) -> Response {
    mec_answer(StatusCode::OK, mec(&s, MecOp::Routers).await)
}

#[utoipa::path(get, path = "/v1/mec/routers/{router}/traffic-rules", params(("router" = String, Path)),
    responses((status = 200, body = [TrafficRule]), (status = 404, body = ApiError)))]
async fn list_rules(State(s): State<AppState>, Path(router): Path<String>) -> Response {
    mec_answer(StatusCode::OK, mec(&s, MecOp::List(router)).await)
}

/// Adds a traffic rule (ETSI GS MEC 011 TrafficRule); the answer lists the
/// ACTIVE rules it overlaps and which one wins.
#[utoipa::path(post, path = "/v1/mec/routers/{router}/traffic-rules", params(("router" = String, Path)),
    request_body = TrafficRule, security(("token" = [])),
    responses((status = 201, body = RuleAnswer), (status = 400, body = ApiError), (status = 404, body = ApiError),
        (status = 409, body = ApiError)))]
async fn create_rule(
    State(s): State<AppState>,
    Path(router): Path<String>,
    body: Result<Json<TrafficRule>, JsonRejection>,
) -> Response {
    let rule = match body {
        Ok(Json(r)) => r,
        Err(e) => return rejected(&s, e),
    };
    mec_answer(StatusCode::CREATED, mec(&s, MecOp::Put(router, rule, false)).await)
}

#[utoipa::path(get, path = "/v1/mec/routers/{router}/traffic-rules/{id}",
    params(("router" = String, Path), ("id" = String, Path)),
    responses((status = 200, body = TrafficRule), (status = 404, body = ApiError)))]
async fn get_rule(State(s): State<AppState>, Path((router, id)): Path<(String, String)>) -> Response {
    mec_answer(StatusCode::OK, mec(&s, MecOp::Get(router, id)).await)
}

/// Replaces a traffic rule; the body's trafficRuleId must be the path's.
#[utoipa::path(put, path = "/v1/mec/routers/{router}/traffic-rules/{id}",
    params(("router" = String, Path), ("id" = String, Path)), request_body = TrafficRule, security(("token" = [])),
    responses((status = 200, body = RuleAnswer), (status = 400, body = ApiError), (status = 404, body = ApiError),
        (status = 409, body = ApiError)))]
async fn replace_rule(
    State(s): State<AppState>,
    Path((router, id)): Path<(String, String)>,
    body: Result<Json<TrafficRule>, JsonRejection>,
) -> Response {
    let rule = match body {
        Ok(Json(r)) => r,
        Err(e) => return rejected(&s, e),
    };
    if rule.traffic_rule_id != id {
        return error(StatusCode::BAD_REQUEST, "the body's trafficRuleId differs from the path's");
    }
    mec_answer(StatusCode::OK, mec(&s, MecOp::Put(router, rule, true)).await)
}

#[utoipa::path(delete, path = "/v1/mec/routers/{router}/traffic-rules/{id}",
    params(("router" = String, Path), ("id" = String, Path)), security(("token" = [])),
    responses((status = 200, body = TrafficRule), (status = 404, body = ApiError)))]
async fn delete_rule(State(s): State<AppState>, Path((router, id)): Path<(String, String)>) -> Response {
    mec_answer(StatusCode::OK, mec(&s, MecOp::Delete(router, id)).await)
}
