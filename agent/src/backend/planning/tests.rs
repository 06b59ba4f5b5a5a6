//! Unit tests of the shared planning pieces.

use super::testing::problem;
use super::*;

#[test]
fn bounded_arguments_name_the_quantity_and_the_bound() {
    let p = problem("vec_add", "", &[], "f32");
    assert_eq!(bounded(&p, "n", 7, i32::MAX, "int"), Ok(7));
    let e = bounded(&p, "n", 1 << 31, i32::MAX, "OpenCL int argument").unwrap_err();
    assert_eq!(
        e.0,
        "n=2147483648 of vec_add exceeds the largest OpenCL int argument (2147483647)"
    );
    assert_eq!(bounded(&p, "n", 1 << 31, u32::MAX, "uint"), Ok(1u32 << 31));
}

#[test]
fn row_groups_shrink_for_short_rows_and_cache_short_enough_rows() {
    assert_eq!(row_group(1, 1024), (32, 1));
    assert_eq!(row_group(100, 1024), (128, 1));
    assert_eq!(row_group(4096, 1024), (256, 16));
    assert_eq!(row_group(4097, 1024), (256, 0));
    assert_eq!(row_group(8192, 1024), (1024, 8));
    assert_eq!(row_group(8192, 64), (64, 0));
}

#[test]
fn im2col_chunks_cover_the_batch() {
    let p = problem("conv2d", "im2col", &[("batch", 5)], "f32");
    let s = p.conv_shape();
    let whole = Im2col::new(&s, usize::MAX);
    assert_eq!(whole.chunks().collect::<Vec<_>>(), [(0, 5)]);
    let one = Im2col::new(&s, 1);
    assert_eq!(one.chunks().count(), 5);
    assert_eq!(one.scratch_bytes(), one.per_image * 4);
    let two = Im2col::new(&s, 2 * whole.per_image * 4);
    assert_eq!(two.chunks().collect::<Vec<_>>(), [(0, 2), (2, 2), (4, 1)]);
}
