//! NVIDIA GPUs through NVML (`libnvidia-ml.so.1`, loaded at run time by
//! `nvml-wrapper`, so hosts without the NVIDIA driver just list NVML as
//! unavailable).
//!
//! Power: NVML's `nvmlDeviceGetPowerUsage` is, on Hopper and later, an
//! average over the last second, which smears a short kernel window. Where
//! the driver supports the field `NVML_FI_DEV_POWER_INSTANT` we read that
//! instead; the channel label says which one is used. Energy: the board's
//! total energy counter (mJ since the driver loaded), which is what makes
//! NVML energy figures trustworthy even for windows shorter than the power
//! average. Both are board scope (GPU, memory, VRM).
//!
//! The library sits behind [`NvmlApi`] so the reading logic is tested with a
//! recorded device; [`probe`] wires in the real one.

use crate::host::pci::normalize_pci;
use crate::power::{
    Channel, ChannelReading, PollError, PowerConfig, PowerSource, Probed, Reading, Scope,
    SourceKind,
};
use nvml_wrapper::Nvml;
use nvml_wrapper::enum_wrappers::device::{Clock, TemperatureSensor};
use nvml_wrapper::enums::device::SampleValue;
use nvml_wrapper::structs::device::FieldId;
use std::time::{Duration, Instant};

/// Source name in Describe and on samples.
pub const NAME: &str = "nvml";

/// NVML in [`super::ALL`]: probed unless the configuration turns it off (`--no-nvml`).
pub const KIND: SourceKind = SourceKind {
    name: NAME,
    probe: |config: &PowerConfig| config.nvml.then(probe),
};

/// `NVML_FI_DEV_POWER_INSTANT` from nvml.h.
const FI_POWER_INSTANT: u32 = 186;

/// One read of one GPU, every figure optional.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct GpuSample {
    pub power_mw: Option<f64>,
    pub energy_mj: Option<u64>,
    pub temperature_c: Option<u32>,
    pub sm_mhz: Option<u32>,
    pub mem_mhz: Option<u32>,
    pub utilization_pct: Option<u32>,
}

/// Static facts of one GPU, read at probe time.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct GpuFacts {
    pub pci_bus_id: String,
    pub name: String,
    pub power_limit_mw: Option<u32>,
    /// True when the instantaneous power field answers.
    pub instant_power: bool,
}

/// What the source needs from NVML; the real library or a recorded device.
pub trait NvmlApi: Send {
    /// Number of GPUs.
    ///
    /// # Errors
    /// The NVML error text.
    fn count(&self) -> Result<u32, String>;
    /// Facts of GPU `index`.
    ///
    /// # Errors
    /// The NVML error text.
    fn facts(&self, index: u32) -> Result<GpuFacts, String>;
    /// One sample of GPU `index`, reading what `want` asks for.
    ///
    /// # Errors
    /// The NVML error text when the device cannot be reached at all.
    fn sample(&self, index: u32, want: Want) -> Result<GpuSample, String>;
}

/// What one [`NvmlApi::sample`] reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Want {
    /// The instantaneous power field instead of the averaged power usage.
    pub instant: bool,
    /// Temperature, clocks and utilisation (they change slowly; without
    /// them only power and energy are read).
    pub details: bool,
    /// The energy counter (on an H100 with driver 580 that one call costs
    /// ~3.9 ms of CPU, the others ~2 µs: `bench/nvml_cost.py`).
    pub energy: bool,
}

/// The real NVML.
struct RealNvml {
    nvml: Nvml,
}

impl RealNvml {
    fn instant_power_mw(&self, index: u32) -> Option<f64> {
        let dev = self.nvml.device_by_index(index).ok()?;
        let values = dev.field_values_for(&[FieldId(FI_POWER_INSTANT)]).ok()?;
        match values.into_iter().next()?.ok()?.value.ok()? {
            SampleValue::U32(v) => Some(f64::from(v)),
            SampleValue::U64(v) => Some(v as f64),
            SampleValue::I64(v) if v >= 0 => Some(v as f64),
            SampleValue::F64(v) if v.is_finite() && v >= 0.0 => Some(v),
            _ => None,
        }
    }
}

impl NvmlApi for RealNvml {
    fn count(&self) -> Result<u32, String> {
        self.nvml.device_count().map_err(|e| e.to_string())
    }

    fn facts(&self, index: u32) -> Result<GpuFacts, String> {
        let dev = self
            .nvml
            .device_by_index(index)
            .map_err(|e| e.to_string())?;
        let pci = dev.pci_info().map_err(|e| e.to_string())?;
        Ok(GpuFacts {
            pci_bus_id: pci.bus_id,
            name: dev.name().unwrap_or_default(),
            power_limit_mw: dev.enforced_power_limit().ok(),
            instant_power: self.instant_power_mw(index).is_some(),
        })
    }

    fn sample(&self, index: u32, want: Want) -> Result<GpuSample, String> {
        let dev = self
            .nvml
            .device_by_index(index)
            .map_err(|e| e.to_string())?;
        let power_mw = if want.instant {
            self.instant_power_mw(index)
        } else {
            dev.power_usage().ok().map(f64::from)
        };
        let mut s = GpuSample {
            power_mw,
            energy_mj: if want.energy {
                dev.total_energy_consumption().ok()
            } else {
                None
            },
            ..GpuSample::default()
        };
        if want.details {
            s.temperature_c = dev.temperature(TemperatureSensor::Gpu).ok();
            s.sm_mhz = dev.clock_info(Clock::SM).ok();
            s.mem_mhz = dev.clock_info(Clock::Memory).ok();
            s.utilization_pct = dev.utilization_rates().ok().map(|u| u.gpu);
        }
        Ok(s)
    }
}

/// NVML as a [`PowerSource`]: one board-scope channel per GPU.
pub struct NvmlSource<A: NvmlApi> {
    api: A,
    channels: Vec<Channel>,
    gpus: Vec<Gpu>,
    /// When temperature, clocks and utilisation were last read.
    last_details: Option<Instant>,
    /// When the energy counter was last read, and how often it is.
    last_energy: Option<Instant>,
    energy_every: Duration,
}

/// How often the energy counter is read unasked. `nvmlDeviceGetTotalEnergyConsumption`
/// busy-waits in the driver (~3.9 ms of CPU per call on an H100), so reading
/// it on every poll made a 100 Hz sampler cost 38% of a core. Every 5 s costs
/// ~0.08%; a run asks for a reading at its start and its end
/// ([`PowerSource::want_counter`]), and the readings around its window are
/// joined to the window's edges by the integrated power samples (see
/// `energy::counter_delta`), so its energy stays exact.
pub const ENERGY_EVERY: Duration = Duration::from_secs(5);

/// How often the slowly changing figures are read: keeps a 100 Hz sampler
/// at two driver calls per GPU per poll.
const DETAILS_EVERY: Duration = Duration::from_millis(250);

struct Gpu {
    index: u32,
    instant: bool,
    /// Energy counter at the first read, so readings count from probe time.
    energy_base_mj: Option<u64>,
}

impl<A: NvmlApi> NvmlSource<A> {
    /// Builds the source from `api`; GPUs whose facts cannot be read or that
    /// have no PCI id are skipped.
    ///
    /// # Errors
    /// The reason when there is no usable GPU.
    pub fn new(api: A) -> Result<Self, String> {
        let count = api.count()?;
        if count == 0 {
            return Err("NVML reports no GPUs".into());
        }
        let mut channels = Vec::new();
        let mut gpus = Vec::new();
        let mut skipped = Vec::new();
        for index in 0..count {
            let facts = match api.facts(index) {
                Ok(f) => f,
                Err(e) => {
                    skipped.push(format!("GPU {index}: {e}"));
                    continue;
                }
            };
            let Some(pci) = normalize_pci(&facts.pci_bus_id) else {
                skipped.push(format!("GPU {index}: bad PCI id {:?}", facts.pci_bus_id));
                continue;
            };
            let how = if facts.instant_power {
                "instantaneous power"
            } else {
                "power usage (averaged by the driver)"
            };
            channels.push(Channel {
                pci_bus_id: pci,
                scope: Scope::Board,
                label: format!("GPU {index} {}: {how}, energy counter", facts.name),
                energy_counter: true,
                power_cap_w: facts.power_limit_mw.map(|mw| f64::from(mw) / 1000.0),
                // The instantaneous field follows the driver's ~20-100 ms
                // sensor; the averaged one is documented as 1 s on Hopper.
                nominal_period: if facts.instant_power {
                    Duration::from_millis(100)
                } else {
                    Duration::from_secs(1)
                },
            });
            gpus.push(Gpu {
                index,
                instant: facts.instant_power,
                energy_base_mj: None,
            });
        }
        if gpus.is_empty() {
            return Err(format!("no usable NVML GPU ({})", skipped.join("; ")));
        }
        Ok(NvmlSource {
            api,
            channels,
            gpus,
            last_details: None,
            last_energy: None,
            energy_every: ENERGY_EVERY,
        })
    }
}

impl<A: NvmlApi> PowerSource for NvmlSource<A> {
    fn name(&self) -> &'static str {
        NAME
    }

    fn want_counter(&mut self) {
        self.last_energy = None;
    }

    fn channels(&self) -> &[Channel] {
        &self.channels
    }

    fn poll(&mut self) -> Result<Vec<ChannelReading>, PollError> {
        let mut out = Vec::with_capacity(self.gpus.len());
        let mut errors = Vec::new();
        let details = self
            .last_details
            .is_none_or(|t| t.elapsed() >= DETAILS_EVERY);
        if details {
            self.last_details = Some(Instant::now());
        }
        let energy = self
            .last_energy
            .is_none_or(|t| t.elapsed() >= self.energy_every);
        if energy {
            self.last_energy = Some(Instant::now());
        }
        for (channel, gpu) in self.gpus.iter_mut().enumerate() {
            let want = Want {
                instant: gpu.instant,
                details,
                energy,
            };
            let s = match self.api.sample(gpu.index, want) {
                Ok(s) => s,
                Err(e) => {
                    errors.push(e);
                    continue;
                }
            };
            let energy_j = s.energy_mj.map(|mj| {
                let base = *gpu.energy_base_mj.get_or_insert(mj);
                mj.saturating_sub(base) as f64 / 1000.0
            });
            out.push(ChannelReading {
                channel,
                reading: Reading {
                    watts: s
                        .power_mw
                        .filter(|mw| mw.is_finite() && *mw >= 0.0)
                        .map(|mw| mw / 1000.0),
                    energy_j,
                    temperature_c: s.temperature_c.map(f64::from),
                    sclk_mhz: s.sm_mhz,
                    mclk_mhz: s.mem_mhz,
                    utilization_pct: s.utilization_pct.map(f64::from),
                },
            });
        }
        if out.is_empty() && !errors.is_empty() {
            return Err(PollError::Retry(errors.join("; ")));
        }
        Ok(out)
    }
}

/// Loads NVML and lists its GPUs.
///
/// # Errors
/// Why NVML cannot be used (library missing, driver not loaded, no GPU).
pub fn probe() -> Probed {
    let nvml = Nvml::init().map_err(|e| format!("cannot load NVML (libnvidia-ml.so.1): {e}"))?;
    Ok(Box::new(NvmlSource::new(RealNvml { nvml })?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// A recorded device: facts plus a queue of samples.
    #[derive(Clone, Default)]
    struct Recorded {
        facts: Vec<Result<GpuFacts, String>>,
        samples: Arc<Mutex<Vec<GpuSample>>>,
    }

    impl NvmlApi for Recorded {
        fn count(&self) -> Result<u32, String> {
            Ok(self.facts.len() as u32)
        }
        fn facts(&self, index: u32) -> Result<GpuFacts, String> {
            self.facts[index as usize].clone()
        }
        fn sample(&self, _index: u32, want: Want) -> Result<GpuSample, String> {
            let mut q = self.samples.lock().unwrap();
            if q.is_empty() {
                return Err("GPU is lost".into());
            }
            let mut s = q.remove(0);
            // Like the driver: what is not asked for is not read.
            if !want.energy {
                s.energy_mj = None;
            }
            if !want.details {
                s.temperature_c = None;
                s.sm_mhz = None;
                s.mem_mhz = None;
                s.utilization_pct = None;
            }
            Ok(s)
        }
    }

    fn h100() -> GpuFacts {
        GpuFacts {
            pci_bus_id: "00000000:06:00.0".into(),
            name: "NVIDIA H100".into(),
            power_limit_mw: Some(700_000),
            instant_power: false,
        }
    }

    #[test]
    fn channels_carry_the_normalised_pci_id_and_power_cap() {
        let src = NvmlSource::new(Recorded {
            facts: vec![Ok(h100())],
            ..Default::default()
        })
        .unwrap();
        let c = &src.channels()[0];
        assert_eq!(c.pci_bus_id, "0000:06:00.0");
        assert_eq!(c.scope, Scope::Board);
        assert_eq!(c.power_cap_w, Some(700.0));
        assert!(c.energy_counter);
        assert_eq!(c.nominal_period, Duration::from_secs(1));
    }

    #[test]
    fn energy_counts_from_the_first_read_and_watts_convert() {
        let rec = Recorded {
            facts: vec![Ok(h100())],
            samples: Arc::new(Mutex::new(vec![
                GpuSample {
                    power_mw: Some(71_500.0),
                    energy_mj: Some(5_000_000),
                    temperature_c: Some(33),
                    sm_mhz: Some(1980),
                    mem_mhz: Some(2619),
                    utilization_pct: Some(0),
                },
                GpuSample {
                    power_mw: Some(650_250.0),
                    energy_mj: Some(5_001_300),
                    ..Default::default()
                },
            ])),
        };
        let mut src = NvmlSource::new(rec.clone()).unwrap();
        src.energy_every = Duration::ZERO;
        let a = src.poll().unwrap();
        assert_eq!(a[0].reading.watts, Some(71.5));
        assert_eq!(a[0].reading.energy_j, Some(0.0));
        assert_eq!(a[0].reading.sclk_mhz, Some(1980));
        let b = src.poll().unwrap();
        assert_eq!(b[0].reading.watts, Some(650.25));
        assert_eq!(b[0].reading.energy_j, Some(1.3));
        assert_eq!(
            b[0].reading.temperature_c, None,
            "details are read every 250 ms"
        );
        // The device is gone: a retryable error, not a panic.
        assert!(matches!(src.poll(), Err(PollError::Retry(_))));
    }

    #[test]
    fn the_costly_energy_counter_is_read_rarely_and_when_asked() {
        let sample = |mj| GpuSample {
            power_mw: Some(100_000.0),
            energy_mj: Some(mj),
            ..Default::default()
        };
        let rec = Recorded {
            facts: vec![Ok(h100())],
            samples: Arc::new(Mutex::new(vec![sample(1000), sample(2000), sample(3000)])),
        };
        let mut src = NvmlSource::new(rec).unwrap();
        assert_eq!(src.poll().unwrap()[0].reading.energy_j, Some(0.0));
        // The next poll, right after: watts yes, counter no.
        let b = src.poll().unwrap();
        assert_eq!(b[0].reading.watts, Some(100.0));
        assert_eq!(b[0].reading.energy_j, None);
        // Asked for (a run starts or ends): read at the next poll.
        src.want_counter();
        assert_eq!(src.poll().unwrap()[0].reading.energy_j, Some(2.0));
    }

    #[test]
    fn unusable_gpus_are_skipped_with_reasons() {
        let err = NvmlSource::new(Recorded {
            facts: vec![Err("GPU requires reset".into())],
            ..Default::default()
        })
        .err()
        .unwrap();
        assert!(err.contains("GPU requires reset"), "{err}");
        let mut bad = h100();
        bad.pci_bus_id = "garbage".into();
        let src = NvmlSource::new(Recorded {
            facts: vec![Ok(bad), Ok(h100())],
            ..Default::default()
        })
        .unwrap();
        assert_eq!(src.channels().len(), 1);
        assert!(NvmlSource::new(Recorded::default()).is_err());
    }
}
