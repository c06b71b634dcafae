//! Commands as raw replies: `r!` runs one and answers its `Value` (an error reply is
//! `Value::ServerError`, not a Rust error), `send!` only sends it (for requests that park in
//! the server; `recv` reads the reply later).

use redis::{Cmd, Connection, ConnectionLike, Value};

/// Runs a command and answers its raw reply; panics on an I/O error (a read timeout included).
/// `r!(conn, "RWLOCK.RLOCK", "k", "owner", 1000)`.
#[macro_export]
macro_rules! r {
    ($c:expr, $name:expr $(, $a:expr)* $(,)?) => {{
        #[allow(unused_mut)]
        let mut cmd = $crate::redis::cmd($name);
        $( cmd.arg($a); )*
        use $crate::raw::Exec as _;
        $c.exec_cmd(&cmd)
    }};
}

/// Sends a command without reading its reply.
#[macro_export]
macro_rules! send {
    ($c:expr, $name:expr $(, $a:expr)* $(,)?) => {{
        #[allow(unused_mut)]
        let mut cmd = $crate::redis::cmd($name);
        $( cmd.arg($a); )*
        use $crate::raw::Exec as _;
        $c.send_cmd(&cmd)
    }};
}

/// What `r!` and `send!` call (method syntax, so both a `Connection` and a `&mut Connection`
/// work).
pub trait Exec {
    fn exec_cmd(&mut self, cmd: &Cmd) -> Value;
    fn send_cmd(&mut self, cmd: &Cmd);
}

impl Exec for Connection {
    fn exec_cmd(&mut self, cmd: &Cmd) -> Value {
        self.req_packed_command(&cmd.get_packed_command())
            .unwrap_or_else(|e| panic!("I/O error: {e}"))
    }

    fn send_cmd(&mut self, cmd: &Cmd) {
        self.send_packed_command(&cmd.get_packed_command())
            .expect("send");
    }
}

/// The next reply on a connection that `send!` was used on.
pub fn recv(c: &mut Connection) -> Value {
    c.recv_response().expect("recv")
}

/// Runs an argument vector of raw bytes.
pub fn exec_args(c: &mut Connection, args: &[Vec<u8>]) -> redis::RedisResult<Value> {
    let mut cmd = Cmd::new();
    for a in args {
        cmd.arg(a.as_slice());
    }
    c.req_packed_command(&cmd.get_packed_command())
}

/// A command in RESP, as a client sends it and an AOF stores it.
pub fn resp(args: &[&str]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(format!("${}\r\n{}\r\n", a.len(), a).as_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resp_frames_each_argument_with_its_length() {
        assert_eq!(
            resp(&["GET", "k"]),
            b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n".to_vec()
        );
    }
}
