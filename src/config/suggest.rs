//! "Did you mean": the names close to a misspelt one. A workload's name, a configuration key and a
//! workload file's top-level section are all suggested by the one measure here, so that a typo is
//! met the same way wherever it is made.

use super::decode::{known_keys, ALIASES};

/// The candidates close to `name`, closest first, at most 4: within an edit distance of a third of
/// its length (at least 3), or one a prefix of the other (`unet3d` and `unet3d_h100`).
pub fn closest_names<'a>(name: &str, candidates: &[&'a str]) -> Vec<&'a str> {
    let mut scored: Vec<(usize, &str)> = candidates
        .iter()
        .map(|c| (edit_distance(name, c), *c))
        .filter(|(d, c)| *d <= 3.max(name.len() / 3) || c.starts_with(name) || name.starts_with(*c))
        .collect();
    scored.sort();
    scored.dedup();
    scored.iter().take(4).map(|(_, c)| *c).collect()
}

/// "; did you mean a, b?" with the [`closest_names`], or nothing when none is close.
pub fn closest_names_hint(name: &str, candidates: &[&str]) -> String {
    let close = closest_names(name, candidates);
    if close.is_empty() {
        String::new()
    } else {
        format!("; did you mean {}?", close.join(", "))
    }
}

/// The keys and sections dlio-rs knows, aliases included (dotted, below `workload.`): every known
/// key and every section above one.
fn known_paths() -> Vec<String> {
    let mut paths: Vec<String> = Vec::new();
    let keys = known_keys();
    let aliases = ALIASES.iter().map(|(alias, _)| alias.to_string());
    for key in keys.into_iter().chain(aliases) {
        let mut end = 0;
        while let Some(dot) = key[end..].find('.') {
            end += dot;
            paths.push(key[..end].to_string());
            end += 1;
        }
        paths.push(key);
    }
    paths.sort();
    paths.dedup();
    paths
}

/// The known keys (or sections) an unknown `key` (dotted, below `workload.`) most likely meant: its
/// last segment misspelt among its section's keys (`reader.odirct`: `reader.odirect`), else the
/// same last segment in another section (`train.batch_size`: `reader.batch_size`). Empty when none
/// is close.
pub fn close_keys(key: &str) -> Vec<String> {
    // No key has a blank: such an entry says why a known key is ignored (`reader (ignored: …)`).
    if key.contains(char::is_whitespace) {
        return Vec::new();
    }
    let (section, leaf) = match key.rsplit_once('.') {
        Some((section, leaf)) => (Some(section), leaf),
        None => (None, key),
    };
    let paths = known_paths();
    let siblings: Vec<&str> = paths
        .iter()
        .filter(|p| p.rsplit_once('.').map(|(parent, _)| parent) == section)
        .map(|p| p.rsplit('.').next().unwrap_or(p))
        .collect();
    let close = closest_names(leaf, &siblings);
    if !close.is_empty() {
        return close
            .iter()
            .map(|name| match section {
                Some(section) => format!("{section}.{name}"),
                None => name.to_string(),
            })
            .collect();
    }
    paths
        .into_iter()
        .filter(|p| p != key && p.rsplit('.').next() == Some(leaf))
        .take(4)
        .collect()
}

/// "; did you mean workload.a.b?" for an unknown key (dotted, below `workload.`), or nothing when
/// no known key is close.
pub fn key_hint(key: &str) -> String {
    let close: Vec<String> = close_keys(key)
        .iter()
        .map(|k| format!("workload.{k}"))
        .collect();
    if close.is_empty() {
        String::new()
    } else {
        format!("; did you mean {}?", close.join(", "))
    }
}

/// The number of single-character insertions, deletions and substitutions between `a` and `b`.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let substitution = diagonal + usize::from(ca != *cb);
            diagonal = row[j + 1];
            row[j + 1] = substitution.min(row[j] + 1).min(row[j + 1] + 1);
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn close_names() {
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        let hint = closest_names_hint("unet3d", &["unet3d_h100", "resnet50_h100", "dlrm"]);
        assert_eq!(hint, "; did you mean unet3d_h100?");
        assert_eq!(closest_names_hint("zzzzzz", &["unet3d_h100"]), "");
    }

    #[test]
    fn a_misspelt_key_is_met_with_the_key_it_meant() {
        for (unknown, meant) in [
            ("reader.odirct", "reader.odirect"),
            ("reader.page_cahce", "reader.page_cache"),
            ("readr", "reader"),
            ("train.batch_size", "reader.batch_size"),
            (
                "storage.storage_options.endpoint",
                "storage.storage_options.endpoint_url",
            ),
            ("dataset.record_lenght", "dataset.record_length"),
        ] {
            assert_eq!(
                close_keys(unknown).first().map(String::as_str),
                Some(meant),
                "{unknown}"
            );
        }
        assert_eq!(
            key_hint("reader.odirct"),
            "; did you mean workload.reader.odirect?"
        );
    }

    #[test]
    fn a_key_far_from_every_known_one_gets_no_hint() {
        for unknown in ["dataset.colour", "extra", "reader.zzzzzzzzzz"] {
            assert_eq!(key_hint(unknown), "", "{unknown}");
        }
    }
}
