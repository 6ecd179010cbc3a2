//! Child processes in tests: one killed when its guard drops, and what is on `PATH`. This
//! part does I/O (processes); the rest of the kit but `desktop` does none.

use std::process::Child;

/// A child process killed (and reaped) when dropped, so a failing test leaves none
/// running (a server, a browser, an X server).
pub struct Kill(pub Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Whether an executable of that name is on `PATH`.
pub fn on_path(name: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(name).is_file()))
}
