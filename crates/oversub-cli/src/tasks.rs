//! `oversub tasks` (being written).

use clap::Args;

use crate::bench::BoxError;

#[derive(Debug, Args)]
pub struct TasksArgs {}

pub fn run(_args: TasksArgs) -> Result<(), BoxError> {
    Err("oversub tasks is not built yet".into())
}
