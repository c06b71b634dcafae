//! A raw RESP2 client on a plain `TcpStream`: no retry, no reconnect, no pooling, so a reply
//! the server never sends stays missing and fails the test (`Sock::reply`) instead of being
//! hidden by a client library. Arguments and replies are bytes (owners and keys are binary).

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// How long `Sock::reply` waits for a reply before failing.
pub const REPLY_LIMIT: Duration = Duration::from_secs(5);

/// How much longer a reply that missed its limit is waited for, to tell "late" from "lost" in
/// the failure message.
const LATE_LIMIT: Duration = Duration::from_secs(20);

/// A RESP2 reply (a push of RESP3 is not spoken: connections stay on RESP2). Its `Debug`
/// form shows bulk strings as escaped text, for failure messages.
#[derive(Clone, PartialEq, Eq)]
pub enum Resp {
    Simple(String),
    Error(String),
    Int(i64),
    Bulk(Vec<u8>),
    /// A nil bulk string or a nil array.
    Nil,
    Array(Vec<Resp>),
}

impl std::fmt::Debug for Resp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Resp::Simple(s) => write!(f, "+{s}"),
            Resp::Error(e) => write!(f, "-{e}"),
            Resp::Int(n) => write!(f, ":{n}"),
            Resp::Bulk(b) => write!(f, "\"{}\"", b.escape_ascii()),
            Resp::Nil => write!(f, "nil"),
            Resp::Array(a) => f.debug_list().entries(a).finish(),
        }
    }
}

impl Resp {
    pub fn is_nil(&self) -> bool {
        matches!(self, Resp::Nil)
    }

    /// An integer reply; panics with the reply otherwise.
    pub fn int(&self) -> i64 {
        match self {
            Resp::Int(n) => *n,
            other => panic!("expected an integer reply, got {other:?}"),
        }
    }

    /// A bulk or status reply's bytes; panics otherwise.
    pub fn bytes(&self) -> &[u8] {
        match self {
            Resp::Bulk(b) => b,
            Resp::Simple(s) => s.as_bytes(),
            other => panic!("expected a string reply, got {other:?}"),
        }
    }

    pub fn array(&self) -> &[Resp] {
        match self {
            Resp::Array(a) => a,
            other => panic!("expected an array reply, got {other:?}"),
        }
    }

    /// The text of an error reply; panics otherwise.
    pub fn err(&self) -> &str {
        match self {
            Resp::Error(e) => e,
            other => panic!("expected an error reply, got {other:?}"),
        }
    }

    /// A RESP2 map (a flat field/value array): the value of `field`, if any.
    pub fn get(&self, field: &str) -> Option<&Resp> {
        self.array()
            .chunks(2)
            .find(|p| {
                matches!(&p[0], Resp::Bulk(b) if b == field.as_bytes())
                    || matches!(&p[0], Resp::Simple(s) if s == field)
            })
            .map(|p| &p[1])
    }
}

/// A command as RESP2 bytes (an array of bulk strings).
pub fn encode(args: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// Parses one reply at the start of `buf`: the reply and the bytes it took, `Ok(None)` if
/// `buf` holds only part of one, `Err` if it is not RESP2.
pub fn parse(buf: &[u8]) -> Result<Option<(Resp, usize)>, String> {
    let Some(end) = buf.windows(2).position(|w| w == b"\r\n") else {
        return Ok(None);
    };
    if end == 0 {
        return Err("empty reply line".into());
    }
    let line = &buf[1..end];
    let text = || String::from_utf8_lossy(line).into_owned();
    let num = || -> Result<i64, String> {
        std::str::from_utf8(line)
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| format!("bad number {:?}", text()))
    };
    let after = end + 2;
    match buf[0] {
        b'+' => Ok(Some((Resp::Simple(text()), after))),
        b'-' => Ok(Some((Resp::Error(text()), after))),
        b':' => Ok(Some((Resp::Int(num()?), after))),
        b'$' => {
            let n = num()?;
            if n < 0 {
                return Ok(Some((Resp::Nil, after)));
            }
            let n = n as usize;
            if buf.len() < after + n + 2 {
                return Ok(None);
            }
            if &buf[after + n..after + n + 2] != b"\r\n" {
                return Err("bulk string not ended by CRLF".into());
            }
            Ok(Some((
                Resp::Bulk(buf[after..after + n].to_vec()),
                after + n + 2,
            )))
        }
        b'*' => {
            let n = num()?;
            if n < 0 {
                return Ok(Some((Resp::Nil, after)));
            }
            let mut at = after;
            let mut items = Vec::with_capacity(n.min(1024) as usize);
            for _ in 0..n {
                match parse(&buf[at..])? {
                    Some((item, used)) => {
                        items.push(item);
                        at += used;
                    }
                    None => return Ok(None),
                }
            }
            Ok(Some((Resp::Array(items), at)))
        }
        other => Err(format!("unknown reply type byte {other:#04x}")),
    }
}

/// A connection: commands go out as written, replies are read with a time limit.
pub struct Sock {
    stream: TcpStream,
    buf: Vec<u8>,
    pub port: u16,
}

impl Sock {
    /// Connects to 127.0.0.1:`port` (Nagle off, so a command leaves at once).
    pub fn connect(port: u16) -> Sock {
        let stream = TcpStream::connect(("127.0.0.1", port))
            .unwrap_or_else(|e| panic!("connect to 127.0.0.1:{port}: {e}"));
        stream.set_nodelay(true).expect("nodelay");
        Sock {
            stream,
            buf: Vec::new(),
            port,
        }
    }

    /// Writes one command (does not read its reply).
    pub fn send(&mut self, args: &[&[u8]]) {
        self.stream
            .write_all(&encode(args))
            .unwrap_or_else(|e| panic!("send {:?}: {e}", show(args)));
    }

    /// Writes raw bytes (several commands at once, for a pipeline).
    pub fn send_raw(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).expect("send");
    }

    /// The next reply, if one arrives within `limit`; `Err` if the connection closed or
    /// broke (with what was read so far).
    pub fn try_reply(&mut self, limit: Duration) -> Result<Option<Resp>, String> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some((r, used)) = parse(&self.buf)? {
                self.buf.drain(..used);
                return Ok(Some(r));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(None);
            }
            self.stream
                .set_read_timeout(Some(left))
                .map_err(|e| e.to_string())?;
            let mut chunk = [0u8; 64 * 1024];
            match self.stream.read(&mut chunk) {
                Ok(0) => {
                    return Err(format!(
                        "connection closed by the server ({} bytes unparsed)",
                        self.buf.len()
                    ))
                }
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(format!("read: {e}")),
            }
        }
    }

    /// The next reply; panics if none arrives within `REPLY_LIMIT` (`what` names the
    /// request in the message).
    pub fn reply(&mut self, what: &str) -> Resp {
        self.reply_within(REPLY_LIMIT, what)
    }

    pub fn reply_within(&mut self, limit: Duration, what: &str) -> Resp {
        match self.try_reply(limit) {
            Ok(Some(r)) => r,
            Ok(None) => {
                // Tell a reply that was lost from one that came late (a server stalled, say
                // on a busy disk), and show what the server saw.
                let late = Instant::now();
                let clients = clients_of(self.port);
                let then = match self.try_reply(LATE_LIMIT) {
                    Ok(Some(r)) => format!("{r:?} came {:?} after the limit", late.elapsed()),
                    Ok(None) => format!("still nothing {LATE_LIMIT:?} after the limit"),
                    Err(e) => e,
                };
                panic!(
                    "no reply within {limit:?} to {what} (port {}): {then}.\nThe server's clients \
                     at the limit:\n{clients}\n{}",
                    self.port,
                    stall_evidence(self.port)
                )
            }
            Err(e) => panic!("{what} (port {}): {e}", self.port),
        }
    }

    /// Sends a command and reads its reply.
    pub fn call(&mut self, args: &[&[u8]]) -> Resp {
        self.send(args);
        self.reply(&show(args))
    }

    /// `call` with text arguments.
    pub fn cmd(&mut self, args: &[&str]) -> Resp {
        let a: Vec<&[u8]> = args.iter().map(|s| s.as_bytes()).collect();
        self.call(&a)
    }

    /// `send` with text arguments (a request left to park; its reply read later).
    pub fn send_text(&mut self, args: &[&str]) {
        let a: Vec<&[u8]> = args.iter().map(|s| s.as_bytes()).collect();
        self.send(&a);
    }

    /// Writes several commands in one write, so the server reads them in one turn of its
    /// event loop; their replies are read with `reply`.
    pub fn send_pipeline(&mut self, commands: &[&[&str]]) {
        let mut pipe = Vec::new();
        for args in commands {
            let a: Vec<&[u8]> = args.iter().map(|s| s.as_bytes()).collect();
            pipe.extend(encode(&a));
        }
        self.send_raw(&pipe);
    }

    /// One integer field of `INFO lease`.
    pub fn lease_int(&mut self, field: &str) -> i64 {
        let i = self.cmd(&["INFO", "lease"]);
        let t = String::from_utf8_lossy(i.bytes()).into_owned();
        t.lines()
            .find_map(|l| l.strip_prefix(&format!("{field}:")))
            .and_then(|v| v.trim().parse::<i64>().ok())
            .unwrap_or_else(|| panic!("INFO lease has no {field}"))
    }

    /// The owners listed under `field` (`holders` or `queue`) of `RWLOCK.INFO key`, in order.
    pub fn owners(&mut self, key: &str, field: &str) -> Vec<String> {
        let info = self.cmd(&["RWLOCK.INFO", key]);
        info.get(field)
            .map(|l| {
                l.array()
                    .iter()
                    .map(|e| {
                        let owner = e.get("owner").expect("an owner");
                        String::from_utf8_lossy(owner.bytes()).into_owned()
                    })
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// A connection of its own to the server at `port`, for a failure message (`None` if it
/// takes none).
fn aside(port: u16) -> Option<Sock> {
    let stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    Some(Sock {
        stream,
        buf: Vec::new(),
        port,
    })
}

impl Sock {
    /// A command's reply within 2 s, or `None` (for a failure message).
    fn ask(&mut self, args: &[&[u8]]) -> Option<Resp> {
        self.send(args);
        self.try_reply(Duration::from_secs(2)).ok().flatten()
    }
}

/// `CLIENT LIST` of the server at `port`, asked on a connection of its own (for a failure
/// message: which client waits, blocked or with unread input).
fn clients_of(port: u16) -> String {
    match aside(port).map(|mut c| c.ask(&[b"CLIENT", b"LIST"])) {
        None => "(no connection)".into(),
        Some(Some(Resp::Bulk(b))) => String::from_utf8_lossy(&b).into_owned(),
        Some(other) => format!("{other:?}"),
    }
}

/// What a server can say about a stall (for a failure message): its AOF's delayed fsyncs,
/// its latency events and the end of its log.
fn stall_evidence(port: u16) -> String {
    let Some(mut c) = aside(port) else {
        return "(no connection)".into();
    };
    let persistence = match c.ask(&[b"INFO", b"persistence"]) {
        Some(Resp::Bulk(b)) => String::from_utf8_lossy(&b)
            .lines()
            .filter(|l| l.starts_with("aof_delayed_fsync") || l.starts_with("aof_last_write"))
            .collect::<Vec<_>>()
            .join(" "),
        other => format!("{other:?}"),
    };
    let latency = c.ask(&[b"LATENCY", b"LATEST"]);
    let log = match c.ask(&[b"CONFIG", b"GET", b"dir"]) {
        Some(Resp::Array(a)) if a.len() == 2 => match &a[1] {
            Resp::Bulk(dir) => {
                let path = std::path::Path::new(&*String::from_utf8_lossy(dir)).join("redis.log");
                let text = match std::fs::read(&path) {
                    Ok(b) => String::from_utf8_lossy(&b).into_owned(),
                    Err(e) => format!("{}: {e}", path.display()),
                };
                let lines: Vec<&str> = text.lines().collect();
                lines[lines.len().saturating_sub(15)..].join("\n")
            }
            other => format!("{other:?}"),
        },
        other => format!("{other:?}"),
    };
    format!(
        "INFO persistence: {persistence}\nLATENCY LATEST: {latency:?}\nthe end of its log:\n{log}"
    )
}

/// A command for a failure message (bytes escaped).
pub fn show(args: &[&[u8]]) -> String {
    args.iter()
        .map(|a| a.escape_ascii().to_string())
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_reply_kind_and_waits_for_partial_ones() {
        let wire = b"+OK\r\n-ERR x y\r\n:42\r\n$3\r\na\0b\r\n$-1\r\n*2\r\n:1\r\n*-1\r\n";
        let mut at = 0;
        let mut got = Vec::new();
        while let Some((r, used)) = parse(&wire[at..]).unwrap() {
            got.push(r);
            at += used;
        }
        assert_eq!(at, wire.len());
        assert_eq!(
            got,
            vec![
                Resp::Simple("OK".into()),
                Resp::Error("ERR x y".into()),
                Resp::Int(42),
                Resp::Bulk(b"a\0b".to_vec()),
                Resp::Nil,
                Resp::Array(vec![Resp::Int(1), Resp::Nil]),
            ]
        );
        // Any cut short of the whole reply is "not yet".
        let whole = b"*2\r\n$6\r\nab\r\ncd\r\n:7\r\n";
        for cut in 0..whole.len() {
            assert_eq!(parse(&whole[..cut]).unwrap(), None, "cut at {cut}");
        }
        let (r, used) = parse(whole).unwrap().unwrap();
        assert_eq!(used, whole.len());
        assert_eq!(r.array()[0].bytes(), b"ab\r\ncd");
        assert!(parse(b"?x\r\n").is_err());
    }

    #[test]
    fn encodes_binary_arguments_by_length() {
        assert_eq!(
            encode(&[b"GET", b"a\r\n\0"]),
            b"*2\r\n$3\r\nGET\r\n$4\r\na\r\n\0\r\n".to_vec()
        );
    }

    #[test]
    fn map_fields_are_found_by_name() {
        let m = Resp::Array(vec![
            Resp::Bulk(b"mode".to_vec()),
            Resp::Simple("write".into()),
            Resp::Bulk(b"token".to_vec()),
            Resp::Int(5),
        ]);
        assert_eq!(m.get("token"), Some(&Resp::Int(5)));
        assert_eq!(m.get("mode").unwrap().bytes(), b"write");
        assert_eq!(m.get("none"), None);
        assert_eq!(format!("{m:?}"), r#"["mode", +write, "token", :5]"#);
        assert_eq!(
            format!("{:?}", Resp::Bulk(b"a\0\xff".to_vec())),
            r#""a\x00\xff""#
        );
    }
}
