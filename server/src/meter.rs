//! Measures the server's load for [`Server::handle_load`]: the share of the time its
//! busiest thread (the machine's or an I/O thread) ran or waited to run, or, where its
//! threads outnumber its cores, their total over the cores (the kernel's counts: a
//! neighbour taking half the core makes a thread wait about as long as it runs, so the
//! same players read as twice the load, and the capacity halves); and the datagrams the
//! sockets dropped. It also says how much of its cores' time other processes take (a
//! neighbour), for the I/O threads' hold-off (see [`crate::io`]).

use expel_protocol::headroom::Load;
use std::time::{Duration, Instant};

#[cfg(doc)]
use expel_protocol::server::ServerMachine;

/// How often the load is reported.
pub(crate) const WINDOW: Duration = Duration::from_millis(250);

/// Run times and drops at the start of the window.
pub(crate) struct LoadMeter {
    port: u16,
    at: Instant,
    /// The machine's thread's time run and waited, and run alone.
    ran: Option<(u64, u64)>,
    /// The share of the last window the machine's thread ran (0 to 1).
    machine_busy: f64,
    /// The tick's workers' schedstat files.
    workers: Vec<String>,
    /// Each other thread's (I/O threads, workers) time run and waited, by its file.
    others: Vec<(String, Option<u64>)>,
    dropped: Option<u64>,
    /// The cores the process may run on.
    cores: f64,
    /// Which they are (`/proc/self/status`), and their busy time and the process's CPU
    /// time at the window's start (clock ticks).
    cpus: Vec<usize>,
    cpu_times: Option<(u64, u64)>,
    /// The share of those cores' time other processes took, averaged over some windows.
    neighbour: f64,
}

/// Weight of each window in the neighbour's share (clock ticks are coarse: 10 ms in a
/// 250 ms window).
const NEIGHBOUR_WEIGHT: f64 = 0.2;

impl LoadMeter {
    /// A meter for the thread that calls it, the tick's workers (their schedstat files)
    /// and the UDP socket(s) on `port`.
    pub(crate) fn new(port: u16, now: Instant, workers: Vec<String>) -> LoadMeter {
        let cpus = allowed_cpus().unwrap_or_default();
        LoadMeter {
            port,
            at: now,
            ran: sched_ns("/proc/thread-self/schedstat"),
            machine_busy: 0.0,
            workers,
            others: Vec::new(),
            dropped: socket_drops(port),
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()) as f64,
            cpu_times: cpu_times(&cpus),
            cpus,
            neighbour: 0.0,
        }
    }

    /// The share of the process's cores' time other processes took of late (0 to 1; 0
    /// where `/proc` does not tell).
    pub(crate) fn neighbour(&self) -> f64 {
        self.neighbour
    }

    /// The share of the last window the machine's thread ran: the serial part of its
    /// ticks, with what it takes in between (0 to 1; 0 where `/proc` does not tell).
    pub(crate) fn machine_busy(&self) -> f64 {
        self.machine_busy
    }

    /// The load over the window just ended, once a window has passed (else `None`), with
    /// the I/O threads to count (their `/proc` schedstat files, asked for only then).
    pub(crate) fn sample(
        &mut self,
        now: Instant,
        io: impl FnOnce() -> Vec<String>,
    ) -> Option<Load> {
        let wall = now.checked_duration_since(self.at)?;
        if wall < WINDOW {
            return None;
        }
        let mut others = io();
        others.extend(self.workers.iter().cloned());
        let share = |a: Option<u64>, b: Option<u64>| match (a, b) {
            (Some(a), Some(b)) => b.saturating_sub(a) as f64 / 1e9 / wall.as_secs_f64(),
            _ => 0.0,
        };
        let ran = sched_ns("/proc/thread-self/schedstat");
        let whole = |r: Option<(u64, u64)>| r.map(|(run, wait)| run.saturating_add(wait));
        let mut busy = share(whole(self.ran), whole(ran));
        self.machine_busy = share(self.ran.map(|r| r.0), ran.map(|r| r.0)).min(1.0);
        let mut total = busy;
        let mut next = Vec::with_capacity(others.len());
        for path in &others {
            let now_ran = run_ns(path);
            let before = self
                .others
                .iter()
                .find(|(p, _)| p == path)
                .and_then(|x| x.1);
            let one = share(before, now_ran);
            busy = busy.max(one);
            total += one;
            next.push((path.clone(), now_ran));
        }
        let busy = busy.max(total / self.cores);
        let dropped = socket_drops(self.port);
        let load = Load {
            busy,
            dropped: match (self.dropped, dropped) {
                (Some(a), Some(b)) => b.saturating_sub(a),
                _ => 0,
            },
        };
        (self.at, self.ran, self.others, self.dropped) = (now, ran, next, dropped);
        let times = cpu_times(&self.cpus);
        if let (Some((busy0, ours0)), Some((busy1, ours1))) = (self.cpu_times, times) {
            let all = wall.as_secs_f64() * CLOCK_TICKS * self.cpus.len() as f64;
            let others = busy1.saturating_sub(busy0) as f64 - ours1.saturating_sub(ours0) as f64;
            let share = (others / all).clamp(0.0, 1.0);
            self.neighbour += (share - self.neighbour) * NEIGHBOUR_WEIGHT;
        }
        self.cpu_times = times;
        Some(load)
    }
}

/// Nanoseconds a thread has run or waited on a run queue to run (the first two fields
/// of its `/proc` schedstat file).
fn run_ns(schedstat: &str) -> Option<u64> {
    sched_ns(schedstat).map(|(run, wait)| run.saturating_add(wait))
}

/// Nanoseconds a thread has run, and waited on a run queue to run.
fn sched_ns(schedstat: &str) -> Option<(u64, u64)> {
    let s = std::fs::read_to_string(schedstat).ok()?;
    let mut f = s.split_whitespace().map(|x| x.parse::<u64>().ok());
    Some((f.next()??, f.next()??))
}

/// The calling thread's `/proc` schedstat file, by a path any thread can read
/// (`/proc/thread-self` is a link relative to `/proc`).
pub(crate) fn thread_schedstat() -> Option<String> {
    let me = std::fs::read_link("/proc/thread-self").ok()?;
    Some(format!("/proc/{}/schedstat", me.to_string_lossy()))
}

/// `/proc`'s clock ticks a second (`USER_HZ`: 100 on every Linux architecture's ABI).
const CLOCK_TICKS: f64 = 100.0;

/// The CPUs the process may run on (`Cpus_allowed_list` of `/proc/self/status`).
fn allowed_cpus() -> Option<Vec<usize>> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let list = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))?;
    cpu_list(list.trim())
}

/// A kernel CPU list ("0-3,6"), each CPU once, at most 4,096.
fn cpu_list(list: &str) -> Option<Vec<usize>> {
    let mut cpus = Vec::new();
    for part in list.split(',').filter(|p| !p.is_empty()) {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        let (a, b) = (
            a.trim().parse::<usize>().ok()?,
            b.trim().parse::<usize>().ok()?,
        );
        if b < a || b >= 4096 {
            return None;
        }
        cpus.extend(a..=b);
    }
    cpus.sort_unstable();
    cpus.dedup();
    Some(cpus)
}

/// The busy time of `cpus` (all but idle and I/O wait: a hypervisor's steal counts, as
/// time someone else had) and the process's CPU time, in clock ticks.
fn cpu_times(cpus: &[usize]) -> Option<(u64, u64)> {
    if cpus.is_empty() {
        return None;
    }
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let busy = busy_of(&stat, cpus)?;
    let me = std::fs::read_to_string("/proc/self/stat").ok()?;
    // After the command's parenthesis: utime and stime are the 12th and 13th fields.
    let mut f = me.rsplit_once(')')?.1.split_whitespace().skip(11);
    let ours = (f.next()?.parse::<u64>().ok()?).saturating_add(f.next()?.parse::<u64>().ok()?);
    Some((busy, ours))
}

/// The busy ticks of `cpus` in a `/proc/stat` text.
fn busy_of(stat: &str, cpus: &[usize]) -> Option<u64> {
    let mut busy = 0u64;
    let mut seen = 0;
    for line in stat.lines() {
        let mut f = line.split_whitespace();
        let Some(cpu) = f.next().and_then(|n| n.strip_prefix("cpu")) else {
            continue;
        };
        let Ok(cpu) = cpu.parse::<usize>() else {
            continue; // the "cpu" total
        };
        if cpus.binary_search(&cpu).is_err() {
            continue;
        }
        let t: Vec<u64> = f.filter_map(|x| x.parse().ok()).collect();
        // user nice system idle iowait irq softirq steal (guest time is within user).
        let all: u64 = t.iter().take(8).sum();
        let idle = t.get(3).copied().unwrap_or(0) + t.get(4).copied().unwrap_or(0);
        busy = busy.saturating_add(all.saturating_sub(idle));
        seen += 1;
    }
    (seen == cpus.len()).then_some(busy)
}

/// Datagrams dropped so far by the UDP sockets bound to `port` (the `drops` column of
/// `/proc/net/udp` and `udp6`); `None` where those are not to be read.
fn socket_drops(port: u16) -> Option<u64> {
    let mut total = None;
    for table in ["/proc/net/udp", "/proc/net/udp6"] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        *total.get_or_insert(0) += drops_on(&text, port);
    }
    total
}

/// The drops of `port`'s sockets in one such table.
fn drops_on(table: &str, port: u16) -> u64 {
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let local = fields.nth(1)?;
            let p = u16::from_str_radix(local.rsplit_once(':')?.1, 16).ok()?;
            let drops = fields.last()?.parse::<u64>().ok()?;
            (p == port).then_some(drops)
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_and_busy_times_are_read_for_the_cores_given() {
        assert_eq!(cpu_list("0"), Some(vec![0]));
        assert_eq!(cpu_list("0-3,6,2"), Some(vec![0, 1, 2, 3, 6]));
        assert_eq!(cpu_list("3-1"), None);
        assert_eq!(cpu_list("0-99999"), None);
        assert_eq!(cpu_list("x"), None);
        let stat = "cpu  100 0 100 800 0 0 0 0 0 0
cpu0 10 1 20 300 5 1 2 3 0 0
cpu1 50 0 40 100 0 0 0 0 0 0
intr 12345";
        // cpu0: 37 of its 342 ticks busy (steal included); cpu1: 90 of 190.
        assert_eq!(busy_of(stat, &[0]), Some(37));
        assert_eq!(busy_of(stat, &[0, 1]), Some(127));
        assert_eq!(busy_of(stat, &[2]), None);
    }

    /// Another thread's schedstat file, as the load meter reads it: from the machine's
    /// thread, a worker's or an I/O thread's run time (a path relative to `/proc` read
    /// from the process's directory found nothing, and those threads counted as idle).
    #[test]
    fn another_threads_run_time_is_read_from_any_thread() {
        if !std::path::Path::new("/proc/thread-self").exists() {
            return; // not Linux: the meter reads no load
        }
        let (tx, rx) = std::sync::mpsc::channel();
        let worker = std::thread::spawn(move || {
            let path = thread_schedstat();
            // A few milliseconds of work, so its run time shows.
            let start = Instant::now();
            let mut x = 0u64;
            while start.elapsed() < Duration::from_millis(20) {
                x = std::hint::black_box(x.wrapping_add(1));
            }
            tx.send(path).unwrap();
            std::thread::sleep(Duration::from_millis(200));
        });
        let path = rx.recv().unwrap().expect("a schedstat path");
        assert!(path.starts_with("/proc/"), "{path}");
        let (run, _) = sched_ns(&path).expect("read from another thread");
        assert!(run >= 10_000_000, "{path}: ran {run} ns");
        worker.join().unwrap();
    }

    #[test]
    fn drops_are_read_for_the_port_alone() {
        let table = "   sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops
  123: 0100007F:6D38 00000000:0000 07 00000000:00000000 00:00000000 00000000  1000        0 41234 2 0000000000000000 17
  124: 00000000:6D38 00000000:0000 07 00000000:00000000 00:00000000 00000000  1000        0 41235 2 0000000000000000 3
  125: 00000000:0035 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 1234 2 0000000000000000 99";
        assert_eq!(drops_on(table, 0x6D38), 20);
        assert_eq!(drops_on(table, 53), 99);
        assert_eq!(drops_on(table, 1), 0);
    }
}
