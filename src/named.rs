//! Values the command line takes by name, parsed through one table of the type's: `--help`
//! lists the table's names (clap's possible values) and an unknown name is refused with
//! the same list, so the help cannot drift from what parses.

use clap::builder::{PossibleValuesParser, TypedValueParser};

/// A parser for the values of `table`, each by its name.
pub(crate) fn named<T: Copy + Send + Sync + 'static>(
    table: &'static [(&'static str, T)],
) -> impl TypedValueParser<Value = T> {
    PossibleValuesParser::new(table.iter().map(|(name, _)| *name))
        .try_map(move |s| lookup(table, &s).ok_or_else(|| format!("unknown value '{s}'")))
}

/// The value named `s` in `table`.
pub(crate) fn lookup<T: Copy>(table: &[(&str, T)], s: &str) -> Option<T> {
    table.iter().find(|(name, _)| *name == s).map(|(_, v)| *v)
}
