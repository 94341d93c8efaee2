//! Placeholder: the parser is being written (issue 3).
use super::ast::{Workload, WorkloadError};

pub fn parse_str(_path: &str, _src: &str) -> Result<Workload, WorkloadError> {
    unimplemented!("workload parser")
}

pub fn parse_file(_path: &str) -> Result<Workload, WorkloadError> {
    unimplemented!("workload parser")
}
