//! The sampler: polls every power source at a fixed rate into a ring buffer
//! and a broadcast channel, and learns each sensor's real update period.
//!
//! Fast sources (sysfs, NVML, RAPL) share one thread polled at the
//! configured rate (default 20 Hz, up to 1 kHz); each slow source (a tool
//! started per poll: `rocm-smi`, `amd-smi`, `ipmitool`) gets its own thread
//! and interval so a hanging tool delays only itself. Every sample is
//! stamped on CLOCK_MONOTONIC right after its read, the clock the workers'
//! kernel-window markers use, so a run's trace is cut by comparing numbers.
//!
//! A sensor rarely updates as often as it is read: the sampler counts how
//! often each channel's watts actually change and reports the period that
//! implies, which decides how long a kernel window must be for an energy
//! figure to mean anything (see [`super::energy::required_window_s`]).

use super::{Channel, ChannelReading, PollError, PowerSource, Reading, Scope};
use crate::host::pci::normalize_pci;
use crate::isolation::{clock_ns, monotonic_ns, unix_now_s};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tokio::sync::broadcast;

/// Highest sampling rate accepted.
pub const MAX_RATE_HZ: f64 = 1000.0;

/// One reading of one channel with its timestamps.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// Index into [`Sampler::channels`].
    pub channel: usize,
    pub monotonic_ns: u64,
    pub wall_unix_s: f64,
    pub reading: Reading,
}

/// A channel as the sampler knows it: its source and its static facts.
#[derive(Debug, Clone, PartialEq)]
pub struct ChannelRef {
    pub source: &'static str,
    pub channel: Channel,
    /// Polled by a slow-source thread at the command interval.
    pub slow: bool,
}

/// Live state of a channel for Describe.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ChannelStatus {
    /// Measured update period of the watts, once a few changes were seen.
    pub measured_period: Option<Duration>,
    /// The last poll error, if the last poll failed.
    pub last_error: Option<String>,
    /// Set when the source failed for good; polling stopped.
    pub stopped: Option<String>,
    pub samples: u64,
}

/// CPU cost of the fast sampler thread.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Cost {
    pub ticks: u64,
    pub cpu_s: f64,
    pub wall_s: f64,
}

impl Cost {
    /// CPU time as a percentage of one core over the wall time.
    pub fn cpu_pct(&self) -> f64 {
        if self.wall_s > 0.0 {
            self.cpu_s / self.wall_s * 100.0
        } else {
            0.0
        }
    }
}

/// Counts value changes to learn a sensor's update period.
#[derive(Debug, Clone, Default)]
struct PeriodTracker {
    last: Option<f64>,
    first_change_ns: u64,
    last_change_ns: u64,
    changes: u64,
}

impl PeriodTracker {
    fn observe(&mut self, t_ns: u64, value: Option<f64>) {
        let Some(v) = value else { return };
        if let Some(prev) = self.last
            && prev != v
        {
            if self.changes == 0 {
                self.first_change_ns = t_ns;
            }
            self.last_change_ns = t_ns;
            self.changes += 1;
        }
        self.last = Some(v);
    }

    fn period(&self) -> Option<Duration> {
        (self.changes >= 3).then(|| {
            Duration::from_nanos(
                (self.last_change_ns - self.first_change_ns) / (self.changes - 1).max(1),
            )
        })
    }
}

struct Shared {
    channels: Vec<ChannelRef>,
    status: Mutex<Vec<(PeriodTracker, ChannelStatus)>>,
    ring: Mutex<VecDeque<Sample>>,
    capacity: usize,
    tx: broadcast::Sender<Sample>,
    cost: Mutex<Cost>,
    stop: AtomicBool,
    /// Set by [`Sampler::want_counter`]; the fast loop passes it on.
    counter_wanted: AtomicBool,
}

impl Shared {
    fn record(&self, first_channel: usize, readings: Vec<ChannelReading>) {
        let t = monotonic_ns();
        let wall = unix_now_s();
        let mut status = self.status.lock().expect("sampler status lock");
        let mut ring = self.ring.lock().expect("sampler ring lock");
        for ChannelReading { channel, reading } in readings {
            let channel = first_channel + channel;
            let Some((tracker, st)) = status.get_mut(channel) else {
                continue;
            };
            tracker.observe(t, reading.watts);
            st.measured_period = tracker.period();
            st.last_error = None;
            st.samples += 1;
            let sample = Sample {
                channel,
                monotonic_ns: t,
                wall_unix_s: wall,
                reading,
            };
            if ring.len() == self.capacity {
                ring.pop_front();
            }
            ring.push_back(sample.clone());
            // No receiver is fine: nobody is streaming.
            let _ = self.tx.send(sample);
        }
    }

    fn failed(&self, first_channel: usize, count: usize, e: &PollError) {
        let mut status = self.status.lock().expect("sampler status lock");
        for (_, st) in status.iter_mut().skip(first_channel).take(count) {
            match e {
                PollError::Retry(m) => st.last_error = Some(m.clone()),
                PollError::Fatal(m) => st.stopped = Some(m.clone()),
            }
        }
    }
}

/// Sampler settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SamplerConfig {
    /// Fast-source rate in Hz, clamped to (0, [`MAX_RATE_HZ`]].
    pub rate_hz: f64,
    /// Interval between polls of a slow source.
    pub slow_interval: Duration,
    /// How far back the ring buffer reaches at the fast rate.
    pub history: Duration,
}

impl Default for SamplerConfig {
    fn default() -> Self {
        SamplerConfig {
            rate_hz: 20.0,
            slow_interval: Duration::from_secs(1),
            history: Duration::from_secs(900),
        }
    }
}

/// The running sampler. Dropping it stops the threads.
pub struct Sampler {
    shared: Arc<Shared>,
    rate_hz: f64,
    fast: Option<JoinHandle<()>>,
}

struct Group {
    first_channel: usize,
    source: Box<dyn PowerSource>,
    dead: bool,
}

impl Group {
    fn poll(&mut self, shared: &Shared) {
        if self.dead {
            return;
        }
        let n = self.source.channels().len();
        match self.source.poll() {
            Ok(r) => shared.record(self.first_channel, r),
            Err(e) => {
                self.dead = matches!(e, PollError::Fatal(_));
                if self.dead {
                    tracing::warn!(source = self.source.name(), "power source stopped: {e}");
                }
                shared.failed(self.first_channel, n, &e);
            }
        }
    }
}

impl Sampler {
    /// Starts polling `sources`. With no sources no thread is started.
    pub fn start(sources: Vec<Box<dyn PowerSource>>, config: SamplerConfig) -> Sampler {
        let rate_hz = if config.rate_hz.is_finite() && config.rate_hz > 0.0 {
            config.rate_hz.min(MAX_RATE_HZ)
        } else {
            SamplerConfig::default().rate_hz
        };
        let mut channels = Vec::new();
        let mut fast = Vec::new();
        let mut slow = Vec::new();
        for source in sources {
            let group = Group {
                first_channel: channels.len(),
                dead: false,
                source,
            };
            let is_slow = group.source.slow();
            channels.extend(group.source.channels().iter().map(|c| ChannelRef {
                source: group.source.name(),
                channel: c.clone(),
                slow: is_slow,
            }));
            if is_slow { &mut slow } else { &mut fast }.push(group);
        }
        let per_s = rate_hz * channels.len().max(1) as f64;
        let capacity = ((per_s * config.history.as_secs_f64()) as usize).clamp(1024, 2_000_000);
        let (tx, _) = broadcast::channel(4096);
        let shared = Arc::new(Shared {
            status: Mutex::new(vec![Default::default(); channels.len()]),
            channels,
            ring: Mutex::new(VecDeque::with_capacity(capacity.min(65536))),
            capacity,
            tx,
            cost: Mutex::new(Cost::default()),
            stop: AtomicBool::new(false),
            counter_wanted: AtomicBool::new(false),
        });
        for mut group in slow {
            let shared = shared.clone();
            let interval = config.slow_interval;
            let name = format!("power-{}", group.source.name());
            // Detached: a tool call in flight may take its whole timeout, and
            // dropping the sampler must not wait for it.
            let _ = std::thread::Builder::new().name(name).spawn(move || {
                while !shared.stop.load(Ordering::Relaxed) && !group.dead {
                    let started = Instant::now();
                    group.poll(&shared);
                    sleep_until(&shared.stop, started + interval);
                }
            });
        }
        let fast = (!fast.is_empty()).then(|| {
            let shared = shared.clone();
            let period = Duration::from_secs_f64(1.0 / rate_hz);
            std::thread::Builder::new()
                .name("power-sampler".into())
                .spawn(move || fast_loop(fast, &shared, period))
                .expect("spawning the power sampler thread")
        });
        Sampler {
            shared,
            rate_hz,
            fast,
        }
    }

    /// Every channel, in sample index order.
    pub fn channels(&self) -> &[ChannelRef] {
        &self.shared.channels
    }

    /// The fast-source rate in Hz.
    pub fn rate_hz(&self) -> f64 {
        self.rate_hz
    }

    /// Live state of channel `index`.
    pub fn status(&self, index: usize) -> ChannelStatus {
        self.shared
            .status
            .lock()
            .expect("sampler status lock")
            .get(index)
            .map(|(_, s)| s.clone())
            .unwrap_or_default()
    }

    /// Asks every source to read its energy counter at the next poll (see
    /// [`PowerSource::want_counter`]).
    pub fn want_counter(&self) {
        self.shared.counter_wanted.store(true, Ordering::Relaxed);
    }

    /// The period to assume for channel `index`: measured when known, else
    /// the source's nominal one, never shorter than the polling interval.
    pub fn effective_period(&self, index: usize) -> Duration {
        let Some(c) = self.shared.channels.get(index) else {
            return Duration::from_secs(1);
        };
        let poll = if c.slow {
            Duration::from_secs(1)
        } else {
            Duration::from_secs_f64(1.0 / self.rate_hz)
        };
        self.status(index)
            .measured_period
            .unwrap_or(c.channel.nominal_period)
            .max(poll)
    }

    /// Samples of `channel` with `from_ns <= t <= to_ns`, oldest first.
    pub fn trace(&self, channel: usize, from_ns: u64, to_ns: u64) -> Vec<Sample> {
        self.shared
            .ring
            .lock()
            .expect("sampler ring lock")
            .iter()
            .filter(|s| {
                s.channel == channel && s.monotonic_ns >= from_ns && s.monotonic_ns <= to_ns
            })
            .cloned()
            .collect()
    }

    /// A live feed of every new sample.
    pub fn subscribe(&self) -> broadcast::Receiver<Sample> {
        self.shared.tx.subscribe()
    }

    /// CPU cost of the fast thread so far.
    pub fn cost(&self) -> Cost {
        *self.shared.cost.lock().expect("sampler cost lock")
    }

    /// The best channel for a device: one with its PCI id (energy counters
    /// first, then fast sources, then probe order); for a device without a
    /// PCI id (the CPU), the first package-scope channel without one (RAPL).
    pub fn channel_for(&self, pci_bus_id: &str, is_cpu: bool) -> Option<usize> {
        let chans = &self.shared.channels;
        if !pci_bus_id.is_empty() {
            let want = normalize_pci(pci_bus_id)?;
            return chans
                .iter()
                .enumerate()
                .filter(|(_, c)| c.channel.pci_bus_id == want)
                .min_by_key(|(i, c)| (!c.channel.energy_counter, c.slow, *i))
                .map(|(i, _)| i);
        }
        if is_cpu {
            return chans.iter().position(|c| {
                c.channel.pci_bus_id.is_empty() && c.channel.scope == Scope::Package
            });
        }
        None
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.fast.take() {
            let _ = t.join();
        }
    }
}

/// Sleeps until `deadline` in short steps so a stop request is seen soon.
fn sleep_until(stop: &AtomicBool, deadline: Instant) {
    loop {
        let now = Instant::now();
        if now >= deadline || stop.load(Ordering::Relaxed) {
            return;
        }
        std::thread::sleep((deadline - now).min(Duration::from_millis(100)));
    }
}

fn thread_cpu_ns() -> u64 {
    clock_ns(libc::CLOCK_THREAD_CPUTIME_ID)
}

fn fast_loop(mut groups: Vec<Group>, shared: &Shared, period: Duration) {
    let start = Instant::now();
    let cpu0 = thread_cpu_ns();
    let mut next = start;
    let mut ticks = 0u64;
    while !shared.stop.load(Ordering::Relaxed) {
        let want = shared.counter_wanted.swap(false, Ordering::Relaxed);
        for g in &mut groups {
            if want {
                g.source.want_counter();
            }
            g.poll(shared);
        }
        ticks += 1;
        if ticks.is_multiple_of(16) || ticks < 16 {
            *shared.cost.lock().expect("sampler cost lock") = Cost {
                ticks,
                cpu_s: (thread_cpu_ns() - cpu0) as f64 * 1e-9,
                wall_s: start.elapsed().as_secs_f64(),
            };
        }
        // Fixed-rate schedule; a late tick is skipped, not bunched.
        next += period;
        let now = Instant::now();
        if next < now {
            let behind = (now - next).as_nanos() / period.as_nanos().max(1);
            next += period * (behind as u32 + 1);
        }
        sleep_until(&shared.stop, next);
    }
}

#[cfg(test)]
mod tests;
