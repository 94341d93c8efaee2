//! include/linux/cpumask.h: a set of CPU numbers, for the machines of 1 to 256 CPUs
//! the model builds.

/// The most CPUs a model machine has (the `cpus` key's upper bound).
pub const NR_CPUS: usize = 256;

/// struct cpumask: one bit per CPU.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuMask([u64; NR_CPUS / 64]);

impl CpuMask {
    pub fn set(&mut self, cpu: usize) {
        self.0[cpu / 64] |= 1 << (cpu % 64);
    }
    pub fn clear_cpu(&mut self, cpu: usize) {
        self.0[cpu / 64] &= !(1 << (cpu % 64));
    }
    pub fn test(&self, cpu: usize) -> bool {
        self.0[cpu / 64] & (1 << (cpu % 64)) != 0
    }
    pub fn or(&mut self, other: &CpuMask) {
        for (a, b) in self.0.iter_mut().zip(other.0) {
            *a |= b;
        }
    }
    pub fn clear(&mut self) {
        self.0 = [0; NR_CPUS / 64];
    }
    pub fn weight(&self) -> u32 {
        self.0.iter().map(|w| w.count_ones()).sum()
    }
    /// cpumask_any_but(mask, cpu) < nr_cpu_ids: some CPU other than `cpu` is set.
    pub fn any_but(&self, cpu: usize) -> bool {
        self.weight() > u32::from(self.test(cpu))
    }
    /// The CPUs set, in ascending order.
    pub fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        (0..NR_CPUS).filter(|&c| self.test(c))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_but_ignores_only_the_named_cpu() {
        let mut m = CpuMask::default();
        assert!(!m.any_but(0));
        m.set(3);
        assert!(!m.any_but(3));
        assert!(m.any_but(0));
        m.set(255);
        m.clear_cpu(3);
        assert_eq!(m.iter().collect::<Vec<_>>(), vec![255]);
        assert_eq!(m.weight(), 1);
    }

    #[test]
    fn or_unites_and_clear_empties() {
        let (mut a, mut b) = (CpuMask::default(), CpuMask::default());
        a.set(1);
        b.set(70);
        a.or(&b);
        assert_eq!(a.iter().collect::<Vec<_>>(), vec![1, 70]);
        a.clear();
        assert_eq!(a, CpuMask::default());
    }
}
