//! How much host memory a new worker may take: `MemAvailable` from /proc/meminfo, less a margin,
//! and the headroom left under the agent's own cgroup limit (v2 `memory.max`, or v1
//! `memory.limit_in_bytes`), at every level from the agent's cgroup up to the mount's root.
//! Also the kernel's count of OOM kills (`oom_kill` in /proc/vmstat), which tells a worker that the
//! OOM killer ended from one that was killed for another reason. And [`HostMemoryShortage`], the
//! refusal of a run whose estimated peak does not fit: the error lives here, with the numbers it
//! names, so the agent's error enum that wraps it depends only on what is below it.
//!
//! Readers take the root of the file system (`/` on a host, a fixture directory in tests); the
//! parsers take the files' text.

use std::path::Path;

/// A value at or above this in a cgroup v1 limit means "no limit" (the kernel writes
/// `PAGE_COUNTER_MAX` pages, 9223372036854771712 bytes on x86-64).
const V1_UNLIMITED: u64 = 1 << 60;

/// Smallest margin kept free on the host, whatever its size.
pub const MIN_MARGIN_BYTES: u64 = 512 << 20;

/// What the host (and the agent's cgroup) can give a new worker now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HostMemory {
    /// `MemTotal`, bytes.
    pub total: u64,
    /// `MemAvailable`, bytes: what the kernel estimates can be allocated without swapping.
    pub available: u64,
    /// The tightest cgroup limit over the agent's cgroup and its ancestors, if any is set.
    pub cgroup: Option<CgroupLimit>,
}

/// One cgroup level's memory limit and what its processes use now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CgroupLimit {
    pub limit: u64,
    pub usage: u64,
}

impl CgroupLimit {
    /// What is left under the limit, less its own margin (a tenth of the limit, at least
    /// [`MIN_MARGIN_BYTES`]).
    pub fn headroom(&self) -> u64 {
        self.limit
            .saturating_sub(self.usage)
            .saturating_sub(margin(self.limit))
    }
}

/// The margin kept free out of `total` bytes: a tenth, at least [`MIN_MARGIN_BYTES`].
pub fn margin(total: u64) -> u64 {
    (total / 10).max(MIN_MARGIN_BYTES)
}

/// `1610612736` -> `"1.5 GiB"`, the unit every memory message of the agent uses.
pub fn gib(bytes: u64) -> String {
    format!("{:.1} GiB", bytes as f64 / (1u64 << 30) as f64)
}

impl HostMemory {
    /// Reads `root`/proc/meminfo, `root`/proc/self/cgroup and the cgroup files under
    /// `root`/sys/fs/cgroup. Missing files read as "unknown": a host whose meminfo cannot be read
    /// has `total == 0`, which [`HostMemory::allowance`] treats as no knowledge (no limit).
    pub fn read(root: &Path) -> HostMemory {
        let read = |rel: &str| std::fs::read_to_string(root.join(rel)).unwrap_or_default();
        let meminfo = read("proc/meminfo");
        HostMemory {
            total: meminfo_bytes(&meminfo, "MemTotal").unwrap_or(0),
            available: meminfo_bytes(&meminfo, "MemAvailable").unwrap_or(0),
            cgroup: cgroup_limit(root, &read("proc/self/cgroup")),
        }
    }

    /// Bytes a new worker may use: `MemAvailable` less [`margin`] of `MemTotal`, and no more than
    /// the cgroup's [`CgroupLimit::headroom`]. `None` when meminfo could not be read.
    pub fn allowance(&self) -> Option<u64> {
        if self.total == 0 {
            return None;
        }
        let host = self.available.saturating_sub(margin(self.total));
        Some(match self.cgroup {
            Some(c) => host.min(c.headroom()),
            None => host,
        })
    }

    /// How the allowance was reached, for messages: `MemAvailable 21.9 GiB less a margin of
    /// 2.3 GiB` (and the cgroup's numbers when it is the tighter bound).
    pub fn explain(&self) -> String {
        let host = format!(
            "MemAvailable {} less a margin of {}",
            gib(self.available),
            gib(margin(self.total))
        );
        match self.cgroup {
            Some(c) if c.headroom() < self.available.saturating_sub(margin(self.total)) => {
                format!(
                    "the agent's cgroup limit {} less its usage {} and a margin of {}; {host}",
                    gib(c.limit),
                    gib(c.usage),
                    gib(margin(c.limit))
                )
            }
            _ => host,
        }
    }
}

/// A run that does not fit the host's memory now: what a run's admission
/// (`run::host_peak::admit`) refuses with, naming the estimate and the allowance.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error(
    "{what} needs about {} of host memory at its peak (estimated), more than the {} a worker \
     may take now ({why})",
    gib(*needed),
    gib(*available)
)]
pub struct HostMemoryShortage {
    /// The run: `vec_add with n=1073741824 on cpu:0`.
    pub what: String,
    /// The estimated peak, bytes.
    pub needed: u64,
    /// [`HostMemory::allowance`], bytes.
    pub available: u64,
    /// How the allowance was reached ([`HostMemory::explain`]).
    pub why: String,
}

/// A `Key:   123 kB` line of /proc/meminfo, in bytes.
pub fn meminfo_bytes(meminfo: &str, key: &str) -> Option<u64> {
    meminfo.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        if k.trim() != key {
            return None;
        }
        let v = v.trim();
        let kb = v
            .strip_suffix("kB")
            .map_or(v, str::trim)
            .parse::<u64>()
            .ok()?;
        Some(if v.ends_with("kB") { kb * 1024 } else { kb })
    })
}

/// The `oom_kill` counter of /proc/vmstat (kills by the kernel's OOM killer since boot, cgroup
/// OOM kills included), or `None` where the kernel does not count them (before 4.13).
pub fn vmstat_oom_kills(vmstat: &str) -> Option<u64> {
    vmstat
        .lines()
        .find_map(|l| l.strip_prefix("oom_kill "))
        .and_then(|v| v.trim().parse().ok())
}

/// Reads `root`/proc/vmstat's `oom_kill`.
pub fn oom_kills(root: &Path) -> Option<u64> {
    vmstat_oom_kills(&std::fs::read_to_string(root.join("proc/vmstat")).ok()?)
}

/// Where the agent's memory cgroup is, from /proc/self/cgroup: the cgroup v2 path (`0::/x`) or
/// the v1 memory controller's (`4:memory:/x`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CgroupPath {
    V2(String),
    V1(String),
}

/// The memory cgroups /proc/self/cgroup names: v1's memory controller first (on a hybrid host
/// it holds the limits), then v2.
pub fn cgroup_paths(proc_self_cgroup: &str) -> Vec<CgroupPath> {
    let mut v1 = Vec::new();
    let mut v2 = Vec::new();
    for line in proc_self_cgroup.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        if id == "0" && controllers.is_empty() {
            v2.push(CgroupPath::V2(path.to_string()));
        } else if controllers.split(',').any(|c| c == "memory") {
            v1.push(CgroupPath::V1(path.to_string()));
        }
    }
    v1.extend(v2);
    v1
}

/// A limit file's text: v2's `max` or a v1 value this large is no limit.
pub fn parse_limit(text: &str) -> Option<u64> {
    let v = text.trim();
    if v == "max" {
        return None;
    }
    v.parse::<u64>().ok().filter(|&b| b < V1_UNLIMITED)
}

/// The tightest limit (least headroom) from the agent's cgroup up to the mount's root. A cgroup
/// namespace can make /proc/self/cgroup name a path the mount does not have; then only the
/// mount's root (the namespace's own cgroup) is read.
fn cgroup_limit(root: &Path, proc_self_cgroup: &str) -> Option<CgroupLimit> {
    let mut best: Option<CgroupLimit> = None;
    for path in cgroup_paths(proc_self_cgroup) {
        let (mount, rel, limit_file, usage_file) = match &path {
            CgroupPath::V2(p) => ("sys/fs/cgroup", p, "memory.max", "memory.current"),
            CgroupPath::V1(p) => (
                "sys/fs/cgroup/memory",
                p,
                "memory.limit_in_bytes",
                "memory.usage_in_bytes",
            ),
        };
        let mount = root.join(mount);
        let leaf = mount.join(rel.trim_start_matches('/'));
        let start = if leaf.is_dir() { leaf } else { mount.clone() };
        for dir in start.ancestors().take_while(|d| d.starts_with(&mount)) {
            let read = |f: &str| std::fs::read_to_string(dir.join(f)).ok();
            let Some(limit) = read(limit_file).as_deref().and_then(parse_limit) else {
                continue;
            };
            let usage = read(usage_file)
                .and_then(|u| u.trim().parse::<u64>().ok())
                .unwrap_or(0);
            let level = CgroupLimit { limit, usage };
            if best.is_none_or(|b| level.headroom() < b.headroom()) {
                best = Some(level);
            }
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;
    const MEMINFO: &str = "MemTotal:       24684084 kB\nMemFree:        21416360 kB\n\
        MemAvailable:   24089748 kB\nBuffers:           16188 kB\nHugePages_Total:       0\n";

    #[test]
    fn parses_meminfo() {
        assert_eq!(meminfo_bytes(MEMINFO, "MemTotal"), Some(24684084 * 1024));
        assert_eq!(
            meminfo_bytes(MEMINFO, "MemAvailable"),
            Some(24089748 * 1024)
        );
        assert_eq!(meminfo_bytes(MEMINFO, "HugePages_Total"), Some(0));
        assert_eq!(meminfo_bytes(MEMINFO, "Mem"), None);
        assert_eq!(meminfo_bytes("MemAvailable: lots kB", "MemAvailable"), None);
    }

    #[test]
    fn parses_vmstat_and_limits() {
        assert_eq!(vmstat_oom_kills("pgfault 9\noom_kill 3\n"), Some(3));
        assert_eq!(vmstat_oom_kills("pgfault 9\n"), None);
        assert_eq!(parse_limit("max\n"), None);
        assert_eq!(parse_limit("9223372036854771712\n"), None);
        assert_eq!(parse_limit("4294967296\n"), Some(4 * GIB));
        assert_eq!(parse_limit(""), None);
    }

    #[test]
    fn finds_cgroup_paths_of_both_versions() {
        let hybrid = "9:name=systemd:/\n4:memory:/process_api/abc\n3:cpuset:/\n0::/\n";
        assert_eq!(
            cgroup_paths(hybrid),
            vec![
                CgroupPath::V1("/process_api/abc".into()),
                CgroupPath::V2("/".into())
            ]
        );
        assert_eq!(
            cgroup_paths("0::/system.slice/agent.service\n"),
            vec![CgroupPath::V2("/system.slice/agent.service".into())]
        );
        assert_eq!(
            cgroup_paths("5:cpu,memory:/x\n"),
            vec![CgroupPath::V1("/x".into())]
        );
        assert!(cgroup_paths("").is_empty());
    }

    #[test]
    fn allowance_keeps_a_margin_and_honours_the_cgroup() {
        let host = HostMemory {
            total: 24 * GIB,
            available: 22 * GIB,
            cgroup: None,
        };
        // A tenth of 24 GiB (2.4 GiB) is above the 512 MiB floor.
        assert_eq!(host.allowance(), Some(22 * GIB - 24 * GIB / 10));
        assert!(host.explain().contains("MemAvailable 22.0 GiB"));
        let small = HostMemory {
            total: 2 * GIB,
            available: GIB,
            cgroup: None,
        };
        assert_eq!(small.allowance(), Some(GIB - MIN_MARGIN_BYTES));
        let limited = HostMemory {
            cgroup: Some(CgroupLimit {
                limit: 8 * GIB,
                usage: 3 * GIB,
            }),
            ..host
        };
        assert_eq!(limited.allowance(), Some(5 * GIB - 8 * GIB / 10));
        assert!(limited.explain().contains("cgroup limit 8.0 GiB"));
        assert_eq!(HostMemory::default().allowance(), None);
    }

    #[test]
    fn reads_a_fixture_root_with_cgroup_v2_ancestors() {
        let root = tempfile::tempdir().unwrap();
        let write = |rel: &str, text: &str| {
            let p = root.path().join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        };
        write("proc/meminfo", MEMINFO);
        write("proc/self/cgroup", "0::/agent.slice/agent.service\n");
        write("sys/fs/cgroup/agent.slice/memory.max", "6442450944\n");
        write("sys/fs/cgroup/agent.slice/memory.current", "1073741824\n");
        write(
            "sys/fs/cgroup/agent.slice/agent.service/memory.max",
            "max\n",
        );
        write(
            "sys/fs/cgroup/agent.slice/agent.service/memory.current",
            "5\n",
        );
        write("proc/vmstat", "oom_kill 0\n");
        let m = HostMemory::read(root.path());
        assert_eq!(m.total, 24684084 * 1024);
        assert_eq!(
            m.cgroup,
            Some(CgroupLimit {
                limit: 6 * GIB,
                usage: GIB
            })
        );
        assert_eq!(m.allowance(), Some(5 * GIB - 6 * GIB / 10));
        assert_eq!(oom_kills(root.path()), Some(0));
        // A path the mount does not have (a cgroup namespace): the mount's root is the limit.
        write("proc/self/cgroup", "0::/elsewhere\n");
        write("sys/fs/cgroup/memory.max", "3221225472\n");
        write("sys/fs/cgroup/memory.current", "0\n");
        let m = HostMemory::read(root.path());
        assert_eq!(m.cgroup.map(|c| c.limit), Some(3 * GIB));
        assert_eq!(
            HostMemory::read(&root.path().join("none")).allowance(),
            None
        );
    }
}
