//! `foliolab native` (placeholder until its issue lands).

#[derive(clap::Args)]
pub struct Args {}

pub fn main(_a: Args) -> super::CmdResult {
    Err("'native' is not implemented yet".into())
}
