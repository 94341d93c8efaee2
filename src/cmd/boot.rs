//! `foliolab boot` (placeholder until its issue lands).

#[derive(clap::Args)]
pub struct Args {}

pub fn main(_a: Args) -> super::CmdResult {
    Err("'boot' is not implemented yet".into())
}
