//! Host data in a device's storage format: f32, IEEE half (converted on
//! the host; catalog inputs are exact in fp16) or u32 words, little-endian.
//! Shared by the GPU backends.

use gpufleet_kernels::Buffer;

/// Element format of a device buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Elem {
    F32,
    F16,
    U32,
    /// A transformer's weights packed in its quantized dtype's blocks
    /// (`gpufleet_kernels::llm::PackedLayout`, [`Buffer::Packed`]): bytes, not elements.
    Packed,
}

impl Elem {
    /// Bytes of one element (1 for packed weights, whose size is their layout's).
    pub fn size(self) -> usize {
        match self {
            Elem::F16 => 2,
            Elem::Packed => 1,
            Elem::F32 | Elem::U32 => 4,
        }
    }
}

/// The bytes of each of `inputs` stored as `storage` says: packed weights through
/// [`packed_bytes`], the others through [`to_bytes`].
pub fn input_bytes(inputs: &[Buffer], storage: &[Elem]) -> Vec<Vec<u8>> {
    inputs
        .iter()
        .zip(storage)
        .map(|(b, s)| match s {
            Elem::Packed => packed_bytes(b).to_vec(),
            _ => to_bytes(b, *s),
        })
        .collect()
}

/// The bytes of `weights`, a quantized transformer's packed weights input (the catalog draws
/// them in the problem's [`gpufleet_kernels::llm::PackedLayout`]).
///
/// # Panics
/// For a buffer that is not packed: the planners give [`Elem::Packed`] to nothing else.
pub fn packed_bytes(weights: &Buffer) -> &[u8] {
    weights
        .as_packed()
        .expect("packed storage is planned for a quantized transformer's packed weights alone")
}

/// `b` as the bytes of a buffer of `e` elements.
pub fn to_bytes(b: &Buffer, e: Elem) -> Vec<u8> {
    range_bytes(b, e, 0..b.len())
}

/// Elements `range` of `b` as the bytes of a buffer of `e` elements (a piece of an input made as
/// several device buffers).
pub fn range_bytes(b: &Buffer, e: Elem, range: std::ops::Range<usize>) -> Vec<u8> {
    match (b, e) {
        (Buffer::F32(v), Elem::F16) => v[range]
            .iter()
            .flat_map(|x| half::f16::from_f32(*x).to_bits().to_le_bytes())
            .collect(),
        (Buffer::F32(v), _) => v[range].iter().flat_map(|x| x.to_le_bytes()).collect(),
        (Buffer::U32(v), _) => v[range].iter().flat_map(|x| x.to_le_bytes()).collect(),
        (Buffer::Packed(v), _) => v[range].to_vec(),
    }
}

/// The buffer `bytes` of `e` elements hold (f16 widened to f32).
pub fn from_bytes(bytes: &[u8], e: Elem) -> Buffer {
    match e {
        Elem::F32 => Buffer::F32(
            bytes
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect(),
        ),
        Elem::F16 => Buffer::F32(
            bytes
                .chunks_exact(2)
                .map(|c| half::f16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f32())
                .collect(),
        ),
        Elem::Packed => unreachable!("packed weights are uploaded, never read back"),
        Elem::U32 => Buffer::U32(
            bytes
                .chunks_exact(4)
                .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_every_format() {
        let f = Buffer::F32(vec![1.5, -0.25, 0.0, 65504.0]);
        for e in [Elem::F32, Elem::F16] {
            let bytes = to_bytes(&f, e);
            assert_eq!(bytes.len(), 4 * e.size());
            assert_eq!(from_bytes(&bytes, e), f, "{e:?}");
        }
        let u = Buffer::U32(vec![0, 7, u32::MAX]);
        assert_eq!(from_bytes(&to_bytes(&u, Elem::U32), Elem::U32), u);
    }

    #[test]
    fn half_rounds_values_it_cannot_hold() {
        let b = to_bytes(&Buffer::F32(vec![1.0 + 1.0 / 4096.0]), Elem::F16);
        assert_eq!(from_bytes(&b, Elem::F16), Buffer::F32(vec![1.0]));
    }
}
