use super::*;

/// An agent with one amdgpu channel at 0000:03:00.0 (device `vulkan:0`) and RAPL on the host
/// (device `cpu:0`), and a source it reported unavailable.
fn info() -> pb::AgentInfo {
    pb::AgentInfo {
        power_sources: vec![
            pb::PowerSourceInfo {
                name: "amdgpu-hwmon".into(),
                available: true,
                scope: "asic".into(),
                pci_bus_id: "0000:03:00.0".into(),
                label: "amdgpu power1_input".into(),
                device_ids: vec!["vulkan:0".into()],
                ..Default::default()
            },
            pb::PowerSourceInfo {
                name: "rapl".into(),
                available: true,
                scope: "package".into(),
                label: "package-0".into(),
                device_ids: vec!["cpu:0".into()],
                ..Default::default()
            },
            pb::PowerSourceInfo {
                name: "nvml".into(),
                reason: "libnvidia-ml.so.1 not found".into(),
                ..Default::default()
            },
        ],
        ..Default::default()
    }
}

fn sample(source: &str, pci: &str, t_ms: u64, watts: f64) -> pb::PowerSample {
    pb::PowerSample {
        source: source.into(),
        pci_bus_id: pci.into(),
        label: format!("{source} channel"),
        monotonic_ns: t_ms * 1_000_000,
        watts,
        has_watts: true,
        ..Default::default()
    }
}

fn req(device: &str, source: &str, rate_hz: f64) -> pb::PowerRequest {
    pb::PowerRequest {
        device_id: device.into(),
        source: source.into(),
        rate_hz,
    }
}

#[tokio::test]
async fn watchers_get_their_filter_at_their_rate_and_the_agent_the_fastest() {
    let live = LivePower::new(1.0);
    let mut want = live.connect("rig", info());
    assert_eq!(
        *want.borrow_and_update(),
        Want::Rate(1.0),
        "the gauges' rate"
    );

    let mut gpu = live.watch("rig", &req("vulkan:0", "", 5.0)).unwrap();
    assert_eq!(*want.borrow_and_update(), Want::Rate(5.0));
    let mut host = live.watch("rig", &req("cpu:0", "", 0.0)).unwrap();
    assert_eq!(*want.borrow_and_update(), Want::Rate(0.0), "one wants all");
    let by_pci = live
        .watch("rig", &req("03:00.0", "amdgpu-hwmon", 10.0))
        .unwrap();

    // 20 Hz for 2 s of both channels.
    for i in 0..40 {
        live.publish(
            "rig",
            sample("amdgpu-hwmon", "0000:03:00.0", i * 50, 8.0 + i as f64),
        );
        live.publish("rig", sample("rapl", "", i * 50, 30.0));
    }
    let drain = |w: &mut Watch| {
        let mut got = Vec::new();
        while let Ok(s) = w.rx.try_recv() {
            got.push(s);
        }
        got
    };
    let g = drain(&mut gpu);
    // 0, 150 (within a quarter period of 200), 350, ... 1950 ms.
    assert!(
        (10..=11).contains(&g.len()),
        "{} samples at 5 Hz in 2 s",
        g.len()
    );
    assert!(g.iter().all(|s| s.source == "amdgpu-hwmon"));
    let h = drain(&mut host);
    assert_eq!(h.len(), 40, "every sample");
    assert!(h.iter().all(|s| s.source == "rapl"));
    drop(host);
    assert_eq!(*want.borrow_and_update(), Want::Rate(10.0));
    drop(by_pci);
    drop(gpu);
    assert_eq!(
        *want.borrow_and_update(),
        Want::Rate(1.0),
        "back to the gauges"
    );
    let latest = live.latest("rig");
    assert_eq!(latest.len(), 2);
    assert!(latest.iter().any(|s| s.watts == 47.0), "{latest:?}");
    // The charts keep a point a second: 0 and 1 s of the 2 s.
    let history = live.history("rig");
    let gpu = &history[&key(&sample("amdgpu-hwmon", "0000:03:00.0", 0, 0.0))];
    assert_eq!(gpu, &vec![(0, 8.0), (1_000_000_000, 28.0)]);
    assert_eq!(live.counts().watchers, 0);
}

#[tokio::test]
async fn a_watcher_that_stops_reading_loses_samples_not_the_others() {
    let live = LivePower::new(0.0);
    let mut want = live.connect("rig", info());
    assert_eq!(
        *want.borrow_and_update(),
        Want::Off,
        "nobody watches, gauges off"
    );
    let stuck = live.watch("rig", &req("", "", 0.0)).unwrap();
    let mut reader = live.watch("rig", &req("", "", 0.0)).unwrap();
    let n = WATCH_BUFFER as u64 * 4;
    for i in 0..n {
        live.publish("rig", sample("amdgpu-hwmon", "0000:03:00.0", i, 8.0));
        assert!(
            reader.rx.try_recv().is_ok(),
            "the reading watcher gets sample {i}"
        );
    }
    let c = live.counts();
    assert_eq!(c.dropped, n - WATCH_BUFFER as u64, "{c:?}");
    assert_eq!(c.delivered, n + WATCH_BUFFER as u64, "{c:?}");
    drop(stuck);
}

#[tokio::test]
async fn a_disconnected_agent_ends_its_watchers_with_why_and_loses_its_gauges() {
    let live = LivePower::new(1.0);
    let _want = live.connect("rig", info());
    let mut w = live.watch("rig", &req("", "", 0.0)).unwrap();
    live.publish("rig", sample("rapl", "", 1, 30.0));
    assert_eq!(live.all_latest().len(), 1);
    live.disconnect("rig", "dial-in agent rig's link ended: reset");
    assert_eq!(
        w.next().await.unwrap().watts,
        30.0,
        "what was sent is still read"
    );
    assert_eq!(
        w.next().await.unwrap_err(),
        "dial-in agent rig's link ended: reset"
    );
    assert!(live.all_latest().is_empty(), "gauges disappear");
    let e = live.watch("rig", &req("", "", 0.0)).err().unwrap();
    assert_eq!(
        e,
        WatchError::NotConnected(
            "agent rig is not connected to this serve: dial-in agent rig's link ended: reset"
                .into()
        )
    );
    // Samples of an agent that is not connected are dropped.
    live.publish("rig", sample("rapl", "", 2, 30.0));
    assert!(live.latest("rig").is_empty());
}

#[tokio::test]
async fn watchers_outlive_a_reconnect_and_the_old_driver_stops() {
    let live = LivePower::new(0.0);
    let old = live.connect("rig", info());
    let mut w = live.watch("rig", &req("", "", 0.0)).unwrap();
    let mut new = live.connect("rig", info());
    assert!(old.has_changed().is_err(), "the old link's driver ends");
    assert_eq!(
        *new.borrow_and_update(),
        Want::Rate(0.0),
        "the watcher is still there"
    );
    live.publish("rig", sample("rapl", "", 1, 30.0));
    assert!(w.next().await.is_ok());
}

#[tokio::test]
async fn bad_filters_name_the_field_and_what_there_is() {
    let live = LivePower::new(0.0);
    let _want = live.connect("rig", info());
    let e = live.watch("rig", &req("vulkan:7", "", 0.0)).err().unwrap();
    let WatchError::BadRequest { field, message } = e else {
        panic!("{e:?}")
    };
    assert_eq!(field, "device");
    assert!(message.contains("`vulkan:7`"), "{message}");
    assert!(
        message.contains("amdgpu-hwmon 0000:03:00.0, rapl host"),
        "{message}"
    );
    let e = live
        .watch("rig", &req("cpu:0", "amdgpu-hwmon", 0.0))
        .err()
        .unwrap();
    assert!(
        matches!(&e, WatchError::BadRequest { field: "source", message } if message.contains("device `cpu:0`")),
        "{e:?}"
    );
    let e = live.watch("rig", &req("", "", -1.0)).err().unwrap();
    assert!(
        matches!(
            e,
            WatchError::BadRequest {
                field: "rate_hz",
                ..
            }
        ),
        "{e:?}"
    );
    let _w = live.connect(
        "bare",
        pb::AgentInfo {
            power_sources: vec![info().power_sources[2].clone()],
            ..Default::default()
        },
    );
    let e = live.watch("bare", &req("", "", 0.0)).err().unwrap();
    assert_eq!(
        e.to_string(),
        "agent bare has no power channel (nvml: libnvidia-ml.so.1 not found)"
    );
    let e = live.watch("nobody", &req("", "", 0.0)).err().unwrap();
    assert!(matches!(e, WatchError::NotConnected(_)), "{e:?}");
}

#[tokio::test]
async fn samples_naming_huge_channels_are_not_kept() {
    let live = LivePower::new(1.0);
    let _want = live.connect("rig", info());
    let mut w = live.watch("rig", &req("", "", 0.0)).unwrap();
    let mut huge = sample("rapl", "", 1, 30.0);
    huge.label = "x".repeat(100_000);
    live.publish("rig", huge);
    assert!(live.latest("rig").is_empty());
    assert!(w.rx.try_recv().is_err());
    assert_eq!(live.counts().dropped, 1);
    // More channels than MAX_CHANNELS: the first ones are kept, the rest not.
    for i in 0..MAX_CHANNELS + 10 {
        let mut s = sample("rapl", "", 1, 30.0);
        s.label = format!("zone {i}");
        live.publish("rig", s);
    }
    assert_eq!(live.latest("rig").len(), MAX_CHANNELS);
}
