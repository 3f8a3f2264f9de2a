//! `KafkaStreams`: one instance of an application — its stream threads,
//! its state (`CREATED`, `REBALANCING`, `RUNNING`, `PENDING_SHUTDOWN`,
//! `NOT_RUNNING`, `PENDING_ERROR`, `ERROR`, with Kafka's transitions), a
//! state listener, and the uncaught-error handler that decides what a
//! failed thread's death means.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use sluice_client::Admin;
use uuid::Uuid;

use super::global::{GlobalSetup, GlobalStreamThread};
use super::task::TaskFactory;
use super::thread::{StreamThread, ThreadContext, ThreadShared, ThreadState};
use crate::assignor::TopologyMetadata;
use crate::config::StreamsConfig;
use crate::error::{Result, StreamsError};
use crate::internal_topics::InternalTopicManager;
use crate::state::directory::StateDirectory;
use crate::task_id::TaskId;

/// A `KafkaStreams` instance's state (Kafka's `KafkaStreams.State`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum State {
    /// Built, not started.
    Created,
    /// Some thread is joining the group or restoring.
    Rebalancing,
    /// Every thread is processing.
    Running,
    /// `close` was called.
    PendingShutdown,
    /// Closed.
    NotRunning,
    /// Shutting down after an error.
    PendingError,
    /// Stopped after an error.
    Error,
}

impl State {
    /// Kafka's transition table.
    pub fn is_valid_transition(self, to: State) -> bool {
        use State::*;
        matches!(
            (self, to),
            (Created, Rebalancing | PendingShutdown)
                | (Rebalancing, Running | PendingShutdown | PendingError)
                | (Running, Rebalancing | PendingShutdown | PendingError)
                | (PendingShutdown, NotRunning)
                | (PendingError, Error)
        )
    }

    /// Whether the instance is started and not shutting down.
    pub fn is_running_or_rebalancing(self) -> bool {
        matches!(self, State::Running | State::Rebalancing)
    }
}

/// What to do when a stream thread fails (Kafka's
/// `StreamThreadExceptionResponse`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamThreadExceptionResponse {
    /// Start a new thread in its place.
    ReplaceThread,
    /// Shut this instance down (state `ERROR`).
    ShutdownClient,
    /// Shut every instance of the application down (state `ERROR`): a
    /// member joins the group with Kafka's `SHUTDOWN_REQUESTED` error code
    /// and the leader hands it to everybody.
    ShutdownApplication,
}

/// The state listener: `(new, old)`.
pub type StateListener = Arc<dyn Fn(State, State) + Send + Sync>;
/// The uncaught-error handler.
pub type UncaughtErrorHandler =
    Arc<dyn Fn(&StreamsError) -> StreamThreadExceptionResponse + Send + Sync>;

struct Inner {
    config: Arc<StreamsConfig>,
    topology: Arc<TopologyMetadata>,
    factory: Arc<dyn TaskFactory>,
    state: Mutex<State>,
    listener: Mutex<Option<StateListener>>,
    handler: Mutex<UncaughtErrorHandler>,
    threads: Mutex<Vec<Arc<ThreadShared>>>,
    state_dir: Mutex<Option<Arc<StateDirectory>>>,
    process_id: Mutex<Uuid>,
    num_threads: Arc<AtomicI32>,
    next_thread: AtomicUsize,
    errors: Mutex<Vec<String>>,
    /// Global stores to bootstrap and keep up to date, if any.
    global: Mutex<Option<GlobalSetup>>,
    /// Stops the global thread.
    global_stop: Arc<AtomicBool>,
}

/// One instance of a Kafka Streams application.
#[derive(Clone)]
pub struct KafkaStreams {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for KafkaStreams {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaStreams")
            .field("application_id", &self.inner.config.application_id)
            .field("state", &self.state())
            .finish_non_exhaustive()
    }
}

impl Inner {
    fn state(&self) -> State {
        *self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Moves to `to` if Kafka allows it; fires the listener.
    fn set_state(&self, to: State) -> bool {
        let from = {
            let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
            let from = *st;
            if from == to || !from.is_valid_transition(to) {
                return false;
            }
            *st = to;
            from
        };
        tracing::info!(application = %self.config.application_id, "state transition from {from:?} to {to:?}");
        let listener = self
            .listener
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        if let Some(l) = listener {
            l(to, from);
        }
        true
    }

    /// Lets another instance use the state directory.
    fn release_state_dir(&self) {
        if let Some(d) = self
            .state_dir
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
        {
            d.release();
        }
    }

    fn live_threads(&self) -> Vec<Arc<ThreadShared>> {
        self.threads
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter(|t| t.state() != ThreadState::Dead)
            .cloned()
            .collect()
    }

    /// Recomputes the instance state from its threads' states.
    fn on_thread_change(&self) {
        if !self.state().is_running_or_rebalancing() {
            return;
        }
        let states: Vec<ThreadState> = self
            .live_threads()
            .iter()
            .map(|t| t.state())
            .filter(|s| *s != ThreadState::PendingShutdown)
            .collect();
        if !states.is_empty() && states.iter().all(|s| *s == ThreadState::Running) {
            self.set_state(State::Running);
        } else if states.iter().any(|s| {
            matches!(
                s,
                ThreadState::Created
                    | ThreadState::Starting
                    | ThreadState::PartitionsRevoked
                    | ThreadState::PartitionsAssigned
            )
        }) {
            self.set_state(State::Rebalancing);
        }
    }
}

impl KafkaStreams {
    /// An instance running `topology` (its tasks built by `factory`).
    pub fn new(
        topology: TopologyMetadata,
        factory: Arc<dyn TaskFactory>,
        config: StreamsConfig,
    ) -> Result<Self> {
        config.validate()?;
        let threads = config.num_stream_threads as i32;
        Ok(Self {
            inner: Arc::new(Inner {
                config: Arc::new(config),
                topology: Arc::new(topology),
                factory,
                state: Mutex::new(State::Created),
                listener: Mutex::new(None),
                handler: Mutex::new(Arc::new(|_| StreamThreadExceptionResponse::ShutdownClient)),
                threads: Mutex::new(Vec::new()),
                state_dir: Mutex::new(None),
                process_id: Mutex::new(Uuid::nil()),
                num_threads: Arc::new(AtomicI32::new(threads)),
                next_thread: AtomicUsize::new(1),
                errors: Mutex::new(Vec::new()),
                global: Mutex::new(None),
                global_stop: Arc::new(AtomicBool::new(false)),
            }),
        })
    }

    /// An instance running a DSL or processor-API `topology`: its tasks are
    /// [`StreamTask`](crate::task::StreamTask)s whose default stores are
    /// persistent (fjall); global tables are bootstrapped at start and kept
    /// up to date by a global thread. `statestore.cache.max.bytes` is divided
    /// by the thread count and given to each task's cached stores.
    pub fn from_topology(
        topology: crate::topology::Topology,
        config: StreamsConfig,
    ) -> Result<Self> {
        let topology = Arc::new(topology);
        let threads = config.num_stream_threads.max(1);
        let global = GlobalSetup::new(
            &topology,
            &config.application_id,
            config.deserialization_handler,
        )?;
        let factory = super::topology_tasks::TopologyTaskFactory::new(
            topology,
            &config,
            config.cache_max_bytes / threads,
            global
                .as_ref()
                .map(|g| g.stores.clone())
                .unwrap_or_default(),
        );
        let metadata = super::topology_tasks::topology_metadata(factory.info());
        let streams = Self::new(metadata, Arc::new(factory), config)?;
        *streams
            .inner
            .global
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = global;
        Ok(streams)
    }

    /// The current state.
    pub fn state(&self) -> State {
        self.inner.state()
    }

    /// Sets the state listener, called with `(new, old)` on every change.
    /// Only before `start`.
    pub fn set_state_listener(
        &self,
        listener: impl Fn(State, State) + Send + Sync + 'static,
    ) -> Result<()> {
        if self.state() != State::Created {
            return Err(StreamsError::IllegalState(
                "the state listener can only be set in CREATED".into(),
            ));
        }
        *self
            .inner
            .listener
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(listener));
        Ok(())
    }

    /// Sets what a failing thread's error leads to (default: shut the
    /// instance down). Only before `start`.
    pub fn set_uncaught_exception_handler(
        &self,
        handler: impl Fn(&StreamsError) -> StreamThreadExceptionResponse + Send + Sync + 'static,
    ) -> Result<()> {
        if self.state() != State::Created {
            return Err(StreamsError::IllegalState(
                "the uncaught exception handler can only be set in CREATED".into(),
            ));
        }
        *self.inner.handler.lock().unwrap_or_else(|e| e.into_inner()) = Arc::new(handler);
        Ok(())
    }

    /// Starts: creates or validates internal topics (failing on a
    /// co-partitioning violation or a missing source topic), locks the state
    /// directory, and starts `num.stream.threads` threads.
    pub async fn start(&self) -> Result<()> {
        if !self.inner.set_state(State::Rebalancing) {
            return Err(StreamsError::IllegalState(format!(
                "start in state {:?}",
                self.state()
            )));
        }
        match self.prepare().await {
            Ok(()) => {
                for _ in 0..self.inner.config.num_stream_threads {
                    spawn_thread(&self.inner);
                }
                spawn_cleaner(&self.inner);
                Ok(())
            }
            Err(e) => {
                self.inner.set_state(State::PendingError);
                self.inner.set_state(State::Error);
                Err(e)
            }
        }
    }

    async fn prepare(&self) -> Result<()> {
        let cfg = &self.inner.config;
        let admin = Admin::connect(cfg.client.clone()).await?;
        InternalTopicManager::new(admin, cfg.replication_factor)
            .prepare(&cfg.application_id, &self.inner.topology)
            .await?;
        let dir = StateDirectory::new(&cfg.state_dir, &cfg.application_id)?;
        *self
            .inner
            .process_id
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = dir.initialize_process_id()?;
        *self
            .inner
            .state_dir
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(dir));
        let global = self
            .inner
            .global
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        if let Some(setup) = global {
            let mut thread = GlobalStreamThread::new(&setup, cfg.client.clone()).await?;
            let n = thread.bootstrap().await?;
            tracing::info!(records = n, "global stores bootstrapped");
            let stop = self.inner.global_stop.clone();
            let weak = Arc::downgrade(&self.inner);
            tokio::spawn(async move {
                if let Err(e) = thread.run(stop).await {
                    tracing::error!("global stream thread failed: {e}");
                    if let Some(inner) = weak.upgrade() {
                        inner
                            .errors
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .push(format!("global thread: {e}"));
                        shutdown_on_error(&inner).await;
                    }
                }
            });
        }
        Ok(())
    }

    /// Stops every thread (each commits and closes its tasks) and waits up
    /// to `timeout`; `true` when everything stopped in time.
    pub async fn close(&self, timeout: Duration) -> bool {
        match self.state() {
            State::Created => {
                self.inner.set_state(State::PendingShutdown);
                self.inner.set_state(State::NotRunning);
                return true;
            }
            State::NotRunning | State::Error => return true,
            _ => {}
        }
        self.inner.set_state(State::PendingShutdown);
        let done = stop_threads(&self.inner, timeout).await;
        self.inner.release_state_dir();
        self.inner.set_state(State::NotRunning);
        done
    }

    /// Starts one more stream thread; its name.
    pub fn add_stream_thread(&self) -> Result<String> {
        if !self.state().is_running_or_rebalancing() {
            return Err(StreamsError::IllegalState(format!(
                "add_stream_thread in state {:?}",
                self.state()
            )));
        }
        self.inner.num_threads.fetch_add(1, Ordering::SeqCst);
        Ok(spawn_thread(&self.inner))
    }

    /// Stops one stream thread (the newest live one) and waits for it; its
    /// name, or `None` when no thread runs.
    pub async fn remove_stream_thread(&self, timeout: Duration) -> Result<Option<String>> {
        if !self.state().is_running_or_rebalancing() {
            return Err(StreamsError::IllegalState(format!(
                "remove_stream_thread in state {:?}",
                self.state()
            )));
        }
        let Some(t) = self.inner.live_threads().pop() else {
            return Ok(None);
        };
        self.inner.num_threads.fetch_sub(1, Ordering::SeqCst);
        t.request_shutdown();
        let deadline = Instant::now() + timeout;
        while t.state() != ThreadState::Dead && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(Some(t.name.clone()))
    }

    /// Waits until the state is `want` or `timeout` passes.
    pub async fn wait_for_state(&self, want: State, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while self.state() != want {
            if Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        true
    }

    /// The instance's process id (stable across restarts on one `state.dir`).
    pub fn process_id(&self) -> Uuid {
        *self
            .inner
            .process_id
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// Names of live threads with their active tasks.
    pub fn thread_tasks(&self) -> BTreeMap<String, BTreeSet<TaskId>> {
        self.inner
            .live_threads()
            .iter()
            .map(|t| {
                (
                    t.name.clone(),
                    t.tasks.lock().unwrap_or_else(|e| e.into_inner()).clone(),
                )
            })
            .collect()
    }

    /// Every active task of this instance.
    pub fn active_tasks(&self) -> BTreeSet<TaskId> {
        self.thread_tasks().into_values().flatten().collect()
    }

    fn sum(&self, f: impl Fn(&ThreadShared) -> u64) -> u64 {
        self.inner
            .threads
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|t| f(t))
            .sum()
    }

    /// Records restored from changelogs by this instance so far.
    pub fn restored_records(&self) -> u64 {
        self.sum(|t| t.restored.load(Ordering::Relaxed))
    }

    /// Records processed by this instance so far.
    pub fn processed_records(&self) -> u64 {
        self.sum(|t| t.processed.load(Ordering::Relaxed))
    }

    /// Commits completed by this instance so far.
    pub fn commits(&self) -> u64 {
        self.sum(|t| t.commits.load(Ordering::Relaxed))
    }

    /// Errors that stopped threads, as text, oldest first.
    pub fn errors(&self) -> Vec<String> {
        self.inner
            .errors
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

/// Requests every thread to stop and waits for them until `timeout`.
async fn stop_threads(inner: &Arc<Inner>, timeout: Duration) -> bool {
    inner.global_stop.store(true, Ordering::SeqCst);
    let threads: Vec<Arc<ThreadShared>> = inner
        .threads
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    for t in &threads {
        t.request_shutdown();
    }
    let deadline = Instant::now() + timeout;
    loop {
        if threads.iter().all(|t| t.state() == ThreadState::Dead) {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Kafka's state directory cleaner: every `state.cleanup.delay.ms`,
/// deletes the folders of tasks this instance no longer runs and nobody
/// holds, once untouched for that long.
fn spawn_cleaner(inner: &Arc<Inner>) {
    let weak = Arc::downgrade(inner);
    let delay = inner.config.state_cleanup_delay;
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(delay.max(Duration::from_millis(100))).await;
            let Some(inner) = weak.upgrade() else { return };
            if !inner.state().is_running_or_rebalancing() {
                return;
            }
            let active: BTreeSet<TaskId> = inner
                .live_threads()
                .iter()
                .flat_map(|t| t.tasks.lock().unwrap_or_else(|e| e.into_inner()).clone())
                .collect();
            let dir = inner
                .state_dir
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone();
            if let Some(dir) = dir {
                match dir.clean_removed_tasks(&active, delay) {
                    Ok(removed) if !removed.is_empty() => {
                        tracing::info!(?removed, "cleaned obsolete task directories");
                    }
                    Ok(_) => {}
                    Err(e) => tracing::warn!("state directory cleanup failed: {e}"),
                }
            }
        }
    });
}

/// Starts a thread; its name.
fn spawn_thread(inner: &Arc<Inner>) -> String {
    spawn_thread_with(inner, false)
}

/// Starts a thread, which asks the group to shut the application down if
/// `request_app_shutdown`; its name.
fn spawn_thread_with(inner: &Arc<Inner>, request_app_shutdown: bool) -> String {
    let n = inner.next_thread.fetch_add(1, Ordering::SeqCst);
    let name = format!("{}-StreamThread-{n}", inner.config.application_id);
    let weak: Weak<Inner> = Arc::downgrade(inner);
    let shared = Arc::new(ThreadShared::new(
        name.clone(),
        Box::new(move || {
            if let Some(i) = weak.upgrade() {
                i.on_thread_change();
            }
        }),
    ));
    shared
        .request_app_shutdown
        .store(request_app_shutdown, Ordering::SeqCst);
    inner
        .threads
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(shared.clone());
    let state_dir = inner
        .state_dir
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    let inner = inner.clone();
    tokio::spawn(async move {
        let result = match state_dir {
            Some(state_dir) => {
                let ctx = ThreadContext {
                    config: inner.config.clone(),
                    topology: inner.topology.clone(),
                    factory: inner.factory.clone(),
                    state_dir,
                    process_id: *inner.process_id.lock().unwrap_or_else(|e| e.into_inner()),
                    num_threads: inner.num_threads.clone(),
                };
                match StreamThread::new(ctx, shared.clone()).await {
                    Ok(t) => t.run().await,
                    Err(e) => Err(e),
                }
            }
            None => Err(StreamsError::IllegalState("not started".into())),
        };
        shared.set_state(ThreadState::Dead);
        match result {
            Err(e) => handle_thread_error(&inner, &shared, e).await,
            Ok(()) if shared.app_shutdown.load(Ordering::SeqCst) => {
                shutdown_on_error(&inner).await;
            }
            Ok(()) => {}
        }
    });
    name
}

/// `PENDING_ERROR`, stop every thread, `ERROR`.
async fn shutdown_on_error(inner: &Arc<Inner>) {
    if inner.set_state(State::PendingError) {
        stop_threads(inner, Duration::from_secs(60)).await;
        inner.release_state_dir();
        inner.set_state(State::Error);
    }
}

async fn handle_thread_error(inner: &Arc<Inner>, thread: &ThreadShared, error: StreamsError) {
    tracing::error!(thread = %thread.name, "stream thread failed: {error}");
    inner
        .errors
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(format!("{}: {error}", thread.name));
    if !inner.state().is_running_or_rebalancing() {
        return;
    }
    let handler = inner
        .handler
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    match handler(&error) {
        StreamThreadExceptionResponse::ReplaceThread => {
            spawn_thread(inner);
        }
        StreamThreadExceptionResponse::ShutdownClient => shutdown_on_error(inner).await,
        StreamThreadExceptionResponse::ShutdownApplication => {
            // A fresh member carries the request to the group leader; every
            // member, this instance's included, then stops.
            spawn_thread_with(inner, true);
        }
    }
}
