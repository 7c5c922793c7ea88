//! What the start benches read of a process from procfs (Linux).

/// CPU seconds (user + system) in a procfs `stat` file: a process's (`/proc/<pid>/stat`, all
/// its threads) or one thread's (`/proc/<pid>/task/<tid>/stat`, `/proc/thread-self/stat`); 0
/// if unreadable (the process is gone).
pub fn stat_cpu_seconds(path: &str) -> f64 {
    // Fields 14 and 15 (utime, stime) in clock ticks, counted after the parenthesised command
    // name. Linux's USER_HZ is 100 on every mainstream architecture.
    let stat = std::fs::read_to_string(path).unwrap_or_default();
    let after = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // `after` starts at field 3 (state), so utime (14) is index 11 and stime (15) index 12.
    (ticks(11) + ticks(12)) / 100.0
}

/// A `/proc/<pid>/status` field in KiB (`VmRSS`, `VmHWM`); 0 when unreadable.
pub fn status_kib(pid: &str, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}
