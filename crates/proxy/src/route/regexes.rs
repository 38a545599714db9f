//! One subject's regular expressions, compiled together: a single pattern
//! runs as one regex, several as one set searched once for all of them.

use std::cell::RefCell;

use regex_automata::meta::{self, Regex};
use regex_automata::nfa::thompson::WhichCaptures;
use regex_automata::util::syntax;
use regex_automata::{Input, MatchKind, PatternSet};

/// A subject's patterns, as written and compiled.
#[derive(Debug)]
pub(crate) struct Regexes {
    patterns: Vec<String>,
    regex: Regex,
}

thread_local! {
    /// The patterns a set found, kept per thread so that a search allocates nothing.
    static FOUND: RefCell<Option<PatternSet>> = const { RefCell::new(None) };
}

/// Compile `patterns` within `size_limit` bytes, as the `regex` crate
/// would (Unicode, matching only UTF-8); as a set (`MatchKind::All`, no
/// captures) or, for one pattern, with its groups. An error says why.
pub(crate) fn compile(patterns: &[String], size_limit: usize, set: bool) -> Result<Regex, String> {
    let mut config = meta::Config::new().nfa_size_limit(Some(size_limit)).hybrid_cache_capacity(2 << 20);
    if set {
        config = config.match_kind(MatchKind::All).which_captures(WhichCaptures::None);
    }
    let built = Regex::builder()
        .configure(config.utf8_empty(true))
        .syntax(syntax::Config::new().utf8(true))
        .build_many(patterns);
    built.map_err(|e| match (e.syntax_error(), e.size_limit()) {
        (Some(syntax), _) => syntax.to_string(),
        (None, Some(limit)) => format!("compiled regex exceeds size limit of {limit} bytes"),
        _ => e.to_string(),
    })
}

impl Regexes {
    /// Compile `patterns` (each checked already) within `size_limit` bytes.
    pub(crate) fn new(patterns: Vec<String>, size_limit: usize) -> Result<Regexes, String> {
        let regex = compile(&patterns, size_limit, patterns.len() > 1)?;
        Ok(Regexes { patterns, regex })
    }

    /// The patterns, in order.
    #[cfg(test)]
    pub(crate) fn patterns(&self) -> &[String] {
        &self.patterns
    }

    /// Call `found` with the index of every pattern that matches somewhere in `text`.
    pub(crate) fn each_match(&self, text: &[u8], mut found: impl FnMut(usize)) {
        match self.patterns.len() {
            0 => {}
            1 => {
                if self.regex.is_match(text) {
                    found(0);
                }
            }
            n => FOUND.with(|cell| {
                let mut cell = cell.borrow_mut();
                let set = match &mut *cell {
                    Some(set) if set.capacity() >= n => {
                        set.clear();
                        set
                    }
                    slot => slot.insert(PatternSet::new(n)),
                };
                self.regex.which_overlapping_matches(&Input::new(text), set);
                set.iter().for_each(|p| found(p.as_usize()));
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found(r: &Regexes, text: &str) -> Vec<usize> {
        let mut out = Vec::new();
        r.each_match(text.as_bytes(), |p| out.push(p));
        out
    }

    #[test]
    fn one_pattern_or_many_find_every_pattern_that_matches() {
        let one = Regexes::new(vec!["^t-[a-z]+$".into()], 1 << 20).unwrap();
        assert_eq!(found(&one, "t-abc"), [0]);
        assert!(found(&one, "t-1").is_empty());
        let many = Regexes::new(vec!["^/a".into(), "b$".into(), "^/x".into(), "".into()], 1 << 20).unwrap();
        assert_eq!(found(&many, "/ab"), [0, 1, 3]);
        assert_eq!(found(&many, "/x"), [2, 3]);
        // A larger set on the same thread, then a smaller one again.
        let more: Vec<String> = (0..40).map(|i| format!("^/v{i}$")).collect();
        let more = Regexes::new(more, 1 << 20).unwrap();
        assert_eq!(found(&more, "/v39"), [39]);
        assert_eq!(found(&many, "/ab"), [0, 1, 3]);
        assert!(found(&Regexes::new(Vec::new(), 1 << 20).unwrap(), "/").is_empty());
    }

    #[test]
    fn patterns_match_text_not_bytes_that_are_not_utf8() {
        let r = Regexes::new(vec!["^.$".into(), "^é$".into()], 1 << 20).unwrap();
        assert_eq!(found(&r, "é"), [0, 1]);
        let mut out = Vec::new();
        r.each_match(b"\xff", |p| out.push(p));
        assert!(out.is_empty());
    }
}
