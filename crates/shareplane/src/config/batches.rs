//! Where a file's `[[limits]]` entries are, so that a large file is parsed in batches of entries
//! rather than as one document: read as one span-keeping document, a configuration of 100,000
//! limits (5.5 MB) peaked at 188 MiB resident, in batches of [`LIMITS_PER_BATCH`] at 70
//! (`examples/bench_memory.rs`).
//!
//! The split is a fast path, never a second meaning: each batch and the rest of the file (its
//! other lines, with where each piece of them is in the file, so that every problem keeps its
//! line) are parsed by the same parser, and the reader goes back to parsing the whole file whenever
//! the split could read differently from it (see [`Split::rest_is_whole`] and the reader's
//! checks of each batch): a syntax error anywhere, a `limits` key outside the batches, or a
//! value of the rest that runs over a batch taken out (a `[[limits]]` line inside a multi-line
//! string or array).

use toml_edit::{Item, TableLike};

/// How many `[[limits]]` entries one batch holds at most.
pub const LIMITS_PER_BATCH: usize = 1_000;

/// A run of whole `[[limits]]` entries: `text[start..end]`, the first being entry `first` of
/// the file and `entries` of them in all.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Batch {
    pub start: usize,
    pub end: usize,
    pub first: usize,
    pub entries: usize,
}

/// A file split into batches of `[[limits]]` entries and the rest.
#[derive(Debug)]
pub struct Split {
    pub batches: Vec<Batch>,
    /// The file without its batches: the lines outside them, in order.
    pub rest: String,
    /// Where each piece of `rest` starts, in `rest` and in the file, in order: the spans read
    /// from `rest` are the file's through them.
    pub pieces: Vec<(usize, usize)>,
    /// Entries in all.
    pub entries: usize,
}

/// Splits `text` at its `[[limits]]` header lines into batches of at most `per_batch` entries.
/// An entry runs from its header line to the next line that starts with `[` (any other header
/// ends the run of entries). `None` when there is no such header: the file is read whole.
pub fn split(text: &str, per_batch: usize) -> Option<Split> {
    let per_batch = per_batch.max(1);
    let mut batches: Vec<Batch> = Vec::new();
    // The batch being filled, if the previous line belongs to an entry.
    let mut open: Option<Batch> = None;
    let mut entries = 0;
    let mut at = 0;
    for line in text.split_inclusive('\n') {
        let head = line.trim_start_matches([' ', '\t']);
        if is_limits_header(head) {
            match open.as_mut() {
                Some(b) if b.entries < per_batch => b.entries += 1,
                _ => {
                    if let Some(mut b) = open.take() {
                        b.end = at;
                        batches.push(b);
                    }
                    open = Some(Batch {
                        start: at,
                        end: at,
                        first: entries,
                        entries: 1,
                    });
                }
            }
            entries += 1;
        } else if head.starts_with('[') {
            if let Some(mut b) = open.take() {
                b.end = at;
                batches.push(b);
            }
        }
        at += line.len();
    }
    if let Some(mut b) = open.take() {
        b.end = at;
        batches.push(b);
    }
    if batches.is_empty() {
        return None;
    }
    let (rest, pieces) = without(text, &batches)?;
    Some(Split {
        batches,
        rest,
        pieces,
        entries,
    })
}

/// `[[limits]]`, then nothing but blanks and a comment.
fn is_limits_header(head: &str) -> bool {
    head.strip_prefix("[[limits]]").is_some_and(|after| {
        let after = after.trim_start_matches([' ', '\t']);
        after.is_empty() || after.starts_with(['#', '\n', '\r'])
    })
}

/// `text` without `batches` (each runs from a line start to a line start), and where each
/// piece left starts in it and in `text`.
fn without(text: &str, batches: &[Batch]) -> Option<(String, Vec<(usize, usize)>)> {
    let mut rest = String::new();
    let mut pieces = Vec::new();
    let mut from = 0;
    let ends = batches.iter().map(|b| (b.start, b.end));
    for (to, next) in ends.chain(std::iter::once((text.len(), text.len()))) {
        let piece = text.get(from..to)?;
        if !piece.is_empty() {
            pieces.push((rest.len(), from));
            rest.push_str(piece);
        }
        from = next;
    }
    Some((rest, pieces))
}

impl Split {
    /// Whether the rest, as parsed into `root`, reads as the whole file would outside the
    /// batches: no `limits` key of its own, and no value that starts before a batch and ends
    /// after it (only then can a `[[limits]]` line taken out have been inside a value).
    pub fn rest_is_whole(&self, root: &dyn TableLike) -> bool {
        root.get("limits").is_none() && !self.a_value_spans_a_batch(root)
    }

    fn a_value_spans_a_batch(&self, t: &dyn TableLike) -> bool {
        t.iter().any(|(_, item)| match item {
            Item::Value(v) => v.span().is_some_and(|s| self.crosses(s.start, s.end)),
            Item::Table(t) => self.a_value_spans_a_batch(t),
            Item::ArrayOfTables(a) => a.iter().any(|t| self.a_value_spans_a_batch(t)),
            Item::None => false,
        })
    }

    /// Whether a batch was taken out strictly inside `start..end` of the rest: where a piece
    /// other than the first starts.
    fn crosses(&self, start: usize, end: usize) -> bool {
        let i = self.pieces.partition_point(|&(at, _)| at <= start);
        self.pieces.get(i).is_some_and(|&(at, _)| at < end)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_batched_at_their_headers_and_other_headers_end_a_run() {
        let text = "a = 1\n[[limits]]\nid = \"x\"\n  [[limits]] # two\nid = \"y\"\n\
                    [[limits]]\nid = \"z\"\n[[templates]]\nid = \"t\"\n[[limits]]\nid = \"w\"";
        let s = split(text, 2).unwrap_or_else(|| panic!("no split"));
        let at = |needle: &str| text.find(needle).unwrap_or(usize::MAX);
        let starts: Vec<(usize, usize, usize)> = s
            .batches
            .iter()
            .map(|b| (b.start, b.first, b.entries))
            .collect();
        assert_eq!(
            starts,
            vec![
                (at("[[limits]]\nid = \"x\""), 0, 2),
                (at("[[limits]]\nid = \"z\""), 2, 1),
                (at("[[limits]]\nid = \"w\""), 3, 1),
            ]
        );
        assert_eq!(s.batches[1].end, at("[[templates]]"));
        assert_eq!(s.batches[2].end, text.len());
        assert_eq!(s.entries, 4);
        assert_eq!(s.rest, "a = 1\n[[templates]]\nid = \"t\"\n");
        assert_eq!(s.pieces, vec![(0, 0), (6, at("[[templates]]"))]);
    }

    #[test]
    fn a_file_without_limits_headers_is_not_split() {
        assert!(split("limits = [{ id = \"a\", rate = 1 }]\n[[limits.x]]\n", 10).is_none());
        assert!(split("[[limitsx]]\n[ [limits]]\n", 10).is_none());
    }
}
