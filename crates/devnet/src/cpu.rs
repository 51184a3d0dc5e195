//! CPU time a process has used, from Linux's `/proc/<pid>/stat`: the load generator's own
//! cost and the nodes' cost per tx in `fabrx bench`.

/// Clock ticks per second of `/proc/*/stat` (`USER_HZ`: 100 on Linux, a fixed part of
/// its user-space interface).
pub const TICKS_PER_SECOND: f64 = 100.0;

/// User + system clock ticks of process `pid` (this process: `None`); `None` where the
/// file is missing or unreadable (not Linux, the process gone).
pub fn ticks(pid: Option<u64>) -> Option<u64> {
    let path = pid.map_or_else(|| "/proc/self/stat".to_string(), |p| format!("/proc/{p}/stat"));
    parse_ticks(&std::fs::read_to_string(path).ok()?)
}

/// User + system CPU seconds of this process.
pub fn own_seconds() -> Option<f64> {
    ticks(None).map(|t| t as f64 / TICKS_PER_SECOND)
}

/// utime + stime of a `stat` line: fields 14 and 15, counted after the command name
/// (in parentheses, and it may hold spaces).
fn parse_ticks(stat: &str) -> Option<u64> {
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let user: u64 = fields.get(11)?.parse().ok()?;
    let system: u64 = fields.get(12)?.parse().ok()?;
    user.checked_add(system)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_and_system_ticks_after_a_name_with_spaces() {
        let line = "42 (a b) c) S 1 42 42 0 -1 4194560 100 0 0 0 250 31 0 0 20 0 1 0 5 0 0";
        assert_eq!(parse_ticks(line), Some(281));
        assert_eq!(parse_ticks("42 (x) S 1"), None);
        assert_eq!(parse_ticks("no parenthesis"), None);
        assert!(ticks(None).is_some(), "this process has a stat file");
    }
}
