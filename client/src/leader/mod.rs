//! Leader election (`LEADER.*`) and observation of who leads.

mod election;
mod elector;
mod info;
mod observer;
mod options;

pub use election::{Election, Leadership};
pub use elector::LeaderElector;
pub use info::ElectionInfo;
pub use observer::{LeaderInfo, LeaderObserver, ObserverOptions};
pub use options::ElectionOptions;

use crate::connection::Client;
use crate::error::Result;
use crate::retry::RetryPolicy;

impl Client {
    /// A candidate for the election on `key`, with a fresh UUIDv4 id and default options.
    ///
    /// ```no_run
    /// # async fn demo(client: redis_lease_client::Client) {
    /// let election = client.elector("scheduler").start();
    /// # }
    /// ```
    pub fn elector(&self, key: impl Into<String>) -> LeaderElector {
        LeaderElector::new(self, key)
    }

    /// Who leads the election on `key` (`LEADER.CURRENT`, with retries of transient failures).
    ///
    /// ```no_run
    /// # async fn demo(client: redis_lease_client::Client) -> redis_lease_client::Result<()> {
    /// match client.current_leader("jobs").await? {
    ///     Some(l) => println!("{} leads (term {})", l.candidate, l.term),
    ///     None => println!("nobody leads"),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn current_leader(&self, key: &str) -> Result<Option<LeaderInfo>> {
        let cmd = redis::cmd("LEADER.CURRENT").arg(key).to_owned();
        LeaderInfo::parse(self.query_retry(&cmd, None, RetryPolicy::default()).await?)
    }

    /// Follows who leads the election on `key` ([`LeaderObserver`]).
    ///
    /// ```no_run
    /// # async fn demo(client: redis_lease_client::Client) -> redis_lease_client::Result<()> {
    /// let mut obs = client.observe("jobs", Default::default()).await?;
    /// println!("{:?}", obs.changed().await?);
    /// # Ok(()) }
    /// ```
    pub async fn observe(&self, key: &str, opts: ObserverOptions) -> Result<LeaderObserver> {
        LeaderObserver::start_with(self, key, opts).await
    }
}
