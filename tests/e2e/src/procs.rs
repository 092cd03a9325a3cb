//! Child processes that always stop: each runs under `timeout` (so it stops by itself even if the
//! test process is killed) in its own process group, and [`Procs`] stops every group it started
//! when it is dropped, on success, failure or panic alike.

use std::fs::File;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Why a process could not be started or found.
#[derive(Debug, thiserror::Error)]
pub enum ProcError {
    #[error("{name} not found at {path}: build it first with `cargo build -p shareplane -p shareplane-limiter --bins` (tests/run-all.sh does)")]
    MissingBinary { name: String, path: PathBuf },
    #[error("cannot start {name}: {source}")]
    Spawn {
        name: String,
        source: std::io::Error,
    },
    #[error("cannot create log file {path}: {source}")]
    Log {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot find a free port on 127.0.0.1: {0}")]
    Port(std::io::Error),
    #[error("{name} did not become ready within {waited:?}")]
    NotReady { name: String, waited: Duration },
    #[error("{name} exited before it was ready ({status})")]
    Exited { name: String, status: String },
}

/// The longest any child may live: `timeout` stops it after this even if nobody else does.
pub const MAX_LIFETIME: Duration = Duration::from_secs(300);
/// How long a stopped group may take to exit after SIGTERM before it gets SIGKILL.
const TERM_GRACE: Duration = Duration::from_secs(3);

struct Proc {
    name: String,
    child: Child,
    logs: [PathBuf; 2],
}

/// Every process a test started. Dropping it stops them all.
pub struct Procs {
    dir: PathBuf,
    procs: Vec<Proc>,
}

impl Procs {
    /// Logs (`<name>.out`, `<name>.err`) go to `dir`, which is created.
    pub fn new(dir: impl Into<PathBuf>) -> Result<Procs, ProcError> {
        let dir = dir.into();
        std::fs::create_dir_all(&dir).map_err(|source| ProcError::Log {
            path: dir.clone(),
            source,
        })?;
        Ok(Procs {
            dir,
            procs: Vec::new(),
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Starts `program args…` under `timeout`, in its own process group, with `env` added, stdout
    /// and stderr to `<dir>/<name>.out` and `.err`. Returns its index for [`Procs::wait`].
    pub fn spawn(
        &mut self,
        name: &str,
        program: &Path,
        args: &[String],
        env: &[(&str, &str)],
    ) -> Result<usize, ProcError> {
        use std::os::unix::process::CommandExt;
        let out = self.dir.join(format!("{name}.out"));
        let err = self.dir.join(format!("{name}.err"));
        let open = |p: &Path| {
            File::create(p).map_err(|source| ProcError::Log {
                path: p.to_path_buf(),
                source,
            })
        };
        let mut cmd = Command::new("timeout");
        cmd.arg("-k")
            .arg("5")
            .arg(MAX_LIFETIME.as_secs().to_string())
            .arg(program)
            .args(args)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(open(&out)?)
            .stderr(open(&err)?)
            .process_group(0);
        let child = cmd.spawn().map_err(|source| ProcError::Spawn {
            name: name.to_string(),
            source,
        })?;
        self.procs.push(Proc {
            name: name.to_string(),
            child,
            logs: [out, err],
        });
        Ok(self.procs.len() - 1)
    }

    /// `base`, or `base-2`, `base-3`… if a process of that name already logged here (a restarted
    /// process logs to files of its own).
    pub fn fresh_name(&self, base: &str) -> String {
        let mut name = base.to_string();
        let mut n = 1;
        while self.dir.join(format!("{name}.err")).exists() {
            n += 1;
            name = format!("{base}-{n}");
        }
        name
    }

    /// What process `i` printed on stdout so far.
    pub fn stdout(&self, i: usize) -> String {
        self.procs
            .get(i)
            .and_then(|p| std::fs::read_to_string(&p.logs[0]).ok())
            .unwrap_or_default()
    }

    /// The id of process `i` (also its process group's id).
    pub fn pid(&self, i: usize) -> Option<u32> {
        self.procs.get(i).map(|p| p.child.id())
    }

    /// Fails if process `i` has exited (used while waiting for readiness).
    pub fn check_alive(&mut self, i: usize) -> Result<(), ProcError> {
        let Some(p) = self.procs.get_mut(i) else {
            return Ok(());
        };
        match p.child.try_wait() {
            Ok(Some(status)) => Err(ProcError::Exited {
                name: p.name.clone(),
                status: status.to_string(),
            }),
            _ => Ok(()),
        }
    }

    /// Kills process `i` and everything in its process group at once (SIGKILL: no cleanup, as a
    /// crash or an OOM kill would), and reaps it.
    pub fn kill(&mut self, i: usize) {
        if let Some(p) = self.procs.get_mut(i) {
            signal_group(p.child.id(), "KILL");
            let _ = p.child.wait();
        }
    }

    /// Sends `signal` to the program of process `i` only, not to the `timeout` that runs it: a
    /// signal that the program handles and lives on (SIGHUP for `shareplane run`'s reload).
    /// `timeout` forwards the signals it catches (SIGHUP, SIGINT, SIGTERM…) to the program and
    /// then, with `-k`, kills it that much later: sent to the whole group, a SIGHUP would end the
    /// daemon 5 s after its reload.
    pub fn signal_program(&self, i: usize, signal: &str) {
        if let Some(p) = self.procs.get(i) {
            for pid in children(p.child.id()) {
                signal_pid(pid, signal);
            }
        }
    }

    /// Sends `signal` (`"STOP"`, `"CONT"`, …) to process `i`'s whole process group.
    pub fn signal(&self, i: usize, signal: &str) {
        if let Some(p) = self.procs.get(i) {
            signal_group(p.child.id(), signal);
        }
    }

    /// Waits up to `limit` for process `i` to exit; returns whether it exited successfully.
    pub fn wait(&mut self, i: usize, limit: Duration) -> Option<bool> {
        let p = self.procs.get_mut(i)?;
        let end = Instant::now() + limit;
        loop {
            if let Ok(Some(status)) = p.child.try_wait() {
                return Some(status.success());
            }
            if Instant::now() >= end {
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The last `lines` lines of every process's non-empty stdout and stderr, for a failure
    /// message.
    pub fn log_tails(&self, lines: usize) -> String {
        let mut out = String::new();
        for p in &self.procs {
            for log in &p.logs {
                let text = std::fs::read_to_string(log).unwrap_or_default();
                let all: Vec<&str> = text.lines().collect();
                if all.is_empty() {
                    continue;
                }
                let tail = &all[all.len().saturating_sub(lines)..];
                out.push_str(&format!(
                    "--- {} ({}) ---\n{}\n",
                    p.name,
                    log.display(),
                    tail.join("\n")
                ));
            }
        }
        out
    }
}

impl Drop for Procs {
    fn drop(&mut self) {
        for p in &self.procs {
            signal_group(p.child.id(), "TERM");
        }
        let end = Instant::now() + TERM_GRACE;
        for p in &mut self.procs {
            while Instant::now() < end && matches!(p.child.try_wait(), Ok(None)) {
                std::thread::sleep(Duration::from_millis(20));
            }
            if matches!(p.child.try_wait(), Ok(None)) {
                signal_group(p.child.id(), "KILL");
            }
            let _ = p.child.kill();
            let _ = p.child.wait();
        }
        // The leader is reaped, but a member it did not reap (it died first, or under load the
        // member's own exit is still in progress) may linger: wait for each group to empty, and
        // kill what is left once the grace is over.
        for p in &self.procs {
            let pgid = p.child.id();
            while Instant::now() < end && group_running(pgid) {
                std::thread::sleep(Duration::from_millis(20));
            }
            if group_running(pgid) {
                signal_group(pgid, "KILL");
                let until = Instant::now() + TERM_GRACE;
                while Instant::now() < until && group_running(pgid) {
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
        }
    }
}

/// Sends `signal` to the process group `pgid` (a group this module created: its leader is the
/// `timeout` process it spawned).
fn signal_group(pgid: u32, signal: &str) {
    let _ = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg("--")
        .arg(format!("-{pgid}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

fn signal_pid(pid: u32, signal: &str) {
    let _ = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// The running processes whose parent is `parent`, from `/proc`.
fn children(parent: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| {
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
            let (state, ppid, _) = stat_fields(&stat)?;
            (ppid == parent && state != 'Z' && state != 'X').then_some(pid)
        })
        .collect()
}

/// Whether any process of group `pgid` is still running: a member of it in `/proc` that is not a
/// zombie (a zombie has stopped; it only waits for whoever adopted it to reap it).
pub fn group_running(pgid: u32) -> bool {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return false;
    };
    entries.flatten().any(|e| {
        let is_pid = e
            .file_name()
            .to_str()
            .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()));
        is_pid
            && std::fs::read_to_string(e.path().join("stat"))
                .ok()
                .and_then(|stat| stat_group_and_state(&stat))
                .is_some_and(|(group, state)| group == pgid && state != 'Z' && state != 'X')
    })
}

/// The process group and state of a `/proc/<pid>/stat` line.
fn stat_group_and_state(stat: &str) -> Option<(u32, char)> {
    stat_fields(stat).map(|(state, _, group)| (group, state))
}

/// The state, parent and process group of a `/proc/<pid>/stat` line: `pid (comm) state ppid pgrp
/// …`, where `comm` may hold spaces and parentheses, so the fields are counted from its last `)`.
fn stat_fields(stat: &str) -> Option<(char, u32, u32)> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    let group = fields.next()?.parse().ok()?;
    Some((state, ppid, group))
}

/// A port on 127.0.0.1 that was free a moment ago.
pub fn free_port() -> Result<u16, ProcError> {
    let l = TcpListener::bind("127.0.0.1:0").map_err(ProcError::Port)?;
    let port = l.local_addr().map_err(ProcError::Port)?.port();
    Ok(port)
}

/// The directory cargo put this workspace's binaries in: `CARGO_TARGET_DIR`'s (or the workspace's
/// `target/`) profile directory, found from the running test executable (`<dir>/deps/<test>`).
pub fn bin_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap_or_default();
    let deps = exe.parent().map(Path::to_path_buf).unwrap_or_default();
    if deps.file_name().is_some_and(|n| n == "deps") {
        if let Some(profile) = deps.parent() {
            return profile.to_path_buf();
        }
    }
    deps
}

/// The built binary `name` next to the test executable's profile directory.
pub fn binary(name: &str) -> Result<PathBuf, ProcError> {
    let path = bin_dir().join(name);
    if path.is_file() {
        Ok(path)
    } else {
        Err(ProcError::MissingBinary {
            name: name.to_string(),
            path,
        })
    }
}

/// Waits until something accepts TCP connections on `127.0.0.1:port`, checking that process `i`
/// of `procs` is still alive.
pub fn wait_for_port(
    procs: &mut Procs,
    i: usize,
    name: &str,
    port: u16,
    limit: Duration,
) -> Result<(), ProcError> {
    let end = Instant::now() + limit;
    loop {
        procs.check_alive(i)?;
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return Ok(());
        }
        if Instant::now() >= end {
            return Err(ProcError::NotReady {
                name: name.to_string(),
                waited: limit,
            });
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stat_line_gives_its_group_and_state_even_when_the_name_has_parentheses() {
        let line = "4242 (a (b) c) S 1 4240 4240 0 -1 4194560 102 0 0 0";
        assert_eq!(stat_group_and_state(line), Some((4240, 'S')));
        assert_eq!(stat_group_and_state("4242 (x) Z 1"), None);
        assert_eq!(stat_group_and_state("garbage"), None);
        assert_eq!(stat_fields(line), Some(('S', 1, 4240)));
    }

    #[test]
    fn a_signal_to_the_program_reaches_it_and_not_its_timeout() {
        let dir = std::env::temp_dir().join(format!("shareplane-e2e-hup-{}", std::process::id()));
        let mut procs = Procs::new(&dir).unwrap_or_else(|e| panic!("{e}"));
        // A shell that counts SIGHUPs and lives on: sent to the group, `timeout` would forward
        // one (a second HUP) and end it 5 s later.
        let sh = PathBuf::from("sh");
        let script = "n=0; trap 'n=$((n+1)); echo hup $n' HUP; while :; do sleep 0.1; done";
        let i = procs
            .spawn("hup", &sh, &["-c".into(), script.into()], &[])
            .unwrap_or_else(|e| panic!("{e}"));
        std::thread::sleep(Duration::from_millis(300));
        procs.signal_program(i, "HUP");
        std::thread::sleep(Duration::from_millis(6_000));
        let out = procs.stdout(i);
        assert_eq!(out.trim(), "hup 1", "{out}");
        assert!(
            procs.pid(i).is_some_and(group_running),
            "the program died after its SIGHUP"
        );
        drop(procs);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn dropping_stops_every_process_of_every_group() {
        let dir = std::env::temp_dir().join(format!("shareplane-e2e-procs-{}", std::process::id()));
        let mut procs = Procs::new(&dir).unwrap_or_else(|e| panic!("{e}"));
        let sleep = PathBuf::from("sleep");
        let a = procs.spawn("sleep-a", &sleep, &["30".into()], &[]);
        let b = procs.spawn("sleep-b", &sleep, &["30".into()], &[]);
        let pids: Vec<u32> = [a, b]
            .into_iter()
            .map(|i| {
                let i = i.unwrap_or_else(|e| panic!("{e}"));
                procs.pid(i).unwrap_or_else(|| panic!("no pid for {i}"))
            })
            .collect();
        assert!(pids.iter().all(|p| group_running(*p)), "started");
        assert_eq!(procs.check_alive(0).ok(), Some(()));
        drop(procs);
        assert!(
            pids.iter().all(|p| !group_running(*p)),
            "a group survived the drop"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_missing_binary_says_how_to_build_it() {
        let e = binary("no-such-binary-here").err().map(|e| e.to_string());
        assert!(e.is_some_and(|e| e.contains("cargo build -p shareplane")));
    }
}
