//! The workload language: parsing and validation. Executors live with what they drive
//! (the model in `sim`, the host in `native`).

pub mod ast;
mod check;
pub mod parse;

pub use ast::{executed, mremap_target, Advice, MachineNeed, Op, Pos, Prot, Range, Stmt, Workload, WorkloadError};
pub use parse::{parse_file, parse_str};

/// The first op only the model runs (threads and CPU placement; the host runners'
/// workers are single-threaded processes placed by the scheduler), if any.
pub fn model_only(stmts: &[Stmt]) -> Option<&Stmt> {
    stmts.iter().find_map(|s| match &s.op {
        Op::Thread { .. } | Op::ThreadsAll | Op::Cpu { .. } => Some(s),
        Op::Repeat { body, .. } => model_only(body),
        _ => None,
    })
}
