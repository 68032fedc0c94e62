//! OS runtime calls (`OSRT_API`, `--trace=osrt`) in which a thread waits: the host blocking on a futex, a
//! condition variable, a semaphore or a poll. A thread that waits so while its GPU work runs is waiting for the
//! GPU (measured: JAX's `block_until_ready()` waits in `futex`, one per decode step, with no CUDA sync call:
//! fixtures/nsys-2025.3.1/jax_decode), not running host code. Sleeps are not waits (a deliberate stall).

use std::collections::HashMap;

use super::schema;
use super::Export;
use crate::contract::Result;

/// OS runtime function names that block a thread on another's progress (nsys writes them with a version or
/// 64 suffix at times: prefixes).
pub const WAIT_APIS: &[&str] = &[
    "futex",
    "pthread_cond_wait",
    "pthread_cond_timedwait",
    "pthread_cond_clockwait",
    "pthread_mutex_lock",
    "pthread_mutex_timedlock",
    "sem_wait",
    "sem_timedwait",
    "sem_clockwait",
    "poll",
    "ppoll",
    "epoll_wait",
    "epoll_pwait",
    "select",
    "pselect",
];

/// Is this OS runtime function a wait ([`WAIT_APIS`])?
pub fn is_wait_api(name: &str) -> bool {
    WAIT_APIS.iter().any(|w| name == *w || name.strip_prefix(w).is_some_and(|r| r.starts_with('_') || r == "64"))
}

impl Export {
    /// The wait calls ([`is_wait_api`]) of the threads `tids`, `(start, end)` by start per thread; empty when the
    /// export has no `OSRT_API` table (OS runtime not traced).
    pub fn osrt_waits(&self, tids: &crate::fx::FxSet<i64>) -> Result<HashMap<i64, Vec<(i64, i64)>>> {
        let mut out: HashMap<i64, Vec<(i64, i64)>> = HashMap::new();
        if tids.is_empty() {
            return Ok(out);
        }
        let Some(t) = self.optional(schema::OSRT_API, &schema::cols::OSRT_API)? else { return Ok(out) };
        let ids = self.string_ids_where(|v| is_wait_api(v).then_some(()))?;
        if ids.is_empty() {
            return Ok(out);
        }
        let list = ids.keys().map(|k| k.to_string()).collect::<Vec<_>>().join(",");
        let sql = format!(
            "SELECT globalTid, start, end FROM \"{}\" WHERE nameId IN ({list}) AND start IS NOT NULL AND end >= start",
            t.name
        );
        let mut stmt = self.conn().prepare(&sql).map_err(self.sql_err(schema::OSRT_API))?;
        let mut rows = stmt.query([]).map_err(self.sql_err(schema::OSRT_API))?;
        while let Some(r) = rows.next().map_err(self.sql_err(schema::OSRT_API))? {
            let (tid, s, e): (Option<i64>, i64, i64) = (
                r.get(0).map_err(self.sql_err(schema::OSRT_API))?,
                r.get(1).map_err(self.sql_err(schema::OSRT_API))?,
                r.get(2).map_err(self.sql_err(schema::OSRT_API))?,
            );
            if let Some(tid) = tid.filter(|t| tids.contains(t)) {
                out.entry(tid).or_default().push((s, e));
            }
        }
        for v in out.values_mut() {
            v.sort_unstable();
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn waits_and_not_waits() {
        for w in ["futex", "pthread_cond_wait", "sem_timedwait", "poll", "epoll_wait", "pthread_cond_timedwait_64"] {
            assert!(super::is_wait_api(w), "{w}");
        }
        for n in ["nanosleep", "clock_nanosleep", "usleep", "read", "write", "mmap64", "futexish", "pollen"] {
            assert!(!super::is_wait_api(n), "{n}");
        }
    }
}
