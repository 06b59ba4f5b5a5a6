//! The measurement settings a [`RunSpec`] gives: its `settings` message, which is the kernels
//! crate's [`PartialSettings`] (`build.rs` maps `gpufleet.v1.RunSettings` to it), and the
//! top-level fields that clients sent before it, read here only.

use crate::v1::RunSpec;
use gpufleet_kernels::PartialSettings;

impl RunSpec {
    /// The settings this spec gives, not yet resolved: `settings`, each field it leaves out taken
    /// from the top-level field of the same name (deprecated in `agent.proto`; older clients send
    /// them and older coordinators stored them in jobs), where a negative `target_ci_pct` is "no
    /// target" as it was before that field was `optional`. [`PartialSettings::resolve`] then
    /// applies the defaults and the bounds.
    #[allow(deprecated)]
    pub fn given_settings(&self) -> PartialSettings {
        let older_no_target = |t: f64| if t < 0.0 && t.is_finite() { 0.0 } else { t };
        let older = PartialSettings {
            warmup: self.warmup,
            min_iterations: self.min_iterations,
            min_seconds: self.min_seconds,
            max_iterations: self.max_iterations,
            timeout_s: self.timeout_s,
            target_ci_pct: self.target_ci_pct.map(older_no_target),
            max_seconds: self.max_seconds,
        };
        self.settings.unwrap_or_default().or(older)
    }

    /// This spec measuring by `settings`: the message whole and, for agents built before it
    /// existed (a fleet upgrades its hosts one by one), the same values in the deprecated
    /// top-level fields, which those agents read and [`RunSpec::given_settings`] reads only where
    /// `settings` leaves a field out. The one place those fields are written.
    #[allow(deprecated)]
    pub fn with_settings(self, settings: PartialSettings) -> RunSpec {
        RunSpec {
            settings: Some(settings),
            warmup: settings.warmup,
            min_iterations: settings.min_iterations,
            min_seconds: settings.min_seconds,
            max_iterations: settings.max_iterations,
            timeout_s: settings.timeout_s,
            target_ci_pct: settings.target_ci_pct,
            max_seconds: settings.max_seconds,
            ..self
        }
    }

    /// The settings message, made (every field not given) when the spec has none: for a client
    /// that sets one setting (`spec.settings_mut().timeout_s = Some(30.0)`).
    pub fn settings_mut(&mut self) -> &mut PartialSettings {
        self.settings.get_or_insert_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;
    use prost_types::field_descriptor_proto::Type;
    use prost_types::{DescriptorProto, FileDescriptorSet};

    fn message(name: &str) -> DescriptorProto {
        let set = FileDescriptorSet::decode(crate::FILE_DESCRIPTOR_SET).unwrap();
        set.file
            .into_iter()
            .filter(|f| f.package() == "gpufleet.v1")
            .flat_map(|f| f.message_type)
            .find(|m| m.name() == name)
            .unwrap_or_else(|| panic!("no message {name} in agent.proto"))
    }

    /// The Rust type carries the proto's fields: every name, at its tag, with its wire type, and
    /// no field the proto lacks; and every one of them has its older top-level field in RunSpec.
    #[test]
    fn partial_settings_is_the_proto_message_and_run_spec_keeps_each_older_field() {
        let proto = message("RunSettings");
        let rust = serde_json::to_value(PartialSettings::default()).unwrap();
        let mut rust_names: Vec<&str> = rust.as_object().unwrap().keys().map(|k| &**k).collect();
        let mut proto_names: Vec<&str> = proto.field.iter().map(|f| f.name()).collect();
        rust_names.sort_unstable();
        proto_names.sort_unstable();
        assert_eq!(rust_names, proto_names);
        let spec = message("RunSpec");
        for field in &proto.field {
            let given: PartialSettings =
                serde_json::from_value(serde_json::json!({ field.name(): 7 })).unwrap();
            let bytes = given.encode_to_vec();
            let (tag, wire) = prost::encoding::decode_key(&mut &bytes[..]).unwrap();
            assert_eq!(tag, field.number() as u32, "{}", field.name());
            let expected = match field.r#type() {
                Type::Uint32 => prost::encoding::WireType::Varint,
                Type::Double => prost::encoding::WireType::SixtyFourBit,
                other => panic!("{}: a setting of type {other:?}", field.name()),
            };
            assert_eq!(wire, expected, "{}", field.name());
            assert_eq!(PartialSettings::decode(&bytes[..]).unwrap(), given);
            let older = spec.field.iter().find(|f| f.name() == field.name());
            assert!(
                older.is_some_and(|f| f.r#type() == field.r#type()
                    && f.options.as_ref().is_some_and(|o| o.deprecated())),
                "RunSpec has no deprecated `{}` of the same type",
                field.name()
            );
        }
    }

    #[test]
    #[allow(deprecated)]
    fn settings_win_and_an_older_field_fills_what_they_leave_out() {
        let spec = RunSpec {
            timeout_s: Some(30.0),
            warmup: Some(1),
            target_ci_pct: Some(-1.0),
            ..RunSpec::default()
        };
        let older = spec.given_settings();
        assert_eq!(
            (older.timeout_s, older.warmup, older.target_ci_pct),
            (Some(30.0), Some(1), Some(0.0))
        );
        let mut both = spec.clone();
        both.settings_mut().timeout_s = Some(5.0);
        let given = both.given_settings();
        assert_eq!(
            (given.timeout_s, given.warmup, given.min_seconds),
            (Some(5.0), Some(1), None)
        );
        // Through the wire: the message nested in the spec arrives whole.
        let back = RunSpec::decode(&both.encode_to_vec()[..]).unwrap();
        assert_eq!(back.given_settings(), given);
        // Written for every agent: an older one reads the top-level fields, a newer one `settings`.
        let explicit = gpufleet_kernels::RunSettings::DEFAULT.explicit();
        let sent = RunSpec::default().with_settings(explicit);
        assert_eq!(sent.given_settings(), explicit);
        let older_agent = RunSpec {
            settings: None,
            ..sent.clone()
        };
        assert_eq!(older_agent.given_settings(), explicit);
        // In `settings` a negative target is refused, naming the field.
        let mut negative = RunSpec::default();
        negative.settings_mut().target_ci_pct = Some(-1.0);
        let refused = negative.given_settings().resolve().unwrap_err();
        assert_eq!(refused.field, "target_ci_pct");
    }
}
