//! Measures the server's load for [`Server::handle_load`]: the share of the time its
//! busiest thread (the machine's or an I/O thread) ran or waited to run, or, where its
//! threads outnumber its cores, their total over the cores (the kernel's counts: a
//! neighbour taking half the core makes a thread wait about as long as it runs, so the
//! same players read as twice the load, and the capacity halves); and the datagrams the
//! sockets dropped.

use expel_shared::protocol::load::Load;
use std::time::{Duration, Instant};

#[cfg(doc)]
use expel_shared::protocol::server::Server;

/// How often the load is reported.
pub(crate) const WINDOW: Duration = Duration::from_millis(250);

/// Run times and drops at the start of the window.
pub(crate) struct LoadMeter {
    port: u16,
    at: Instant,
    /// The machine's thread's run time.
    ran: Option<u64>,
    /// Each I/O thread's, by its schedstat file.
    others: Vec<(String, Option<u64>)>,
    dropped: Option<u64>,
    /// The cores the process may run on.
    cores: f64,
}

impl LoadMeter {
    /// A meter for the thread that calls it and the UDP socket(s) on `port`.
    pub(crate) fn new(port: u16, now: Instant) -> LoadMeter {
        LoadMeter {
            port,
            at: now,
            ran: run_ns("/proc/thread-self/schedstat"),
            others: Vec::new(),
            dropped: socket_drops(port),
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()) as f64,
        }
    }

    /// The load over the window just ended, once a window has passed (else `None`), with
    /// the other threads to count (their `/proc` schedstat files, asked for only then).
    pub(crate) fn sample(
        &mut self,
        now: Instant,
        others: impl FnOnce() -> Vec<String>,
    ) -> Option<Load> {
        let wall = now.checked_duration_since(self.at)?;
        if wall < WINDOW {
            return None;
        }
        let others = others();
        let share = |a: Option<u64>, b: Option<u64>| match (a, b) {
            (Some(a), Some(b)) => b.saturating_sub(a) as f64 / 1e9 / wall.as_secs_f64(),
            _ => 0.0,
        };
        let ran = run_ns("/proc/thread-self/schedstat");
        let mut busy = share(self.ran, ran);
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
        Some(load)
    }
}

/// Nanoseconds a thread has run or waited on a run queue to run (the first two fields
/// of its `/proc` schedstat file).
fn run_ns(schedstat: &str) -> Option<u64> {
    let s = std::fs::read_to_string(schedstat).ok()?;
    let mut f = s.split_whitespace().map(|x| x.parse::<u64>().ok());
    Some(f.next()??.saturating_add(f.next()??))
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
