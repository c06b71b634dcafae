//! What `LEADER.INFO` tells: the leader, the candidates waiting behind it.

use redis::Value;

use super::LeaderInfo;
use crate::connection::Client;
use crate::error::{Error, Result};
use crate::queue_info::{self, Waiting};
use crate::reply;
use crate::retry::RetryPolicy;

/// The reply of `LEADER.INFO`.
///
/// ```no_run
/// # async fn demo(client: redis_lease_client::Client) -> redis_lease_client::Result<()> {
/// let info = client.election_info("jobs").await?;
/// if let Some(l) = &info.leader { println!("{} leads, term {}", l.candidate, l.term); }
/// for w in &info.queue { println!("{} waits since {:?}", w.owner, w.waited); }
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct ElectionInfo {
    /// `None` when nobody leads.
    pub leader: Option<LeaderInfo>,
    /// The waiting candidates, in queue order (at most 100).
    pub queue: Vec<Waiting>,
    /// How many candidates wait.
    pub waiters: u64,
}

impl ElectionInfo {
    pub(crate) fn parse(v: Value) -> Result<ElectionInfo> {
        let bad = |what: &str| Error::Protocol(format!("LEADER.INFO: {what}"));
        let mut info = ElectionInfo::default();
        for (k, v) in reply::map(v).ok_or_else(|| bad("not a map"))? {
            match k.as_str() {
                "leader" if v == Value::Nil => info.leader = None,
                "leader" => {
                    let mut l = LeaderInfo {
                        candidate: String::new(),
                        term: 0,
                        ttl: Default::default(),
                    };
                    for (lk, lv) in reply::map(v).ok_or_else(|| bad("leader"))? {
                        match lk.as_str() {
                            "candidate" => l.candidate = reply::text(&lv).unwrap_or_default(),
                            "term" => l.term = reply::token(&lv)?,
                            "ttl" => {
                                let ms = reply::int(&lv).unwrap_or(0).max(0) as u64;
                                l.ttl = std::time::Duration::from_millis(ms);
                            }
                            _ => {}
                        }
                    }
                    info.leader = Some(l);
                }
                "queue" => info.queue = queue_info::parse(v, "LEADER.INFO")?,
                "waiters" => info.waiters = reply::int(&v).unwrap_or(0).max(0) as u64,
                _ => {}
            }
        }
        Ok(info)
    }
}

impl Client {
    /// The leader and the waiting candidates of the election on `key` (`LEADER.INFO`, with
    /// retries of transient failures).
    pub async fn election_info(&self, key: &str) -> Result<ElectionInfo> {
        let cmd = redis::cmd("LEADER.INFO").arg(key).to_owned();
        ElectionInfo::parse(self.query_retry(&cmd, None, RetryPolicy::default()).await?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn a_leader_and_its_queue_or_nobody() {
        let v = Value::Map(vec![
            (
                bulk("leader"),
                Value::Map(vec![
                    (bulk("candidate"), bulk("a")),
                    (bulk("term"), Value::Int(9)),
                    (bulk("ttl"), Value::Int(800)),
                ]),
            ),
            (
                bulk("queue"),
                Value::Array(vec![Value::Array(vec![
                    bulk("candidate"),
                    bulk("b"),
                    bulk("waited"),
                    Value::Int(5),
                    bulk("left"),
                    Value::Int(-1),
                ])]),
            ),
            (bulk("waiters"), Value::Int(1)),
        ]);
        let i = ElectionInfo::parse(v).unwrap();
        let l = i.leader.unwrap();
        assert_eq!((l.candidate.as_str(), l.term), ("a", 9));
        assert_eq!(i.queue[0].owner, "b");
        assert_eq!(i.queue[0].left, None);
        assert_eq!(i.waiters, 1);
        let none = Value::Array(vec![
            bulk("leader"),
            Value::Nil,
            bulk("queue"),
            Value::Array(vec![]),
            bulk("waiters"),
            Value::Int(0),
        ]);
        assert_eq!(ElectionInfo::parse(none).unwrap(), ElectionInfo::default());
    }
}
