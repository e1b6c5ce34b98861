//! `oversub sim swap` (being written).

use clap::Args;

use crate::bench::BoxError;

#[derive(Debug, Args)]
pub struct SwapArgs {}

pub fn run(_args: SwapArgs) -> Result<(), BoxError> {
    Err("oversub sim swap is not built yet".into())
}
