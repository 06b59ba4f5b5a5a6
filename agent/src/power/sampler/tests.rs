//! Tests of [`super`] (`power/sampler.rs`).

use super::*;

/// A source whose watts step up by one every `every` polls.
struct Stepping {
    channels: Vec<Channel>,
    polls: u64,
    every: u64,
    fail_after: Option<u64>,
}

impl PowerSource for Stepping {
    fn name(&self) -> &'static str {
        "stepping"
    }
    fn channels(&self) -> &[Channel] {
        &self.channels
    }
    fn poll(&mut self) -> Result<Vec<ChannelReading>, PollError> {
        self.polls += 1;
        if self.fail_after.is_some_and(|n| self.polls > n) {
            return Err(PollError::Fatal("device removed".into()));
        }
        Ok(vec![ChannelReading {
            channel: 0,
            reading: Reading {
                watts: Some((self.polls / self.every) as f64),
                ..Default::default()
            },
        }])
    }
}

fn channel(pci: &str, scope: Scope, counter: bool) -> Channel {
    Channel {
        pci_bus_id: pci.into(),
        scope,
        label: String::new(),
        energy_counter: counter,
        power_cap_w: None,
        nominal_period: Duration::from_secs(1),
    }
}

#[test]
fn period_tracker_counts_changes() {
    let mut p = PeriodTracker::default();
    for i in 0..100u64 {
        // Changes every 5 polls of 10 ms: a 50 ms sensor.
        p.observe(i * 10_000_000, Some((i / 5) as f64));
    }
    assert_eq!(p.period(), Some(Duration::from_millis(50)));
    let mut flat = PeriodTracker::default();
    flat.observe(0, Some(1.0));
    flat.observe(1, Some(1.0));
    assert_eq!(flat.period(), None);
}

#[test]
fn samples_reach_the_ring_and_subscribers_and_the_period_is_learned() {
    let src = Stepping {
        channels: vec![channel("0000:03:00.0", Scope::Asic, false)],
        polls: 0,
        every: 4,
        fail_after: None,
    };
    let sampler = Sampler::start(
        vec![Box::new(src)],
        SamplerConfig {
            rate_hz: 200.0,
            ..Default::default()
        },
    );
    let mut rx = sampler.subscribe();
    let t0 = monotonic_ns();
    std::thread::sleep(Duration::from_millis(400));
    let trace = sampler.trace(0, 0, u64::MAX);
    assert!(trace.len() >= 20, "only {} samples at 200 Hz", trace.len());
    assert!(
        trace
            .windows(2)
            .all(|w| w[0].monotonic_ns <= w[1].monotonic_ns)
    );
    assert!(trace.iter().all(|s| s.monotonic_ns >= t0 - 1_000_000_000));
    assert!(rx.try_recv().is_ok());
    // 4 polls at 5 ms: about 20 ms between changes.
    let p = sampler.status(0).measured_period.unwrap();
    assert!(
        p >= Duration::from_millis(15) && p <= Duration::from_millis(40),
        "{p:?}"
    );
    assert!(sampler.effective_period(0) >= Duration::from_millis(15));
    let cost = sampler.cost();
    assert!(cost.ticks > 0 && cost.wall_s > 0.0);
}

#[test]
fn a_fatal_error_stops_the_source_and_says_why() {
    let src = Stepping {
        channels: vec![channel("", Scope::Package, true)],
        polls: 0,
        every: 1,
        fail_after: Some(3),
    };
    let sampler = Sampler::start(
        vec![Box::new(src)],
        SamplerConfig {
            rate_hz: 500.0,
            ..Default::default()
        },
    );
    std::thread::sleep(Duration::from_millis(100));
    let st = sampler.status(0);
    assert_eq!(st.stopped.as_deref(), Some("device removed"));
    assert_eq!(st.samples, 3);
}

#[test]
fn channel_choice_prefers_counters_then_fast_sources() {
    struct Fixed(Vec<Channel>, &'static str, bool);
    impl PowerSource for Fixed {
        fn name(&self) -> &'static str {
            self.1
        }
        fn channels(&self) -> &[Channel] {
            &self.0
        }
        fn poll(&mut self) -> Result<Vec<ChannelReading>, PollError> {
            Ok(Vec::new())
        }
        fn slow(&self) -> bool {
            self.2
        }
    }
    let gpu = "0000:06:00.0";
    let sampler = Sampler::start(
        vec![
            Box::new(Fixed(
                vec![channel(gpu, Scope::Package, false)],
                "smi",
                true,
            )),
            Box::new(Fixed(
                vec![channel(gpu, Scope::Asic, false)],
                "hwmon",
                false,
            )),
            Box::new(Fixed(vec![channel(gpu, Scope::Board, true)], "nvml", false)),
            Box::new(Fixed(
                vec![channel("", Scope::Package, true)],
                "rapl",
                false,
            )),
        ],
        SamplerConfig::default(),
    );
    assert_eq!(sampler.channel_for("00000000:06:00.0", false), Some(2));
    assert_eq!(sampler.channel_for("0000:07:00.0", false), None);
    assert_eq!(sampler.channel_for("", true), Some(3));
    assert_eq!(sampler.channel_for("", false), None);
}
