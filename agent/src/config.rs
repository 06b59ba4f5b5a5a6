//! The agent's configuration file, `/etc/gpufleet/agent.toml` (or `--config PATH`,
//! `GPUFLEET_CONFIG`): what a host's owner sets once for the service. Command-line flags and
//! `GPUFLEET_*` variables override it, key by key.
//!
//! ```toml
//! connect = "https://fleet.example:7443"   # the coordinator's --fleet-listen
//! name = "rx580-desktop"
//! token_file = "/etc/gpufleet/token"       # never the token itself
//! pin_sha256 = "ab12..."                   # or ca_cert = "/etc/gpufleet/ca.crt"
//! power_rate_hz = 20
//! metrics_listen = "127.0.0.1:9464"
//!
//! [device_pci]
//! # Devices whose driver reports no PCI address (Clover's OpenCL): id as `describe` prints it.
//! "opencl:0" = "0000:0a:00.0"
//!
//! [loader]
//! # Values runs may give the loader variables beyond the standard ICD directories.
//! allow = ["/opt/amdvlk/amd_icd64.json", "/opt/rocm/lib/librocprofiler64.so"]
//! ```
//!
//! A key the agent does not know, or a value of the wrong type or out of range, is refused naming
//! the key and the file's line. The token is never read from this file (it is often readable by
//! more people than the secret should be): `token_file` names a file only the service user reads.

use gpufleet_proto::addr::parse_host_port;
use serde::Deserialize;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use toml::Spanned;

/// The file's keys; every one optional.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    connect: Option<Spanned<Connect>>,
    name: Option<Spanned<String>>,
    token_file: Option<PathBuf>,
    /// Present only to refuse it with a reason.
    token: Option<Spanned<toml::Value>>,
    pin_sha256: Option<String>,
    ca_cert: Option<PathBuf>,
    listen: Option<Spanned<String>>,
    metrics_listen: Option<Spanned<String>>,
    state_dir: Option<PathBuf>,
    cache_dir: Option<PathBuf>,
    sysfs_root: Option<PathBuf>,
    power_rate_hz: Option<Spanned<f64>>,
    #[serde(default)]
    loader: Loader,
    device_pci: Option<Spanned<std::collections::BTreeMap<String, String>>>,
}

/// `connect = "URL"` or `connect = ["URL1", "URL2"]` (coordinators of one fleet, tried in turn).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Connect {
    One(String),
    Many(Vec<String>),
}

impl Connect {
    fn into_vec(self) -> Vec<String> {
        match self {
            Connect::One(url) => vec![url],
            Connect::Many(urls) => urls,
        }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Loader {
    #[serde(default)]
    allow: Vec<String>,
}

/// The configuration file, checked.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AgentFile {
    /// Where it was read.
    pub path: PathBuf,
    /// Coordinators to dial, in order (empty: none).
    pub connect: Vec<String>,
    pub name: Option<String>,
    pub token_file: Option<PathBuf>,
    pub pin_sha256: Option<String>,
    pub ca_cert: Option<PathBuf>,
    pub listen: Option<SocketAddr>,
    pub metrics_listen: Option<SocketAddr>,
    pub state_dir: Option<PathBuf>,
    pub cache_dir: Option<PathBuf>,
    pub sysfs_root: Option<PathBuf>,
    pub power_rate_hz: Option<f64>,
    /// `[loader] allow`.
    pub loader_allow: Vec<String>,
    /// `[device_pci]`: device id → normalised PCI address.
    pub device_pci: std::collections::BTreeMap<String, String>,
}

/// The 1-based line of byte `offset` in `text`.
fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].matches('\n').count() + 1
}

impl AgentFile {
    /// Reads and checks the file at `path`.
    ///
    /// # Errors
    /// A message naming the file, and for a bad key or value the key and its line.
    pub fn load(path: &Path) -> Result<AgentFile, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("config file {}: {e}", path.display()))?;
        AgentFile::parse(&text, path)
    }

    /// Checks `text`, read from `path`.
    ///
    /// # Errors
    /// As [`AgentFile::load`].
    pub fn parse(text: &str, path: &Path) -> Result<AgentFile, String> {
        let at = |offset: usize| format!("{} line {}", path.display(), line_of(text, offset));
        let raw: Raw = toml::from_str(text).map_err(|e| {
            let line = e.span().map(|s| line_of(text, s.start));
            let message = e.message().trim_end();
            match line {
                Some(l) => format!("config file {} line {l}: {message}", path.display()),
                None => format!("config file {}: {message}", path.display()),
            }
        })?;
        if let Some(t) = &raw.token {
            return Err(format!(
                "{}: token: the token is not read from the config file; write it to a file only the service user can read and name it with token_file",
                at(t.span().start)
            ));
        }
        let addr = |key: &str, v: &Option<Spanned<String>>| -> Result<Option<SocketAddr>, String> {
            v.as_ref()
                .map(|v| {
                    parse_host_port(v.get_ref())
                        .map_err(|e| format!("{}: {key}: {e}", at(v.span().start)))
                })
                .transpose()
        };
        let listen = addr("listen", &raw.listen)?;
        let metrics_listen = addr("metrics_listen", &raw.metrics_listen)?;
        if let Some(r) = &raw.power_rate_hz {
            let v = *r.get_ref();
            if !(v > 0.0 && v <= 1000.0) {
                return Err(format!(
                    "{}: power_rate_hz: {v} is outside (0, 1000] Hz",
                    at(r.span().start)
                ));
            }
        }
        if let Some(v) = &raw.name
            && v.get_ref().trim().is_empty()
        {
            return Err(format!("{}: name: empty", at(v.span().start)));
        }
        if let Some(v) = &raw.connect {
            let empty = match v.get_ref() {
                Connect::One(url) => url.trim().is_empty(),
                Connect::Many(urls) => urls.is_empty() || urls.iter().any(|u| u.trim().is_empty()),
            };
            if empty {
                return Err(format!("{}: connect: empty", at(v.span().start)));
            }
        }
        let mut device_pci = std::collections::BTreeMap::new();
        if let Some(table) = &raw.device_pci {
            for (device, bdf) in table.get_ref() {
                let (device, pci) = crate::host::pci::device_pci(device, bdf).map_err(|e| {
                    format!(
                        "{}: [device_pci] {:?}: {e}",
                        at(table.span().start),
                        gpufleet_kernels::prefix(device, 64)
                    )
                })?;
                device_pci.insert(device, pci);
            }
        }
        Ok(AgentFile {
            path: path.to_path_buf(),
            connect: raw
                .connect
                .map(|c| c.into_inner().into_vec())
                .unwrap_or_default(),
            name: raw.name.map(Spanned::into_inner),
            token_file: raw.token_file,
            pin_sha256: raw.pin_sha256,
            ca_cert: raw.ca_cert,
            listen,
            metrics_listen,
            state_dir: raw.state_dir,
            cache_dir: raw.cache_dir,
            sysfs_root: raw.sysfs_root,
            power_rate_hz: raw.power_rate_hz.map(Spanned::into_inner),
            loader_allow: raw.loader.allow,
            device_pci,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<AgentFile, String> {
        AgentFile::parse(text, Path::new("/etc/gpufleet/agent.toml"))
    }

    #[test]
    fn every_key_is_read() {
        let f = parse(
            "connect = \"https://fleet:7443\"\nname = \"rig\"\ntoken_file = \"/etc/gpufleet/token\"\n\
             pin_sha256 = \"ab\"\nlisten = \"127.0.0.1:50051\"\nmetrics_listen = \"localhost:9464\"\n\
             state_dir = \"/var/lib/gpufleet\"\ncache_dir = \"/var/cache/gpufleet\"\n\
             power_rate_hz = 10\n[loader]\nallow = [\"/opt/x.json\"]\n\
             [device_pci]\n\"opencl:0\" = \"0A:00.0\"\n",
        )
        .unwrap();
        assert_eq!(
            f.device_pci,
            std::collections::BTreeMap::from([("opencl:0".into(), "0000:0a:00.0".into())])
        );
        assert_eq!(f.connect, ["https://fleet:7443"]);
        assert_eq!(f.name.as_deref(), Some("rig"));
        assert_eq!(f.listen.unwrap().port(), 50051);
        assert_eq!(f.metrics_listen.unwrap().port(), 9464);
        assert_eq!(f.power_rate_hz, Some(10.0));
        assert_eq!(f.loader_allow, vec!["/opt/x.json".to_string()]);
        assert!(parse("").unwrap().connect.is_empty());
        let many = parse("connect = [\"https://a:7443\", \"https://b:7443\"]").unwrap();
        assert_eq!(many.connect, ["https://a:7443", "https://b:7443"]);
        let e = parse("connect = []").unwrap_err();
        assert!(e.contains("connect: empty"), "{e}");
    }

    #[test]
    fn unknown_keys_and_bad_values_name_the_key_and_the_line() {
        let e = parse("name = \"rig\"\n\nconect = \"https://x\"\n").unwrap_err();
        assert!(
            e.starts_with("config file /etc/gpufleet/agent.toml line 3:") && e.contains("conect"),
            "{e}"
        );
        let e = parse("name = \"rig\"\n[device_pci]\n\"opencl:0\" = \"card0\"\n").unwrap_err();
        assert!(
            e.contains("line 2") && e.contains("[device_pci]") && e.contains("not a PCI address"),
            "{e}"
        );
        let e = parse("name = \"rig\"\npower_rate_hz = 5000\n").unwrap_err();
        assert_eq!(
            e,
            "/etc/gpufleet/agent.toml line 2: power_rate_hz: 5000 is outside (0, 1000] Hz"
        );
        let e = parse("power_rate_hz = \"fast\"\n").unwrap_err();
        assert!(e.contains("line 1") && e.contains("invalid type"), "{e}");
        let e = parse("\nlisten = \"nowhere\"\n").unwrap_err();
        assert!(
            e.starts_with("/etc/gpufleet/agent.toml line 2: listen:"),
            "{e}"
        );
        let e = parse("[loader]\nallow = [\"/x\"]\nallowed = 1\n").unwrap_err();
        assert!(e.contains("line 3") && e.contains("allowed"), "{e}");
        let e = parse("name = \"rig\"\ntoken = \"s3cret\"\n").unwrap_err();
        assert!(e.contains("line 2: token:") && !e.contains("s3cret"), "{e}");
    }
}
