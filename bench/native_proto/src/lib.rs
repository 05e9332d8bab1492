//! A measured prototype (issue 23, branch `native`): the `kafka` policy's
//! per-partition leader model (isr/model/partition.py, follower.py, rules.py,
//! stall.py as isr/engine/local.py applies them) for the per-partition event
//! grain: `leader`, `append`, `fetch`. Each rule below names the Python it
//! mirrors; the bench (bench_native.py) checks the decisions are the same.
//!
//! Left out (the bench's streams have none of it; a full core would need it):
//! broker events and eligibility (no broker is ever fenced: Brokers says
//! every fetch is eligible and none stale), bootstrap before a leader event
//! (counted as `unsupported`), fetch_start (KIP-501), min_insync_replicas
//! overrides per event, the time-under-min-ISR tally, the other policies,
//! sessions, listeners/alerts, snapshot/state rows, the sequencer, decode.
//! Partitions are dense integer ids (`pid`) that the caller assigns, or
//! that `apply_file` assigns as it decodes JSON lines itself (serde_json).

use std::borrow::Cow;
use std::collections::HashMap;
use std::io::BufRead;

use pyo3::buffer::PyBuffer;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyList;

const KIND_LEADER: i64 = 0;
const KIND_APPEND: i64 = 1;
const KIND_FETCH: i64 = 2;
const NO_HW: i64 = i64::MIN; // a leader event without `hw`

/// The numbers the `kafka` policy runs with (rules.Rules).
#[derive(Clone, Copy)]
struct Rules {
    lag: i64,      // replica_lag_time_max_ms
    interval: i64, // isr-expiration interval (lag / 2 unless set)
    min_isr: i32,  // min.insync.replicas of every topic
}

/// Kafka's ReplicaState as the leader keeps it (follower.Follower, without
/// broker_epoch and the KIP-501 pending fetch).
#[derive(Clone, Copy)]
struct Follower {
    replica: i32,
    leo: i64,                   // -1: unknown
    last_fetch_leader_leo: i64, // lastFetchLeaderLogEndOffset
    last_fetch_ts: i64,
    last_caught_up_ts: i64, // 0: never caught up
}

impl Follower {
    fn new(replica: i32) -> Self {
        Follower { replica, leo: -1, last_fetch_leader_leo: -1, last_fetch_ts: 0, last_caught_up_ts: 0 }
    }
}

/// One partition as its leader sees it (partition.PartitionModel).
#[derive(Default)]
struct Partition {
    exists: bool,
    leader: i32, // -1: none
    leader_epoch: i32,
    leader_epoch_start_offset: i64,
    hw: i64,
    leader_leo: i64,
    min_isr: i32,
    seq: u32,
    next_check: i64, // the earliest check instant not yet run
    ts: i64,
    leader_active_ts: i64, // -1: none seen
    stall_from: i64,
    stall_check_at: i64, // -1: no stall suspected
    replicas: Vec<i32>,
    isr: Vec<i32>,
    followers: Vec<Follower>, // in assignment order, the leader left out
}

struct Decision {
    pid: u32,
    ts: i64,
    expand: bool,
    leader: i32,
    leader_epoch: i32,
    seq: u32,
    replicas: Vec<i32>,
    isr_before: Vec<i32>,
    isr_after: Vec<i32>,
    hw: i64,
    leader_leo: i64,
    reason: String,
    // (replica, leo, lag_ms (None: never caught up), last_caught_up_ts, last_fetch_ts)
    details: Vec<(i32, i64, Option<i64>, i64, i64)>,
}

fn ceil_to(t: i64, interval: i64) -> i64 {
    -((-t).div_euclid(interval)) * interval
}

/// stall.confirm_by: the last instant a fetch confirms a stall that ended at `resume_ts`.
fn confirm_by(r: &Rules, resume_ts: i64) -> i64 {
    ceil_to(resume_ts + 1, r.interval)
}

/// rules.out_of_sync_from, kafka: LEO equality, else lag (KAFKA-7152).
fn out_of_sync_from(r: &Rules, f: &Follower, leader_leo: i64) -> Option<i64> {
    if f.leo == leader_leo {
        None
    } else {
        Some(f.last_caught_up_ts + r.lag + 1)
    }
}

fn is_out_of_sync(r: &Rules, f: &Follower, leader_leo: i64, now: i64) -> bool {
    matches!(out_of_sync_from(r, f, leader_leo), Some(since) if now >= since)
}

/// rules.lag_ms
fn lag_ms(f: &Follower, leader_leo: i64, now: i64) -> Option<i64> {
    if f.leo == leader_leo && f.leo >= 0 {
        Some(0)
    } else if f.last_caught_up_ts <= 0 {
        None
    } else {
        Some((now - f.last_caught_up_ts).max(0))
    }
}

/// rules.describe_out_of_sync, kafka
fn describe_out_of_sync(r: &Rules, replica: i32, f: &Follower, leader_leo: i64, now: i64) -> String {
    let mut text = if f.last_caught_up_ts > 0 {
        format!("replica {}: lag {} ms > {} ms", replica, now - f.last_caught_up_ts, r.lag)
    } else {
        format!("replica {}: never caught up in this leader epoch", replica)
    };
    text.push_str(&format!("; leo {} != leader_leo {}", f.leo, leader_leo));
    text
}

impl Partition {
    fn follower(&self, replica: i32) -> Option<usize> {
        self.followers.iter().position(|f| f.replica == replica)
    }

    fn isr_follower(&self, replica: i32) -> &Follower {
        &self.followers[self.follower(replica).expect("an ISR member is a follower")]
    }

    fn first_seen(&mut self, r: &Rules, ts: i64) {
        *self = Partition {
            exists: true,
            leader: -1,
            leader_epoch: -1,
            min_isr: r.min_isr,
            next_check: ceil_to(ts, r.interval),
            ts,
            leader_active_ts: -1,
            stall_from: -1,
            stall_check_at: -1,
            ..Default::default()
        };
    }

    fn refresh_min_isr(&mut self, r: &Rules) {
        self.min_isr = if self.replicas.is_empty() { r.min_isr } else { r.min_isr.min(self.replicas.len() as i32) };
    }

    /// PartitionModel.advance: every check at instants T < until (T <= until if inclusive).
    fn advance(&mut self, r: &Rules, until: i64, inclusive: bool, pid: u32, out: &mut Vec<Decision>) {
        if self.stall_check_at >= 0 {
            let deadline = confirm_by(r, self.stall_check_at);
            if until > deadline || (inclusive && until == deadline) {
                self.stall_check_at = -1; // no fetch came in time
                self.stall_from = -1;
            }
        }
        if until < self.next_check || (until == self.next_check && !inclusive) {
            return;
        }
        if self.leader >= 0 {
            while let Some(due) = self.next_shrink_at(r) {
                if due > until || (due == until && !inclusive) {
                    break;
                }
                self.shrink(r, due, String::new(), pid, out);
                self.next_check = due + r.interval;
            }
        }
        let first_unrun = ceil_to(if inclusive { until + 1 } else { until }, r.interval);
        if first_unrun > self.next_check {
            self.next_check = first_unrun;
        }
    }

    /// PartitionModel._next_shrink_at: the first check instant that shrinks if nothing else comes.
    fn next_shrink_at(&self, r: &Rules) -> Option<i64> {
        let mut best: Option<i64> = None;
        for &x in &self.isr {
            if x == self.leader {
                continue;
            }
            if let Some(since) = out_of_sync_from(r, self.isr_follower(x), self.leader_leo) {
                if best.map_or(true, |b| since < b) {
                    best = Some(since);
                }
            }
        }
        best.map(|b| self.next_check.max(ceil_to(b, r.interval)))
    }

    /// PartitionModel._step_to
    fn step_to(&mut self, r: &Rules, ts: i64, pid: u32, out: &mut Vec<Decision>) {
        if self.stall_check_at >= 0 && ts > confirm_by(r, self.stall_check_at) {
            self.stall_check_at = -1;
            self.stall_from = -1;
        }
        if ts > self.next_check {
            self.advance(r, ts, false, pid, out);
        }
        if ts > self.ts {
            self.ts = ts;
        }
    }

    /// PartitionModel._note_activity (with stall.suspects_stall)
    fn note_activity(&mut self, r: &Rules, ts: i64) {
        let last = self.leader_active_ts;
        if last >= 0
            && self.stall_check_at < 0
            && ts - last > r.lag
            && self
                .isr
                .iter()
                .any(|&x| x != self.leader && self.isr_follower(x).last_fetch_ts >= last - r.lag)
        {
            self.stall_from = last;
            self.stall_check_at = ts;
        }
        self.leader_active_ts = ts;
    }

    /// PartitionModel._resume_check: Kafka's overdue isr-expiration run after the leader's stall.
    fn resume_check(&mut self, r: &Rules, at: i64, pid: u32, out: &mut Vec<Decision>) {
        let (since, resumed) = (self.stall_from, self.stall_check_at);
        self.stall_check_at = -1;
        self.stall_from = -1;
        if self.next_check == at {
            self.next_check = at + r.interval;
        }
        if self.leader < 0 {
            return;
        }
        let leader_leo = self.leader_leo;
        if self
            .isr
            .iter()
            .any(|&x| x != self.leader && is_out_of_sync(r, self.isr_follower(x), leader_leo, at))
        {
            let why = format!("leader {} resumed after {} ms without activity: ", self.leader, resumed - since);
            self.shrink(r, at, why, pid, out);
        }
    }

    /// PartitionModel._recompute_hw: min LEO over the holders, forward only (kafka: modern).
    fn recompute_hw(&mut self, r: &Rules, now: i64) {
        if (self.isr.len() as i32) < self.min_isr {
            return; // strict min ISR (KAFKA-15583)
        }
        let leader_leo = self.leader_leo;
        let mut candidate = leader_leo;
        for f in &self.followers {
            if f.leo >= candidate {
                continue;
            }
            if self.isr.contains(&f.replica) || f.leo == leader_leo || now - f.last_caught_up_ts <= r.lag {
                candidate = f.leo;
            }
        }
        if candidate > self.hw {
            self.hw = candidate;
        }
    }

    fn shrink(&mut self, r: &Rules, at: i64, why: String, pid: u32, out: &mut Vec<Decision>) {
        let leader_leo = self.leader_leo;
        let removed: Vec<i32> = self
            .isr
            .iter()
            .copied()
            .filter(|&x| x != self.leader && is_out_of_sync(r, self.isr_follower(x), leader_leo, at))
            .collect();
        let described: Vec<String> = removed
            .iter()
            .map(|&x| describe_out_of_sync(r, x, self.isr_follower(x), leader_leo, at))
            .collect();
        let reason = why + &described.join("; ");
        if at > self.ts {
            self.ts = at;
        }
        let after: Vec<i32> = self.isr.iter().copied().filter(|x| !removed.contains(x)).collect();
        self.change_isr(r, at, false, removed, after, reason, at, pid, out);
    }

    /// PartitionModel._change_isr: commit, recompute the HW, record.
    #[allow(clippy::too_many_arguments)]
    fn change_isr(&mut self, r: &Rules, now: i64, expand: bool, replicas: Vec<i32>, after: Vec<i32>,
                  reason: String, at: i64, pid: u32, out: &mut Vec<Decision>) {
        let before = std::mem::replace(&mut self.isr, after);
        self.recompute_hw(r, now);
        self.seq += 1;
        let leader_leo = self.leader_leo;
        let details = replicas
            .iter()
            .map(|&x| {
                let f = self.isr_follower(x);
                (x, f.leo, lag_ms(f, leader_leo, at), f.last_caught_up_ts, f.last_fetch_ts)
            })
            .collect();
        out.push(Decision {
            pid, ts: at, expand, leader: self.leader, leader_epoch: self.leader_epoch, seq: self.seq,
            replicas, isr_before: before, isr_after: self.isr.clone(), hw: self.hw, leader_leo, reason, details,
        });
    }
}

/// Outcome counters (the engine's `ignored` tally and its rejections).
#[derive(Default)]
struct Counts {
    ignored: u64,
    rejected: u64,
    unsupported: u64, // a partition's first event is not a leader event (bootstrap: left out)
}

#[pyclass(module = "isr_native_proto")]
struct Model {
    rules: Rules,
    parts: Vec<Partition>,
    decisions: Vec<Decision>,
    counts: Counts,
}

impl Model {
    /// PartitionModel._on_leader (no bootstrap), after first_seen and _step_to.
    #[allow(clippy::too_many_arguments)]
    fn on_leader(&mut self, ts: i64, pid: u32, leader: i32, leader_epoch: i32, start: i64, hw: i64,
                 replicas: &[i32], isr_in: &[i32]) {
        let r = self.rules;
        let Model { parts, decisions, counts, .. } = self;
        let p = {
            let i = pid as usize;
            if i >= parts.len() {
                parts.resize_with(i + 1, Partition::default);
            }
            &mut parts[i]
        };
        if !p.exists {
            p.first_seen(&r, ts);
        }
        p.step_to(&r, ts, pid, decisions);
        p.stall_check_at = -1;
        p.stall_from = -1;
        if leader_epoch < p.leader_epoch {
            counts.ignored += 1;
            return;
        }
        let new_epoch = leader_epoch > p.leader_epoch;
        if !new_epoch && leader != p.leader {
            counts.rejected += 1;
            return;
        }
        let mut isr: Vec<i32> = isr_in.to_vec();
        if !isr.contains(&leader) {
            isr.insert(0, leader);
        }
        if new_epoch {
            p.leader_epoch_start_offset = start;
            p.leader_leo = start;
            p.hw = if hw != NO_HW { hw } else { p.hw.min(p.leader_leo) };
            // _reset_followers: Kafka's resetReplicaState on a new leader epoch (KAFKA-13790)
            let new_leader = leader != p.leader;
            let old = std::mem::take(&mut p.followers);
            p.followers = replicas
                .iter()
                .filter(|&&x| x != leader)
                .map(|&x| {
                    let t0 = if isr.contains(&x) { ts } else { 0 };
                    if new_leader {
                        Follower { last_caught_up_ts: t0, ..Follower::new(x) }
                    } else {
                        let kept = old.iter().find(|f| f.replica == x);
                        Follower {
                            replica: x,
                            leo: kept.map_or(-1, |f| f.leo),
                            last_fetch_leader_leo: start,
                            last_fetch_ts: t0,
                            last_caught_up_ts: t0,
                        }
                    }
                })
                .collect();
        } else {
            let old = std::mem::take(&mut p.followers);
            p.followers = replicas
                .iter()
                .filter(|&&x| x != leader)
                .map(|&x| old.iter().find(|f| f.replica == x).copied().unwrap_or_else(|| Follower::new(x)))
                .collect();
        }
        if leader != p.leader {
            p.leader_active_ts = -1;
        }
        p.leader = leader;
        p.leader_epoch = leader_epoch;
        p.replicas = replicas.to_vec();
        p.isr = isr;
        p.refresh_min_isr(&r);
        p.recompute_hw(&r, ts);
    }

    /// PartitionModel.apply of an `append`.
    fn on_append(&mut self, ts: i64, pid: u32, leader: i32, leader_epoch: i32, leader_leo: i64) {
        let r = self.rules;
        let Model { parts, decisions, counts, .. } = self;
        let p = match parts.get_mut(pid as usize) {
            Some(p) if p.exists => p,
            _ => {
                counts.unsupported += 1;
                return;
            }
        };
        p.step_to(&r, ts, pid, decisions);
        let stale = leader_epoch != p.leader_epoch || leader != p.leader;
        if p.leader < 0 || stale {
            counts.ignored += 1;
            return;
        }
        if ts > p.leader_active_ts {
            p.note_activity(&r, ts); // (an append does not confirm a stall: only a fetch does)
        }
        if leader_leo > p.leader_leo {
            p.leader_leo = leader_leo;
        }
        p.recompute_hw(&r, ts);
    }

    /// PartitionModel.apply_fetch (Kafka's updateFollowerFetchState).
    #[allow(clippy::too_many_arguments)]
    fn on_fetch(&mut self, ts: i64, pid: u32, replica: i32, leader: i32, leader_epoch: i32, fetch_ts: i64,
                fetch_offset: i64, fetch_leader_leo: i64) {
        let r = self.rules;
        let Model { parts, decisions, counts, .. } = self;
        let p = match parts.get_mut(pid as usize) {
            Some(p) if p.exists => p,
            _ => {
                counts.unsupported += 1;
                return;
            }
        };
        if ts > p.next_check || p.stall_check_at >= 0 {
            p.step_to(&r, ts, pid, decisions);
        } else if ts > p.ts {
            p.ts = ts;
        }
        if p.leader < 0 || leader_epoch != p.leader_epoch || leader != p.leader {
            counts.ignored += 1;
            return;
        }
        let last = p.leader_active_ts;
        if ts > last {
            if last >= 0 && ts - last > r.lag {
                p.note_activity(&r, ts);
            } else {
                p.leader_active_ts = ts;
            }
        }
        if p.stall_check_at >= 0 {
            p.resume_check(&r, ts, pid, decisions);
        }
        let i = match p.follower(replica) {
            Some(i) => i,
            None => {
                counts.rejected += 1;
                return;
            }
        };
        let f = &mut p.followers[i];
        // KAFKA-4485: caught up at this fetch if it reached the LEO it saw; at
        // the previous fetch if it reached the LEO the previous one saw.
        if fetch_offset >= fetch_leader_leo {
            if fetch_ts > f.last_caught_up_ts {
                f.last_caught_up_ts = fetch_ts;
            }
        } else if fetch_offset >= f.last_fetch_leader_leo && f.last_fetch_ts > f.last_caught_up_ts {
            f.last_caught_up_ts = f.last_fetch_ts;
        }
        let previous_leo = f.leo;
        f.leo = fetch_offset; // may go down after truncation: no max
        if fetch_leader_leo > f.last_fetch_leader_leo {
            f.last_fetch_leader_leo = fetch_leader_leo;
        }
        f.last_fetch_ts = fetch_ts;
        let leo = f.leo;
        if fetch_leader_leo > p.leader_leo {
            p.leader_leo = fetch_leader_leo;
        }
        // canAddReplicaToIsr + isFollowerInSync (eligibility: no broker events here)
        if !p.isr.contains(&replica) && leo >= p.hw && leo >= p.leader_epoch_start_offset {
            let reason = format!("replica {}: leo {} >= hw {} and >= leader_epoch_start_offset {}",
                                 replica, leo, p.hw, p.leader_epoch_start_offset);
            let mut after = p.isr.clone();
            after.push(replica);
            p.change_isr(&r, fetch_ts, true, vec![replica], after, reason, ts, pid, decisions);
        } else if leo != previous_leo {
            p.recompute_hw(&r, fetch_ts);
        }
    }
}

/// One JSON line of the per-partition grain, as `apply_file` reads it
/// (unknown fields ignored; no contract validation).
#[derive(serde::Deserialize)]
struct JsonEvent<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    ts: i64,
    #[serde(borrow, default)]
    cluster: Option<Cow<'a, str>>,
    #[serde(borrow)]
    topic: Cow<'a, str>,
    partition: i64,
    leader: i32,
    leader_epoch: i32,
    replica: Option<i32>,
    fetch_offset: Option<i64>,
    leader_leo: Option<i64>,
    received_ts: Option<i64>,
    replicas: Option<Vec<i32>>,
    isr: Option<Vec<i32>>,
    leader_epoch_start_offset: Option<i64>,
    hw: Option<i64>,
}

fn column<'a>(buf: &'a PyBuffer<i64>, py: Python<'a>, n: usize, name: &str) -> PyResult<&'a [pyo3::buffer::ReadOnlyCell<i64>]> {
    let s = buf.as_slice(py).ok_or_else(|| PyValueError::new_err(format!("{name}: not a contiguous int64 buffer")))?;
    if s.len() != n {
        return Err(PyValueError::new_err(format!("{name}: {} values, not {n}", s.len())));
    }
    Ok(s)
}

#[pymethods]
impl Model {
    #[new]
    #[pyo3(signature = (replica_lag_time_max_ms=30000, isr_expiration_interval_ms=None, min_insync_replicas=1))]
    fn py_new(replica_lag_time_max_ms: i64, isr_expiration_interval_ms: Option<i64>, min_insync_replicas: i32) -> Self {
        let interval = isr_expiration_interval_ms.filter(|&v| v > 0).unwrap_or(replica_lag_time_max_ms / 2).max(1);
        Model {
            rules: Rules { lag: replica_lag_time_max_ms, interval, min_isr: min_insync_replicas },
            parts: Vec::new(),
            decisions: Vec::new(),
            counts: Counts::default(),
        }
    }

    /// A `leader` event (hw None: not sent).
    #[pyo3(signature = (ts, pid, leader, leader_epoch, leader_epoch_start_offset, replicas, isr, hw=None))]
    #[allow(clippy::too_many_arguments)]
    fn leader(&mut self, ts: i64, pid: u32, leader: i32, leader_epoch: i32, leader_epoch_start_offset: i64,
              replicas: Vec<i32>, isr: Vec<i32>, hw: Option<i64>) {
        self.on_leader(ts, pid, leader, leader_epoch, leader_epoch_start_offset, hw.unwrap_or(NO_HW), &replicas, &isr);
    }

    fn append(&mut self, ts: i64, pid: u32, leader: i32, leader_epoch: i32, leader_leo: i64) {
        self.on_append(ts, pid, leader, leader_epoch, leader_leo);
    }

    #[allow(clippy::too_many_arguments)]
    fn fetch(&mut self, ts: i64, pid: u32, replica: i32, leader: i32, leader_epoch: i32, fetch_ts: i64,
             fetch_offset: i64, leader_leo: i64) {
        self.on_fetch(ts, pid, replica, leader, leader_epoch, fetch_ts, fetch_offset, leader_leo);
    }

    /// A whole batch as int64 columns (array('q') or anything with the
    /// buffer protocol), in apply order. kind: 0 leader, 1 append, 2 fetch.
    /// A leader event's `replica` is its index in `assignments` (a list of
    /// (replicas, isr)), its `offset` the leader_epoch_start_offset, its
    /// `leader_leo` its hw (i64 min: none).
    #[allow(clippy::too_many_arguments)]
    fn apply_batch<'py>(&mut self, py: Python<'py>, kind: PyBuffer<i64>, ts: PyBuffer<i64>, pid: PyBuffer<i64>,
                   leader: PyBuffer<i64>, leader_epoch: PyBuffer<i64>, replica: PyBuffer<i64>,
                   fetch_ts: PyBuffer<i64>, offset: PyBuffer<i64>, leader_leo: PyBuffer<i64>,
                   assignments: Vec<(Vec<i32>, Vec<i32>)>) -> PyResult<()> {
        let n = kind.item_count();
        let (k, t, p, l, e, r, ft, o, leo) = (
            column(&kind, py, n, "kind")?, column(&ts, py, n, "ts")?, column(&pid, py, n, "pid")?,
            column(&leader, py, n, "leader")?, column(&leader_epoch, py, n, "leader_epoch")?,
            column(&replica, py, n, "replica")?, column(&fetch_ts, py, n, "fetch_ts")?,
            column(&offset, py, n, "offset")?, column(&leader_leo, py, n, "leader_leo")?,
        );
        for i in 0..n {
            let (ts, pid, leader, epoch) = (t[i].get(), p[i].get() as u32, l[i].get() as i32, e[i].get() as i32);
            match k[i].get() {
                KIND_FETCH => self.on_fetch(ts, pid, r[i].get() as i32, leader, epoch, ft[i].get(), o[i].get(), leo[i].get()),
                KIND_APPEND => self.on_append(ts, pid, leader, epoch, leo[i].get()),
                KIND_LEADER => {
                    let (replicas, isr) = assignments
                        .get(r[i].get() as usize)
                        .ok_or_else(|| PyValueError::new_err("leader event: no such assignment"))?;
                    self.on_leader(ts, pid, leader, epoch, o[i].get(), leo[i].get(), replicas, isr);
                }
                other => return Err(PyValueError::new_err(format!("event kind {other}"))),
            }
        }
        Ok(())
    }

    /// A whole file of JSON lines decoded here (serde_json) and applied:
    /// (the last ts, the (cluster, topic, partition) of each pid).
    fn apply_file(&mut self, path: &str) -> PyResult<(i64, Vec<(String, String, i64)>)> {
        let bad = |e: String| PyValueError::new_err(e);
        let file = std::fs::File::open(path).map_err(|e| bad(e.to_string()))?;
        let mut reader = std::io::BufReader::with_capacity(1 << 20, file);
        let mut pids: HashMap<String, u32> = HashMap::new();
        let mut keys: Vec<(String, String, i64)> = Vec::new();
        let (mut line, mut key, mut max_ts) = (Vec::new(), String::new(), i64::MIN);
        loop {
            line.clear();
            if reader.read_until(b'\n', &mut line).map_err(|e| bad(e.to_string()))? == 0 {
                break;
            }
            let e: JsonEvent = serde_json::from_slice(&line).map_err(|e| bad(e.to_string()))?;
            let cluster = e.cluster.as_deref().unwrap_or("default");
            key.clear();
            key.push_str(cluster);
            key.push('\0');
            key.push_str(&e.topic);
            key.push('\0');
            key.push_str(&e.partition.to_string());
            let pid = match pids.get(key.as_str()) {
                Some(&p) => p,
                None => {
                    let p = keys.len() as u32;
                    pids.insert(key.clone(), p);
                    keys.push((cluster.to_string(), e.topic.to_string(), e.partition));
                    p
                }
            };
            max_ts = max_ts.max(e.ts);
            let need = |v: Option<i64>, name: &str| v.ok_or_else(|| bad(format!("{} event without {name}", e.kind)));
            match e.kind.as_ref() {
                "fetch" => self.on_fetch(
                    e.ts, pid, e.replica.ok_or_else(|| bad("fetch without replica".into()))?, e.leader,
                    e.leader_epoch, e.received_ts.unwrap_or(e.ts), need(e.fetch_offset, "fetch_offset")?,
                    need(e.leader_leo, "leader_leo")?),
                "append" => self.on_append(e.ts, pid, e.leader, e.leader_epoch, need(e.leader_leo, "leader_leo")?),
                "leader" => {
                    let replicas = e.replicas.as_deref().unwrap_or(&[]);
                    let isr = e.isr.as_deref().unwrap_or(&[]);
                    self.on_leader(e.ts, pid, e.leader, e.leader_epoch,
                                   need(e.leader_epoch_start_offset, "leader_epoch_start_offset")?,
                                   e.hw.unwrap_or(NO_HW), replicas, isr);
                }
                other => return Err(bad(format!("{other}: not in this prototype"))),
            }
        }
        Ok((max_ts, keys))
    }

    /// The checks of every partition up to `until` (inclusive): the end of the input.
    fn finish(&mut self, until: i64) {
        let r = self.rules;
        let Model { parts, decisions, .. } = self;
        for (pid, p) in parts.iter_mut().enumerate() {
            if p.exists {
                p.advance(&r, until, true, pid as u32, decisions);
            }
        }
    }

    /// The isr_change decisions taken so far, as tuples: ((pid, ts, action,
    /// leader, leader_epoch, seq), (replicas, isr_before, isr_after), (hw,
    /// leader_leo, reason, details)).
    fn take_decisions<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let taken = std::mem::take(&mut self.decisions);
        let items = taken.into_iter().map(|d| {
            ((d.pid, d.ts, if d.expand { "expand" } else { "shrink" }, d.leader, d.leader_epoch, d.seq),
             (d.replicas, d.isr_before, d.isr_after), (d.hw, d.leader_leo, d.reason, d.details))
        });
        PyList::new(py, items)
    }

    /// (ignored, rejected, unsupported) events.
    fn counts(&self) -> (u64, u64, u64) {
        (self.counts.ignored, self.counts.rejected, self.counts.unsupported)
    }

    /// (partitions, bytes held for them): the partitions' slots and what their vectors hold.
    fn memory(&self) -> (usize, usize) {
        let heap: usize = self
            .parts
            .iter()
            .map(|p| {
                p.replicas.capacity() * 4 + p.isr.capacity() * 4
                    + p.followers.capacity() * std::mem::size_of::<Follower>()
            })
            .sum();
        let count = self.parts.iter().filter(|p| p.exists).count();
        (count, self.parts.capacity() * std::mem::size_of::<Partition>() + heap)
    }
}

#[pymodule]
fn isr_native_proto(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Model>()?;
    Ok(())
}
