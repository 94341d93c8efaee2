//! Seed 002: large anonymous folios in the fault path, measured on a real program (a
//! kernel build on Ampere Altra). Reproducing it needs that program's recorded
//! address-space operations and faults, which foliolab cannot record yet.

use super::{Reproduction, Row};

const SEED: &str = "002";
const WHY: &str = "not yet reproducible: the seed measures a real kernel build; replaying it needs `foliolab record` of that build (issue 26), which does not exist yet";

pub fn run(r: &mut Reproduction) {
    for (experiment, change) in [
        ("kernel compile wall time, % change", -4.0),
        ("kernel compile kernel time, % change", -34.0),
    ] {
        for (variant, seed_value) in [("order-0 folios", 0.0), ("large anon folios", change)] {
            r.rows.push(Row {
                seed: SEED.into(),
                experiment: experiment.into(),
                machine: "altra-metal".into(),
                variant: variant.into(),
                unit: "%".into(),
                seed_value,
                model_value: None,
                seed_stdev: None,
                sign_agrees: false,
            });
        }
    }
    r.notes.insert(SEED.into(), vec![WHY.into()]);
}
