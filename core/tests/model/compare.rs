//! The model-based property: the real core and the reference model, driven in lockstep by
//! the same operations, agree on every reply, every woken and timed-out waiter and the
//! visible state after every step.

use std::collections::HashMap;

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use redis_lease_core::{Acquire, HolderView, Mode};

use super::ops::{KindSel, Scenario};
use super::reference::{Cov, Model};
use super::sut::{name, Reply, Sut, WaiterRow};
use super::TestResult;
use crate::harness::START;

/// Maps model tokens to core tokens: the first time a model token is seen, the core's token must
/// be above every core token seen before; afterwards it must be the same core token.
#[derive(Default)]
pub struct TokenMap {
    map: HashMap<u64, u64>,
    last_real: u64,
}

impl TokenMap {
    fn check(&mut self, model: u64, real: u64) -> TestResult {
        match self.map.get(&model) {
            Some(&r) => prop_assert_eq!(r, real, "model token {} maps to {}", model, r),
            None => {
                prop_assert!(
                    real > self.last_real,
                    "new token {} (model {}) not above the last one {}",
                    real,
                    model,
                    self.last_real
                );
                self.last_real = real;
                self.map.insert(model, real);
            }
        }
        Ok(())
    }

    fn real(&self, model: u64) -> u64 {
        if model == 0 {
            return 0;
        }
        *self
            .map
            .get(&model)
            .expect("every model token was reported by a reply or a woken waiter")
    }

    fn reply(&mut self, model: Reply, real: Reply) -> TestResult {
        match (model, real) {
            (Reply::Acquire(Ok(Acquire::Granted(m))), Reply::Acquire(Ok(Acquire::Granted(r))))
            | (Reply::Token(Some(m)), Reply::Token(Some(r))) => self.check(m, r),
            (m, r) => {
                prop_assert_eq!(m, r, "reply");
                Ok(())
            }
        }
    }
}

/// A holder as both sides show it: owner, reads (permits), writes, deadline, token.
pub type HolderRow = (Vec<u8>, u32, u32, u64, u64);

pub fn real_holders<'a>(views: impl Iterator<Item = HolderView<'a>>) -> Vec<HolderRow> {
    let mut v: Vec<_> = views
        .map(|h| {
            (
                h.owner.to_vec(),
                h.hold.reads,
                h.hold.writes,
                h.hold.deadline,
                h.hold.token,
            )
        })
        .collect();
    v.sort();
    v
}

fn model_holders(m: &Model, map: &TokenMap) -> Vec<HolderRow> {
    let mut v: Vec<_> = m
        .holders
        .iter()
        .filter(|h| m.now < h.deadline)
        .map(|h| {
            (
                name(h.owner),
                h.reads,
                h.writes,
                h.deadline,
                map.real(h.token),
            )
        })
        .collect();
    v.sort();
    v
}

fn model_waiters(m: &Model) -> Vec<WaiterRow> {
    m.waiters
        .iter()
        .map(|w| {
            let row = (w.id, name(w.owner), w.mode, w.permits, w.ttl, w.until);
            (row.0, row.1, row.2, row.3, row.4, row.5, !w.gone)
        })
        .collect()
}

fn fail(ctx: &str) -> impl Fn(TestCaseError) -> TestCaseError + '_ {
    move |e| TestCaseError::fail(format!("{e} ({ctx})"))
}

/// Runs a scenario on both sides, comparing after every step; answers what the run reached.
pub fn run_against_model(kind: KindSel, s: &Scenario) -> Result<Cov, TestCaseError> {
    let mut sut = Sut::new(kind, s.limit);
    let mut model = Model::new(kind, START);
    let mut map = TokenMap::default();
    for (step, op) in s.ops.iter().enumerate() {
        let act = sut.resolve(op);
        let real = sut.act(&act);
        let (m_reply, m_out) = model.act(&act);
        let ctx = format!("step {step}: {act:?}");
        if let Some((r_reply, changes)) = &real {
            // Woken waiters first: they are served before the request itself is decided.
            let r_ids: Vec<u64> = changes.woken.iter().map(|w| w.waiter).collect();
            let m_ids: Vec<u64> = m_out.woken.iter().map(|w| w.0).collect();
            prop_assert_eq!(&r_ids, &m_ids, "woken ids at {}", ctx);
            for (w, m) in changes.woken.iter().zip(&m_out.woken) {
                map.check(m.1, w.token).map_err(fail(&ctx))?;
            }
            prop_assert_eq!(&changes.timed_out, &m_out.timed_out, "timed out at {}", ctx);
            map.reply(m_reply, *r_reply).map_err(fail(&ctx))?;
        } else {
            prop_assert!(m_out.woken.is_empty() && m_out.timed_out.is_empty());
        }
        prop_assert_eq!(sut.world.now, model.now);
        let lock = sut.key.lock();
        let now = sut.world.now;
        prop_assert_eq!(
            real_holders(lock.live_holders(now)),
            model_holders(&model, &map),
            "live holders after {}",
            ctx
        );
        prop_assert_eq!(
            sut.waiters(),
            model_waiters(&model),
            "waiters after {}",
            ctx
        );
        let live = model.holders.iter().filter(|h| now < h.deadline);
        let m_mode = live.fold(None, |m, h| match (m, h.writes > 0) {
            (_, true) | (Some(Mode::Write), _) => Some(Mode::Write),
            _ => Some(Mode::Read),
        });
        prop_assert_eq!(lock.mode(now), m_mode, "mode after {}", ctx);
        if act.is_core_op() {
            prop_assert_eq!(lock.is_empty(), model.is_empty(), "is_empty after {}", ctx);
            prop_assert_eq!(lock.holder_count(), model.holders.len(), "after {}", ctx);
            prop_assert_eq!(lock.waiter_count(), model.waiters.len(), "after {}", ctx);
            prop_assert_eq!(lock.last_token(), map.real(model.key_last), "after {}", ctx);
            if kind == KindSel::Sem {
                prop_assert_eq!(lock.limit(), model.limit, "limit after {}", ctx);
                prop_assert_eq!(lock.permits_used(), model.used(), "used after {}", ctx);
            }
            if s.reset && sut.reset_if_empty() {
                model.reset();
            }
        }
    }
    Ok(model.cov)
}
