//! A minimal RESP2 client over a raw tokio `TcpStream`.
//!
//! The pipelined throughput scenarios and the 10,000-waiter scenario use it instead of the
//! `redis` crate so that the load generator costs as little CPU as possible (the machine has
//! two cores, one of which the server needs): commands are encoded once, up front, and replies
//! are parsed without allocating unless they are bulk strings or errors.

use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::BenchResult;

/// One reply, as much of it as the harness needs.
#[derive(Clone, Debug, PartialEq)]
pub enum Reply {
    Int(i64),
    Nil,
    Status(String),
    Bulk(Vec<u8>),
    Error(String),
    Array(Vec<Reply>),
}

impl Reply {
    /// A grant: an integer token >= 1 (the module) or 1 (the baseline scripts), or `+OK`
    /// (`SET NX PX`).
    pub fn is_grant(&self) -> bool {
        match self {
            Reply::Int(n) => *n >= 1,
            Reply::Status(s) => s == "OK",
            _ => false,
        }
    }
}

/// Encodes one command as a RESP array of bulk strings.
pub fn encode(args: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::with_capacity(16 + args.iter().map(|a| a.len() + 16).sum::<usize>());
    out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// Encodes a command given as strings.
pub fn encode_str(args: &[&str]) -> Vec<u8> {
    let v: Vec<&[u8]> = args.iter().map(|s| s.as_bytes()).collect();
    encode(&v)
}

/// A raw connection with a read buffer.
pub struct RawConn {
    stream: TcpStream,
    buf: Vec<u8>,
    start: usize,
    end: usize,
}

impl RawConn {
    pub async fn connect(port: u16, timeout: Duration) -> BenchResult<RawConn> {
        let stream = tokio::time::timeout(timeout, TcpStream::connect(("127.0.0.1", port)))
            .await
            .map_err(|_| format!("connect to 127.0.0.1:{port} timed out"))??;
        stream.set_nodelay(true)?;
        Ok(RawConn {
            stream,
            buf: vec![0; 64 * 1024],
            start: 0,
            end: 0,
        })
    }

    pub async fn send(&mut self, bytes: &[u8]) -> BenchResult<()> {
        self.stream.write_all(bytes).await?;
        Ok(())
    }

    /// Reads one complete reply.
    pub async fn read_reply(&mut self) -> BenchResult<Reply> {
        loop {
            if self.start < self.end {
                if let Some((reply, used)) = parse(&self.buf[self.start..self.end])? {
                    self.start += used;
                    if self.start == self.end {
                        self.start = 0;
                        self.end = 0;
                    }
                    return Ok(reply);
                }
            }
            // Need more bytes: compact, grow if full, read.
            if self.start > 0 {
                self.buf.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
            }
            if self.end == self.buf.len() {
                let n = self.buf.len() * 2;
                self.buf.resize(n, 0);
            }
            let n = self.stream.read(&mut self.buf[self.end..]).await?;
            if n == 0 {
                return Err("connection closed by the server".into());
            }
            self.end += n;
        }
    }

    /// Reads one reply, giving up after `limit`.
    pub async fn read_reply_within(&mut self, limit: Duration) -> BenchResult<Reply> {
        tokio::time::timeout(limit, self.read_reply())
            .await
            .map_err(|_| format!("no reply within {limit:?}"))?
    }

    /// Sends one command and reads its reply (bounded by `limit`).
    pub async fn call(&mut self, args: &[&str], limit: Duration) -> BenchResult<Reply> {
        self.send(&encode_str(args)).await?;
        self.read_reply_within(limit).await
    }
}

fn find_crlf(b: &[u8]) -> Option<usize> {
    b.windows(2).position(|w| w == b"\r\n")
}

fn parse_int(b: &[u8]) -> BenchResult<i64> {
    std::str::from_utf8(b)?
        .parse::<i64>()
        .map_err(|e| format!("bad integer in reply: {e}").into())
}

/// Parses one reply from the front of `b`: `None` if incomplete, else the reply and the
/// number of bytes it used.
pub fn parse(b: &[u8]) -> BenchResult<Option<(Reply, usize)>> {
    if b.is_empty() {
        return Ok(None);
    }
    let Some(eol) = find_crlf(b) else {
        return Ok(None);
    };
    let line = &b[1..eol];
    let after = eol + 2;
    match b[0] {
        b':' => Ok(Some((Reply::Int(parse_int(line)?), after))),
        b'+' => Ok(Some((
            Reply::Status(String::from_utf8_lossy(line).into_owned()),
            after,
        ))),
        b'-' => Ok(Some((
            Reply::Error(String::from_utf8_lossy(line).into_owned()),
            after,
        ))),
        b'_' => Ok(Some((Reply::Nil, after))),
        b'$' => {
            let n = parse_int(line)?;
            if n < 0 {
                return Ok(Some((Reply::Nil, after)));
            }
            let n = n as usize;
            if b.len() < after + n + 2 {
                return Ok(None);
            }
            Ok(Some((
                Reply::Bulk(b[after..after + n].to_vec()),
                after + n + 2,
            )))
        }
        b'*' => {
            let n = parse_int(line)?;
            if n < 0 {
                return Ok(Some((Reply::Nil, after)));
            }
            let mut items = Vec::with_capacity(n as usize);
            let mut pos = after;
            for _ in 0..n {
                match parse(&b[pos..])? {
                    Some((r, used)) => {
                        items.push(r);
                        pos += used;
                    }
                    None => return Ok(None),
                }
            }
            Ok(Some((Reply::Array(items), pos)))
        }
        other => Err(format!("unexpected reply type byte {other:#x}").into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_replies() {
        assert_eq!(parse(b":12\r\n").unwrap(), Some((Reply::Int(12), 5)));
        assert_eq!(parse(b"$-1\r\n").unwrap(), Some((Reply::Nil, 5)));
        assert_eq!(parse(b"$3\r\nabc\r\n").unwrap().unwrap().1, 9);
        assert_eq!(parse(b"$3\r\nab").unwrap(), None);
        assert_eq!(
            parse(b"*2\r\n:1\r\n$-1\r\n").unwrap(),
            Some((Reply::Array(vec![Reply::Int(1), Reply::Nil]), 13))
        );
        assert_eq!(parse(b"*2\r\n:1\r\n").unwrap(), None);
        assert!(matches!(
            parse(b"-ERR x\r\n").unwrap(),
            Some((Reply::Error(_), 8))
        ));
        assert_eq!(
            encode_str(&["GET", "k"]),
            b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n".to_vec()
        );
    }
}
