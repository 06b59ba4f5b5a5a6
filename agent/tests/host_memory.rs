//! Host memory protection over real gRPC with real workers: a run whose estimated peak does not
//! fit the host is refused before anything is allocated, one that no longer fits when its device
//! becomes free ends `out_of_memory` without a worker, and a worker that allocates past its
//! limit ends `out_of_memory` while the agent keeps serving.
//!
//! The agents here read a fixture /proc (a 24 GiB host with 22 GiB available) so the outcomes
//! do not depend on the machine; the worker's limit (about 1.1 GiB for debug_alloc) is far below
//! what any test machine has.

mod common;

use common::{cancel, client, last_result, refused, run, spec, start};
use gpufleet_agent::host::memory::HostMemory;
use gpufleet_agent::run::host_peak::host_peak_bytes;
use gpufleet_kernels::PartialSettings;
use gpufleet_proto::v1 as pb;
use std::path::Path;
use std::time::{Duration, Instant};
use tokio_stream::StreamExt;

const GIB_KB: u64 = 1 << 20;

/// Writes a /proc/meminfo of `total_gib` with `available_gib` available under `root`.
fn write_meminfo(root: &Path, total_gib: u64, available_gib: u64) {
    let proc = root.join("proc");
    std::fs::create_dir_all(&proc).unwrap();
    let text = format!(
        "MemTotal:       {} kB\nMemFree:        {} kB\nMemAvailable:   {} kB\n",
        total_gib * GIB_KB,
        available_gib * GIB_KB,
        available_gib * GIB_KB
    );
    std::fs::write(proc.join("meminfo"), text).unwrap();
}

/// A fixture root of a 24 GiB host with 22 GiB available.
fn host_24_gib() -> tempfile::TempDir {
    let root = tempfile::tempdir().unwrap();
    write_meminfo(root.path(), 24, 22);
    root
}

#[tokio::test]
async fn debug_alloc_past_the_worker_limit_ends_out_of_memory_and_the_agent_serves_on() {
    let root = host_24_gib();
    let path = root.path().to_path_buf();
    let a = start(move |c| c.host_root = path).await;
    let mut c = client(&a).await;
    let quick = |gib: i64| pb::RunSpec {
        settings: Some(PartialSettings {
            warmup: Some(0),
            min_iterations: Some(1),
            max_iterations: Some(1),
            ..PartialSettings::default()
        }),
        ..spec("debug_alloc", &[("gib", gib)])
    };
    // 1 GiB fits the worker's limit (its 64 MiB estimate plus 1 GiB of headroom)...
    let (_, r) = run(&mut c, "alloc-1", quick(1)).await;
    assert_eq!(r.status(), pb::RunStatus::Ok, "{}", r.message);
    // ...2 GiB does not: the allocation fails at the limit, before the memory is touched.
    let t = Instant::now();
    let (_, r) = run(&mut c, "alloc-2", quick(2)).await;
    assert_eq!(r.status(), pb::RunStatus::OutOfMemory, "{}", r.message);
    assert!(t.elapsed() < Duration::from_secs(20), "{:?}", t.elapsed());
    for needle in [
        "ran out of memory: an allocation of 64.0 MiB failed",
        "memory limit of 1.1 GiB (RLIMIT_DATA)",
        "estimated peak of 0.1 GiB",
    ] {
        assert!(r.message.contains(needle), "{needle} not in {}", r.message);
    }
    assert_eq!(r.signal, 6, "SIGABRT");
    assert!(
        r.stderr_tail.contains("memory allocation of"),
        "{}",
        r.stderr_tail
    );
    let (_, r) = run(&mut c, "after", spec("noop", &[])).await;
    assert_eq!(r.status(), pb::RunStatus::Ok, "{}", r.message);
}

#[tokio::test]
async fn the_probe_vec_add_is_refused_up_front_naming_needed_and_available() {
    let root = host_24_gib();
    let path = root.path().to_path_buf();
    let a = start(move |c| c.host_root = path).await;
    let mut c = client(&a).await;
    let probe = || spec("vec_add", &[("n", 1 << 30)]);
    let t = Instant::now();
    let st = refused(&mut c, probe()).await;
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    assert_eq!(st.code(), tonic::Code::InvalidArgument, "{st:?}");
    let m = st.message();
    for needle in [
        "field params",
        "vec_add with n=1073741824 on cpu:0",
        "needs about 24.1 GiB",
        "19.6 GiB",
        "MemAvailable 22.0 GiB less a margin of 2.4 GiB",
    ] {
        assert!(m.contains(needle), "{needle} not in {m}");
    }

    // The same probe against this machine's own memory: refused wherever it cannot be held.
    let real = start(|_| {}).await;
    let mut rc = client(&real).await;
    let info = common::describe(&mut rc).await;
    let dev = info.devices.iter().find(|d| d.id == "cpu:0").unwrap();
    let device = gpufleet_agent::backend::DeviceInfo {
        backend: dev.backend.clone(),
        device_type: dev.device_type.clone(),
        ..Default::default()
    };
    let problem = gpufleet_kernels::Problem::new(
        "vec_add",
        "",
        &std::collections::BTreeMap::from([("n".to_string(), 1 << 30)]),
        "f32",
        false,
    )
    .unwrap();
    let needed = host_peak_bytes(&problem, &device, gpufleet_kernels::Mode::ComputeOnly);
    match HostMemory::read(Path::new("/")).allowance() {
        Some(available) if available < needed => {
            let t = Instant::now();
            let st = refused(&mut rc, probe()).await;
            assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
            assert!(st.message().contains("needs about 24.1 GiB"), "{st:?}");
        }
        other => eprintln!(
            "skipping the real-host probe: this host can hold it ({other:?} bytes available)"
        ),
    }
}

#[tokio::test]
async fn a_run_that_no_longer_fits_when_its_device_is_free_ends_out_of_memory() {
    let root = host_24_gib();
    let path = root.path().to_path_buf();
    let a = start(move |c| c.host_root = path).await;
    let mut c = client(&a).await;
    let mut hang = spec("debug_hang", &[]);
    hang.settings_mut().timeout_s = Some(30.0);
    let mut busy = c
        .run(pb::RunRequest {
            run_id: "busy".into(),
            spec: Some(hang),
        })
        .await
        .unwrap()
        .into_inner();
    // Wait until the hang holds the device.
    while let Some(ev) = busy.next().await {
        if let Some(pb::run_event::Event::Progress(p)) = ev.unwrap().event
            && p.phase == "starting"
        {
            break;
        }
    }
    // 2^28 elements: an estimated 6 GiB, admitted while 22 GiB are available.
    let mut waiting = c
        .run(pb::RunRequest {
            run_id: "big".into(),
            spec: Some(spec("vec_add", &[("n", 1 << 28)])),
        })
        .await
        .expect("admitted while it fits")
        .into_inner();
    // Meanwhile the host's memory is taken: 4 GiB left.
    write_meminfo(root.path(), 24, 4);
    assert!(cancel(&mut c, "busy").await);
    let r = last_result(&mut waiting).await;
    assert_eq!(r.status(), pb::RunStatus::OutOfMemory, "{}", r.message);
    assert!(
        r.message.contains("not started") && r.message.contains("needs about 6.1 GiB"),
        "{}",
        r.message
    );
    assert!(r.stats.is_none(), "no worker ran");
}
