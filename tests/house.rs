//! The house's rules, checked on the source itself: each type's inherent methods in at most
//! two files (its state's file and one owned part at most), and no function so long that
//! a name for its parts would not help. `cargo test --test house` prints what breaks them.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use syn::spanned::Spanned;
use syn::visit::Visit;

/// The crates' library and binary sources (tests, benches and examples are not the house).
const ROOTS: &[&str] = &[
    "src",
    "expel/src",
    "core/src",
    "shared/src",
    "modes/src",
    "testkit/src",
    "quic/src",
    "server/src",
    "client/src",
    "bots/src",
    "bevy/src",
];
/// Past this many lines a function is split where a name explains the part.
const LONGEST_FN: usize = 150;
/// A type's inherent `impl` blocks may stand in this many files at most.
const MOST_FILES: usize = 2;

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<_> = entries.flatten().map(|e| e.path()).collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// `#[test]`, or `#[cfg(test)]` (and `cfg(all(test, ...))`): not the house, its tests.
fn is_test(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        let cfg = || quote::ToTokens::to_token_stream(&a.meta).to_string();
        a.path().is_ident("test") || (a.path().is_ident("cfg") && cfg().contains("test"))
    })
}

struct Survey<'a> {
    file: &'a str,
    krate: &'a str,
    /// (crate, type) -> files holding an inherent impl of it.
    impls: &'a mut BTreeMap<(String, String), BTreeSet<String>>,
    long: &'a mut Vec<String>,
}

impl Survey<'_> {
    fn function(&mut self, name: &syn::Ident, span: proc_macro2::Span) {
        let lines = span.end().line + 1 - span.start().line;
        if lines > LONGEST_FN {
            self.long.push(format!(
                "{}:{} fn {name}: {lines} lines",
                self.file,
                span.start().line
            ));
        }
    }
}

impl<'ast> Visit<'ast> for Survey<'_> {
    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        if !is_test(&m.attrs) {
            syn::visit::visit_item_mod(self, m);
        }
    }
    fn visit_item_fn(&mut self, f: &'ast syn::ItemFn) {
        if !is_test(&f.attrs) {
            self.function(&f.sig.ident, f.span());
            syn::visit::visit_item_fn(self, f);
        }
    }
    fn visit_impl_item_fn(&mut self, f: &'ast syn::ImplItemFn) {
        if !is_test(&f.attrs) {
            self.function(&f.sig.ident, f.span());
            syn::visit::visit_impl_item_fn(self, f);
        }
    }
    fn visit_item_impl(&mut self, i: &'ast syn::ItemImpl) {
        if is_test(&i.attrs) {
            return;
        }
        if i.trait_.is_none() {
            if let syn::Type::Path(p) = &*i.self_ty {
                if let Some(last) = p.path.segments.last() {
                    self.impls
                        .entry((self.krate.to_string(), last.ident.to_string()))
                        .or_default()
                        .insert(self.file.to_string());
                }
            }
        }
        syn::visit::visit_item_impl(self, i);
    }
}

#[test]
fn each_type_in_one_room_and_no_function_past_its_name() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut impls = BTreeMap::new();
    let mut long = Vec::new();
    for dir in ROOTS {
        let mut files = Vec::new();
        sources(&root.join(dir), &mut files);
        let krate = dir.trim_end_matches("/src");
        for path in files {
            let text = std::fs::read_to_string(&path).expect("a source file reads");
            let file = path
                .strip_prefix(root)
                .unwrap_or(&path)
                .display()
                .to_string();
            let ast =
                syn::parse_file(&text).unwrap_or_else(|e| panic!("{file} does not parse: {e}"));
            Survey {
                file: &file,
                krate,
                impls: &mut impls,
                long: &mut long,
            }
            .visit_file(&ast);
        }
    }
    let spread: Vec<String> = impls
        .iter()
        .filter(|(_, files)| files.len() > MOST_FILES)
        .map(|((krate, ty), files)| {
            let files: Vec<&str> = files.iter().map(String::as_str).collect();
            format!(
                "{krate}: {ty} in {} files: {}",
                files.len(),
                files.join(", ")
            )
        })
        .collect();
    assert!(
        impls.len() > 50,
        "the survey found only {} types: is it reading the sources?",
        impls.len()
    );
    assert!(
        spread.is_empty() && long.is_empty(),
        "types whose inherent methods stand in more than {MOST_FILES} files:\n{}\n\
         functions over {LONGEST_FN} lines:\n{}",
        spread.join("\n"),
        long.join("\n")
    );
}
