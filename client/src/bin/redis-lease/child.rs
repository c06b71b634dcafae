//! Running CMD under a lease: spawning it in a process group of its own, forwarding signals,
//! job control at a terminal, stopping it when the lease is lost, and the guard process that
//! kills CMD's whole group should redis-lease itself die.

use std::ffi::OsString;
use std::time::Duration;

use tokio::process::{Child, Command};
use tokio::signal::unix::{signal, Signal, SignalKind};

use crate::guard::GroupGuard;
use crate::tty::{self, Terminal};
use crate::{out, EXIT_FAILURE};

/// How CMD ended.
pub enum Outcome {
    /// CMD ended with this exit code (128+N if killed by signal N).
    Exited(u8),
    /// CMD, in the terminal's foreground, was killed by Ctrl-C (SIGINT): see [`die_of_sigint`].
    Interrupted,
    /// The lease was lost (CMD was stopped).
    Lost(String),
}

/// CMD, running in its own process group.
pub struct Running {
    child: Child,
    pgid: libc::pid_t,
    /// The controlling terminal, if there is one.
    terminal: Option<Terminal>,
    /// Whether CMD was given the terminal's foreground (at its start, or when it stopped
    /// reading the terminal from the background).
    handed: std::cell::Cell<bool>,
    /// Kills CMD's group if redis-lease dies before [`Running::supervise`] has ended it.
    guard: GroupGuard,
}

/// Starts CMD with `env` added. It leads a new process group (so that stopping it reaches
/// whatever it starts), and, when redis-lease is in the foreground of its terminal, gets the
/// terminal's foreground. Should redis-lease die (even by SIGKILL), its guard process kills
/// CMD's whole group at once; CMD itself also gets SIGKILL then (Linux `PR_SET_PDEATHSIG`),
/// which covers the moment before the guard knows the group.
pub fn spawn(cmd: &[OsString], env: &[(&str, String)]) -> std::io::Result<Running> {
    // The guard first: without it CMD does not run.
    let mut guard = GroupGuard::start()?;
    // Orphans of CMD's (also those that left its process group) become redis-lease's children
    // instead of init's, so that they can be stopped before the lease is released.
    #[cfg(target_os = "linux")]
    // SAFETY: prctl with PR_SET_CHILD_SUBREAPER takes plain integers.
    unsafe {
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1);
    }
    let terminal = Terminal::open();
    let handoff = terminal.as_ref().filter(|t| t.ours()).map(Terminal::fd);
    let mut c = Command::new(&cmd[0]);
    c.args(&cmd[1..]);
    for (k, v) in env {
        c.env(k, v);
    }
    c.process_group(0);
    // SAFETY: the closure runs in the child between fork and exec and only makes
    // async-signal-safe calls (prctl, getpid, pthread_sigmask, tcsetpgrp) on plain values.
    unsafe {
        c.pre_exec(move || {
            #[cfg(target_os = "linux")]
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // Our new group (process_group(0) ran before this) takes the foreground, so CMD
            // can read the terminal and gets Ctrl-C. Done here rather than in the parent, so
            // that it is in place before CMD runs.
            if let Some(fd) = handoff {
                tty::give_terminal(fd, libc::getpid());
            }
            Ok(())
        });
    }
    c.kill_on_drop(false);
    let child = c.spawn()?;
    let pgid = child.id().map_or(0, |p| p as libc::pid_t);
    guard.arm(pgid);
    if terminal.is_some() {
        // redis-lease is now a background group: let it write to the terminal and take the
        // foreground back without being stopped (SIGTTOU), even with `stty tostop`.
        // SAFETY: setting a signal's disposition to SIG_IGN involves no memory.
        unsafe {
            libc::signal(libc::SIGTTOU, libc::SIG_IGN);
        }
    }
    Ok(Running {
        child,
        pgid,
        terminal,
        handed: std::cell::Cell::new(handoff.is_some()),
        guard,
    })
}

fn exit_code(status: std::process::ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) => c.clamp(0, 255) as u8,
        (None, Some(sig)) => (128 + sig).clamp(0, 255) as u8,
        _ => EXIT_FAILURE,
    }
}

impl Running {
    fn signal(&self, sig: libc::c_int) {
        if self.pgid > 0 {
            // SAFETY: kill takes plain integers; the group is the child's own.
            unsafe {
                libc::kill(-self.pgid, sig);
            }
        }
    }

    /// Whether any process is left in CMD's group.
    fn group_alive(&self) -> bool {
        // SAFETY: kill with signal 0 only checks that the group exists; plain integers.
        self.pgid > 0 && unsafe { libc::kill(-self.pgid, 0) } == 0
    }

    /// Stops everything in CMD's group: SIGTERM (and SIGCONT), then SIGKILL once `grace` has
    /// passed with anything still there. Returns once CMD is reaped and the group is empty (or,
    /// should a member linger as an unreaped zombie, a second after the SIGKILL).
    async fn stop_group(&mut self, grace: Duration) {
        self.deliver(libc::SIGTERM);
        let deadline = tokio::time::Instant::now() + grace;
        let _ = tokio::time::timeout_at(deadline, self.child.wait()).await;
        while self.group_alive() && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        if self.group_alive() {
            self.signal(libc::SIGKILL);
        }
        let _ = self.child.wait().await;
        let until = tokio::time::Instant::now() + Duration::from_secs(1);
        while self.group_alive() && tokio::time::Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Processes CMD started that left its process group and were orphaned since: they are
    /// redis-lease's children now (it is a subreaper). Stopped as the group is: SIGTERM (and
    /// SIGCONT), SIGKILL after `grace`; each is reaped. Their own orphans come next, until none
    /// is left (within `grace` and a second).
    async fn stop_strays(&self, grace: Duration) {
        let start = tokio::time::Instant::now();
        let mut termed: Vec<libc::pid_t> = Vec::new();
        let mut warned = false;
        loop {
            let strays: Vec<libc::pid_t> = children()
                .into_iter()
                .filter(|&p| p != self.guard.pid() && p != self.pgid)
                .collect();
            for &p in &strays {
                // SAFETY: waitpid on a child of ours, with WNOHANG and no status pointer.
                unsafe {
                    libc::waitpid(p, std::ptr::null_mut(), libc::WNOHANG);
                }
            }
            let live: Vec<libc::pid_t> = strays.into_iter().filter(|&p| alive(p)).collect();
            if live.is_empty() {
                return;
            }
            if !warned {
                warned = true;
                out::warn(format_args!(
                    "redis-lease: the command left {} process(es) outside its group; stopping them",
                    live.len()
                ));
            }
            let late = start.elapsed() >= grace;
            for &p in &live {
                let sig = if late { libc::SIGKILL } else { libc::SIGTERM };
                if late || !termed.contains(&p) {
                    // SAFETY: kill takes plain integers; p is a child of ours.
                    unsafe {
                        libc::kill(p, sig);
                        libc::kill(p, libc::SIGCONT);
                    }
                    termed.push(p);
                }
            }
            if start.elapsed() >= grace + Duration::from_secs(1) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Whether CMD had the terminal's foreground: then a SIGINT that killed it was Ctrl-C.
    fn had_terminal(&self) -> bool {
        self.handed.get()
            || self
                .terminal
                .as_ref()
                .is_some_and(|t| t.foreground() == self.pgid)
    }

    /// Sends `sig`, then SIGCONT: a stopped CMD must run to act on it.
    fn deliver(&self, sig: libc::c_int) {
        self.signal(sig);
        self.signal(libc::SIGCONT);
    }

    /// CMD stopped with `sig`: behave as a shell's job would.
    fn on_stop(&self, sig: libc::c_int, held: &dyn Fn() -> bool) {
        let Some(t) = &self.terminal else {
            return;
        };
        match sig {
            // Ctrl-Z (or a background CMD that needs the terminal): give the terminal back to
            // the shell and stop, so that the shell shows the job stopped; on `fg` or `bg`,
            // continue CMD.
            libc::SIGTSTP | libc::SIGTTIN | libc::SIGTTOU => {
                let background_read = sig != libc::SIGTSTP && t.ours();
                if !background_read {
                    if t.foreground() == self.pgid {
                        t.take_back();
                    }
                    tty::stop_own_group();
                }
                if !held() {
                    return; // the lease lapsed meanwhile: the caller stops CMD
                }
                if t.ours() {
                    t.give(self.pgid);
                    self.handed.set(true);
                }
                self.signal(libc::SIGCONT);
            }
            // A SIGSTOP from someone else: theirs to undo.
            _ => {}
        }
    }

    /// Waits for CMD to end, forwarding SIGINT/SIGTERM/SIGHUP to it; stops it (SIGTERM, then
    /// SIGKILL after `grace`) if `lost` resolves. `held` tells whether the lease is still held.
    pub async fn supervise<L, R>(
        mut self,
        lost: L,
        held: &dyn Fn() -> bool,
        grace: Duration,
    ) -> Outcome
    where
        L: std::future::Future<Output = R>,
        R: std::fmt::Display,
    {
        let mut sigint = signal(SignalKind::interrupt()).ok();
        let mut sigterm = signal(SignalKind::terminate()).ok();
        let mut sighup = signal(SignalKind::hangup()).ok();
        let mut sigchld = signal(SignalKind::child()).ok();
        tokio::pin!(lost);
        let outcome = loop {
            tokio::select! {
                status = self.child.wait() => {
                    use std::os::unix::process::ExitStatusExt;
                    break match status {
                        Ok(st) if self.had_terminal() && st.signal() == Some(libc::SIGINT) => {
                            Outcome::Interrupted
                        }
                        Ok(st) => Outcome::Exited(exit_code(st)),
                        Err(_) => Outcome::Exited(EXIT_FAILURE),
                    };
                }
                what = &mut lost => {
                    self.stop_group(grace).await;
                    break Outcome::Lost(what.to_string());
                }
                _ = recv(&mut sigchld) => {
                    if let Some(sig) = tty::stopped(self.pgid) {
                        self.on_stop(sig, held);
                    }
                }
                _ = recv(&mut sigint) => self.deliver(libc::SIGINT),
                _ = recv(&mut sigterm) => self.deliver(libc::SIGTERM),
                _ = recv(&mut sighup) => self.deliver(libc::SIGHUP),
            }
        };
        if !matches!(outcome, Outcome::Lost(_)) && self.group_alive() {
            // CMD ended but left processes in its group: the lease covers them too, so they
            // are stopped before it is released.
            out::warn(format_args!(
                "redis-lease: the command left processes running in its group; stopping them"
            ));
            self.stop_group(grace).await;
        }
        self.stop_strays(grace).await;
        self.guard.disarm();
        if let Some(t) = &self.terminal {
            if t.foreground() == self.pgid {
                t.take_back();
            }
        }
        outcome
    }
}

/// The pids of this process's children, from `/proc` (their parent is us).
fn children() -> Vec<libc::pid_t> {
    // SAFETY: getpid cannot fail and touches no memory.
    let me = unsafe { libc::getpid() };
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<libc::pid_t>().ok())
        .filter(|&pid| parent_of(pid) == Some(me))
        .collect()
}

/// The parent of `pid` (`/proc/PID/stat`'s fourth field, after the parenthesised name).
fn parent_of(pid: libc::pid_t) -> Option<libc::pid_t> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// Whether `pid` runs (not a zombie).
fn alive(pid: libc::pid_t) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rfind(')')
            .and_then(|i| stat[i + 1..].split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X")
    })
}

async fn recv(s: &mut Option<Signal>) {
    match s {
        Some(s) => {
            s.recv().await;
        }
        None => std::future::pending().await,
    }
}

/// Ctrl-C at the terminal reached only CMD's process group, which had the foreground. Pass it
/// on to redis-lease's own group, which had the foreground before (a shell script that ran
/// redis-lease, the rest of a pipeline), and end by it: then a calling shell stops too, as it
/// would have without redis-lease in between, and its `$?` is 130.
pub fn die_of_sigint() -> ! {
    // SAFETY: restoring the default disposition and signalling our own process group
    // (pid 0) involve no memory.
    unsafe {
        libc::signal(libc::SIGINT, libc::SIG_DFL);
        libc::kill(0, libc::SIGINT);
    }
    std::process::exit(130)
}

/// Resolves with 128+N when redis-lease gets SIGINT, SIGTERM or SIGHUP (before CMD runs).
pub async fn terminated() -> u8 {
    let mut int = signal(SignalKind::interrupt()).ok();
    let mut term = signal(SignalKind::terminate()).ok();
    let mut hup = signal(SignalKind::hangup()).ok();
    tokio::select! {
        _ = recv(&mut int) => 128 + 2,
        _ = recv(&mut term) => 128 + 15,
        _ = recv(&mut hup) => 128 + 1,
    }
}
