//! A real pseudo-terminal for CLI tests: the child runs as a session leader with the pty as
//! its controlling terminal (so it is the terminal's foreground process group), and the test
//! types into the master side (`\x03` is Ctrl-C, `\x1a` Ctrl-Z: the line discipline turns
//! them into SIGINT / SIGTSTP for the foreground group) and reads what the terminal shows.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::FromRawFd;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command};
use std::sync::mpsc::{channel, Receiver};
use std::time::{Duration, Instant};

pub struct Pty {
    master: File,
    pub child: Child,
    output: Receiver<Vec<u8>>,
    seen: String,
}

impl Pty {
    /// Starts `cmd` on a new pty (stdin, stdout and stderr all on it).
    pub fn spawn(mut cmd: Command) -> Pty {
        let (mut m, mut s) = (0, 0);
        // SAFETY: openpty writes two fds into the live locals; the null pointers ask for
        // no name, default termios and default window size.
        let r = unsafe {
            libc::openpty(
                &mut m,
                &mut s,
                std::ptr::null_mut(),
                std::ptr::null(),
                std::ptr::null(),
            )
        };
        assert_eq!(r, 0, "openpty: {}", std::io::Error::last_os_error());
        // Not inherited by what other tests spawn meanwhile (the child gets the slave as its
        // stdio, which spawn dups).
        for fd in [m, s] {
            // SAFETY: fcntl on fds openpty just opened; FD_CLOEXEC is a plain flag.
            unsafe {
                libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
            }
        }
        // SAFETY: both fds were just opened by openpty and are owned by nobody else.
        let (master, slave) = unsafe { (File::from_raw_fd(m), File::from_raw_fd(s)) };
        cmd.stdin(slave.try_clone().unwrap())
            .stdout(slave.try_clone().unwrap())
            .stderr(slave.try_clone().unwrap());
        // SAFETY: setsid, ioctl and sigaction (through signal) are async-signal-safe; they
        // make the child a session leader whose controlling terminal is the pty on its stdin,
        // with the signal dispositions a terminal session starts with (a test run started in
        // the background of a shell inherits SIGINT and SIGQUIT ignored).
        unsafe {
            cmd.pre_exec(|| {
                for sig in [libc::SIGINT, libc::SIGQUIT, libc::SIGTSTP] {
                    libc::signal(sig, libc::SIG_DFL);
                }
                if libc::setsid() < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                if libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd.spawn().expect("spawn on the pty");
        drop(slave); // the master reads EOF/EIO once the child side is gone
        let mut reader = master.try_clone().unwrap();
        let (tx, output) = channel();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = reader.read(&mut buf) {
                if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                    break;
                }
            }
        });
        Pty {
            master,
            child,
            output,
            seen: String::new(),
        }
    }

    /// Types `bytes` at the terminal.
    pub fn send(&mut self, bytes: &[u8]) {
        self.master.write_all(bytes).unwrap();
        self.master.flush().unwrap();
    }

    /// Waits until the terminal has shown `needle` (answers false after `limit`).
    pub fn wait_for(&mut self, needle: &str, limit: Duration) -> bool {
        let start = Instant::now();
        loop {
            if self.seen.contains(needle) {
                return true;
            }
            let left = limit.saturating_sub(start.elapsed());
            if left.is_zero() {
                return false;
            }
            match self
                .output
                .recv_timeout(left.min(Duration::from_millis(50)))
            {
                Ok(bytes) => self.seen.push_str(&String::from_utf8_lossy(&bytes)),
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                    return self.seen.contains(needle)
                }
            }
        }
    }

    /// Everything the terminal showed so far.
    pub fn seen(&self) -> &str {
        &self.seen
    }

    /// Waits for the child to exit, killing it (by its pid) if it overruns `limit`.
    pub fn wait(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        let start = Instant::now();
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                return Some(st);
            }
            if start.elapsed() > limit {
                let _ = self.child.kill();
                let _ = self.child.wait();
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Pty {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
