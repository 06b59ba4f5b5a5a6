//! The README says what the code does: its kernel lists name every kernel of the catalog, its
//! regression section states the detection defaults, and its noise paragraph the noise limit.
//! Each figure is formatted from the code, so changing a default without the README fails here.

use gpufleet_coordinator::regression::detect::DetectConfig;

fn readme() -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md");
    std::fs::read_to_string(path).expect("README.md next to the workspace")
}

/// The text of the `### {title}` section, up to the next heading.
fn section(readme: &str, title: &str) -> String {
    let start = readme
        .find(&format!("### {title}\n"))
        .unwrap_or_else(|| panic!("README has no `### {title}` section"));
    let body = &readme[start + title.len() + 5..];
    let end = body.find("\n#").unwrap_or(body.len());
    // Lines joined, so a sentence broken across lines still matches.
    body[..end].split_whitespace().collect::<Vec<_>>().join(" ")
}

#[test]
fn the_kernel_lists_name_every_kernel_of_the_catalog() {
    let readme = readme();
    let kernels = section(&readme, "Kernels");
    let debugging = section(&readme, "Debugging the harness");
    let mut missing = Vec::new();
    for k in gpufleet_kernels::catalog() {
        let listed = if k.debug { &debugging } else { &kernels };
        if !listed.contains(&format!("`{}`", k.name)) {
            missing.push(k.name);
        }
    }
    assert!(
        missing.is_empty(),
        "README's kernel lists leave out {missing:?}"
    );
}

#[test]
fn the_regression_section_states_the_detection_defaults() {
    let text = section(&readme(), "Nightly runs and regressions");
    let d = DetectConfig::DEFAULT;
    let rule = format!(
        "beyond max({} %, {} × the robust spread) of the last {} ok, non-noisy results",
        d.threshold_pct, d.k, d.baseline_n
    );
    assert!(text.contains(&rule), "README does not say: {rule}");
    let least = format!("({} at least)", d.min_baseline);
    assert!(text.contains(&least), "README does not say: {least}");
    assert!(!d.include_noisy, "the README says baselines are non-noisy");
    let limit = format!(
        "robust CV is above {} %",
        gpufleet_kernels::NOISY_SPREAD * 100.0
    );
    assert!(text.contains(&limit), "README does not say: {limit}");
}

#[test]
fn the_noise_paragraph_states_the_limit() {
    let text = readme().split_whitespace().collect::<Vec<_>>().join(" ");
    let limit = format!(
        "IQR / 1.349 / median) is above {} % or its interval is wider than its target",
        gpufleet_kernels::NOISY_SPREAD * 100.0
    );
    assert!(text.contains(&limit), "README does not say: {limit}");
}
