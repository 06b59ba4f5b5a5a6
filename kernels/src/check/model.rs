//! Validation of a network run: every layer against the f64 reference of that layer computed from
//! the backend's own input to it (a sample of each layer's elements), then the logits against the
//! f64 network run from the images (the whole graph in f64). Both on the first and the last image
//! of the batch. When the logits miss, every element of every layer of that image is checked to
//! name the first layer that diverges.
//!
//! The logits' tolerance is [`LOGITS_REL_TOL`] of the largest reference logit of the image: an fp32
//! network accumulates about `depth · 2^-24 · √K` relative error (3·10^-5 for ResNet-18's
//! 4608-long dot products over 21 layers), so 10^-3 leaves a margin of 30 while one layer's
//! weights off by 1/16 moves the logits by a few percent.

use rand::SeedableRng;
use rand_pcg::Pcg64;

use super::harness::{EPS32, Tally, Validation, format_index, pick};
use crate::model::{Graph, Layer, Op, layer_element, layer_forward};
use crate::types::Dtype;

/// Tolerance of the logits, relative to the largest reference logit of the image.
pub const LOGITS_REL_TOL: f64 = 1e-3;

/// Tolerance of the logits in f16 storage, relative to the largest reference logit: every layer's
/// output is rounded to half (2^-11 relative) and the network carries those roundings to the
/// logits. A perfect f16-storage backend (each layer in f64 from the rounded earlier tensors, then
/// rounded to half) misses the f64 network by 1.1·10^-3 of the largest logit on mobilenet_v2,
/// 3.4·10^-4 on resnet18 and 2.6·10^-4 on simple_cnn (seed 5, batch 1; `model::tests`): 10^-2
/// leaves a margin of 9, room for a device that rounds toward zero (Vulkan lets it). One layer's
/// weights off by 1/16 are caught by that layer's own check, whose tolerance is the f32 one plus
/// one unit in the last place of a half.
pub const LOGITS_REL_TOL_F16: f64 = 1e-2;

/// How a network's tensors are stored: the check's tolerances follow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Storage {
    /// f32 everywhere.
    F32,
    /// Images, weights and every layer's output in IEEE half, the arithmetic in f32: each layer's
    /// output is its f32 result rounded once.
    F16,
}

impl Storage {
    /// The storage of a problem's dtype.
    pub fn of(dtype: Dtype) -> Storage {
        match dtype {
            Dtype::F16 => Storage::F16,
            // Quantized weights keep f32 activations and results.
            Dtype::F32 | Dtype::Q8_0 | Dtype::Q4_0 => Storage::F32,
        }
    }

    /// A layer element's tolerance `tol` (the f32 one) widened by the rounding of `expected` to
    /// the stored format: up to one unit in the last place of a half (10 fraction bits; an
    /// implementation may round toward zero), or one step of its subnormals.
    fn widen(self, expected: f64, tol: f64) -> f64 {
        match self {
            Storage::F32 => tol,
            Storage::F16 => tol + expected.abs() / 1024.0 + 1.0 / 16_777_216.0,
        }
    }

    /// The logits' tolerance relative to the largest reference logit.
    pub fn logits_rel_tol(self) -> f64 {
        match self {
            Storage::F32 => LOGITS_REL_TOL,
            Storage::F16 => LOGITS_REL_TOL_F16,
        }
    }

    /// `v` as the format stores it (tests only: the perfect backend of [`reference_arena`]).
    #[cfg(test)]
    fn round(self, v: f64) -> f32 {
        match self {
            Storage::F32 => v as f32,
            Storage::F16 => half::f16::from_f64(v).to_f32(),
        }
    }
}

/// Elements of each layer compared per checked image.
const SAMPLES_PER_LAYER: usize = 384;

fn widen(v: &[f32]) -> Vec<f64> {
    v.iter().map(|&x| f64::from(x)).collect()
}

/// One element out of tolerance.
struct Miss {
    layer: usize,
    message: String,
}

/// Records one comparison in `tally`; the message when it is out of tolerance.
fn compare(tally: &mut Tally, got: f32, expected: f64, tol: f64) -> Option<String> {
    tally
        .misses(f64::from(got), expected, tol)
        .then(|| format!("got {got}, expected {expected} (tol {tol:.3e})"))
}

/// The layer's element index `o` of image `img` as `[n,c,y,x]`.
fn where_in(layer: &Layer, img: usize, o: usize) -> String {
    let s = layer.out;
    format_index(img * s.len() + o, &[usize::MAX, s.c, s.h, s.w])
}

fn describe(graph: &Graph, i: usize) -> String {
    let l = &graph.layers[i];
    format!(
        "layer {} `{}` ({}, {} of {})",
        i + 1,
        l.name,
        l.op.kind(),
        i + 1,
        graph.layers.len()
    )
}

/// A network's run under check: its graph, its storage, its inputs and the backend's arena.
struct Checked<'a> {
    graph: &'a Graph,
    storage: Storage,
    images: &'a [f32],
    weights: &'a [f32],
    arena: &'a [f32],
}

/// Checks layer `i` of image `img` on `samples` (all elements when `None`).
fn check_layer(
    run: &Checked<'_>,
    i: usize,
    img: usize,
    samples: Option<&mut Pcg64>,
    tally: &mut Tally,
) -> Option<Miss> {
    let Checked {
        graph,
        storage,
        images,
        weights,
        arena,
    } = *run;
    let l = &graph.layers[i];
    let x = widen(graph.tensor(l.input, img, images, arena));
    let skip = match l.op {
        Op::Add { skip, .. } => Some(widen(graph.tensor(skip, img, images, arena))),
        _ => None,
    };
    let got = graph.tensor(i + 1, img, images, arena);
    let miss = |o: usize, v: f64, t: f64, tally: &mut Tally| {
        compare(tally, got[o], v, storage.widen(v, t)).map(|m| Miss {
            layer: i,
            message: format!("element {}: {m}", where_in(l, img, o)),
        })
    };
    match samples {
        Some(rng) => {
            let n = l.out.len();
            for o in pick(rng, n, SAMPLES_PER_LAYER, &[0, n - 1]) {
                let (v, t) = layer_element(l, &x, skip.as_deref(), weights, o);
                if let Some(m) = miss(o, v, t, tally) {
                    return Some(m);
                }
            }
        }
        None => {
            let r = layer_forward(l, &x, skip.as_deref(), weights);
            for (o, (v, t)) in r.value.iter().zip(&r.tol).enumerate() {
                if let Some(m) = miss(o, *v, *t, tally) {
                    return Some(m);
                }
            }
        }
    }
    None
}

/// Validates the arena a backend computed for `graph` from `images` and `weights` (see the module
/// doc).
pub(crate) fn check_model(
    graph: &Graph,
    storage: Storage,
    images: &[f32],
    weights: &[f32],
    arena: &[f32],
) -> Validation {
    let total = arena.len() as u64;
    let last = graph.batch - 1;
    let checked_images: Vec<usize> = if last == 0 { vec![0] } else { vec![0, last] };
    let mut tally = Tally::default();
    let fail = |tally: &Tally, message: String| tally.outcome(total, true, message);

    // Each layer from the backend's own input: the first layer out of tolerance is the culprit.
    let run = Checked {
        graph,
        storage,
        images,
        weights,
        arena,
    };
    let mut rng = Pcg64::seed_from_u64(0x6d6f_6465_6c73 ^ graph.batch as u64);
    for i in 0..graph.layers.len() {
        for &img in &checked_images {
            if let Some(m) = check_layer(&run, i, img, Some(&mut rng), &mut tally) {
                return fail(
                    &tally,
                    format!("{} diverges first: {}", describe(graph, m.layer), m.message),
                );
            }
        }
    }

    // The logits against the whole network in f64, one thread per checked image.
    let g = graph;
    let logits: Vec<Vec<f64>> = std::thread::scope(|s| {
        let runs: Vec<_> = checked_images
            .iter()
            .map(|&img| s.spawn(move || g.forward_f64(img, images, weights)))
            .collect();
        runs.into_iter()
            .map(|h| h.join().unwrap_or_default())
            .collect()
    });
    let classes = graph.classes();
    for (&img, reference) in checked_images.iter().zip(&logits) {
        let got = graph.tensor(graph.layers.len(), img, images, arena);
        let scale = reference.iter().fold(0f64, |m, v| m.max(v.abs()));
        let rel = storage.logits_rel_tol();
        let tol = rel * scale + EPS32;
        for (c, (&g, &r)) in got.iter().zip(reference).enumerate().take(classes) {
            if let Some(m) = compare(&mut tally, g, r, tol) {
                // Name the layer: every element of every layer of this image.
                let mut full = Tally::default();
                let culprit = (0..graph.layers.len())
                    .find_map(|i| check_layer(&run, i, img, None, &mut full));
                let why = match culprit {
                    Some(miss) => format!(
                        "; first layer out of tolerance: {}: {}",
                        describe(graph, miss.layer),
                        miss.message
                    ),
                    None => format!(
                        "; every layer is within its own tolerance, so the error accumulated over {} layers",
                        graph.layers.len()
                    ),
                };
                return fail(
                    &tally,
                    format!(
                        "logit [{img},{c}]: {m} against the f64 network (tolerance {rel:e} of the largest logit){why}"
                    ),
                );
            }
        }
    }
    let message = format!(
        "{} layers × {} image(s) sampled against their f64 reference from the backend's own inputs, and the logits against the f64 network: max |err| {:.3e}, {:.3} of tolerance",
        graph.layers.len(),
        checked_images.len(),
        tally.max_abs,
        tally.worst
    );
    tally.outcome(total, false, message)
}

/// The arena of a perfect backend of `storage`: each layer in f64 from the rounded earlier
/// tensors, then rounded to the stored format (tests only).
#[cfg(test)]
pub(crate) fn reference_arena(
    graph: &Graph,
    storage: Storage,
    images: &[f32],
    weights: &[f32],
) -> Vec<f32> {
    let mut arena = vec![0f32; graph.arena_len];
    for img in 0..graph.batch {
        for (i, l) in graph.layers.iter().enumerate() {
            let x = widen(graph.tensor(l.input, img, images, &arena));
            let skip = match l.op {
                Op::Add { skip, .. } => Some(widen(graph.tensor(skip, img, images, &arena))),
                _ => None,
            };
            let r = layer_forward(l, &x, skip.as_deref(), weights);
            let at = graph.layers[i].out_offset + img * l.out.len();
            for (d, v) in arena[at..at + l.out.len()].iter_mut().zip(&r.value) {
                *d = storage.round(*v);
            }
        }
    }
    arena
}
