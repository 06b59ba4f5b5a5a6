//! Unit tests of the HIP status mapping: pure, no device.

use super::*;

#[test]
fn no_device_is_unavailable_with_its_name() {
    let e = discovery_error(HIP_ERROR_NO_DEVICE, "hipErrorNoDevice");
    assert_eq!(
        e,
        BackendError::Unavailable {
            backend: "hip".into(),
            reason: "no HIP device (hipErrorNoDevice)".into()
        }
    );
    let e = discovery_error(999, "hipErrorUnknown").to_string();
    assert!(
        e.contains("hipGetDeviceCount: hipErrorUnknown (999)"),
        "{e}"
    );
    let e = discovery_error(HIP_ERROR_INSUFFICIENT_DRIVER, "hipErrorInsufficientDriver");
    assert!(e.to_string().contains("/dev/kfd"), "{e}");
}

#[test]
fn call_errors_name_the_call_and_status() {
    let e = call_error(
        "hipMalloc(8 bytes)",
        HIP_ERROR_OUT_OF_MEMORY,
        "hipErrorOutOfMemory",
    );
    assert!(matches!(e, BackendError::OutOfMemory { .. }));
    assert!(
        e.to_string()
            .contains("hipMalloc(8 bytes): hipErrorOutOfMemory (2)"),
        "{e}"
    );
    let e = call_error("hipModuleLaunchKernel(copy_f32)", 1, "hipErrorInvalidValue");
    assert_eq!(
        e.to_string(),
        "hip: hipModuleLaunchKernel(copy_f32): hipErrorInvalidValue (1)"
    );
}

#[test]
fn the_runtime_names_statuses() {
    // Needs only libamdhip64, no device.
    assert_eq!(error_name(HIP_ERROR_NO_DEVICE), "hipErrorNoDevice");
    assert_eq!(error_name(HIP_SUCCESS), "hipSuccess");
}
