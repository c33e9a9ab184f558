//! `vramscope watch`: live GPU memory of a process (or of every GPU) from NVML, the numbers
//! nvidia-smi shows, with the peak and when it happened.
//!
//! NVML is loaded at run time (`nvml-wrapper` dlopens `libnvidia-ml.so.1`), so the binary runs
//! on machines without a driver and says so in one line.

// Without the `nvml` feature only the one-line error is reachable.
#![cfg_attr(not(feature = "nvml"), allow(dead_code))]

use super::CmdResult;

/// Errors that end `watch` before it samples anything: one line, exit 2.
#[derive(Debug)]
pub struct WatchError(pub String);

impl std::fmt::Display for WatchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for WatchError {}

/// Shortest sampling interval: NVML's process list costs a driver call per GPU.
const MIN_INTERVAL_MS: u64 = 20;

#[cfg(not(feature = "nvml"))]
pub fn run(_pid: Option<u32>, _interval_ms: u64, _json: bool, _command: &[String]) -> CmdResult {
    Err(Box::new(WatchError(
        "watch: this vramscope was built without NVML support (cargo feature `nvml`)".into(),
    )))
}

#[cfg(feature = "nvml")]
pub fn run(pid: Option<u32>, interval_ms: u64, json: bool, command: &[String]) -> CmdResult {
    imp::run(pid, interval_ms.max(MIN_INTERVAL_MS), json, command)
}

/// The peak seen so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Peak {
    pub bytes: u64,
    /// Milliseconds since the watch began.
    pub at_ms: u64,
}

impl Peak {
    /// Records a sample; the first moment of the highest value is kept.
    pub fn update(&mut self, bytes: u64, at_ms: u64) {
        if bytes > self.bytes {
            *self = Peak { bytes, at_ms };
        }
    }
}

/// The parent of each process, from `/proc/<pid>/stat` (field 4, after the parenthesised
/// command name, which may itself contain spaces and parentheses: proc(5)).
fn parent_of(stat: &str) -> Option<u32> {
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// `root` and its descendants (Linux: from /proc; elsewhere just `root`): a launcher script's
/// Python child is where the GPU memory is.
fn family(root: u32) -> std::collections::HashSet<u32> {
    let mut set = std::collections::HashSet::from([root]);
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return set;
    };
    let mut parents = Vec::new();
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if let Some(pp) = std::fs::read_to_string(e.path().join("stat"))
            .ok()
            .as_deref()
            .and_then(parent_of)
        {
            parents.push((pid, pp));
        }
    }
    loop {
        let before = set.len();
        for &(pid, pp) in &parents {
            if set.contains(&pp) {
                set.insert(pid);
            }
        }
        if set.len() == before {
            return set;
        }
    }
}

#[cfg(feature = "nvml")]
mod imp {
    use super::{family, Peak, WatchError};
    use crate::output::{print, print_json};
    use crate::units::bytes;
    use nvml_wrapper::enums::device::UsedGpuMemory;
    use nvml_wrapper::Nvml;
    use std::time::{Duration, Instant};

    #[derive(serde::Serialize)]
    struct Summary {
        pid: Option<u32>,
        command: Option<Vec<String>>,
        samples: u64,
        duration_ms: u64,
        /// Bytes the watched processes held on all GPUs (without --pid: all GPUs' used bytes).
        peak: Peak,
        exit_code: Option<i32>,
    }

    /// Bytes used by `pids` on every GPU (None = every GPU's used memory).
    fn sample(nvml: &Nvml, pids: Option<&std::collections::HashSet<u32>>) -> (u64, Vec<u64>) {
        let n = nvml.device_count().unwrap_or(0);
        let mut total = 0u64;
        let mut per = Vec::new();
        for i in 0..n {
            let Ok(d) = nvml.device_by_index(i) else {
                per.push(0);
                continue;
            };
            let used = match pids {
                None => d.memory_info().map(|m| m.used).unwrap_or(0),
                Some(set) => {
                    let mut seen = std::collections::HashSet::new();
                    let mut sum = 0u64;
                    let procs = d
                        .running_compute_processes()
                        .unwrap_or_default()
                        .into_iter()
                        .chain(d.running_graphics_processes().unwrap_or_default());
                    for p in procs {
                        // A process both computing and drawing is listed twice.
                        if set.contains(&p.pid) && seen.insert(p.pid) {
                            if let UsedGpuMemory::Used(b) = p.used_gpu_memory {
                                sum = sum.saturating_add(b);
                            }
                        }
                    }
                    sum
                }
            };
            per.push(used);
            total = total.saturating_add(used);
        }
        (total, per)
    }

    fn alive(pid: u32) -> bool {
        !std::path::Path::new("/proc").is_dir()
            || std::path::Path::new(&format!("/proc/{pid}")).exists()
    }

    /// What one watch is told: whom to watch (a root process and its children, or every GPU),
    /// how often, and whether to print each sample.
    struct Watch {
        nvml: Nvml,
        root: Option<u32>,
        pid: Option<u32>,
        interval_ms: u64,
        json: bool,
        start: Instant,
    }

    /// How the sampling ended.
    #[derive(Default)]
    struct Outcome {
        peak: Peak,
        samples: u64,
        exit_code: Option<i32>,
        /// stdout's reader went away (`watch | head`).
        closed: bool,
    }

    pub fn run(
        pid: Option<u32>,
        interval_ms: u64,
        json: bool,
        command: &[String],
    ) -> super::CmdResult {
        let nvml = Nvml::init().map_err(|e| {
            WatchError(format!(
                "watch: cannot use NVML ({e}): no NVIDIA driver on this machine, or \
                 libnvidia-ml.so.1 is not on the library path"
            ))
        })?;
        let mut child = start(command)?;
        let root = child.as_ref().map(|c| c.id()).or(pid);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .enable_io()
            .build()?;
        let w = Watch {
            nvml,
            root,
            pid,
            interval_ms,
            json,
            start: Instant::now(),
        };
        let outcome = rt.block_on(w.sample_until_done(child.as_mut()));
        if outcome.closed {
            return Ok(0);
        }
        let summary = Summary {
            pid: root,
            command: (!command.is_empty()).then(|| command.to_vec()),
            samples: outcome.samples,
            duration_ms: w.start.elapsed().as_millis() as u64,
            peak: outcome.peak,
            exit_code: outcome.exit_code,
        };
        if json {
            print_json(&summary)?;
        } else {
            print(&summary_line(&summary))?;
        }
        Ok(outcome.exit_code.map_or(0, |c| c.clamp(0, 255)))
    }

    /// Starts the command to watch, if one was given.
    fn start(command: &[String]) -> Result<Option<std::process::Child>, WatchError> {
        let Some((program, args)) = command.split_first() else {
            return Ok(None);
        };
        std::process::Command::new(program)
            .args(args)
            .spawn()
            .map(Some)
            .map_err(|e| WatchError(format!("watch: cannot start {program}: {e}")))
    }

    impl Watch {
        /// Samples every `interval_ms` until the command or process ends (or Ctrl-C when
        /// watching a pid or every GPU).
        async fn sample_until_done(&self, mut child: Option<&mut std::process::Child>) -> Outcome {
            let mut o = Outcome::default();
            loop {
                let pids = self.root.map(family);
                let (used, per) = sample(&self.nvml, pids.as_ref());
                let at = self.start.elapsed().as_millis() as u64;
                o.samples += 1;
                o.peak.update(used, at);
                let printed = (!self.json).then(|| print(&sample_line(at, used, &per)));
                if printed.is_some_and(|r| r.is_err_and(|e| crate::output::closed_pipe(&e))) {
                    // `watch | head`: the reader is gone, so the watch ends quietly.
                    o.closed = true;
                    return o;
                }
                if let Some(c) = child.as_deref_mut() {
                    if let Ok(Some(status)) = c.try_wait() {
                        o.exit_code = Some(status.code().unwrap_or(1));
                        return o;
                    }
                } else if self.pid.is_some_and(|p| !alive(p)) {
                    return o;
                }
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(self.interval_ms)) => {}
                    _ = tokio::signal::ctrl_c() => {
                        // The command shares the terminal's signal: let it end, then report.
                        if child.is_none() {
                            return o;
                        }
                    }
                }
            }
        }
    }

    /// One sample: seconds since the start, the bytes watched, and each GPU's.
    fn sample_line(at_ms: u64, used: u64, per: &[u64]) -> String {
        let gpus = per
            .iter()
            .enumerate()
            .map(|(i, b)| format!("GPU{i} {}", bytes(*b)))
            .collect::<Vec<_>>()
            .join("  ");
        format!(
            "{:>9.1} s  {:>11}  ({gpus})\n",
            at_ms as f64 / 1000.0,
            bytes(used)
        )
    }

    /// The peak and when it happened.
    fn summary_line(s: &Summary) -> String {
        format!(
            "peak {} at +{:.1} s ({} samples over {:.1} s{})\n",
            bytes(s.peak.bytes),
            s.peak.at_ms as f64 / 1000.0,
            s.samples,
            s.duration_ms as f64 / 1000.0,
            match s.pid {
                Some(p) => format!(", pid {p} and its children"),
                None => ", all processes on all GPUs".into(),
            }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parent_field_follows_the_command_name() {
        // proc(5): "pid (comm) state ppid ...", comm may hold spaces and ')'.
        assert_eq!(parent_of("4242 (python) S 17 4242 17 0"), Some(17));
        assert_eq!(parent_of("4242 (a b) c)) R 99 1 1"), Some(99));
        assert_eq!(parent_of("garbage"), None);
    }

    #[test]
    fn peak_keeps_the_first_moment_of_the_highest_value() {
        let mut p = Peak::default();
        for (b, t) in [(10, 0), (30, 100), (30, 200), (20, 300)] {
            p.update(b, t);
        }
        assert_eq!(
            p,
            Peak {
                bytes: 30,
                at_ms: 100
            }
        );
    }

    #[test]
    fn own_process_is_in_its_family() {
        let me = std::process::id();
        assert!(family(me).contains(&me));
    }
}
