//! The guard process: it kills CMD's whole process group if redis-lease dies (even by
//! SIGKILL, when no clean-up of redis-lease's own can run), so that nothing CMD started runs on
//! without the lease.
//!
//! It is redis-lease itself, started as `redis-lease __group-guard` in a process group of its
//! own (so Ctrl-C and job control do not reach it), ignoring the terminal's signals. It reads
//! CMD's process group id from its stdin, a pipe from redis-lease, then waits on that pipe:
//! a `d` byte (redis-lease has ended CMD and its group) lets it exit quietly; end of file
//! without one (redis-lease died) makes it `kill(-pgid, SIGKILL)`.

use std::io::{BufRead, Read, Write};
use std::process::{Child, ChildStdin, Command, ExitCode, Stdio};

/// The hidden first argument that runs the guard instead of the CLI.
pub const ARG: &str = "__group-guard";

/// redis-lease's end of a running guard.
pub struct GroupGuard {
    child: Child,
    pipe: Option<ChildStdin>,
}

impl GroupGuard {
    /// Starts the guard (not yet told a group).
    pub fn start() -> std::io::Result<GroupGuard> {
        let mut c = Command::new(std::env::current_exe()?);
        c.arg(ARG)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        std::os::unix::process::CommandExt::process_group(&mut c, 0);
        let mut child = c.spawn()?;
        let pipe = child.stdin.take();
        Ok(GroupGuard { child, pipe })
    }

    /// The guard's pid.
    pub fn pid(&self) -> libc::pid_t {
        self.child.id() as libc::pid_t
    }

    /// Tells the guard CMD's group: from now on, redis-lease's death kills it.
    pub fn arm(&mut self, pgid: libc::pid_t) {
        if let Some(p) = &mut self.pipe {
            let _ = writeln!(p, "{pgid}");
        }
    }

    /// CMD and its group are gone: the guard exits without killing anything.
    pub fn disarm(&mut self) {
        if let Some(mut p) = self.pipe.take() {
            let _ = p.write_all(b"d");
        }
        let _ = self.child.wait();
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        // Dropped without disarming (CMD never ran): the guard knows no group, or one whose
        // leader redis-lease has reaped; either way its end of file harms nothing.
        self.pipe.take();
        let _ = self.child.wait();
    }
}

/// The guard's `main`.
pub fn run() -> ExitCode {
    for sig in [
        libc::SIGINT,
        libc::SIGQUIT,
        libc::SIGHUP,
        libc::SIGTERM,
        libc::SIGTSTP,
        libc::SIGTTIN,
        libc::SIGTTOU,
        libc::SIGPIPE,
    ] {
        // SAFETY: setting a signal's disposition to SIG_IGN involves no memory.
        unsafe {
            libc::signal(sig, libc::SIG_IGN);
        }
    }
    let mut input = std::io::stdin().lock();
    let mut line = String::new();
    let pgid = match input.read_line(&mut line) {
        Ok(_) => match line.trim().parse::<libc::pid_t>() {
            Ok(p) if p > 1 => p,
            _ => return ExitCode::SUCCESS, // no group was started
        },
        Err(_) => return ExitCode::SUCCESS,
    };
    let mut byte = [0u8; 1];
    loop {
        match input.read(&mut byte) {
            Ok(0) => break,
            Ok(_) if byte[0] == b'd' => return ExitCode::SUCCESS,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    // redis-lease is gone while CMD's group may still run.
    // SAFETY: kill takes plain integers; the group is the one redis-lease started.
    unsafe {
        libc::kill(-pgid, libc::SIGKILL);
    }
    ExitCode::SUCCESS
}
