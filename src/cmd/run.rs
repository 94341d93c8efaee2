//! `foliolab run` (placeholder until its issue lands).

#[derive(clap::Args)]
pub struct Args {}

pub fn main(_a: Args) -> super::CmdResult {
    Err("'run' is not implemented yet".into())
}
