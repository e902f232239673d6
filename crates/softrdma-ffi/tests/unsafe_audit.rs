//! `unsafe` lives in `entry` and `ptr` alone, every `unsafe` block says why it is sound, and
//! the crate root denies the rest.

#[test]
fn unsafe_code_is_confined_to_the_audited_modules_with_safety_comments() {
    let src = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src");
    softrdma_ffi::audit::check_unsafe_confined(&src, &["entry.rs", "ptr.rs"]).unwrap();
}
