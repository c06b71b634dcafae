//! A server's append-only files (Redis 7 multi-part AOF) and the commands in them.

use std::path::PathBuf;

use crate::server::Server;

/// Every file of the server's AOF directory, by file name.
pub fn aof_files(s: &Server) -> Vec<(String, Vec<u8>)> {
    let dir = s.dir().join("appendonlydir");
    let mut out = Vec::new();
    for e in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let e = e.unwrap();
        let name = e.file_name().to_string_lossy().into_owned();
        out.push((name, std::fs::read(e.path()).unwrap()));
    }
    out.sort();
    out
}

/// The incremental AOF file the server appends to (from the manifest).
pub fn aof_incr_path(s: &Server) -> PathBuf {
    let dir = s.dir().join("appendonlydir");
    let manifest = std::fs::read_to_string(dir.join("appendonly.aof.manifest")).expect("manifest");
    let name = manifest
        .lines()
        .rev()
        .filter(|l| l.contains("type i"))
        .find_map(|l| l.split_whitespace().nth(1))
        .expect("an incr file in the manifest")
        .to_string();
    dir.join(name)
}

/// Whether `hay` contains `needle`.
pub fn contains(hay: &[u8], needle: &str) -> bool {
    hay.windows(needle.len()).any(|w| w == needle.as_bytes())
}

/// The commands of an AOF file in RESP form (an RDB preamble, if any, is skipped; a torn last
/// command is left out).
pub fn parse_aof(bytes: &[u8]) -> Vec<Vec<String>> {
    let mut cmds = Vec::new();
    let mut i = match bytes.iter().position(|&b| b == b'*') {
        Some(p) if !bytes.starts_with(b"REDIS") => p,
        _ => return cmds,
    };
    let line = |i: &mut usize| -> Option<String> {
        let end = bytes[*i..].windows(2).position(|w| w == b"\r\n")? + *i;
        let s = String::from_utf8_lossy(&bytes[*i..end]).into_owned();
        *i = end + 2;
        Some(s)
    };
    while i < bytes.len() {
        let Some(head) = line(&mut i) else { break };
        let Some(n) = head.strip_prefix('*').and_then(|n| n.parse::<usize>().ok()) else {
            break;
        };
        let mut cmd = Vec::with_capacity(n);
        for _ in 0..n {
            let Some(len) = line(&mut i)
                .and_then(|l| l.strip_prefix('$').and_then(|n| n.parse::<usize>().ok()))
            else {
                return cmds;
            };
            if i + len + 2 > bytes.len() {
                return cmds;
            }
            cmd.push(String::from_utf8_lossy(&bytes[i..i + len]).into_owned());
            i += len + 2;
        }
        cmds.push(cmd);
    }
    cmds
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::raw::resp;

    #[test]
    fn parse_aof_reads_back_what_resp_wrote_and_drops_a_torn_tail() {
        let mut bytes = resp(&["SELECT", "0"]);
        bytes.extend(resp(&["LEASE.APPLY", "k", "GRANT"]));
        bytes.extend(b"*2\r\n$3\r\nDEL");
        assert_eq!(
            parse_aof(&bytes),
            vec![vec!["SELECT", "0"], vec!["LEASE.APPLY", "k", "GRANT"]]
        );
        assert!(contains(&bytes, "LEASE.APPLY"));
    }
}
