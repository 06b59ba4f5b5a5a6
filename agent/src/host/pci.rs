//! PCI addresses, the join key between the backends' devices and the power sensors. Every tool
//! spells them its own way (NVML `00000000:06:00.0`, rocm-smi `0000:03:00.0`, sysfs link names,
//! HIP's `hipDeviceGetPCIBusId`), so both sides normalise them here, below the backends and the
//! power sources alike.

/// Normalises a PCI bus id to `dddd:bb:dd.f` in lower case: NVML's
/// `00000000:06:00.0` and `rocm-smi`'s `0000:03:00.0` both become
/// `0000:06:00.0`. Returns `None` for anything that is not a PCI address.
pub fn normalize_pci(id: &str) -> Option<String> {
    let id = id.trim().to_ascii_lowercase();
    let (domain, rest) = match id.matches(':').count() {
        2 => {
            let (d, r) = id.split_once(':')?;
            (d.to_string(), r.to_string())
        }
        1 => ("0".to_string(), id.clone()),
        _ => return None,
    };
    let (bus, rest) = rest.split_once(':')?;
    let (dev, func) = rest.split_once('.')?;
    let domain = u32::from_str_radix(&domain, 16).ok()?;
    let bus = u8::from_str_radix(bus, 16).ok()?;
    let dev = u8::from_str_radix(dev, 16).ok()?;
    let func = u8::from_str_radix(func, 16).ok()?;
    if domain > 0xffff || dev > 0x1f || func > 7 {
        return None;
    }
    Some(format!("{domain:04x}:{bus:02x}:{dev:02x}.{func:x}"))
}

/// A `DEVICE=BDF` value of `--device-pci`: [`device_pci`] of its two sides.
///
/// # Errors
/// No `=`, or what [`device_pci`] refuses, each quoting the value.
pub fn parse_device_pci(text: &str) -> Result<(String, String), String> {
    let quoted = || format!("--device-pci {:?}", gpufleet_kernels::prefix(text, 64));
    let Some((device, bdf)) = text.split_once('=') else {
        return Err(format!(
            "{}: expected DEVICE=BDF (e.g. opencl:0=0000:0a:00.0)",
            quoted()
        ));
    };
    device_pci(device, bdf).map_err(|e| format!("{}: {e}", quoted()))
}

/// The PCI address `bdf` given to `device` (`--device-pci`, a `[device_pci]` entry) for a device
/// whose driver reports none (Clover's and rusticl's OpenCL, a CPU device standing in for a card):
/// the device id trimmed and the address normalised.
///
/// # Errors
/// An empty device id, or an address that is not a PCI address (quoted).
pub fn device_pci(device: &str, bdf: &str) -> Result<(String, String), String> {
    let device = device.trim();
    if device.is_empty() {
        return Err("the device id before `=` is empty".into());
    }
    let pci = normalize_pci(bdf).ok_or_else(|| {
        format!(
            "{:?} is not a PCI address (domain:bus:device.function, e.g. 0000:0a:00.0)",
            gpufleet_kernels::prefix(bdf.trim(), 32)
        )
    })?;
    Ok((device.to_string(), pci))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_device_pci_value_is_checked_and_normalised() {
        assert_eq!(
            parse_device_pci("opencl:0=0A:00.0").unwrap(),
            ("opencl:0".into(), "0000:0a:00.0".into())
        );
        for (bad, says) in [
            ("opencl:0", "DEVICE=BDF"),
            ("=0000:0a:00.0", "empty"),
            ("opencl:0=card0", "not a PCI address"),
            ("opencl:0=0000:0a:20.0", "not a PCI address"),
        ] {
            let e = parse_device_pci(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn pci_ids_normalise_from_every_tool() {
        assert_eq!(
            normalize_pci("00000000:06:00.0").as_deref(),
            Some("0000:06:00.0")
        );
        assert_eq!(
            normalize_pci("0000:C3:00.0").as_deref(),
            Some("0000:c3:00.0")
        );
        assert_eq!(normalize_pci("03:00.0").as_deref(), Some("0000:03:00.0"));
        assert_eq!(normalize_pci("card0"), None);
        assert_eq!(normalize_pci("0000:03:00"), None);
        assert_eq!(normalize_pci("0000:03:40.0"), None);
    }

    #[test]
    fn pci_ids_are_normalized() {
        assert_eq!(
            normalize_pci("0000:03:00.0").as_deref(),
            Some("0000:03:00.0")
        );
        assert_eq!(
            normalize_pci("0000:C1:00.0").as_deref(),
            Some("0000:c1:00.0")
        );
        assert_eq!(normalize_pci("03:00.0").as_deref(), Some("0000:03:00.0"));
        assert_eq!(
            normalize_pci(" 0001:0A:1F.7\n").as_deref(),
            Some("0001:0a:1f.7")
        );
        for bad in [
            "",
            "0000:03:00",
            "zz:00.0",
            "0000:100:00.0",
            "0000:03:20.0",
            "0000:03:00.8",
        ] {
            assert_eq!(normalize_pci(bad), None, "{bad}");
        }
    }
}
