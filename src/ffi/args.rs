//! A command's arguments, read in place: no vector of retained strings per call.

use std::os::raw::c_int;

use redis_module::raw;

use super::string::RStr;

/// The arguments of the running command (`argv[0]` is its name).
pub struct Args<'a> {
    argv: &'a [*mut raw::RedisModuleString],
}

impl<'a> Args<'a> {
    /// # Safety
    /// `argv` and `argc` must be the running command's, valid for `'a`.
    pub unsafe fn from_raw(argv: *mut *mut raw::RedisModuleString, argc: c_int) -> Args<'a> {
        let argv = if argv.is_null() || argc <= 0 {
            &[][..]
        } else {
            std::slice::from_raw_parts(argv, argc as usize)
        };
        Args { argv }
    }

    pub fn len(&self) -> usize {
        self.argv.len()
    }

    /// Argument `i` as a Redis string.
    pub fn get(&self, i: usize) -> Option<RStr<'a>> {
        // SAFETY: argv entries of the running command live as long as the call.
        self.argv.get(i).and_then(|s| unsafe { RStr::from_raw(*s) })
    }

    /// Argument `i`'s bytes (empty when absent; callers check the arity first).
    pub fn bytes(&self, i: usize) -> &'a [u8] {
        self.get(i).map_or(&[], |s| s.bytes())
    }

    /// Arguments from `i` on, as bytes.
    pub fn rest(&self, i: usize) -> Vec<&'a [u8]> {
        (i..self.len()).map(|j| self.bytes(j)).collect()
    }

    /// The raw argument vector from `i` on (for running them as a command).
    pub fn raw_from(&self, i: usize) -> &'a [*mut raw::RedisModuleString] {
        self.argv.get(i..).unwrap_or(&[])
    }
}
