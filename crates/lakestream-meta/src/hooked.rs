//! [`HookedStore`]: a [`MetaStore`] that forwards every call to another store, and on which a
//! test installs hooks that fail, hold, pause, race, observe or count chosen calls (feature
//! `testkit`).
//!
//! Nothing is faked behind the hooks: a call no hook takes goes to the real store, and a hook
//! that makes a call "take effect" makes it take effect there. One wrapper serves every
//! test, instead of a hand-written wrapper per test.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! use std::sync::Arc;
//! use bytes::Bytes;
//! use lakestream_meta::hooked::{HookedStore, Op};
//! use lakestream_meta::{InMemoryStore, MetaError, MetaStore, PutCondition};
//!
//! let store = HookedStore::new(Arc::new(InMemoryStore::new()));
//! // The next put under /a/ takes effect, but its answer is lost.
//! let lost = store.on(Op::Put).key_prefix("/a/").once().lose_answer();
//! let err = store.put("p", "/a/1", Bytes::from_static(b"x"), PutCondition::None).await.unwrap_err();
//! assert!(matches!(err, MetaError::OutcomeUnknown(_)));
//! assert!(store.inner().get("p", "/a/1").await.unwrap().is_some(), "it took effect");
//! assert_eq!((lost.fired(), store.calls(Op::Put)), (1, 1));
//! // Spent: the next put is answered as usual.
//! store.put("p", "/a/2", Bytes::from_static(b"y"), PutCondition::None).await.unwrap();
//! # }
//! ```
//!
//! **Matching.** [`HookedStore::on`] starts a hook on one operation ([`Op`]); filters narrow
//! it (partition, key, key prefix, any predicate on the [`Call`]), counts bound it
//! ([`HookBuilder::skip`], [`HookBuilder::times`], [`HookBuilder::once`]), and one action
//! ends it and installs it. Hooks are matched when the call is made, in the order they were
//! installed; every matching hook acts, the first installed outermost, except that matching
//! stops at a hook that answers the call itself ([`HookBuilder::fail`],
//! [`HookBuilder::hold`], [`HookBuilder::answer`]).
//!
//! **Sessions.** Sessions opened through the store are wrapped too: their
//! `create_ephemeral` and `close` are the operations [`Op::CreateEphemeral`] and
//! [`Op::CloseSession`].
//!
//! **Pipelined sequenced puts.** [`MetaStore::sequenced_put_owned`] issues the put to the
//! inner store at the call, as the inner store would, unless a matching hook must run before
//! it ([`HookBuilder::pause`], [`HookBuilder::run`], [`HookBuilder::lose_race`],
//! [`HookBuilder::around`]); then the put is issued when the future is first polled.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures::future::BoxFuture;
use tokio::sync::watch;

use crate::error::{MetaError, MetaResult};
use crate::store::{Comparison, MetaStore, PutCondition, Record, Session, Version, WriteResult};

/// An operation of the store or of a session opened through it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    /// [`MetaStore::get`] and [`MetaStore::get_cmp`] ([`Call::cmp`] tells which lookup).
    Get,
    /// [`MetaStore::put`].
    Put,
    /// [`MetaStore::delete`].
    Delete,
    /// [`MetaStore::delete_if_version`].
    DeleteIfVersion,
    /// [`MetaStore::delete_range`].
    DeleteRange,
    /// [`MetaStore::sequenced_put`] and [`MetaStore::sequenced_put_owned`].
    SequencedPut,
    /// [`MetaStore::list`].
    List,
    /// [`MetaStore::scan`].
    Scan,
    /// [`MetaStore::open_session`].
    OpenSession,
    /// [`Session::create_ephemeral`] of a session opened through the store.
    CreateEphemeral,
    /// [`Session::close`] of a session opened through the store.
    CloseSession,
}

impl Op {
    /// The store's own operations (not the sessions').
    pub const STORE: [Op; 9] = [
        Op::Get,
        Op::Put,
        Op::Delete,
        Op::DeleteIfVersion,
        Op::DeleteRange,
        Op::SequencedPut,
        Op::List,
        Op::Scan,
        Op::OpenSession,
    ];

    /// Every operation, the sessions' included.
    pub const ALL: [Op; 11] = [
        Op::Get,
        Op::Put,
        Op::Delete,
        Op::DeleteIfVersion,
        Op::DeleteRange,
        Op::SequencedPut,
        Op::List,
        Op::Scan,
        Op::OpenSession,
        Op::CreateEphemeral,
        Op::CloseSession,
    ];
}

/// One call as the store received it: the operation and its arguments. Fields an operation
/// does not have are empty (`""`, `None`).
#[derive(Debug, Clone)]
pub struct Call {
    /// The operation.
    pub op: Op,
    /// The call's number among the calls of its operation through this store, from 1.
    pub nth: u64,
    /// The partition (empty for the session operations without one).
    pub partition: String,
    /// The key; a range's start; a sequenced put's key prefix.
    pub key: String,
    /// A range's end (delete_range, list, scan).
    pub end: String,
    /// A lookup's comparison (`Equal` for [`MetaStore::get`]).
    pub cmp: Option<Comparison>,
    /// The value written (put, sequenced put, create_ephemeral).
    pub value: Option<Bytes>,
    /// A put's condition.
    pub condition: Option<PutCondition>,
    /// The version a delete_if_version expects.
    pub version: Option<Version>,
    /// A sequenced put's deltas.
    pub deltas: Vec<u64>,
    /// A scan's limit.
    pub limit: Option<usize>,
    /// A session's timeout (open_session).
    pub timeout: Option<Duration>,
    /// The session's id (create_ephemeral, close).
    pub session_id: Option<String>,
    /// The session a session operation goes to, so that a held one can be landed.
    session: Option<Arc<dyn Session>>,
}

impl Call {
    fn new(op: Op, partition: &str, key: &str) -> Call {
        Call {
            op,
            nth: 0,
            partition: partition.to_owned(),
            key: key.to_owned(),
            end: String::new(),
            cmp: None,
            value: None,
            condition: None,
            version: None,
            deltas: Vec::new(),
            limit: None,
            timeout: None,
            session_id: None,
            session: None,
        }
    }

    /// Whether this is a put with a condition (`IfAbsent` or `IfVersion`).
    pub fn is_conditional_put(&self) -> bool {
        self.op == Op::Put && !matches!(self.condition, None | Some(PutCondition::None))
    }

    /// A short description, for errors the hooks inject: `put p /key`.
    fn describe(&self) -> String {
        format!("{:?} {} {}", self.op, self.partition, self.key)
    }
}

/// What an operation answers, in one type: what a hook answers instead of the store, and
/// what [`HookedStore::land`] and [`Next::forward`] return.
#[derive(Debug, Clone)]
pub enum Answer {
    /// A get's record.
    Record(Option<Record>),
    /// A put's, sequenced put's or create_ephemeral's result.
    Written(WriteResult),
    /// Whether a delete found the key.
    Deleted(bool),
    /// delete_if_version, delete_range, close.
    Done,
    /// A list's keys.
    Keys(Vec<String>),
    /// A scan's records.
    Records(Vec<Record>),
    /// The session open_session opened.
    Session(Arc<dyn Session>),
}

impl Answer {
    /// The written record's result, if this is a write's answer.
    pub fn written(self) -> Option<WriteResult> {
        match self {
            Answer::Written(w) => Some(w),
            _ => None,
        }
    }
}

/// An answer of the wrong kind for the call (a test's hook answered a get with keys).
fn mismatch(op: Op, answer: &Answer) -> MetaError {
    MetaError::Internal(format!("a test hook answered {op:?} with {answer:?}"))
}

macro_rules! answer_as {
    ($name:ident, $variant:ident, $ty:ty) => {
        fn $name(op: Op, answer: Answer) -> MetaResult<$ty> {
            match answer {
                Answer::$variant(v) => Ok(v),
                other => Err(mismatch(op, &other)),
            }
        }
    };
}
answer_as!(as_record, Record, Option<Record>);
answer_as!(as_written, Written, WriteResult);
answer_as!(as_deleted, Deleted, bool);
answer_as!(as_keys, Keys, Vec<String>);
answer_as!(as_records, Records, Vec<Record>);
answer_as!(as_session, Session, Arc<dyn Session>);

fn as_done(op: Op, answer: Answer) -> MetaResult<()> {
    match answer {
        Answer::Done => Ok(()),
        other => Err(mismatch(op, &other)),
    }
}

/// A pause a hook makes: a call that reaches the gate tells the test (its [`GateHandle`]) and
/// waits until the test opens it. Once open it stays open; a dropped handle opens it too.
#[derive(Debug)]
pub struct Gate {
    reached: watch::Sender<bool>,
    open: watch::Receiver<bool>,
}

/// The test's side of a [`Gate`].
#[derive(Debug)]
pub struct GateHandle {
    reached: watch::Receiver<bool>,
    open: watch::Sender<bool>,
}

/// A closed gate and its handle.
pub fn gate() -> (Gate, GateHandle) {
    let (reached_tx, reached_rx) = watch::channel(false);
    let (open_tx, open_rx) = watch::channel(false);
    (Gate { reached: reached_tx, open: open_rx }, GateHandle { reached: reached_rx, open: open_tx })
}

impl Gate {
    /// Tells the handle the gate was reached, then waits until it is open. For wrappers of
    /// other stores a test pauses the same way.
    pub async fn pass(&self) {
        self.reached.send_replace(true);
        let mut open = self.open.clone();
        // An error: the handle is gone, and nobody will open the gate; go on.
        let _ = open.wait_for(|open| *open).await;
    }
}

impl GateHandle {
    /// Waits until a call reaches the gate. Panics if the gate was dropped (its hook removed
    /// or its store gone) before any did.
    pub async fn reached(&self) {
        let mut reached = self.reached.clone();
        if reached.wait_for(|reached| *reached).await.is_err() {
            panic!("the gate was dropped before a call reached it");
        }
    }

    /// Whether a call has reached the gate.
    pub fn is_reached(&self) -> bool {
        *self.reached.borrow()
    }

    /// Opens the gate: the calls waiting at it go on, and later ones pass.
    pub fn open(&self) {
        self.open.send_replace(true);
    }
}

type Predicate = Box<dyn Fn(&Call) -> bool + Send + Sync>;
type ObserveFn = Box<dyn Fn(&Call) + Send + Sync>;
type RunFn = Box<dyn Fn(Arc<dyn MetaStore>, Call) -> BoxFuture<'static, MetaResult<()>> + Send + Sync>;
type AroundFn = Box<dyn Fn(Call, Next) -> BoxFuture<'static, MetaResult<Answer>> + Send + Sync>;

enum Action {
    Observe(ObserveFn),
    Fail(MetaError),
    Hold,
    Answer(Answer),
    LoseAnswer,
    Pause(Gate),
    PauseAfter(Gate),
    Run(RunFn),
    RunAfter(RunFn),
    Around(AroundFn),
}

impl Action {
    /// Whether the action answers the call itself, before it reaches the store.
    fn answers(&self) -> bool {
        matches!(self, Action::Fail(_) | Action::Hold | Action::Answer(_))
    }

    /// Whether the action needs to run (asynchronously) before the call reaches the store.
    fn waits_before(&self) -> bool {
        matches!(self, Action::Pause(_) | Action::Run(_) | Action::Around(_))
    }

    fn name(&self) -> &'static str {
        match self {
            Action::Observe(_) => "observe",
            Action::Fail(_) => "fail",
            Action::Hold => "hold",
            Action::Answer(_) => "answer",
            Action::LoseAnswer => "lose_answer",
            Action::Pause(_) => "pause",
            Action::PauseAfter(_) => "pause_after",
            Action::Run(_) => "run",
            Action::RunAfter(_) => "run_after",
            Action::Around(_) => "around",
        }
    }
}

#[derive(Debug, Default)]
struct Counts {
    /// Matching calls still to let through before acting.
    skip: u64,
    /// Matching calls still to act on (`None`: every one).
    remaining: Option<u64>,
    fired_at: Vec<tokio::time::Instant>,
}

struct HookState {
    ops: Vec<Op>,
    partition: Option<String>,
    key: Option<String>,
    key_prefix: Option<String>,
    when: Vec<Predicate>,
    counts: Mutex<Counts>,
    removed: AtomicBool,
    action: Action,
}

impl HookState {
    /// Whether the hook takes `call` (counting it if so).
    fn takes(&self, call: &Call) -> bool {
        if self.removed.load(Ordering::SeqCst)
            || !self.ops.contains(&call.op)
            || self.partition.as_ref().is_some_and(|p| *p != call.partition)
            || self.key.as_ref().is_some_and(|k| *k != call.key)
            || self.key_prefix.as_ref().is_some_and(|p| !call.key.starts_with(p.as_str()))
            || !self.when.iter().all(|when| when(call))
        {
            return false;
        }
        let mut counts = lock(&self.counts);
        if counts.skip > 0 {
            counts.skip -= 1;
            return false;
        }
        match &mut counts.remaining {
            Some(0) => return false,
            Some(n) => *n -= 1,
            None => {}
        }
        counts.fired_at.push(tokio::time::Instant::now());
        true
    }
}

/// An installed hook: how often it acted, and a way to remove it.
#[derive(Clone)]
pub struct Hook(Arc<HookState>);

impl Hook {
    /// How many calls the hook has acted on.
    pub fn fired(&self) -> u64 {
        lock(&self.0.counts).fired_at.len() as u64
    }

    /// When the hook acted on each call, on tokio's clock (paused in tests that check pauses).
    pub fn fired_at(&self) -> Vec<tokio::time::Instant> {
        lock(&self.0.counts).fired_at.clone()
    }

    /// Removes the hook: it takes no more calls (calls it is acting on finish).
    pub fn remove(&self) {
        self.0.removed.store(true, Ordering::SeqCst);
    }
}

impl fmt::Debug for Hook {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Hook")
            .field("ops", &self.0.ops)
            .field("action", &self.0.action.name())
            .field("fired", &self.fired())
            .finish_non_exhaustive()
    }
}

/// A hook being set up: filters and counts, then one action, which installs it.
#[must_use = "a hook is installed by its action (fail, hold, pause, observe, …)"]
pub struct HookBuilder<'a> {
    store: &'a HookedStore,
    ops: Vec<Op>,
    partition: Option<String>,
    key: Option<String>,
    key_prefix: Option<String>,
    when: Vec<Predicate>,
    counts: Counts,
}

impl HookBuilder<'_> {
    /// Only calls to this partition.
    pub fn partition(mut self, partition: impl Into<String>) -> Self {
        self.partition = Some(partition.into());
        self
    }

    /// Only calls of this key (a range's start; a sequenced put's prefix).
    pub fn key(mut self, key: impl Into<String>) -> Self {
        self.key = Some(key.into());
        self
    }

    /// Only calls whose key starts with `prefix`.
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.key_prefix = Some(prefix.into());
        self
    }

    /// Only calls for which `predicate` holds (several: all of them). Evaluated only for calls
    /// the other filters let through, in order, so a predicate may draw random numbers.
    pub fn when(mut self, predicate: impl Fn(&Call) -> bool + Send + Sync + 'static) -> Self {
        self.when.push(Box::new(predicate));
        self
    }

    /// Lets the first `n` matching calls through untouched.
    pub fn skip(mut self, n: u64) -> Self {
        self.counts.skip = n;
        self
    }

    /// Acts on `n` matching calls (after those skipped), then on no more. Default: every one.
    pub fn times(mut self, n: u64) -> Self {
        self.counts.remaining = Some(n);
        self
    }

    /// Acts on the next matching call only.
    pub fn once(self) -> Self {
        self.times(1)
    }

    fn install(self, action: Action) -> Hook {
        let hook = Arc::new(HookState {
            ops: self.ops,
            partition: self.partition,
            key: self.key,
            key_prefix: self.key_prefix,
            when: self.when,
            counts: Mutex::new(self.counts),
            removed: AtomicBool::new(false),
            action,
        });
        lock(&self.store.shared.hooks).push(hook.clone());
        Hook(hook)
    }

    /// Calls `observer` with each call, as it is made; the call goes on. ([`Hook::fired`]
    /// counts them: `observe(|_| ())` is a counter.)
    pub fn observe(self, observer: impl Fn(&Call) + Send + Sync + 'static) -> Hook {
        self.install(Action::Observe(Box::new(observer)))
    }

    /// Answers with `error`; the call does not reach the store.
    pub fn fail(self, error: MetaError) -> Hook {
        self.install(Action::Fail(error))
    }

    /// Answers [`MetaError::OutcomeUnknown`] without the call reaching the store, as when a
    /// request is still in the store's pipeline; the call is kept ([`HookedStore::held`]) so
    /// the test can make it land later ([`HookedStore::land`]), or never.
    pub fn hold(self) -> Hook {
        self.install(Action::Hold)
    }

    /// Answers with `answer` instead of the store (a stale read, say); the call does not
    /// reach the store.
    pub fn answer(self, answer: Answer) -> Hook {
        self.install(Action::Answer(answer))
    }

    /// The call takes effect, then its answer is lost: [`MetaError::OutcomeUnknown`]. (A call
    /// that fails answers its own error.)
    pub fn lose_answer(self) -> Hook {
        self.install(Action::LoseAnswer)
    }

    /// Waits at `gate` before the call reaches the store.
    pub fn pause(self, gate: Gate) -> Hook {
        self.install(Action::Pause(gate))
    }

    /// Waits at `gate` after the call took effect, before answering.
    pub fn pause_after(self, gate: Gate) -> Hook {
        self.install(Action::PauseAfter(gate))
    }

    /// Runs `action` on the inner store before the call reaches it: another writer's change
    /// landing first, a yield to the scheduler. Its error answers the call, which then does
    /// not reach the store.
    pub fn run<F, Fut>(self, action: F) -> Hook
    where
        F: Fn(Arc<dyn MetaStore>, Call) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = MetaResult<()>> + Send + 'static,
    {
        self.install(Action::Run(Box::new(move |inner, call| Box::pin(action(inner, call)))))
    }

    /// Runs `action` on the inner store after the call took effect (whatever it answered),
    /// before answering. Its error replaces the answer.
    pub fn run_after<F, Fut>(self, action: F) -> Hook
    where
        F: Fn(Arc<dyn MetaStore>, Call) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = MetaResult<()>> + Send + 'static,
    {
        self.install(Action::RunAfter(Box::new(move |inner, call| Box::pin(action(inner, call)))))
    }

    /// Conditional puts lose a real race: before each, another writer rewrites the record
    /// (the same value, so only its version changes) or, when it does not exist, creates it
    /// with the value being put, so that the put finds another version or an existing key,
    /// exactly as against a concurrent process. Only conditional puts match.
    pub fn lose_race(self) -> Hook {
        self.when(Call::is_conditional_put).run(|inner, call| async move {
            let theirs = match inner.get(&call.partition, &call.key).await? {
                Some(current) => current.value,
                None => call.value.clone().unwrap_or_default(),
            };
            inner.put(&call.partition, &call.key, theirs, PutCondition::None).await.map(drop)
        })
    }

    /// The general hook: `around` gets the call and the rest of the chain ([`Next`]), and
    /// answers in its place — forwarding the call or not, before or after its own steps.
    pub fn around<F>(self, around: F) -> Hook
    where
        F: Fn(Call, Next) -> BoxFuture<'static, MetaResult<Answer>> + Send + Sync + 'static,
    {
        self.install(Action::Around(Box::new(around)))
    }
}

/// How a call goes on once the hooks before it acted: the hooks after it, then the store.
/// For [`HookBuilder::around`].
pub struct Next {
    hooks: Arc<[Arc<HookState>]>,
    index: usize,
    ctx: Ctx,
    call: Call,
    terminal: Terminal,
}

impl Next {
    /// The store the hooked store forwards to.
    pub fn inner(&self) -> &Arc<dyn MetaStore> {
        &self.ctx.inner
    }

    /// The call.
    pub fn call(&self) -> &Call {
        &self.call
    }

    /// Passes the call on: through the remaining hooks, then to the store.
    pub fn forward(self) -> BoxFuture<'static, MetaResult<Answer>> {
        run_chain(self)
    }
}

impl fmt::Debug for Next {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Next").field("call", &self.call).finish_non_exhaustive()
    }
}

/// Makes the call on the inner store (or, for a pipelined put, awaits the put already issued).
type Terminal = Box<dyn FnOnce(Arc<dyn MetaStore>, Call) -> BoxFuture<'static, MetaResult<Answer>> + Send>;

#[derive(Clone)]
struct Ctx {
    inner: Arc<dyn MetaStore>,
    shared: Arc<Shared>,
}

fn run_chain(next: Next) -> BoxFuture<'static, MetaResult<Answer>> {
    Box::pin(async move {
        let Next { hooks, index, ctx, call, terminal } = next;
        let Some(hook) = hooks.get(index).cloned() else {
            return terminal(ctx.inner.clone(), call).await;
        };
        let inner = ctx.inner.clone();
        let rest = Next { hooks, index: index + 1, ctx, call: call.clone(), terminal };
        match &hook.action {
            Action::Observe(observe) => {
                observe(&call);
                run_chain(rest).await
            }
            Action::Fail(error) => Err(error.clone()),
            Action::Hold => {
                let error = held_error(&call);
                lock(&rest.ctx.shared.held).push(call);
                Err(error)
            }
            Action::Answer(answer) => Ok(answer.clone()),
            Action::LoseAnswer => {
                run_chain(rest).await?;
                Err(lost_answer_error(&call))
            }
            Action::Pause(gate) => {
                gate.pass().await;
                run_chain(rest).await
            }
            Action::PauseAfter(gate) => {
                let answer = run_chain(rest).await;
                gate.pass().await;
                answer
            }
            Action::Run(action) => {
                action(inner, call).await?;
                run_chain(rest).await
            }
            Action::RunAfter(action) => {
                let answer = run_chain(rest).await;
                action(inner, call).await?;
                answer
            }
            Action::Around(around) => around(call, rest).await,
        }
    })
}

fn held_error(call: &Call) -> MetaError {
    MetaError::OutcomeUnknown(format!("injected by a test hook: no answer to {} (held)", call.describe()))
}

fn lost_answer_error(call: &Call) -> MetaError {
    MetaError::OutcomeUnknown(format!(
        "injected by a test hook: the answer to {} was lost (it took effect)",
        call.describe()
    ))
}

/// Makes `call` on `inner` (a session operation on its session).
fn apply(inner: Arc<dyn MetaStore>, call: Call) -> BoxFuture<'static, MetaResult<Answer>> {
    Box::pin(async move {
        let Call { op, partition: p, key: k, end, cmp, value, condition, version, deltas, limit, .. } = &call;
        let bytes = || value.clone().unwrap_or_default();
        let session = || {
            call.session.clone().ok_or_else(|| MetaError::InvalidRequest(format!("{op:?} without a session")))
        };
        Ok(match op {
            Op::Get => match cmp.unwrap_or(Comparison::Equal) {
                Comparison::Equal => Answer::Record(inner.get(p, k).await?),
                cmp => Answer::Record(inner.get_cmp(p, k, cmp).await?),
            },
            Op::Put => {
                Answer::Written(inner.put(p, k, bytes(), condition.unwrap_or(PutCondition::None)).await?)
            }
            Op::Delete => Answer::Deleted(inner.delete(p, k).await?),
            Op::DeleteIfVersion => {
                let version = version.ok_or_else(|| MetaError::InvalidRequest("no version".into()))?;
                inner.delete_if_version(p, k, version).await?;
                Answer::Done
            }
            Op::DeleteRange => {
                inner.delete_range(p, k, end).await?;
                Answer::Done
            }
            Op::SequencedPut => Answer::Written(inner.sequenced_put(p, k, deltas, bytes()).await?),
            Op::List => Answer::Keys(inner.list(p, k, end).await?),
            Op::Scan => Answer::Records(inner.scan(p, k, end, *limit).await?),
            Op::OpenSession => Answer::Session(inner.open_session(call.timeout.unwrap_or_default()).await?),
            Op::CreateEphemeral => Answer::Written(session()?.create_ephemeral(p, k, bytes()).await?),
            Op::CloseSession => {
                session()?.close().await?;
                Answer::Done
            }
        })
    })
}

#[derive(Debug, Default, Clone, Copy)]
struct OpStats {
    calls: u64,
    in_flight: u64,
    max_in_flight: u64,
}

#[derive(Default)]
struct Shared {
    hooks: Mutex<Vec<Arc<HookState>>>,
    stats: Mutex<HashMap<Op, OpStats>>,
    history: Mutex<Vec<Call>>,
    held: Mutex<Vec<Call>>,
    /// Bumped on every call, for [`HookedStore::wait_for_calls`].
    calls: watch::Sender<u64>,
    call_order: Mutex<Option<bool>>,
}

/// Counts a call as finished when dropped (answered, or abandoned by its caller).
struct InFlight {
    shared: Arc<Shared>,
    op: Op,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if let Some(stats) = lock(&self.shared.stats).get_mut(&self.op) {
            stats.in_flight -= 1;
        }
    }
}

impl Shared {
    /// Registers `call` (numbers it, counts it, keeps it in the history) and answers the
    /// hooks that take it.
    fn begin(self: &Arc<Self>, call: &mut Call) -> (Arc<[Arc<HookState>]>, InFlight) {
        {
            let mut stats = lock(&self.stats);
            let stats = stats.entry(call.op).or_default();
            stats.calls += 1;
            stats.in_flight += 1;
            stats.max_in_flight = stats.max_in_flight.max(stats.in_flight);
            call.nth = stats.calls;
        }
        lock(&self.history).push(call.clone());
        self.calls.send_modify(|n| *n += 1);
        let installed = lock(&self.hooks).clone();
        let mut taken = Vec::new();
        for hook in installed {
            if hook.takes(call) {
                let answers = hook.action.answers();
                taken.push(hook);
                if answers {
                    break;
                }
            }
        }
        (taken.into(), InFlight { shared: self.clone(), op: call.op })
    }
}

/// Forwards every [`MetaStore`] call to the inner store, through the hooks a test installs
/// (see the [module documentation](self)).
pub struct HookedStore {
    inner: Arc<dyn MetaStore>,
    shared: Arc<Shared>,
}

impl fmt::Debug for HookedStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HookedStore")
            .field("inner", &self.inner)
            .field("hooks", &lock(&self.shared.hooks).len())
            .finish_non_exhaustive()
    }
}

impl HookedStore {
    /// A store that forwards to `inner`, with no hooks yet.
    pub fn new(inner: Arc<dyn MetaStore>) -> Arc<HookedStore> {
        Arc::new(HookedStore { inner, shared: Arc::new(Shared::default()) })
    }

    /// The store calls are forwarded to (calls made on it directly pass no hook).
    pub fn inner(&self) -> &Arc<dyn MetaStore> {
        &self.inner
    }

    /// Starts a hook on calls of `op`.
    pub fn on(&self, op: Op) -> HookBuilder<'_> {
        self.on_any(&[op])
    }

    /// Starts a hook on calls of any of `ops` (e.g. [`Op::STORE`], [`Op::ALL`]).
    pub fn on_any(&self, ops: &[Op]) -> HookBuilder<'_> {
        HookBuilder {
            store: self,
            ops: ops.to_vec(),
            partition: None,
            key: None,
            key_prefix: None,
            when: Vec::new(),
            counts: Counts::default(),
        }
    }

    /// Removes every hook.
    pub fn remove_hooks(&self) {
        for hook in lock(&self.shared.hooks).drain(..) {
            hook.removed.store(true, Ordering::SeqCst);
        }
    }

    /// How many calls of `op` have been made (answered or not).
    pub fn calls(&self, op: Op) -> u64 {
        self.stats(op).calls
    }

    /// How many calls of `op` are being made now (made, not yet answered).
    pub fn in_flight(&self, op: Op) -> u64 {
        self.stats(op).in_flight
    }

    /// The most calls of `op` ever in flight at once.
    pub fn max_in_flight(&self, op: Op) -> u64 {
        self.stats(op).max_in_flight
    }

    fn stats(&self, op: Op) -> OpStats {
        lock(&self.shared.stats).get(&op).copied().unwrap_or_default()
    }

    /// Waits until `n` calls of `op` have been made.
    pub async fn wait_for_calls(&self, op: Op, n: u64) {
        let mut calls = self.shared.calls.subscribe();
        // The sender lives as long as the store, which `self` borrows: no error.
        let _ = calls.wait_for(|_| self.calls(op) >= n).await;
    }

    /// Every call made so far, in the order made.
    pub fn history(&self) -> Vec<Call> {
        lock(&self.shared.history).clone()
    }

    /// The calls [`HookBuilder::hold`] kept and no test landed, oldest first.
    pub fn held(&self) -> Vec<Call> {
        lock(&self.shared.held).clone()
    }

    /// Makes a held call take effect now, on the inner store (passing no hook), as a request
    /// still in the store's pipeline finally does; it is no longer [`HookedStore::held`].
    pub async fn land(&self, call: &Call) -> MetaResult<Answer> {
        lock(&self.shared.held).retain(|held| !(held.op == call.op && held.nth == call.nth));
        apply(self.inner.clone(), call.clone()).await
    }

    /// Overrides what [`MetaStore::sequenced_puts_commit_in_call_order`] answers (by default,
    /// the inner store's answer).
    pub fn claim_commit_in_call_order(&self, claim: bool) {
        *lock(&self.shared.call_order) = Some(claim);
    }

    fn ctx(&self) -> Ctx {
        Ctx { inner: self.inner.clone(), shared: self.shared.clone() }
    }

    /// Makes `call` through the hooks.
    async fn dispatch(&self, call: Call) -> MetaResult<Answer> {
        dispatch(self.ctx(), call).await
    }
}

async fn dispatch(ctx: Ctx, mut call: Call) -> MetaResult<Answer> {
    let (hooks, _in_flight) = ctx.shared.begin(&mut call);
    run_chain(Next { hooks, index: 0, ctx, call, terminal: Box::new(apply) }).await
}

#[async_trait]
impl MetaStore for HookedStore {
    async fn get(&self, partition: &str, key: &str) -> MetaResult<Option<Record>> {
        let call = Call { cmp: Some(Comparison::Equal), ..Call::new(Op::Get, partition, key) };
        as_record(Op::Get, self.dispatch(call).await?)
    }

    async fn get_cmp(&self, partition: &str, key: &str, cmp: Comparison) -> MetaResult<Option<Record>> {
        // `Equal` is forwarded as `get`, the same lookup by the trait's contract.
        let call = Call { cmp: Some(cmp), ..Call::new(Op::Get, partition, key) };
        as_record(Op::Get, self.dispatch(call).await?)
    }

    async fn put(
        &self,
        partition: &str,
        key: &str,
        value: Bytes,
        condition: PutCondition,
    ) -> MetaResult<WriteResult> {
        let call =
            Call { value: Some(value), condition: Some(condition), ..Call::new(Op::Put, partition, key) };
        as_written(Op::Put, self.dispatch(call).await?)
    }

    async fn delete(&self, partition: &str, key: &str) -> MetaResult<bool> {
        as_deleted(Op::Delete, self.dispatch(Call::new(Op::Delete, partition, key)).await?)
    }

    async fn delete_if_version(&self, partition: &str, key: &str, version: Version) -> MetaResult<()> {
        let call = Call { version: Some(version), ..Call::new(Op::DeleteIfVersion, partition, key) };
        as_done(Op::DeleteIfVersion, self.dispatch(call).await?)
    }

    async fn delete_range(&self, partition: &str, start: &str, end: &str) -> MetaResult<()> {
        let call = Call { end: end.to_owned(), ..Call::new(Op::DeleteRange, partition, start) };
        as_done(Op::DeleteRange, self.dispatch(call).await?)
    }

    fn sequenced_puts_commit_in_call_order(&self) -> bool {
        let claim = *lock(&self.shared.call_order);
        claim.unwrap_or_else(|| self.inner.sequenced_puts_commit_in_call_order())
    }

    fn sequenced_put_owned(
        self: Arc<Self>,
        partition: String,
        prefix: String,
        deltas: Vec<u64>,
        value: Bytes,
    ) -> BoxFuture<'static, MetaResult<WriteResult>>
    where
        Self: 'static,
    {
        let mut call =
            Call { deltas, value: Some(value), ..Call::new(Op::SequencedPut, &partition, &prefix) };
        let (hooks, in_flight) = self.shared.begin(&mut call);
        let ctx = self.ctx();
        let owned = |inner: Arc<dyn MetaStore>, call: &Call| {
            let value = call.value.clone().unwrap_or_default();
            inner.sequenced_put_owned(call.partition.clone(), call.key.clone(), call.deltas.clone(), value)
        };
        if hooks.iter().any(|hook| hook.action.waits_before()) {
            // A hook runs first: the put is issued when it reaches the store.
            let terminal: Terminal = Box::new(move |inner, call| {
                Box::pin(async move { owned(inner, &call).await.map(Answer::Written) })
            });
            let chain = run_chain(Next { hooks, index: 0, ctx, call, terminal });
            return Box::pin(async move {
                let _in_flight = in_flight;
                as_written(Op::SequencedPut, chain.await?)
            });
        }
        // Issued now, at the call, as the inner store does, unless a hook answers first; the
        // hooks that act after the put wrap its answer.
        let mut after = Vec::new();
        for hook in hooks.iter() {
            match &hook.action {
                Action::Observe(observe) => observe(&call),
                Action::Fail(error) => return Box::pin(std::future::ready(Err(error.clone()))),
                Action::Hold => {
                    let error = held_error(&call);
                    lock(&self.shared.held).push(call);
                    return Box::pin(std::future::ready(Err(error)));
                }
                Action::Answer(answer) => {
                    return Box::pin(std::future::ready(as_written(Op::SequencedPut, answer.clone())));
                }
                _ => after.push(hook.clone()),
            }
        }
        let issued = owned(self.inner.clone(), &call);
        let terminal: Terminal =
            Box::new(move |_, _| Box::pin(async move { issued.await.map(Answer::Written) }));
        let chain = run_chain(Next { hooks: after.into(), index: 0, ctx, call, terminal });
        Box::pin(async move {
            let _in_flight = in_flight;
            as_written(Op::SequencedPut, chain.await?)
        })
    }

    async fn sequenced_put(
        &self,
        partition: &str,
        prefix: &str,
        deltas: &[u64],
        value: Bytes,
    ) -> MetaResult<WriteResult> {
        let call = Call {
            deltas: deltas.to_vec(),
            value: Some(value),
            ..Call::new(Op::SequencedPut, partition, prefix)
        };
        as_written(Op::SequencedPut, self.dispatch(call).await?)
    }

    async fn list(&self, partition: &str, start: &str, end: &str) -> MetaResult<Vec<String>> {
        let call = Call { end: end.to_owned(), ..Call::new(Op::List, partition, start) };
        as_keys(Op::List, self.dispatch(call).await?)
    }

    async fn scan(
        &self,
        partition: &str,
        start: &str,
        end: &str,
        limit: Option<usize>,
    ) -> MetaResult<Vec<Record>> {
        let call = Call { end: end.to_owned(), limit, ..Call::new(Op::Scan, partition, start) };
        as_records(Op::Scan, self.dispatch(call).await?)
    }

    async fn open_session(&self, timeout: Duration) -> MetaResult<Arc<dyn Session>> {
        let call = Call { timeout: Some(timeout), ..Call::new(Op::OpenSession, "", "") };
        let session = as_session(Op::OpenSession, self.dispatch(call).await?)?;
        Ok(Arc::new(HookedSession { inner: session, ctx: self.ctx() }))
    }
}

/// A session opened through a [`HookedStore`]: its writes pass the store's hooks.
struct HookedSession {
    inner: Arc<dyn Session>,
    ctx: Ctx,
}

impl fmt::Debug for HookedSession {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HookedSession").field("inner", &self.inner).finish_non_exhaustive()
    }
}

impl HookedSession {
    fn call(&self, op: Op, partition: &str, key: &str) -> Call {
        Call {
            session_id: Some(self.inner.id()),
            session: Some(self.inner.clone()),
            ..Call::new(op, partition, key)
        }
    }
}

#[async_trait]
impl Session for HookedSession {
    fn id(&self) -> String {
        self.inner.id()
    }

    async fn create_ephemeral(&self, partition: &str, key: &str, value: Bytes) -> MetaResult<WriteResult> {
        let call = Call { value: Some(value), ..self.call(Op::CreateEphemeral, partition, key) };
        as_written(Op::CreateEphemeral, dispatch(self.ctx.clone(), call).await?)
    }

    fn ended(&self) -> watch::Receiver<bool> {
        self.inner.ended()
    }

    fn is_ended(&self) -> bool {
        self.inner.is_ended()
    }

    async fn close(&self) -> MetaResult<()> {
        as_done(Op::CloseSession, dispatch(self.ctx.clone(), self.call(Op::CloseSession, "", "")).await?)
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::InMemoryStore;

    fn store() -> Arc<HookedStore> {
        HookedStore::new(Arc::new(InMemoryStore::new()))
    }

    fn bytes(s: &'static str) -> Bytes {
        Bytes::from_static(s.as_bytes())
    }

    /// The names of the methods a trait declares in `source`'s `trait {name}` block.
    fn declared_methods(source: &str, name: &str) -> Vec<String> {
        let start = source.find(&format!("pub trait {name}")).expect("the trait");
        let body = &source[start..];
        let end = body.find("\n}\n").expect("the trait's end");
        body[..end]
            .lines()
            .filter_map(|line| {
                let line = line.trim_start();
                let rest = line.strip_prefix("async fn ").or_else(|| line.strip_prefix("fn "))?;
                Some(rest.split(['(', '<']).next()?.to_owned())
            })
            .collect()
    }

    /// Adding a method to `MetaStore` or `Session`, default or not, must not let the hooked
    /// store pass it to the default silently: every declared method is implemented here.
    #[test]
    fn every_trait_method_is_forwarded() {
        let store_rs = include_str!("store.rs");
        let this = include_str!("hooked.rs");
        for (trait_name, impl_line) in [
            ("MetaStore", "impl MetaStore for HookedStore {"),
            ("Session", "impl Session for HookedSession {"),
        ] {
            let methods = declared_methods(store_rs, trait_name);
            assert!(methods.len() >= 4, "{trait_name}: {methods:?}");
            let start = this.find(impl_line).expect("the impl");
            let body = &this[start..start + this[start..].find("\n}\n").expect("the impl's end")];
            for method in methods {
                let forwarded = body.contains(&format!("fn {method}("));
                assert!(forwarded, "{trait_name}::{method} is not forwarded by the hooked store");
            }
        }
    }

    #[tokio::test]
    async fn without_hooks_every_call_is_forwarded_counted_and_kept() {
        let s = store();
        s.put("p", "/a", bytes("1"), PutCondition::IfAbsent).await.unwrap();
        let written = s.sequenced_put("p", "x", &[2], bytes("v")).await.unwrap();
        assert_eq!(s.get("p", "/a").await.unwrap().unwrap().value, bytes("1"));
        assert_eq!(s.get_cmp("p", "/b", Comparison::Lower).await.unwrap().unwrap().key, "/a");
        assert_eq!(s.list("p", "/a", "/b").await.unwrap(), ["/a"]);
        assert_eq!(s.scan("p", "x", "y", Some(1)).await.unwrap()[0].key, written.key);
        s.delete_if_version("p", &written.key, written.version).await.unwrap();
        assert!(s.delete("p", "/a").await.unwrap());
        s.delete_range("p", "a", "z").await.unwrap();
        let session = s.open_session(Duration::from_secs(5)).await.unwrap();
        session.create_ephemeral("p", "/e", bytes("e")).await.unwrap();
        assert!(s.inner().get("p", "/e").await.unwrap().is_some());
        session.close().await.unwrap();
        assert!(session.is_ended() && s.inner().get("p", "/e").await.unwrap().is_none());
        for op in Op::ALL {
            let expected = if op == Op::Get { 2 } else { 1 };
            assert_eq!((op, s.calls(op), s.in_flight(op)), (op, expected, 0));
        }
        let history = s.history();
        assert_eq!(history.len(), 12);
        assert_eq!((history[0].op, history[0].condition), (Op::Put, Some(PutCondition::IfAbsent)));
        assert_eq!((history[2].op, history[2].nth, history[3].nth), (Op::Get, 1, 2));
        assert_eq!(history[11].session_id, Some(session.id()));
    }

    #[tokio::test]
    async fn filters_and_counts_choose_the_calls_a_hook_takes() {
        let s = store();
        let refused = MetaError::Unavailable("refused".into());
        let hook = s.on(Op::Put).partition("p").key_prefix("/a/").skip(1).times(2).fail(refused.clone());
        let other_op = s.on(Op::Delete).key("/a/1").fail(refused.clone());
        for (key, expected) in
            [("/a/1", true), ("/b/1", true), ("/a/2", false), ("/a/3", false), ("/a/4", true)]
        {
            let result = s.put("p", key, bytes("v"), PutCondition::None).await;
            assert_eq!(result.is_ok(), expected, "{key}");
        }
        assert!(s.put("q", "/a/5", bytes("v"), PutCondition::None).await.is_ok(), "another partition");
        assert_eq!((hook.fired(), other_op.fired()), (2, 0));
        assert_eq!(s.delete("p", "/a/1").await.unwrap_err(), refused);
        other_op.remove();
        assert!(s.delete("p", "/a/1").await.unwrap());
        assert_eq!(other_op.fired(), 1);
    }

    #[tokio::test]
    async fn held_calls_take_effect_only_when_landed() {
        let s = store();
        s.on(Op::SequencedPut).once().hold();
        let err = s.sequenced_put("7", "k", &[1], bytes("v")).await.unwrap_err();
        assert!(matches!(err, MetaError::OutcomeUnknown(_)), "{err}");
        assert!(s.inner().scan("7", "k", "l", None).await.unwrap().is_empty());
        let held = s.held();
        assert_eq!(held.len(), 1);
        let landed = s.land(&held[0]).await.unwrap().written().unwrap();
        assert_eq!(landed.key, format!("k-{:020}", 1));
        assert!(s.held().is_empty());
        // A lost answer: applied, then unknown.
        s.on(Op::SequencedPut).once().lose_answer();
        assert!(matches!(
            s.sequenced_put("7", "k", &[1], bytes("v")).await,
            Err(MetaError::OutcomeUnknown(_))
        ));
        assert_eq!(s.inner().scan("7", "k", "l", None).await.unwrap().len(), 2);
    }

    #[tokio::test]
    async fn a_lost_race_rewrites_or_creates_the_record_first() {
        let s = store();
        let race = s.on(Op::Put).key("/r").times(2).lose_race();
        let err = s.put("p", "/r", bytes("mine"), PutCondition::IfAbsent).await.unwrap_err();
        assert!(matches!(err, MetaError::KeyExists { .. }), "{err}");
        let current = s.inner().get("p", "/r").await.unwrap().unwrap();
        let err = s.put("p", "/r", bytes("2"), PutCondition::IfVersion(current.version)).await.unwrap_err();
        assert!(matches!(err, MetaError::VersionMismatch { .. }), "{err}");
        s.put("p", "/r", bytes("free"), PutCondition::None).await.unwrap();
        assert_eq!(race.fired(), 2, "unconditional puts do not race");
        let current = s.inner().get("p", "/r").await.unwrap().unwrap();
        s.put("p", "/r", bytes("won"), PutCondition::IfVersion(current.version)).await.unwrap();
    }

    #[tokio::test]
    async fn answers_observers_and_around_hooks() {
        let s = store();
        s.inner().put("p", "/k", bytes("real"), PutCondition::None).await.unwrap();
        let stale =
            Record { key: "/k".into(), value: bytes("stale"), version: 0, created_ms: 0, modified_ms: 0 };
        s.on(Op::Get).once().answer(Answer::Record(Some(stale)));
        assert_eq!(s.get("p", "/k").await.unwrap().unwrap().value, bytes("stale"));
        assert_eq!(s.get("p", "/k").await.unwrap().unwrap().value, bytes("real"));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        s.on_any(&Op::STORE).observe(move |call| lock(&log).push(call.key.clone()));
        let log = seen.clone();
        s.on(Op::Delete).around(move |call, next| {
            let log = log.clone();
            Box::pin(async move {
                lock(&log).push(format!("before {}", call.key));
                let answer = next.forward().await;
                lock(&log).push(format!("after {}", call.key));
                answer
            })
        });
        assert!(s.delete("p", "/k").await.unwrap());
        assert_eq!(*lock(&seen), ["/k", "before /k", "after /k"]);
        // A hook answering with the wrong kind is an error, not a panic.
        s.on(Op::List).answer(Answer::Done);
        assert!(matches!(s.list("p", "a", "b").await, Err(MetaError::Internal(_))));
    }

    #[tokio::test]
    async fn gates_pause_before_or_after_the_call() {
        let s = store();
        let (before, at_before) = gate();
        s.on(Op::Put).once().pause(before);
        let put = tokio::spawn({
            let s = s.clone();
            async move { s.put("p", "/g", bytes("v"), PutCondition::None).await }
        });
        at_before.reached().await;
        assert!(s.inner().get("p", "/g").await.unwrap().is_none(), "paused before the put");
        assert_eq!(s.in_flight(Op::Put), 1);
        at_before.open();
        put.await.unwrap().unwrap();

        let (after, at_after) = gate();
        s.on(Op::Delete).once().pause_after(after);
        let delete = tokio::spawn({
            let s = s.clone();
            async move { s.delete("p", "/g").await }
        });
        at_after.reached().await;
        assert!(s.inner().get("p", "/g").await.unwrap().is_none(), "deleted before the answer");
        assert!(!delete.is_finished());
        drop(at_after); // a dropped handle opens the gate
        assert!(delete.await.unwrap().unwrap());
    }

    #[tokio::test]
    async fn a_pipelined_put_is_issued_at_the_call_unless_a_hook_runs_first() {
        let s = store();
        let (after, release) = gate();
        s.on(Op::SequencedPut).when(|call| call.nth == 1).pause_after(after);
        let first = s.clone().sequenced_put_owned("1".into(), "k".into(), vec![1], bytes("a"));
        // Issued at the call, before its future is polled; the answer waits at the gate.
        assert_eq!(s.inner().scan("1", "k", "l", None).await.unwrap().len(), 1);
        assert_eq!((s.calls(Op::SequencedPut), s.in_flight(Op::SequencedPut)), (1, 1));
        let first = tokio::spawn(first);
        release.reached().await;
        release.open();
        assert_eq!(first.await.unwrap().unwrap().key, format!("k-{:020}", 1));

        let (before, go) = gate();
        s.on(Op::SequencedPut).when(|call| call.nth == 2).pause(before);
        let second = s.clone().sequenced_put_owned("1".into(), "k".into(), vec![1], bytes("b"));
        assert_eq!(s.inner().scan("1", "k", "l", None).await.unwrap().len(), 1, "waits for the gate");
        go.open();
        second.await.unwrap();
        assert_eq!(s.max_in_flight(Op::SequencedPut), 1);

        s.on(Op::SequencedPut).once().fail(MetaError::Unavailable("no".into()));
        let refused = s.clone().sequenced_put_owned("1".into(), "k".into(), vec![1], bytes("c"));
        assert!(refused.await.is_err());
        assert_eq!(s.inner().scan("1", "k", "l", None).await.unwrap().len(), 2);
        s.wait_for_calls(Op::SequencedPut, 3).await;
        assert!(s.sequenced_puts_commit_in_call_order());
        s.claim_commit_in_call_order(false);
        assert!(!s.sequenced_puts_commit_in_call_order());
    }
}
