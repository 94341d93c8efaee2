//! arch/arm64/kernel/cpufeature.c and cpu_errata.c: the capabilities the kernel
//! derives from the CPU's MIDR_EL1 and ID registers. The hardware model carries only
//! the registers (`hw::cpu`); what a kernel makes of them depends on its release.

use crate::hw::cpu::{IMP_AMPERE, IMP_ARM};
use crate::hw::Features;

/// How a kernel decides on BBML2_NOABORT (contpte_convert without its TLBI; the
/// linear map kept in blocks under rodata=full).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bbml2Detect {
    /// cpu_supports_bbml2_noabort() (5aa4b625762e, 6.17, to 7.2): the MIDR on an
    /// allow-list; "We currently ignore the ID_AA64MMFR2_EL1 register" (7.2.12's
    /// source).
    MidrList,
    /// cpu_supports_bbml3() (7.3: the capability renamed BBM Level 3, 06468bc3c936;
    /// the ID register first, 4955df16ff99): ID_AA64MMFR2_EL1.BBM >= 3, else a
    /// longer allow-list (f8d0751426dd).
    IdRegOrList,
    /// 7.3's rule with QEMU's TCG `-cpu max` added to the list: a kernel built with
    /// `tools/kernel/patches/qemu-bbml3.patch` (ours), so the QEMU guests run the
    /// BBML3 paths (TCG raises no TLB-conflict abort; its BBM field reads 2).
    IdRegOrListQemu,
}

/// One list entry: a part of an implementer, revisions (variant, revision) `from`
/// to `to` (MIDR_REV_RANGE keeps the variant, MIDR_RANGE does not).
struct Allowed {
    implementer: u32,
    part: u32,
    from: (u32, u32),
    to: (u32, u32),
}

const fn all(implementer: u32, part: u32) -> Allowed {
    Allowed {
        implementer,
        part,
        from: (0, 0),
        to: (0xf, 0xf),
    }
}

/// MIDR_REV_RANGE(part, variant, revision, 0xf) / MIDR_RANGE(part, v, r, 0xf, 0xf).
const fn from(implementer: u32, part: u32, variant: u32, revision: u32, same_variant: bool) -> Allowed {
    let to = if same_variant { (variant, 0xf) } else { (0xf, 0xf) };
    Allowed {
        implementer,
        part,
        from: (variant, revision),
        to,
    }
}

/// 7.2.12's supports_bbml2_noabort_list: Cortex-X4 r0p3+, Neoverse V3/V3AE r0p2+,
/// NVIDIA Olympus, AmpereOne, AmpereOne A.
const LIST_7_2: &[Allowed] = &[
    from(IMP_ARM, 0xd82, 0, 3, true),
    from(IMP_ARM, 0xd84, 0, 2, true),
    from(IMP_ARM, 0xd83, 0, 2, true),
    all(0x4e, 0x010),
    all(IMP_AMPERE, 0xac3),
    all(IMP_AMPERE, 0xac4),
];

/// 7.3.4's supports_bbml3_list adds Cortex-A520AE, A715, A720AE, A725, Neoverse N3,
/// C1-Nano and C1-Pro, and C1-Ultra and C1-Premium from r1p1 (erratum 3683289).
const LIST_7_3_MORE: &[Allowed] = &[
    all(IMP_ARM, 0xd88),
    all(IMP_ARM, 0xd4d),
    all(IMP_ARM, 0xd89),
    all(IMP_ARM, 0xd87),
    all(IMP_ARM, 0xd8e),
    all(IMP_ARM, 0xd8a),
    all(IMP_ARM, 0xd8b),
    from(IMP_ARM, 0xd8c, 1, 1, false),
    from(IMP_ARM, 0xd90, 1, 1, false),
];

/// The entry qemu-bbml3.patch adds: QEMU's `-cpu max` (implementer 0, part 0x051).
const QEMU_MAX: &[Allowed] = &[all(0, 0x051)];

fn listed(list: &[Allowed], m: u32) -> bool {
    let (imp, part, var, rev) = (m >> 24, (m >> 4) & 0xfff, (m >> 20) & 0xf, m & 0xf);
    list.iter()
        .any(|a| a.implementer == imp && a.part == part && (a.from..=a.to).contains(&(var, rev)))
}

/// system_supports_bbml2_noabort() / system_supports_bbml3(): the kernel's verdict
/// on the machine's CPU. The model's unnamed CPU (MIDR 0) has no registers to
/// judge; its `bbml2` flag stands for the verdict.
pub fn supports_bbml2_noabort(f: &Features, detect: Bbml2Detect) -> bool {
    if f.midr == 0 {
        return f.bbml2;
    }
    match detect {
        Bbml2Detect::MidrList => listed(LIST_7_2, f.midr),
        Bbml2Detect::IdRegOrList => f.bbm >= 3 || listed(LIST_7_2, f.midr) || listed(LIST_7_3_MORE, f.midr),
        Bbml2Detect::IdRegOrListQemu => supports_bbml2_noabort(f, Bbml2Detect::IdRegOrList) || listed(QEMU_MAX, f.midr),
    }
}

/// ARM64_ERRATUM_4118414's MIDR list (Debian's configs enable it; 2441007 and 1286807
/// are off): Cortex-A76/A76AE/A77/A78/A78AE/A78C/A710, X1/X1C/X2/X3/X4/X925, Neoverse
/// N1/N2/V1/V2/V3/V3AE, C1-Premium/Ultra, NVIDIA Olympus, Azure Cobalt 100.
const REPEAT_TLBI: &[Allowed] = &[
    all(IMP_ARM, 0xd0b),
    all(IMP_ARM, 0xd0e),
    all(IMP_ARM, 0xd0d),
    all(IMP_ARM, 0xd41),
    all(IMP_ARM, 0xd42),
    all(IMP_ARM, 0xd4b),
    all(IMP_ARM, 0xd47),
    all(IMP_ARM, 0xd44),
    all(IMP_ARM, 0xd4c),
    all(IMP_ARM, 0xd48),
    all(IMP_ARM, 0xd4e),
    all(IMP_ARM, 0xd82),
    all(IMP_ARM, 0xd85),
    all(IMP_ARM, 0xd0c),
    all(IMP_ARM, 0xd49),
    all(IMP_ARM, 0xd40),
    all(IMP_ARM, 0xd4f),
    all(IMP_ARM, 0xd84),
    all(IMP_ARM, 0xd83),
    all(IMP_ARM, 0xd90),
    all(IMP_ARM, 0xd8c),
    all(0x4e, 0x010),
    all(0x6d, 0xd49),
];

/// ARM64_WORKAROUND_REPEAT_TLBI(_SYNC), "Broken broadcast TLBI completion": after
/// the DSB ISH that completes broadcast TLBIs, __tlbi_sync_s1ish() issues one more
/// TLBI VALE1IS and DSB ISH. Every kernel foliolab runs has this form (Debian's
/// 6.1.0-56, 6.12.117, 7.2.12 and 7.3.4 carry the CVE-2025-10263 fix); the older
/// per-TLBI repeat, and arch_tlbbatch_should_defer() refusing to batch on such CPUs,
/// are not modeled.
pub fn repeat_tlbi_sync(f: &Features) -> bool {
    listed(REPEAT_TLBI, f.midr)
}

/// The MIDR of a part, for tests.
#[cfg(test)]
fn arm(part: u32, variant: u32, revision: u32) -> u32 {
    crate::hw::cpu::midr(IMP_ARM, part, variant, revision)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hw::cpu::by_name;

    fn features(cpu: &str) -> Features {
        let c = by_name(cpu).unwrap();
        Features {
            midr: c.midr,
            bbm: c.bbm,
            bbml2: c.bbml2_noabort,
            ..Features::default()
        }
    }

    #[test]
    fn qemu_max_has_neither_bbml2_nor_the_repeat_erratum() {
        let f = features("qemu-max");
        assert_eq!(f.bbm, 2, "level 2: below the 3 that 7.3 accepts");
        for d in [Bbml2Detect::MidrList, Bbml2Detect::IdRegOrList] {
            assert!(!supports_bbml2_noabort(&f, d));
        }
        assert!(!repeat_tlbi_sync(&f));
    }

    #[test]
    fn only_the_qemu_patch_lists_qemu_max() {
        assert!(supports_bbml2_noabort(
            &features("qemu-max"),
            Bbml2Detect::IdRegOrListQemu
        ));
        assert!(!supports_bbml2_noabort(
            &features("neoverse-n1"),
            Bbml2Detect::IdRegOrListQemu
        ));
        assert!(supports_bbml2_noabort(
            &features("cortex-a725"),
            Bbml2Detect::IdRegOrListQemu
        ));
    }

    #[test]
    fn cortex_a725_gains_bbml2_with_7_3s_list() {
        let f = features("cortex-a725");
        assert!(!supports_bbml2_noabort(&f, Bbml2Detect::MidrList));
        assert!(supports_bbml2_noabort(&f, Bbml2Detect::IdRegOrList));
    }

    #[test]
    fn an_allow_list_entry_starts_at_its_revision() {
        let mut f = features("neoverse-v3");
        assert!(supports_bbml2_noabort(&f, Bbml2Detect::MidrList));
        f.midr = arm(0xd84, 0, 1);
        assert!(
            !supports_bbml2_noabort(&f, Bbml2Detect::MidrList),
            "V3 r0p1 is not listed"
        );
        f.midr = arm(0xd84, 1, 0);
        assert!(
            !supports_bbml2_noabort(&f, Bbml2Detect::MidrList),
            "MIDR_REV_RANGE keeps r0"
        );
    }

    #[test]
    fn the_bbm_field_counts_only_from_7_3() {
        let mut f = features("neoverse-n1");
        f.bbm = 3;
        assert!(!supports_bbml2_noabort(&f, Bbml2Detect::MidrList));
        assert!(supports_bbml2_noabort(&f, Bbml2Detect::IdRegOrList));
    }

    #[test]
    fn the_unnamed_cpu_follows_its_flag() {
        let mut f = Features::default();
        assert!(!supports_bbml2_noabort(&f, Bbml2Detect::IdRegOrList));
        f.bbml2 = true;
        assert!(supports_bbml2_noabort(&f, Bbml2Detect::MidrList));
        assert!(!repeat_tlbi_sync(&f));
    }

    #[test]
    fn n1_and_a76_repeat_their_tlbi_sync() {
        assert!(repeat_tlbi_sync(&features("neoverse-n1")));
        assert!(repeat_tlbi_sync(&features("cortex-a76")));
        assert!(!repeat_tlbi_sync(&features("cortex-a55")));
        assert!(!repeat_tlbi_sync(&features("ampere1")));
    }
}
