//! Holds that ended, as the server that decided them saw them: with `lease.log-lapses` a
//! notice line per lapse (their hold times go into `INFO lease` where `commit` counts the
//! effects).

use redis_lease_core::{Changes, DropReason, Effect};

use crate::ffi::ctx::{log, Ctx};
use crate::ffi::string::RStr;
use crate::{config, text};

/// Logs the lapses among the holds `changes` ended on `key`.
#[inline]
pub fn log_lapses(ctx: &Ctx, key: RStr, changes: &Changes) {
    // The common case (a give-back, or nothing ended) looks at the effects only.
    let lapse = |e: &Effect| {
        matches!(
            e,
            Effect::Drop {
                reason: DropReason::Lapse,
                ..
            }
        )
    };
    if !changes.ended.is_empty() && changes.effects.iter().any(lapse) {
        log_each(ctx, key, changes);
    }
}

#[inline(never)]
fn log_each(ctx: &Ctx, key: RStr, changes: &Changes) {
    for e in &changes.ended {
        if let Some(Effect::Drop {
            owner,
            reason: DropReason::Lapse,
        }) = changes.effects.get(e.effect as usize)
        {
            let line = lapse_line(key.bytes(), &owner.bytes(), e.held_ms, changes);
            if config::log_lapses() {
                log(Some(ctx), c"notice", &line);
            } else {
                // Off, a lapse is still worth a line when debugging.
                ctx.log_verbose(&line);
            }
        }
    }
}

/// `lease: lapse key='k' owner='o' held_ms=N served=yes|no`: bytes escaped, so no byte of a
/// key or an owner can break or forge a line.
fn lapse_line(key: &[u8], owner: &[u8], held_ms: u64, changes: &Changes) -> String {
    let served = if changes.woken.is_empty() {
        "no"
    } else {
        "yes"
    };
    format!(
        "lease: lapse key='{}' owner='{}' held_ms={held_ms} served={served}",
        text::escaped(key, 128),
        text::escaped(owner, 128),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lapse_line_is_one_escaped_ascii_line() {
        let line = lapse_line(b"k\n'x", b"o\0\xe9", 1500, &Changes::default());
        assert_eq!(
            line,
            "lease: lapse key='k\\n\\'x' owner='o\\x00\\xe9' held_ms=1500 served=no"
        );
    }
}
