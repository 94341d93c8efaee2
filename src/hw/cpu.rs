//! Which CPU the machine is: its MIDR_EL1 and the ID register field the kernel reads
//! to decide on break-before-make relaxations (ID_AA64MMFR2_EL1.BBM), and what the
//! core itself guarantees. The kernel never reads `bbml2_noabort`; it decides from
//! the MIDR and the BBM field, as arch/arm64/kernel/cpufeature.c does.

/// One CPU model `--set cpu=NAME` can name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cpu {
    pub name: &'static str,
    /// MIDR_EL1: implementer [31:24], variant [23:20], architecture [19:16],
    /// part number [15:4], revision [3:0].
    pub midr: u32,
    /// ID_AA64MMFR2_EL1.BBM (0: level 0; 2: level 2; 3: level 3, which promises no
    /// TLB-conflict aborts).
    pub bbm: u8,
    /// Whether the core never raises a TLB-conflict abort when the contiguous bit or
    /// block size of a live entry changes: the hardware checker's rule, not the
    /// kernel's knowledge.
    pub bbml2_noabort: bool,
    pub about: &'static str,
}

/// MIDR_EL1 of `implementer`'s `part`, revision rVpR.
pub const fn midr(implementer: u32, part: u32, variant: u32, revision: u32) -> u32 {
    (implementer << 24) | (variant << 20) | (0xf << 16) | (part << 4) | revision
}

pub const IMP_ARM: u32 = 0x41;
pub const IMP_AMPERE: u32 = 0xc0;

/// The named CPUs; `generic` (MIDR 0) is the model's unnamed CPU, whose `bbml2` key
/// stands for "a CPU the kernel trusts with BBML2_NOABORT".
pub const CPUS: &[Cpu] = &[
    Cpu {
        name: "generic",
        midr: 0,
        bbm: 0,
        bbml2_noabort: false,
        about: "no particular CPU: the `bbml2` key says whether the kernel finds BBML2_NOABORT",
    },
    Cpu {
        name: "qemu-max",
        // The 7.3 guest's boot log: "Booting Linux on physical CPU 0x0 [0x000f0510]"
        // (QEMU 7.2 -cpu max). BBM reads 2 (FEAT_BBM level 2: the kernel built with
        // qemu-bbml3.patch prints it), and TCG never raises a TLB-conflict abort: its
        // software TLB keeps one translation per page, and a stale one with the same
        // output address and attributes is as good as the new.
        midr: 0x000f_0510,
        bbm: 2,
        bbml2_noabort: true,
        about: "QEMU's TCG `-cpu max` (QEMU 7.2, the qemu-arm64 targets)",
    },
    Cpu {
        name: "cortex-a55",
        midr: midr(IMP_ARM, 0xd05, 2, 0),
        bbm: 0,
        bbml2_noabort: false,
        about: "Cortex-A55 r2p0 (erratum 2441007, a repeat-TLBI one, is off in Debian's configs)",
    },
    Cpu {
        name: "cortex-a76",
        midr: midr(IMP_ARM, 0xd0b, 4, 1),
        bbm: 0,
        bbml2_noabort: false,
        about: "Cortex-A76 r4p1: erratum 4193800 (ARM64_ERRATUM_4118414, repeat TLBI)",
    },
    Cpu {
        name: "neoverse-n1",
        midr: midr(IMP_ARM, 0xd0c, 4, 1),
        bbm: 0,
        bbml2_noabort: false,
        about: "Neoverse N1 r4p1 (Ampere Altra, Graviton2): erratum 4193800, repeat TLBI",
    },
    Cpu {
        name: "neoverse-v3",
        midr: midr(IMP_ARM, 0xd84, 0, 2),
        bbm: 2,
        bbml2_noabort: true,
        about: "Neoverse V3 r0p2: on the BBML2_NOABORT allow-list from r0p2; erratum 4118414's list, repeat TLBI",
    },
    Cpu {
        name: "ampere1",
        midr: midr(IMP_AMPERE, 0xac3, 0, 0),
        bbm: 2,
        bbml2_noabort: true,
        about: "AmpereOne: on the BBML2_NOABORT allow-list (13efe932d2fc)",
    },
    Cpu {
        name: "cortex-a725",
        midr: midr(IMP_ARM, 0xd87, 0, 1),
        bbm: 2,
        bbml2_noabort: true,
        about: "Cortex-A725 r0p1: on 7.3's BBML3 allow-list, not 7.2's",
    },
];

/// The CPU called `name`.
pub fn by_name(name: &str) -> Option<&'static Cpu> {
    CPUS.iter().find(|c| c.name == name)
}

/// The names, `|`-separated, for a key's list of values.
pub fn names() -> String {
    CPUS.iter().map(|c| c.name).collect::<Vec<_>>().join("|")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn midr_fields_are_where_the_architecture_puts_them() {
        // Neoverse N1 r4p1, as /proc/cpuinfo of an Altra shows it.
        assert_eq!(midr(IMP_ARM, 0xd0c, 4, 1), 0x414f_d0c1);
        assert_eq!(by_name("qemu-max").unwrap().midr, 0x000f_0510);
        assert!(by_name("pentium").is_none());
        assert!(names().starts_with("generic|qemu-max|"));
    }
}
