//! The host CPU against the one this binary was built for.
//!
//! `.cargo/config.toml` builds for the building machine's CPU (`target-cpu=native`). A
//! binary copied to a CPU that lacks one of those features would die of SIGILL at the
//! first instruction that needs it, somewhere in the model; `missing_feature` finds
//! that out first, with std's runtime detection (built for the baseline CPU), so the
//! command and the Python module can say so instead.

/// The first instruction-set feature this binary was compiled to use that the CPU
/// running it lacks; None when it has them all.
pub fn missing_feature() -> Option<&'static str> {
    #[cfg(target_arch = "x86_64")]
    {
        // The features LLVM uses in ordinary code; a build enables those its CPU has.
        macro_rules! first_missing {
            ($($f:tt),*) => {
                $(if cfg!(target_feature = $f) && !std::arch::is_x86_feature_detected!($f) {
                    return Some($f);
                })*
            };
        }
        first_missing!(
            "sse3", "ssse3", "sse4.1", "sse4.2", "popcnt", "avx", "avx2", "bmi1", "bmi2", "fma", "lzcnt", "movbe",
            "f16c", "avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"
        );
    }
    None
}

/// What to tell the user when `missing_feature` found `f` missing.
pub fn mismatch_message(f: &str) -> String {
    format!(
        "this binary was built for a CPU with {f} (target-cpu=native in .cargo/config.toml) and this \
         CPU has none: build it on this machine (cargo build --release)"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_binary_runs_on_the_cpu_it_was_built_for() {
        // Tests are built on the machine that runs them, so every feature is there.
        assert_eq!(missing_feature(), None);
        assert!(mismatch_message("avx2").contains("built for a CPU with avx2"));
    }
}
