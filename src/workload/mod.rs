//! The workload language: parsing and validation. Executors live with what they drive
//! (the model in `sim`, the host in `native`).

pub mod ast;
mod check;
pub mod parse;

pub use ast::{Advice, Op, Pos, Prot, Range, Stmt, Workload, WorkloadError};
pub use parse::{parse_file, parse_str};
