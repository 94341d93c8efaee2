//! Sweeps: the product of inputs (workloads, traces) × variants × kernels × machines ×
//! targets, each point one run, kept in the results store under a key of its inputs and
//! the build, so a rerun only runs what is not stored. `spec` reads SPEC.toml (or the
//! same shape from Python), `point` runs one point, `exec` runs them on every core,
//! `table` turns the stored results into one tidy table.

pub mod exec;
pub mod point;
pub mod spec;
pub mod table;

pub use exec::{run_local, Outcome};
pub use point::{Input, Point, PointError};
pub use spec::Spec;
pub use table::{Column, Table};

/// This build's identity (build.rs): the crate version and a hash of every source file,
/// machine profile and data file the model is built from.
pub const BUILD: &str = env!("FOLIOLAB_BUILD");
