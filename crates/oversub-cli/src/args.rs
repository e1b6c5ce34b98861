//! The flags' value parsers live in `oversub_lab::args`, beside the options structs that name them.

pub use oversub_lab::args::*;

/// Parses `argv` (the flags only) into one command's `T`, as the binary would: the tests use it to hold each
/// experiment's command-line defaults to the lab's `Options::default()`.
#[cfg(test)]
pub fn parse_flags<T: clap::Args>(argv: &[&str]) -> Result<T, clap::Error> {
    use clap::Parser;

    #[derive(Parser)]
    struct Cli<T: clap::Args> {
        #[command(flatten)]
        inner: T,
    }
    let cli = Cli::<T>::try_parse_from(std::iter::once("oversub").chain(argv.iter().copied()))?;
    Ok(cli.inner)
}
