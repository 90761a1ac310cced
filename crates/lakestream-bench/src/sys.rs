//! Process figures from `/proc` (Linux): resident memory and CPU time. Elsewhere they read as
//! `None` and the report says "n/a".

/// The resident set size of this process in bytes (`VmRSS` of `/proc/self/status`).
pub fn rss_bytes() -> Option<u64> {
    parse_vm_rss(&std::fs::read_to_string("/proc/self/status").ok()?)
}

/// CPU time (user + system) this process has used so far, in seconds (`/proc/self/stat`).
pub fn cpu_seconds() -> Option<f64> {
    parse_cpu_seconds(&std::fs::read_to_string("/proc/self/stat").ok()?)
}

/// CPU time (user + system) process `pid` has used so far, in seconds
/// (`/proc/<pid>/stat`): the S3 server's, when it runs as a process of its own.
pub fn cpu_seconds_of(pid: u32) -> Option<f64> {
    parse_cpu_seconds(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// `VmRSS:   123456 kB` → bytes.
pub(crate) fn parse_vm_rss(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let mut words = line["VmRSS:".len()..].split_whitespace();
    let value: u64 = words.next()?.parse().ok()?;
    match words.next() {
        Some("kB") => value.checked_mul(1024),
        _ => None,
    }
}

/// Fields 14 and 15 (utime, stime) of `/proc/self/stat`, in clock ticks. The command name
/// (field 2) may hold spaces and parentheses, so fields are counted after its last `)`.
pub(crate) fn parse_cpu_seconds(stat: &str) -> Option<f64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After the name: field 3 (state) is index 0, so field n is index n - 3.
    let utime: u64 = fields.get(14 - 3)?.parse().ok()?;
    let stime: u64 = fields.get(15 - 3)?.parse().ok()?;
    // USER_HZ is 100 on every Linux architecture the project builds for.
    Some((utime + stime) as f64 / 100.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_vm_rss() {
        let status = "Name:\tx\nVmPeak:\t  999 kB\nVmRSS:\t   2048 kB\nThreads: 3\n";
        assert_eq!(parse_vm_rss(status), Some(2048 * 1024));
        assert_eq!(parse_vm_rss("Name: x\n"), None);
        assert_eq!(parse_vm_rss("VmRSS: lots kB\n"), None);
        assert_eq!(parse_vm_rss("VmRSS: 12 MB\n"), None);
    }

    #[test]
    fn parses_cpu_time_past_a_tricky_command_name() {
        let stat = "42 (a) b (c)) S 1 42 42 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 3 0 100 0 0";
        assert_eq!(parse_cpu_seconds(stat), Some(3.0));
        assert_eq!(parse_cpu_seconds("42 (x) S 1"), None);
        assert_eq!(parse_cpu_seconds("no parenthesis"), None);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn reads_this_process() {
        assert!(rss_bytes().is_some_and(|b| b > 0));
        assert!(cpu_seconds().is_some());
        assert!(cpu_seconds_of(std::process::id()).is_some());
        assert!(cpu_seconds_of(u32::MAX).is_none());
    }
}
