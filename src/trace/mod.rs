//! Real programs in the model: `record` writes a host program's address-space
//! operations and page faults to a trace, `replay` drives the model with it.

pub mod format;
pub mod predict;
pub mod record;
pub mod replay;
