//! The process-wide panic counter and what a run takes from its environment.

use std::sync::{Mutex, Once, OnceLock, PoisonError};
use std::time::Duration;

/// A panic seen by the hook of [`install_panic_counter`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PanicRecord {
    /// The panicking thread's name.
    pub thread: String,
    /// `file:line:column` of the panic.
    pub location: String,
    /// The panic message.
    pub message: String,
}

pub(crate) fn panic_log() -> &'static Mutex<Vec<PanicRecord>> {
    static LOG: OnceLock<Mutex<Vec<PanicRecord>>> = OnceLock::new();
    LOG.get_or_init(|| Mutex::new(Vec::new()))
}

/// Installs (once per process) a panic hook that records every panic of every thread,
/// tokio worker threads and blocking threads included (a panicking task is caught by
/// tokio, but the hook runs first), then calls the previous hook.
pub fn install_panic_counter() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let message = if let Some(s) = info.payload().downcast_ref::<&str>() {
                (*s).to_string()
            } else if let Some(s) = info.payload().downcast_ref::<String>() {
                s.clone()
            } else {
                "<non-string payload>".to_string()
            };
            let record = PanicRecord {
                thread: std::thread::current().name().unwrap_or("<unnamed>").to_string(),
                location: info
                    .location()
                    .map_or_else(|| "<unknown>".to_string(), ToString::to_string),
                message,
            };
            panic_log()
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(record);
            previous(info);
        }));
    });
}

/// Every panic recorded since [`install_panic_counter`].
pub fn panics() -> Vec<PanicRecord> {
    panic_log().lock().unwrap_or_else(PoisonError::into_inner).clone()
}

/// The run's seed: `FUZZ_SEED` (decimal or `0x` hex) when set, else one from the clock.
pub fn seed_from_env() -> u64 {
    let parsed = std::env::var("FUZZ_SEED").ok().and_then(|s| {
        let s = s.trim();
        match s.strip_prefix("0x") {
            Some(hex) => u64::from_str_radix(hex, 16).ok(),
            None => s.parse().ok(),
        }
    });
    parsed.unwrap_or_else(|| {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        now.as_secs() ^ u64::from(now.subsec_nanos()).rotate_left(32)
    })
}

/// The fuzzing budget per service: `FUZZ_SECS` (seconds, may be fractional) when set,
/// else `default`.
pub fn budget_from_env(default: Duration) -> Duration {
    std::env::var("FUZZ_SECS")
        .ok()
        .and_then(|s| s.trim().parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s >= 0.0)
        .map_or(default, Duration::from_secs_f64)
}

/// Resident memory of this process in KiB (`VmRSS`), when `/proc` tells.
pub fn rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Lowercase hex of `bytes`, cut after `max` bytes (with the full length noted).
pub fn hex(bytes: &[u8], max: usize) -> String {
    let mut out: String = bytes.iter().take(max).map(|b| format!("{b:02x}")).collect();
    if bytes.len() > max {
        out.push_str(&format!("…({} bytes)", bytes.len()));
    }
    out
}
