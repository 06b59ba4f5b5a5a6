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

#[cfg(test)]
mod tests {
    use super::*;

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
