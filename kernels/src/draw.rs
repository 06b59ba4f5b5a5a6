//! Drawing many seeded values across the host's cores with exactly the values of one stream.
//!
//! Below `inputs` and `quant` (both draw through it) and above nothing of this crate.

use rand_pcg::Pcg64;

/// Fills `out` (a whole number of `unit`-element units, each taking `steps` draws of `rng`) with
/// `draw`, exactly as `draw(out, rng)` would, but across the host's cores where `out` is large (a
/// model's weights: 8 billion values took a minute and a half on one core): each thread's stretch
/// starts from its own copy of `rng` advanced past the draws before it (PCG jumps ahead in
/// O(log n)), and `rng` ends advanced past them all.
pub(crate) fn draw_units<T: Send>(
    out: &mut [T],
    unit: usize,
    steps: u128,
    rng: &mut Pcg64,
    draw: impl Fn(&mut [T], &mut Pcg64) + Sync,
) {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    // Below a few million values one core is quicker than starting threads.
    if threads == 1 || out.len() < 1 << 22 {
        draw(out, rng);
        return;
    }
    draw_across(threads, out, unit, steps, rng, draw);
}

/// [`draw_units`] on `threads` threads, whatever the length.
fn draw_across<T: Send>(
    threads: usize,
    out: &mut [T],
    unit: usize,
    steps: u128,
    rng: &mut Pcg64,
    draw: impl Fn(&mut [T], &mut Pcg64) + Sync,
) {
    debug_assert_eq!(out.len() % unit, 0);
    let units = out.len() / unit;
    let per = units.div_ceil(threads).max(1) * unit;
    std::thread::scope(|scope| {
        for (t, part) in out.chunks_mut(per).enumerate() {
            let mut own = rng.clone();
            own.advance((t * per / unit) as u128 * steps);
            let draw = &draw;
            scope.spawn(move || draw(part, &mut own));
        }
    });
    rng.advance(units as u128 * steps);
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{RngCore, SeedableRng};

    #[test]
    fn drawing_across_threads_gives_the_values_of_one_stream() {
        // Units of three values taking five draws each (two unused): every thread's stretch must
        // start exactly where the one stream would be, and the stream end past them all.
        let draw = |part: &mut [f32], rng: &mut Pcg64| {
            for u in part.chunks_exact_mut(3) {
                for v in u.iter_mut() {
                    *v = (rng.next_u64() >> 40) as f32;
                }
                rng.next_u64();
                rng.next_u64();
            }
        };
        let mut one = Pcg64::seed_from_u64(3);
        let mut want = vec![0f32; 3 * 1001];
        draw(&mut want, &mut one);
        for threads in [1, 2, 5, 7, 2000] {
            let mut rng = Pcg64::seed_from_u64(3);
            let mut got = vec![0f32; 3 * 1001];
            draw_across(threads, &mut got, 3, 5, &mut rng, draw);
            assert_eq!(got, want, "{threads} threads");
            assert_eq!(
                rng.next_u64(),
                one.clone().next_u64(),
                "{threads} threads: the stream's end"
            );
        }
    }
}
