//! What one source file holds, read with `syn`: the length of each function, the lines outside
//! `#[cfg(test)]` items, the modules it declares, and the `crate::`, `super::` and `self::` paths
//! it names (the edges of the import graph).

use proc_macro2::{Span, TokenStream};
use quote::ToTokens;
use syn::visit::{self, Visit};
use syn::{
    Attribute, ImplItemFn, Item, ItemFn, ItemImpl, ItemMod, ItemTrait, TraitItemFn, UseTree,
};

/// One file's measures.
#[derive(Debug, Default)]
pub struct FileMeasure {
    /// Lines of the file, as `wc -l` counts them.
    pub total_lines: usize,
    /// Lines outside `#[cfg(test)]` items (from the item's first attribute to its end).
    pub code_lines: usize,
    /// Each function with a body, outside `#[cfg(test)]` items: its name within the file (inline
    /// modules, `Type::`, `<Type as Trait>::`, an enclosing function) and its length in lines,
    /// from the line of the `fn` keyword to the line of the closing brace, both counted
    /// (attributes and doc comments above the `fn` line are not).
    pub fns: Vec<(String, usize)>,
    /// Modules declared with `mod name;`: where, and whether only for tests.
    pub mods: Vec<ModDecl>,
    /// Paths that start with `crate`, `super` or `self`, outside `#[cfg(test)]` items, made absolute
    /// by the inline module they are in (segments after `crate`; `super` resolved later).
    pub paths: Vec<NamedPath>,
    /// Every path named outside `#[cfg(test)]` items, as written (`std::net::TcpStream`, `f64`),
    /// `use` trees flattened, and `float literal` for each float literal.
    pub names: Vec<String>,
}

/// A `mod name;` (without a body) in a file.
#[derive(Debug, Clone)]
pub struct ModDecl {
    /// Inline modules around the declaration, outermost first.
    pub inline: Vec<String>,
    pub name: String,
    /// The `#[path = "…"]` attribute, if any.
    pub path_attr: Option<String>,
    pub test_only: bool,
}

/// A path as written, with the inline modules around it.
#[derive(Debug, Clone)]
pub struct NamedPath {
    pub inline: Vec<String>,
    pub segments: Vec<String>,
}

/// Measures a file's text. Fails only when `syn` cannot parse it (then rustc could not either).
pub fn measure(text: &str) -> Result<FileMeasure, syn::Error> {
    let file = syn::parse_file(text)?;
    let mut v = Visitor::default();
    v.visit_file(&file);
    let total_lines = text.lines().count();
    Ok(FileMeasure {
        total_lines,
        code_lines: total_lines.saturating_sub(v.test_lines),
        fns: v.fns,
        mods: v.mods,
        paths: v.paths,
        names: v.names,
    })
}

#[derive(Default)]
struct Visitor {
    /// Names around the current item: inline modules, types, functions.
    scope: Vec<String>,
    /// Inline modules only (for module paths).
    inline: Vec<String>,
    test_lines: usize,
    fns: Vec<(String, usize)>,
    mods: Vec<ModDecl>,
    paths: Vec<NamedPath>,
    names: Vec<String>,
}

impl Visitor {
    fn record_fn(&mut self, name: String, fn_token: Span, close: Span) {
        let lines = close.end().line + 1 - fn_token.start().line;
        let full = self
            .scope
            .iter()
            .chain([&name])
            .cloned()
            .collect::<Vec<_>>();
        self.fns.push((full.join("::"), lines));
    }

    fn in_scope(&mut self, name: String, f: impl FnOnce(&mut Self)) {
        self.scope.push(name);
        f(self);
        self.scope.pop();
    }

    fn push_path(&mut self, segments: Vec<String>) {
        self.names.push(segments.join("::"));
        if matches!(
            segments.first().map(String::as_str),
            Some("crate" | "super" | "self")
        ) {
            let inline = self.inline.clone();
            self.paths.push(NamedPath { inline, segments });
        }
    }
}

impl<'ast> Visit<'ast> for Visitor {
    fn visit_item(&mut self, item: &'ast Item) {
        if item_attrs(item).is_some_and(is_test_only) {
            self.test_lines += line_span(item.to_token_stream());
            if let Item::Mod(m) = item {
                if m.content.is_none() {
                    self.mods.push(mod_decl(&self.inline, m, true));
                }
            }
            return;
        }
        visit::visit_item(self, item);
    }

    fn visit_item_mod(&mut self, m: &'ast ItemMod) {
        if m.content.is_none() {
            self.mods.push(mod_decl(&self.inline, m, false));
            return;
        }
        self.inline.push(m.ident.to_string());
        self.in_scope(m.ident.to_string(), |v| visit::visit_item_mod(v, m));
        self.inline.pop();
    }

    fn visit_item_fn(&mut self, f: &'ast ItemFn) {
        let name = f.sig.ident.to_string();
        self.record_fn(
            name.clone(),
            f.sig.fn_token.span,
            f.block.brace_token.span.close(),
        );
        self.in_scope(name, |v| visit::visit_item_fn(v, f));
    }

    fn visit_item_impl(&mut self, i: &'ast ItemImpl) {
        let ty = match &*i.self_ty {
            syn::Type::Path(p) => bare(&p.path),
            other => tokens(other),
        };
        let name = match &i.trait_ {
            Some((_, tr, _)) => format!("<{ty} as {}>", bare(tr)),
            None => ty,
        };
        self.in_scope(name, |v| visit::visit_item_impl(v, i));
    }

    fn visit_impl_item_fn(&mut self, f: &'ast ImplItemFn) {
        if is_test_only(&f.attrs) {
            self.test_lines += line_span(f.to_token_stream());
            return;
        }
        let name = f.sig.ident.to_string();
        self.record_fn(
            name.clone(),
            f.sig.fn_token.span,
            f.block.brace_token.span.close(),
        );
        self.in_scope(name, |v| visit::visit_impl_item_fn(v, f));
    }

    fn visit_item_trait(&mut self, t: &'ast ItemTrait) {
        self.in_scope(t.ident.to_string(), |v| visit::visit_item_trait(v, t));
    }

    fn visit_trait_item_fn(&mut self, f: &'ast TraitItemFn) {
        let name = f.sig.ident.to_string();
        if let Some(block) = &f.default {
            self.record_fn(
                name.clone(),
                f.sig.fn_token.span,
                block.brace_token.span.close(),
            );
        }
        self.in_scope(name, |v| visit::visit_trait_item_fn(v, f));
    }

    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        let mut flat = Vec::new();
        flatten_use(&u.tree, &mut Vec::new(), &mut flat);
        for segments in flat {
            self.push_path(segments);
        }
    }

    fn visit_lit_float(&mut self, _: &'ast syn::LitFloat) {
        self.names.push("float literal".into());
    }

    fn visit_path(&mut self, p: &'ast syn::Path) {
        self.push_path(p.segments.iter().map(|s| s.ident.to_string()).collect());
        visit::visit_path(self, p);
    }
}

/// `true` for attributes that compile an item only in tests: `#[cfg(test)]`, `#[cfg(all(test, …))]`,
/// and `#[test]` itself.
pub fn is_test_only(attrs: &[Attribute]) -> bool {
    attrs.iter().any(|a| {
        if a.path().is_ident("test") {
            return true;
        }
        if !a.path().is_ident("cfg") {
            return false;
        }
        let Ok(meta) = a.parse_args::<syn::Meta>() else {
            return false;
        };
        requires_test(&meta)
    })
}

fn requires_test(meta: &syn::Meta) -> bool {
    match meta {
        syn::Meta::Path(p) => p.is_ident("test"),
        syn::Meta::List(l) if l.path.is_ident("all") => l
            .parse_args_with(
                syn::punctuated::Punctuated::<syn::Meta, syn::Token![,]>::parse_terminated,
            )
            .is_ok_and(|metas| metas.iter().any(requires_test)),
        _ => false,
    }
}

fn item_attrs(item: &Item) -> Option<&[Attribute]> {
    Some(match item {
        Item::Const(i) => &i.attrs,
        Item::Enum(i) => &i.attrs,
        Item::ExternCrate(i) => &i.attrs,
        Item::Fn(i) => &i.attrs,
        Item::ForeignMod(i) => &i.attrs,
        Item::Impl(i) => &i.attrs,
        Item::Macro(i) => &i.attrs,
        Item::Mod(i) => &i.attrs,
        Item::Static(i) => &i.attrs,
        Item::Struct(i) => &i.attrs,
        Item::Trait(i) => &i.attrs,
        Item::TraitAlias(i) => &i.attrs,
        Item::Type(i) => &i.attrs,
        Item::Union(i) => &i.attrs,
        Item::Use(i) => &i.attrs,
        _ => return None,
    })
}

fn mod_decl(inline: &[String], m: &ItemMod, test_only: bool) -> ModDecl {
    let path_attr = m
        .attrs
        .iter()
        .find(|a| a.path().is_ident("path"))
        .and_then(|a| match &a.meta {
            syn::Meta::NameValue(nv) => match &nv.value {
                syn::Expr::Lit(syn::ExprLit {
                    lit: syn::Lit::Str(s),
                    ..
                }) => Some(s.value()),
                _ => None,
            },
            _ => None,
        });
    ModDecl {
        inline: inline.to_vec(),
        name: m.ident.to_string(),
        path_attr,
        test_only,
    }
}

fn flatten_use(tree: &UseTree, prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    match tree {
        UseTree::Path(p) => {
            prefix.push(p.ident.to_string());
            flatten_use(&p.tree, prefix, out);
            prefix.pop();
        }
        UseTree::Name(n) => out.push(
            prefix
                .iter()
                .cloned()
                .chain([n.ident.to_string()])
                .collect(),
        ),
        UseTree::Rename(r) => out.push(
            prefix
                .iter()
                .cloned()
                .chain([r.ident.to_string()])
                .collect(),
        ),
        UseTree::Glob(_) => out.push(prefix.clone()),
        UseTree::Group(g) => g.items.iter().for_each(|t| flatten_use(t, prefix, out)),
    }
}

/// Lines from the first token to the last, both counted.
fn line_span(tokens: TokenStream) -> usize {
    let mut iter = tokens.into_iter();
    let Some(first) = iter.next() else { return 0 };
    let last = iter.last().unwrap_or_else(|| first.clone());
    last.span().end().line + 1 - first.span().start().line
}

/// A path without its generic arguments (`Sim<'a>` is `Sim`), so that renaming a lifetime does
/// not rename a function.
fn bare(p: &syn::Path) -> String {
    p.segments
        .iter()
        .map(|s| s.ident.to_string())
        .collect::<Vec<_>>()
        .join("::")
}

/// A type or path as one word without spaces: `Foo<T>`, `fmt::Display`.
fn tokens(t: &impl ToTokens) -> String {
    t.to_token_stream().to_string().replace(' ', "")
}

#[cfg(test)]
mod tests {
    use super::measure;

    #[test]
    fn a_function_counts_from_its_fn_line_to_its_closing_brace() {
        let text = "/// doc\n#[inline]\npub fn one() {\n    let _ = 1;\n}\n";
        let m = measure(text).unwrap();
        assert_eq!(m.fns, vec![("one".to_string(), 3)]);
        assert_eq!(m.total_lines, 5);
    }

    #[test]
    fn methods_are_named_by_their_type_and_trait_and_tests_are_skipped() {
        let text = "struct S;\nimpl S {\n    fn a(&self) {}\n}\n\
                    impl std::fmt::Display for S {\n    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {\n        Ok(())\n    }\n}\n\
                    mod inner {\n    fn b() {\n        fn c() {}\n    }\n}\n\
                    #[cfg(test)]\nmod tests {\n    fn t() {}\n}\n";
        let m = measure(text).unwrap();
        let names: Vec<_> = m.fns.iter().map(|(n, l)| (n.as_str(), *l)).collect();
        assert_eq!(
            names,
            vec![
                ("S::a", 1),
                ("<S as std::fmt::Display>::fmt", 3),
                ("inner::b", 3),
                ("inner::b::c", 1)
            ]
        );
        assert_eq!(m.total_lines, 18);
        assert_eq!(m.code_lines, 14);
    }

    #[test]
    fn braces_in_strings_and_comments_do_not_count() {
        let text = "fn s() {\n    let _ = \"}}}\";\n    // }\n    /* { */\n}\n";
        assert_eq!(measure(text).unwrap().fns, vec![("s".to_string(), 5)]);
    }

    #[test]
    fn crate_super_and_self_paths_are_collected_and_test_modules_declared() {
        let text = "use crate::a::{B, c::D};\nuse std::fmt;\nfn f() { super::x::y(); }\n\
                    #[cfg(all(test, unix))]\nmod t;\n#[cfg(not(test))]\nmod u;\n";
        let m = measure(text).unwrap();
        let paths: Vec<_> = m.paths.iter().map(|p| p.segments.join("::")).collect();
        assert_eq!(paths, vec!["crate::a::B", "crate::a::c::D", "super::x::y"]);
        let mods: Vec<_> = m
            .mods
            .iter()
            .map(|d| (d.name.as_str(), d.test_only))
            .collect();
        assert_eq!(mods, vec![("t", true), ("u", false)]);
    }
}
