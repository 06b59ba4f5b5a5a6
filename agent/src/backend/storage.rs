//! Host data in a device's storage format: f32, IEEE half (converted on
//! the host; catalog inputs are exact in fp16; an f16 transformer's weights come as half words)
//! or u32 words, little-endian. Shared by the GPU backends.

use std::borrow::Cow;

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

/// The bytes of each of `inputs` stored as `storage` says (see [`input_range_bytes`]).
pub fn input_bytes<'a>(inputs: &'a [Buffer], storage: &[Elem]) -> Vec<Cow<'a, [u8]>> {
    inputs
        .iter()
        .zip(storage)
        .map(|(b, s)| input_range_bytes(b, *s, 0..b.len()))
        .collect()
}

/// Elements `range` of `b` stored as `e`: borrowed where the buffer already holds those bytes
/// (packed weights, [`packed_bytes`]; f32, u32 and half words stored as such, on a little-endian
/// host), else converted through [`range_bytes`]. Borrowed, an upload reads the problem's own
/// buffer: for a quantized `8b` that is 4.2 GiB of host memory not copied, for an f16 one 15.
pub fn input_range_bytes(b: &Buffer, e: Elem, range: std::ops::Range<usize>) -> Cow<'_, [u8]> {
    match (b, e) {
        (_, Elem::Packed) => Cow::Borrowed(&packed_bytes(b)[range]),
        #[cfg(target_endian = "little")]
        (Buffer::F32(v), Elem::F32) => Cow::Borrowed(words_as_bytes(&v[range])),
        #[cfg(target_endian = "little")]
        (Buffer::U32(v), Elem::U32) => Cow::Borrowed(words_as_bytes(&v[range])),
        #[cfg(target_endian = "little")]
        (Buffer::Half(v), Elem::F16) => Cow::Borrowed(words_as_bytes(&v[range])),
        _ => Cow::Owned(range_bytes(b, e, range)),
    }
}

/// The bytes of `words` (f32, u32 or u16) as they lie in memory: their little-endian encoding on
/// a little-endian host, which is where [`input_bytes`] borrows them.
#[cfg(target_endian = "little")]
fn words_as_bytes<T: Word>(words: &[T]) -> &[u8] {
    // SAFETY: `T` is f32, u32 or u16 (the sealed `Word`): plain words, no padding, every byte
    // initialized; u8 has alignment 1, and the length covers exactly the slice's memory.
    unsafe { std::slice::from_raw_parts(words.as_ptr().cast::<u8>(), std::mem::size_of_val(words)) }
}

/// The plain words [`words_as_bytes`] may view as bytes.
#[cfg(target_endian = "little")]
trait Word: Copy {}
#[cfg(target_endian = "little")]
impl Word for f32 {}
#[cfg(target_endian = "little")]
impl Word for u32 {}
#[cfg(target_endian = "little")]
impl Word for u16 {}

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
        (Buffer::Half(v), Elem::F16) => v[range].iter().flat_map(|x| x.to_le_bytes()).collect(),
        (Buffer::Half(v), _) => v[range]
            .iter()
            .flat_map(|x| half::f16::from_bits(*x).to_f32().to_le_bytes())
            .collect(),
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
    fn input_bytes_borrow_what_the_buffers_hold_and_equal_the_conversion_whole_or_in_part() {
        let inputs = [
            Buffer::F32(vec![1.5, -0.25, 3.0e-7]),
            Buffer::F32(vec![2.0, -1.0]),
            Buffer::U32(vec![1, u32::MAX]),
            Buffer::Packed(vec![0x12, 0x34, 0x56]),
            Buffer::Half(vec![0x3C00, 0xC000, 0x0001]),
            Buffer::Half(vec![0x3E00, 0x8000]),
        ];
        let storage = [
            Elem::F32,
            Elem::F16,
            Elem::U32,
            Elem::Packed,
            Elem::F16,
            Elem::F32,
        ];
        let bytes = input_bytes(&inputs, &storage);
        for (i, ((b, e), got)) in inputs.iter().zip(storage).zip(&bytes).enumerate() {
            assert_eq!(&got[..], &to_bytes(b, e)[..], "input {i}");
            let borrowed = matches!(got, Cow::Borrowed(_));
            let stored_as_such = match b {
                Buffer::Half(_) => e == Elem::F16,
                _ => e != Elem::F16,
            };
            let expect = e == Elem::Packed || (cfg!(target_endian = "little") && stored_as_such);
            assert_eq!(borrowed, expect, "input {i}: only a conversion is owned");
            // A segment of the input: the same bytes as converting that range.
            let part = input_range_bytes(b, e, 1..b.len());
            assert_eq!(
                &part[..],
                &range_bytes(b, e, 1..b.len())[..],
                "input {i}, 1.."
            );
        }
    }

    #[test]
    fn half_words_upload_as_themselves_or_widened() {
        // 1.0, -2.0 and the smallest subnormal, as half words.
        let h = Buffer::Half(vec![0x3C00, 0xC000, 0x0001]);
        assert_eq!(
            to_bytes(&h, Elem::F16),
            [0x00, 0x3C, 0x00, 0xC0, 0x01, 0x00]
        );
        let wide = from_bytes(&to_bytes(&h, Elem::F32), Elem::F32);
        assert_eq!(wide, Buffer::F32(vec![1.0, -2.0, 2f32.powi(-24)]));
        assert_eq!(from_bytes(&to_bytes(&h, Elem::F16), Elem::F16), wide);
    }

    #[test]
    fn half_rounds_values_it_cannot_hold() {
        let b = to_bytes(&Buffer::F32(vec![1.0 + 1.0 / 4096.0]), Elem::F16);
        assert_eq!(from_bytes(&b, Elem::F16), Buffer::F32(vec![1.0]));
    }
}
