//! Output that never panics: `println!` panics when stdout is a closed pipe
//! (`redis-lease leader --watch | head -1`). Here a closed reader ends the program quietly.

use std::io::Write;

/// Stdout is gone (its reader closed the pipe): nothing more can be shown.
#[derive(Debug)]
pub struct Closed;

/// Writes one line to stdout and flushes it (a watcher's lines must show up at once).
pub fn line(text: std::fmt::Arguments<'_>) -> Result<(), Closed> {
    let mut out = std::io::stdout().lock();
    out.write_fmt(text)
        .and_then(|()| out.write_all(b"\n"))
        .and_then(|()| out.flush())
        .map_err(|_| Closed)
}

/// Writes one line to stderr, ignoring failure (there is nowhere left to report it).
pub fn warn(text: std::fmt::Arguments<'_>) {
    let mut err = std::io::stderr().lock();
    let _ = err.write_fmt(text).and_then(|()| err.write_all(b"\n"));
}

/// Resolves when stdout is a pipe or socket whose reader went away (a watcher then ends at
/// once instead of at its next line); never for a terminal or a file.
pub async fn closed() {
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    std::thread::spawn(move || {
        if reader_gone() {
            let _ = tx.send(());
        }
    });
    if rx.await.is_err() {
        std::future::pending::<()>().await
    }
}

/// Blocks until stdout (a pipe or socket) reports an error or hang-up.
fn reader_gone() -> bool {
    // SAFETY: fstat and poll write only into the live locals passed to them.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        if libc::fstat(1, &mut st) != 0 {
            return false;
        }
        let kind = st.st_mode & libc::S_IFMT;
        if kind != libc::S_IFIFO && kind != libc::S_IFSOCK {
            return false;
        }
        let mut p = libc::pollfd {
            fd: 1,
            events: 0, // errors and hang-ups are reported whatever is asked for
            revents: 0,
        };
        loop {
            let r = libc::poll(&mut p, 1, -1);
            if r > 0 {
                return p.revents & (libc::POLLERR | libc::POLLHUP) != 0;
            }
            if r < 0 && std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
                return false;
            }
        }
    }
}

/// Shows the library's warnings (a renewal that failed, a lease lost, a grant too few replicas
/// acknowledged while an acquisition retries) on stderr as `redis-lease: <message>`.
pub fn show_library_warnings() {
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_max_level(tracing::Level::WARN)
        .event_format(MessageOnly)
        .try_init();
}

/// Formats an event as `redis-lease: <message>` (its structured fields are for programs).
struct MessageOnly;

impl<S, N> tracing_subscriber::fmt::FormatEvent<S, N> for MessageOnly
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    N: for<'a> tracing_subscriber::fmt::FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _ctx: &tracing_subscriber::fmt::FmtContext<'_, S, N>,
        mut w: tracing_subscriber::fmt::format::Writer<'_>,
        event: &tracing::Event<'_>,
    ) -> std::fmt::Result {
        struct Message<'a, 'w>(
            &'a mut tracing_subscriber::fmt::format::Writer<'w>,
            std::fmt::Result,
        );
        impl tracing::field::Visit for Message<'_, '_> {
            fn record_debug(&mut self, f: &tracing::field::Field, v: &dyn std::fmt::Debug) {
                if f.name() == "message" {
                    self.1 = write!(self.0, "{v:?}");
                }
            }
        }
        w.write_str("redis-lease: ")?;
        let mut m = Message(&mut w, Ok(()));
        event.record(&mut m);
        m.1?;
        writeln!(w)
    }
}
