//! The host CPU against the one this binary was built for.
//!
//! `.cargo/config.toml` builds for the building machine's CPU (`target-cpu=native`). A
//! binary copied to a CPU that lacks one of those features would die of SIGILL at the
//! first instruction that needs it, somewhere in the model. `mismatch` finds that out
//! first, from the CPUID leaves with constant masks (std's `is_x86_feature_detected!`
//! answers `true` at compile time for a feature the build enables, so it cannot tell),
//! and its callers report it on paths that need nothing but the baseline: write(2) of a
//! static message. The leaves are glibc's copy, read once by its loader: CPUID traps to
//! the hypervisor in a VM (17.5 µs each on the machine of docs/src/tasks/speed.md), and
//! every command pays for this check.

/// A message naming the first instruction-set feature this binary was compiled to use
/// that the CPU running it lacks; None when it has them all. Out of line, so its code
/// can be checked for baseline instructions (`objdump -d`, see docs/src/tasks/speed.md).
#[inline(never)]
pub fn mismatch() -> Option<&'static str> {
    #[cfg(target_arch = "x86_64")]
    {
        let Leaves {
            l1_ecx,
            l7_ebx: l7,
            ext_ecx: ext,
        } = leaves();
        // The register state the OS saves (XCR0): AVX needs SSE and AVX state, AVX-512
        // also its mask and upper-register state.
        let xcr0 = if l1_ecx & (1 << 27) != 0 {
            // SAFETY: OSXSAVE (CPUID.1:ECX[27]) says XGETBV is enabled.
            unsafe { xcr0() }
        } else {
            0
        };
        let avx_os = xcr0 & 0x6 == 0x6;
        let avx512_os = xcr0 & 0xe6 == 0xe6;
        // The features LLVM uses in ordinary code, as name => present.
        macro_rules! first_missing {
            ($($f:tt => $have:expr),* $(,)?) => {
                $(if cfg!(target_feature = $f) && !$have {
                    return Some(concat!(
                        "foliolab: this binary was built for a CPU with ", $f,
                        " (target-cpu=native in .cargo/config.toml) and this CPU lacks it: \
                         build it on this machine (cargo build --release)\n"
                    ));
                })*
            };
        }
        // Most likely missing first (an older CPU, or a VM's CPU model, lacks AVX2 and
        // BMI2 before the rest).
        first_missing!(
            "avx2" => l7 & (1 << 5) != 0 && avx_os,
            "bmi2" => l7 & (1 << 8) != 0,
            "bmi1" => l7 & (1 << 3) != 0,
            "fma" => l1_ecx & (1 << 12) != 0 && avx_os,
            "avx" => l1_ecx & (1 << 28) != 0 && avx_os,
            "f16c" => l1_ecx & (1 << 29) != 0 && avx_os,
            "lzcnt" => ext & (1 << 5) != 0,
            "movbe" => l1_ecx & (1 << 22) != 0,
            "popcnt" => l1_ecx & (1 << 23) != 0,
            "sse4.2" => l1_ecx & (1 << 20) != 0,
            "sse4.1" => l1_ecx & (1 << 19) != 0,
            "ssse3" => l1_ecx & (1 << 9) != 0,
            "sse3" => l1_ecx & (1 << 0) != 0,
            "avx512f" => l7 & (1 << 16) != 0 && avx512_os,
            "avx512dq" => l7 & (1 << 17) != 0 && avx512_os,
            "avx512cd" => l7 & (1 << 28) != 0 && avx512_os,
            "avx512bw" => l7 & (1 << 30) != 0 && avx512_os,
            "avx512vl" => l7 & (1 << 31) != 0 && avx512_os,
        );
    }
    None
}

/// The CPUID registers `mismatch` reads: leaf 1's ECX, leaf 7 (subleaf 0)'s EBX and
/// leaf 0x8000_0001's ECX, each zero where the CPU's highest leaf is below it.
#[cfg(target_arch = "x86_64")]
#[derive(Debug, PartialEq, Eq)]
struct Leaves {
    l1_ecx: u32,
    l7_ebx: u32,
    ext_ecx: u32,
}

/// glibc's `struct cpuid_feature` (<bits/platform/x86.h>): a leaf's registers as CPUID
/// gave them (EAX, EBX, ECX, EDX), then the ones glibc makes active.
#[cfg(all(target_arch = "x86_64", target_env = "gnu"))]
#[repr(C)]
struct CpuidFeature {
    cpuid: [u32; 4],
    active: [u32; 4],
}

#[cfg(all(target_arch = "x86_64", target_env = "gnu"))]
unsafe extern "C" {
    /// The loader's copy of leaf `index` (CPUID_INDEX_1 = 0, CPUID_INDEX_7 = 1,
    /// CPUID_INDEX_80000001 = 2), zero where the CPU lacks the leaf (glibc 2.33).
    fn __x86_get_cpuid_feature_leaf(index: u32) -> *const CpuidFeature;
}

/// The leaves as glibc's loader read them at start-up, before any code of this binary.
#[cfg(all(target_arch = "x86_64", target_env = "gnu"))]
fn leaves() -> Leaves {
    // SAFETY: the function returns a pointer to the loader's read-only feature array
    // (or to a static zeroed entry for an index past it), valid for the process.
    let leaf = |index| unsafe { &(*__x86_get_cpuid_feature_leaf(index)).cpuid };
    Leaves {
        l1_ecx: leaf(0)[2],
        l7_ebx: leaf(1)[1],
        ext_ecx: leaf(2)[2],
    }
}

/// The leaves by CPUID, where no glibc keeps them.
#[cfg(all(target_arch = "x86_64", not(target_env = "gnu")))]
fn leaves() -> Leaves {
    cpuid_leaves()
}

/// The leaves read by CPUID itself (with glibc, only the test's reference).
#[cfg(all(target_arch = "x86_64", any(test, not(target_env = "gnu"))))]
fn cpuid_leaves() -> Leaves {
    use std::arch::x86_64::{__cpuid, __cpuid_count};
    let max = __cpuid(0).eax;
    let max_ext = __cpuid(0x8000_0000).eax;
    Leaves {
        l1_ecx: __cpuid(1).ecx,
        l7_ebx: if max >= 7 { __cpuid_count(7, 0).ebx } else { 0 },
        ext_ecx: if max_ext >= 0x8000_0001 {
            __cpuid(0x8000_0001).ecx
        } else {
            0
        },
    }
}

/// XCR0, the state components the OS enables.
///
/// # Safety
/// The CPU must support XGETBV and the OS enable it (CPUID.1:ECX.OSXSAVE).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "xsave")]
unsafe fn xcr0() -> u64 {
    // SAFETY: the caller's contract.
    unsafe { std::arch::x86_64::_xgetbv(0) }
}

/// For the command line, before anything else runs: on a CPU without the binary's
/// features, say which (write(2), a static message) and exit 2 (_exit(2): std's exit
/// path is compiled for the target CPU).
pub extern "C" fn exit_on_mismatch() {
    if let Some(m) = mismatch() {
        // SAFETY: write(2) of a static string's bytes to stderr, then _exit, which
        // runs no handler of this process.
        unsafe {
            libc::write(2, m.as_ptr().cast(), m.len());
            libc::_exit(2);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_binary_runs_on_the_cpu_it_was_built_for() {
        // Tests are built on the machine that runs them, so every feature is there.
        assert_eq!(mismatch(), None);
    }

    #[test]
    #[cfg(target_arch = "x86_64")]
    fn the_leaves_read_are_the_ones_cpuid_gives() {
        assert_eq!(leaves(), cpuid_leaves());
    }

    #[test]
    #[cfg(target_arch = "x86_64")]
    fn the_cpuid_reading_agrees_with_std_where_std_asks_the_cpu() {
        // The bits `mismatch` reads, against std's answer: CPUID's where the build does
        // not enable the feature, `true` where it does (then this host has it).
        let l1_ecx = leaves().l1_ecx;
        assert_eq!(l1_ecx & (1 << 23) != 0, std::arch::is_x86_feature_detected!("popcnt"));
        assert_eq!(l1_ecx & (1 << 20) != 0, std::arch::is_x86_feature_detected!("sse4.2"));
    }
}
