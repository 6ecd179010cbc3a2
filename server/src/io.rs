//! The I/O threads: each owns a QUIC socket on the server's port (`SO_REUSEPORT`, so the
//! kernel spreads clients over them by address), a quinn-proto endpoint and the
//! connections it accepted, and does all their packet work (receive, decrypt, encrypt,
//! send). The machine's thread keeps the protocol machine alone: it takes what the
//! threads gathered ([`Up`]) before each tick and hands them the machine's outputs
//! ([`Down`]) in one batch per thread.
//!
//! A connection belongs to the thread that accepted it; its connection ids name that
//! thread, so a datagram that reaches another socket (the client moved to a new address,
//! which hashes elsewhere) is handed to the owner, which answers from its own socket on
//! the same port.

use crate::metrics::{thread_cpu_seconds, IoWork};
use crate::quic::{Context, Forwarded, Quic, QuicParts, Router, Up, Waker};
use crate::{Shared, READ_GAP};
use expel_protocol::server::{ConnId, Output};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::mpsc::{self, Receiver, Sender, TryRecvError};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// The longest an I/O thread spends on waiting handshakes in one go, so its playing
/// connections' datagrams are read in between.
const ADMIT_SLICE: Duration = Duration::from_millis(2);
/// The longest an I/O thread sharing the machine's core waits for its tick to end.
const TICK_WAIT: Duration = Duration::from_millis(5);
/// The longest an idle I/O thread waits before it looks round again.
const IDLE_LOOK: Duration = Duration::from_millis(50);
/// Datagrams that may wait for their owning thread; past it they are dropped, as the
/// network may drop them.
const FORWARD_QUEUE: usize = 4096;

/// The bit every connection id of the browser's door carries (QUIC's stay far below it):
/// the machine's outputs for those go to the door.
pub(crate) const WEB_IDS: ConnId = 1 << 62;

/// A thread that moves a door's bytes other than the QUIC threads (the browser's), as
/// the machine's side keeps it.
pub(crate) struct Slot {
    pub(crate) down: Sender<Vec<Down>>,
    pub(crate) waker: Waker,
    pub(crate) up: Arc<Mutex<Vec<Up>>>,
    pub(crate) schedstat: Arc<OnceLock<String>>,
    pub(crate) thread: JoinHandle<()>,
}

/// What the machine asks of an I/O thread.
#[derive(Debug)]
pub(crate) enum Down {
    /// One of the machine's outputs for a connection of this thread's, as the machine
    /// wrote it, and when the machine's thread handed it over (a map's transfer is timed
    /// from then).
    Output(Output, Instant),
    /// The player joined: its admission slot is free.
    Joined { conn: ConnId },
    /// Shut down: take nobody more, close what is left by `until`, then end.
    Stop { reason: String, until: Instant },
}

/// What wakes the machine's thread before its next tick.
#[derive(Debug)]
pub(crate) enum Wake {
    /// An I/O thread gathered something that should not wait for the tick.
    Up,
    /// Fault injection: hold the tick's thread this long.
    Stall(Duration),
    /// Shut down, telling everyone why.
    Shutdown(String),
    /// An I/O thread ended: `None` after a stop, else why.
    Ended { index: usize, why: Option<String> },
}

/// The machine's side of one I/O thread.
struct IoThread {
    down: Sender<Vec<Down>>,
    batch: Vec<Down>,
    waker: Waker,
    up: Arc<Mutex<Vec<Up>>>,
    /// Its `/proc` schedstat file, once it has started (for the load meter).
    schedstat: Arc<OnceLock<String>>,
    thread: Option<JoinHandle<()>>,
    ended: bool,
}

/// The I/O threads, as the machine's thread sees them.
pub(crate) struct IoThreads {
    /// The QUIC threads, then the browser's door where there is one.
    threads: Vec<IoThread>,
    /// How many of `threads` are QUIC's.
    quic: usize,
    /// Set by an I/O thread that woke the machine, cleared when the machine looks: one
    /// wake-up per look, however much arrived.
    woken: Arc<AtomicBool>,
    /// Set while the machine ticks, where the I/O threads share its one core: they
    /// hold off until it is done rather than cut the tick into slices.
    ticking: Option<Arc<AtomicBool>>,
    /// Whether they hold off now: not while a neighbour takes part of the core (see
    /// [`IoThreads::hold_off`]).
    hold: bool,
}

impl IoThreads {
    /// Starts one thread per socket. `wake` reaches the machine's thread.
    pub(crate) fn start(
        parts: Vec<QuicParts>,
        shared: &Arc<Shared>,
        wake: &Sender<Wake>,
    ) -> std::io::Result<IoThreads> {
        let woken = Arc::new(AtomicBool::new(false));
        let one_core = std::thread::available_parallelism().map_or(true, |n| n.get() == 1);
        let ticking = one_core.then(|| Arc::new(AtomicBool::new(false)));
        let mut queues = Vec::new();
        let mut started = Vec::new();
        let notifies: Vec<Arc<Notify>> = parts.iter().map(|_| Arc::new(Notify::new())).collect();
        // The threads start parked until every waker exists (each needs the others').
        let (go_tx, go_rx): (Vec<_>, Vec<_>) = parts.iter().map(|_| mpsc::channel()).unzip();
        for ((part, notify), go) in parts.into_iter().zip(&notifies).zip(go_rx) {
            let index = usize::from(part.index);
            let (down_tx, down_rx) = mpsc::channel();
            let (fwd_tx, fwd_rx) = mpsc::sync_channel(FORWARD_QUEUE);
            let up = Arc::new(Mutex::new(Vec::new()));
            let schedstat = Arc::new(OnceLock::new());
            let job = Job {
                index,
                shared: shared.clone(),
                down: down_rx,
                forwarded: fwd_rx,
                notify: notify.clone(),
                up: up.clone(),
                woken: woken.clone(),
                ticking: ticking.clone(),
                wake: wake.clone(),
                schedstat: schedstat.clone(),
            };
            // Built here, before the server says it is ready: a runtime needs descriptors
            // of its own, which a crowd at the descriptor limit may have taken by the time
            // the thread gets going.
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let thread = std::thread::Builder::new()
                .name(format!("expel-io-{index}"))
                .spawn(move || job.run(part, go, rt))?;
            let waker = Waker {
                thread: thread.thread().clone(),
                notify: notify.clone(),
            };
            queues.push((fwd_tx, waker.clone()));
            started.push(IoThread {
                down: down_tx,
                batch: Vec::new(),
                waker,
                up,
                schedstat,
                thread: Some(thread),
                ended: false,
            });
        }
        let router = Router { to: queues };
        for go in go_tx {
            let _ = go.send(router.clone());
        }
        let quic = started.len();
        Ok(IoThreads {
            threads: started,
            quic,
            woken,
            ticking,
            hold: true,
        })
    }

    /// Adds the browser's door after the QUIC threads: `start` starts its thread, given
    /// the machine's wake-up flag and the door's place (how it names itself when it ends).
    pub(crate) fn add_web(
        &mut self,
        start: impl FnOnce(Arc<AtomicBool>, usize) -> std::io::Result<Slot>,
    ) -> std::io::Result<()> {
        let d = start(self.woken.clone(), self.threads.len())?;
        self.threads.push(IoThread {
            down: d.down,
            batch: Vec::new(),
            waker: d.waker,
            up: d.up,
            schedstat: d.schedstat,
            thread: Some(d.thread),
            ended: false,
        });
        Ok(())
    }

    /// The `/proc` schedstat files of the threads started so far.
    pub(crate) fn schedstats(&self) -> Vec<String> {
        self.threads
            .iter()
            .filter_map(|l| l.schedstat.get().cloned())
            .collect()
    }

    /// Everything the threads gathered, each thread's in its order.
    pub(crate) fn take_up(&mut self, into: &mut Vec<Up>) {
        self.woken.store(false, Relaxed);
        for l in &self.threads {
            let mut up = l.up.lock().unwrap_or_else(|e| e.into_inner());
            into.append(&mut up);
        }
    }

    /// Whether the I/O threads sharing the machine's core hold off while it ticks. On a
    /// core of its own the server's work is the same either way, and a tick not cut into
    /// slices is shorter and cheaper (about 7% less CPU at a thousand players). Beside a
    /// neighbour, the kernel shares the core out by runnable threads: the machine's alone
    /// gets half of it while it ticks, and then the I/O thread alone half, where the two
    /// together would get two thirds; held off, the server falls behind its players'
    /// packets (3% of their commands late at 670 players, against none).
    pub(crate) fn hold_off(&mut self, hold: bool) {
        self.hold = hold;
    }

    /// Whether the I/O threads share the machine's one core (and may hold off).
    pub(crate) fn shares_core(&self) -> bool {
        self.ticking.is_some()
    }

    /// The machine starts (`true`) or ends a tick: sharing its core, the I/O threads wait
    /// for the end (while they hold off).
    pub(crate) fn ticking(&self, on: bool) {
        if let Some(t) = &self.ticking {
            if t.swap(on && self.hold, Relaxed) && !on {
                for l in &self.threads {
                    l.waker.wake();
                }
            }
        }
    }

    /// Queues `d` for the thread that owns connection `id`: a browser's session the
    /// door's, a QUIC connection the thread its id names.
    pub(crate) fn send(&mut self, conn: ConnId, d: Down) {
        let at = if conn & WEB_IDS != 0 {
            self.quic
        } else {
            (conn % self.quic.max(1) as ConnId) as usize
        };
        if let Some(l) = self.threads.get_mut(at) {
            l.batch.push(d);
        }
    }

    /// Hands each thread what was queued for it.
    pub(crate) fn flush(&mut self) {
        for l in &mut self.threads {
            if !l.batch.is_empty() {
                let batch = std::mem::take(&mut l.batch);
                if l.down.send(batch).is_ok() {
                    l.waker.wake();
                }
            }
        }
    }

    /// Tells every thread to take nobody more and close what is left by `until`.
    pub(crate) fn stop(&mut self, reason: &str, until: Instant) {
        for l in &mut self.threads {
            l.batch.push(Down::Stop {
                reason: reason.to_string(),
                until,
            });
        }
        self.flush();
    }

    /// Thread `index` said it ended.
    pub(crate) fn ended(&mut self, index: usize) {
        if let Some(l) = self.threads.get_mut(index) {
            l.ended = true;
            if let Some(t) = l.thread.take() {
                let _ = t.join();
            }
        }
    }

    pub(crate) fn all_ended(&self) -> bool {
        self.threads.iter().all(|l| l.ended)
    }
}

/// What one I/O thread runs with.
struct Job {
    index: usize,
    shared: Arc<Shared>,
    down: Receiver<Vec<Down>>,
    forwarded: Receiver<Forwarded>,
    notify: Arc<Notify>,
    up: Arc<Mutex<Vec<Up>>>,
    woken: Arc<AtomicBool>,
    ticking: Option<Arc<AtomicBool>>,
    wake: Sender<Wake>,
    schedstat: Arc<OnceLock<String>>,
}

impl Job {
    /// The thread's body: a panic is reported as its end, with the message.
    fn run(self, part: QuicParts, go: Receiver<Router>, rt: tokio::runtime::Runtime) {
        let (index, wake) = (self.index, self.wake.clone());
        let why = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
            let Ok(router) = go.recv() else {
                return None;
            };
            if let Some(me) = crate::meter::thread_schedstat() {
                let _ = self.schedstat.set(me);
            }
            rt.block_on(async move {
                match Quic::new(part, router) {
                    Ok(quic) => self.drive(quic).await,
                    Err(e) => Some(format!("its QUIC socket failed: {e}")),
                }
            })
        }));
        let why = why.unwrap_or_else(|panic| {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic".into());
            Some(format!("panicked: {what}"))
        });
        let _ = wake.send(Wake::Ended { index, why });
    }

    /// Moves packets until stopped: the machine's commands, forwarded datagrams, QUIC's
    /// timers, waiting handshakes, then the socket (looked at no more than once per
    /// [`READ_GAP`]).
    async fn drive(self, mut quic: Quic) -> Option<String> {
        let s = &self.shared;
        let cx = Context {
            metrics: &s.metrics,
            admission: &s.admission,
            limits: &s.cfg.limits,
            map: &s.cfg.settings.map_bytes,
            max_players: s.cfg.settings.max_players as u64,
        };
        let mut read_from = Instant::now();
        let mut stop: Option<(String, Instant)> = None;
        let mut cpu = CpuLaps::start();
        loop {
            if self.ticking.as_ref().is_some_and(|t| t.load(Relaxed)) {
                // (Bounded, should the wake-up be missed.)
                std::thread::park_timeout(TICK_WAIT);
                continue;
            }
            let now = Instant::now();
            let mut outputs = false;
            loop {
                match self.down.try_recv() {
                    Ok(batch) => {
                        if !outputs {
                            // What came before the machine's first batch is not theirs.
                            cpu.lap(IoWork::Other, &cx);
                            outputs = true;
                        }
                        for d in batch {
                            if let Some(s) = perform(&mut quic, d, now, &cx) {
                                stop = Some(s);
                            }
                        }
                    }
                    Err(TryRecvError::Empty) => break,
                    // The machine is gone: nobody to play with.
                    Err(TryRecvError::Disconnected) => {
                        let why = "server stopping".to_string();
                        quic.stop_accepting(&why, now);
                        stop.get_or_insert((why, now));
                        break;
                    }
                }
            }
            if outputs {
                quic.drive(Instant::now(), &cx);
                cpu.lap(IoWork::Send, &cx);
            }
            while let Ok(f) = self.forwarded.try_recv() {
                quic.datagram(now, f, &cx);
            }
            quic.fire_timers(now);
            if quic.has_waiting() {
                quic.admit_waiting(&cx, now + ADMIT_SLICE);
            }
            quic.drive(Instant::now(), &cx);
            if let Some((why, until)) = &stop {
                if quic.all_closed() || Instant::now() >= *until {
                    quic.close_all(why, Instant::now());
                    quic.drive(Instant::now(), &cx);
                    self.tell(&mut quic);
                    return None;
                }
            }
            self.tell(&mut quic);
            cpu.lap(IoWork::Other, &cx);
            // Wait: for the socket, a timer or the machine.
            let now = Instant::now();
            let due = if quic.has_waiting() {
                now
            } else {
                // QUIC's timers (acknowledgement delays, probes, idle limits, none finer
                // than READ_GAP) wait for the next look at the socket, so a crowd's timers
                // do not wake the thread one by one.
                let later = now + IDLE_LOOK;
                let due = quic
                    .next_timer()
                    .map_or(later, |t| t.max(read_from).min(later));
                stop.as_ref().map_or(due, |(_, u)| due.min(*u))
            };
            if now < read_from {
                // Not looking at the socket yet: parked, the thread is not woken by what
                // arrives meanwhile (the reactor would be, for each datagram); the
                // machine unparks it.
                let until = due.min(read_from);
                if until > now {
                    std::thread::park_timeout(until - now);
                }
                continue;
            }
            tokio::select! {
                biased;
                _ = self.notify.notified() => {}
                _ = tokio::time::sleep_until(due.into()) => {}
                r = quic.io(&cx) => {
                    match r {
                        Ok(work) => {
                            // What arrived is served at once, its cost charged with it.
                            quic.drive(Instant::now(), &cx);
                            cpu.lap(work, &cx);
                        }
                        Err(e) => return Some(format!("its QUIC socket failed: {e}")),
                    }
                    read_from = Instant::now() + READ_GAP;
                }
            }
        }
    }

    /// Hands the machine what the connections did, waking it for anything but inputs
    /// (those wait for its tick).
    fn tell(&self, quic: &mut Quic) {
        let up = quic.take_up();
        if up.is_empty() {
            return;
        }
        let urgent = up.iter().any(Up::urgent);
        self.up.lock().unwrap_or_else(|e| e.into_inner()).extend(up);
        if urgent && !self.woken.swap(true, Relaxed) {
            let _ = self.wake.send(Wake::Up);
        }
    }
}

/// An I/O thread's CPU time, charged lap by lap to what it went to: each lap ends where
/// one kind of work does, and what lies between (the loop, its waits) goes with the next.
struct CpuLaps {
    last: Option<f64>,
}

impl CpuLaps {
    fn start() -> CpuLaps {
        CpuLaps {
            last: thread_cpu_seconds(),
        }
    }

    /// Charges the CPU time since the last lap to `work`.
    fn lap(&mut self, work: IoWork, cx: &Context) {
        let now = thread_cpu_seconds();
        if let (Some(a), Some(b)) = (self.last, now) {
            cx.metrics.io_cpu_spent(work, (b - a).max(0.0));
        }
        self.last = now;
    }
}

/// Does what the machine's thread handed over; returns the stop, when it is one.
fn perform(quic: &mut Quic, d: Down, now: Instant, cx: &Context) -> Option<(String, Instant)> {
    match d {
        Down::Output(Output::Datagram { conn, bytes }, _) => {
            if !quic.send_datagram(conn, bytes) {
                cx.metrics.datagram_send_errors.inc();
            }
        }
        Down::Output(Output::Control { conn, bytes }, _) => quic.write(conn, bytes),
        Down::Output(Output::Map { conn }, at) => quic.send_map(conn, at, cx),
        Down::Output(
            Output::Close {
                conn,
                last,
                code,
                reason,
            },
            _,
        ) => quic.close(conn, last, code.number().into(), reason),
        Down::Joined { conn } => quic.joined(conn, cx),
        Down::Stop { reason, until } => {
            quic.stop_accepting(&reason, now);
            return Some((reason, until));
        }
    }
    None
}
