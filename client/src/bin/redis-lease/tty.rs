//! The controlling terminal, for job control: CMD runs in a process group of its own (so that
//! redis-lease can stop it and its children on lease loss), and when redis-lease is in the
//! terminal's foreground, that group is made the foreground group. Then CMD can read the
//! terminal (a prompt, psql, an editor) and gets Ctrl-C and Ctrl-Z itself, as under a shell.

use std::fs::File;
use std::os::fd::{AsRawFd, RawFd};

/// The controlling terminal of this process.
pub struct Terminal {
    tty: File,
}

/// Runs `f` with SIGTTOU blocked in the calling thread: `tcsetpgrp` from a background group
/// then succeeds instead of stopping the caller. Only async-signal-safe calls, so it may run
/// between fork and exec.
fn without_sigttou<T>(f: impl FnOnce() -> T) -> T {
    // SAFETY: sigset_t is plain data; sigemptyset/sigaddset initialise it before use, and
    // pthread_sigmask only reads `block` and writes `old`, both live locals.
    unsafe {
        let mut block: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut block);
        libc::sigaddset(&mut block, libc::SIGTTOU);
        libc::pthread_sigmask(libc::SIG_BLOCK, &block, &mut old);
        let out = f();
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        out
    }
}

impl Terminal {
    /// The controlling terminal, if there is one (`None` under a service manager, in a
    /// container without a tty, in CI...).
    pub fn open() -> Option<Terminal> {
        // O_NOCTTY: never acquire one; /dev/tty is the existing controlling terminal or fails.
        let tty = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags_noctty()
            .open("/dev/tty")
            .ok()?;
        Some(Terminal { tty })
    }

    pub fn fd(&self) -> RawFd {
        self.tty.as_raw_fd()
    }

    /// The terminal's foreground process group.
    pub fn foreground(&self) -> libc::pid_t {
        // SAFETY: tcgetpgrp only reads the terminal's state through a valid open fd.
        unsafe { libc::tcgetpgrp(self.fd()) }
    }

    /// Whether this process's group is the terminal's foreground group.
    pub fn ours(&self) -> bool {
        // SAFETY: getpgrp cannot fail and touches no memory.
        self.foreground() == unsafe { libc::getpgrp() }
    }

    /// Makes `pgid` the foreground group.
    pub fn give(&self, pgid: libc::pid_t) {
        give_terminal(self.fd(), pgid);
    }

    /// Makes this process's group the foreground group again.
    pub fn take_back(&self) {
        // SAFETY: getpgrp cannot fail and touches no memory.
        give_terminal(self.fd(), unsafe { libc::getpgrp() });
    }
}

/// `tcsetpgrp(fd, pgid)` that does not stop the caller. Async-signal-safe (used in the child
/// between fork and exec, where it hands the terminal to its own new group).
pub fn give_terminal(fd: RawFd, pgid: libc::pid_t) -> bool {
    // SAFETY: tcsetpgrp takes plain integers; an invalid fd or group is an error, not UB.
    without_sigttou(|| unsafe { libc::tcsetpgrp(fd, pgid) } == 0)
}

trait NoCtty {
    fn custom_flags_noctty(&mut self) -> &mut Self;
}

impl NoCtty for std::fs::OpenOptions {
    fn custom_flags_noctty(&mut self) -> &mut Self {
        use std::os::unix::fs::OpenOptionsExt;
        self.custom_flags(libc::O_NOCTTY | libc::O_CLOEXEC)
    }
}

/// Why a child stopped, if it did: `waitid(WSTOPPED | WNOHANG)` on `pid`. It consumes only
/// the stop notification; the exit status stays for tokio's reaper.
pub fn stopped(pid: libc::pid_t) -> Option<libc::c_int> {
    // SAFETY: siginfo_t is plain data, zeroed as waitid requires for the WNOHANG case; the
    // pointer is to a live local.
    unsafe {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        let r = libc::waitid(
            libc::P_PID,
            pid as libc::id_t,
            &mut info,
            libc::WSTOPPED | libc::WNOHANG,
        );
        if r != 0 || info.si_pid() == 0 || info.si_code != libc::CLD_STOPPED {
            return None;
        }
        Some(info.si_status())
    }
}

/// Stops this process's group the way Ctrl-Z would (SIGTSTP), so that the shell sees the job
/// stopped; returns once it is continued. (Discarded, and so a no-op, in an orphaned group.)
pub fn stop_own_group() {
    // SAFETY: kill with pid 0 signals our own process group; no memory is involved.
    unsafe {
        libc::kill(0, libc::SIGTSTP);
    }
}
