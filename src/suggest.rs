//! "Did you mean ...?" for a mistyped name: the nearest known one, as clap does for
//! subcommands, so a typo in a variant, value or kernel release names its fix.

/// The candidate most like `word`, if one is close enough to be the intended one
/// (Jaro-Winkler similarity of at least 0.8, clap's own threshold being 0.7 on Jaro).
pub fn nearest<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    candidates
        .into_iter()
        .map(|c| (strsim::jaro_winkler(word, c), c))
        .filter(|&(score, _)| score >= 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, c)| c)
}

/// `" (did you mean 'X'?)"` when a near candidate exists, else nothing.
pub fn hint<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> String {
    nearest(word, candidates)
        .map(|c| format!(" (did you mean '{c}'?)"))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_one_letter_typo_finds_its_word() {
        assert_eq!(nearest("zapp", ["zap", "tlb-batch", "contpte"]), Some("zap"));
        assert_eq!(nearest("batchd", ["per-pte", "batched"]), Some("batched"));
        assert_eq!(nearest("6.188", ["6.1", "6.12", "6.18"]), Some("6.18"));
    }

    #[test]
    fn an_unrelated_word_finds_nothing() {
        assert_eq!(nearest("granite", ["zap", "tlb-batch"]), None);
        assert_eq!(hint("xyz", ["zap"]), "");
    }
}
