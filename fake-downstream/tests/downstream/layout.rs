//! The crate's layout (ARCHITECTURE.md): one core under dialects, imports one way. Read from
//! the source: every `crate::<module>` a file names is an edge.

use std::collections::{BTreeMap, BTreeSet};

/// Module -> the modules it names.
fn imports() -> BTreeMap<String, BTreeSet<String>> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut modules = BTreeMap::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        if name == "lib" {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        // Tests may reach anywhere; only the module's own code counts.
        let code: String = text
            .split("#[cfg(test)]\nmod tests")
            .next()
            .unwrap_or_default()
            .lines()
            .filter(|line| !line.trim_start().starts_with("//"))
            .collect::<Vec<_>>()
            .join("\n");
        let mut named = BTreeSet::new();
        for (start, _) in code.match_indices("crate::") {
            let rest = &code[start + "crate::".len()..];
            let end = rest.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(rest.len());
            named.insert(rest[..end].to_owned());
        }
        // `use crate::{a, b}`.
        for (start, _) in code.match_indices("use crate::{") {
            let rest = &code[start + "use crate::{".len()..];
            let list = &rest[..rest.find('}').unwrap()];
            named.extend(list.split(',').map(|item| item.trim().to_owned()).filter(|item| !item.is_empty()));
        }
        named.remove(&name);
        modules.insert(name, named);
    }
    assert!(modules.len() >= 10, "too few modules read: {modules:?}");
    modules
}

#[test]
fn no_module_imports_another_in_a_circle() {
    let modules = imports();
    // Depth-first search for a path back to where it started.
    fn reaches(
        modules: &BTreeMap<String, BTreeSet<String>>,
        from: &str,
        target: &str,
        seen: &mut BTreeSet<String>,
    ) -> bool {
        for next in modules.get(from).into_iter().flatten() {
            if next == target || (seen.insert(next.clone()) && reaches(modules, next, target, seen)) {
                return true;
            }
        }
        false
    }
    for module in modules.keys() {
        assert!(
            !reaches(&modules, module, module, &mut BTreeSet::new()),
            "{module} imports itself through others: {modules:#?}"
        );
    }
}

#[test]
fn the_core_knows_no_dialect_and_a_dialect_no_other() {
    let modules = imports();
    let dialects = ["native", "stripe"];
    for low in ["service", "http", "faults", "ledger", "config", "paths", "content"] {
        let named = &modules[low];
        for dialect in dialects {
            assert!(!named.contains(dialect), "{low} imports the dialect {dialect}");
        }
    }
    for dialect in dialects {
        for other in dialects.iter().filter(|other| **other != dialect) {
            assert!(!modules[dialect].contains(*other), "{dialect} imports {other}");
        }
    }
}
