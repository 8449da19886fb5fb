//! Mutations of valid inputs, for the parsers' fuzz tests (tests/parsers.rs): a real file srvprof
//! wrote, with bytes replaced, inserted and removed, and values known to break parsers spliced
//! in (the ends of integer types, NaN, line breaks, template delimiters), so that the mutated
//! inputs get past the first check of a format and reach the code behind it.

use proptest::prelude::*;

/// Values spliced into inputs: the ends of integer and float ranges, separators, and characters
/// that end lines in YAML or a shell.
const TOKENS: &[&str] = &[
    "18446744073709551615",
    "18446744073709551616",
    "9223372036854775807",
    "-9223372036854775808",
    "4294967295",
    "-1",
    "0",
    "1e308",
    "-1e308",
    "NaN",
    "inf",
    "0.000000001",
    "99999999999999999999.999",
    "\n",
    "\r\n",
    "\u{2028}",
    "\u{85}",
    ";",
    ",",
    ":",
    " ",
    "{{",
    "}}",
    "\"",
    "null",
    "[]",
    "{}",
    "HISTFAAAA",
    "#[StartTime: ",
    "@",
    "..",
    "/",
    "http://",
    "[::1]",
    "65536",
    "%",
];

#[derive(Clone, Debug)]
enum Edit {
    Replace(usize, u8),
    Insert(usize, u8),
    Remove(usize, usize),
    Splice(usize, usize),
    Duplicate(usize, usize),
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        (any::<usize>(), any::<u8>()).prop_map(|(at, b)| Edit::Replace(at, b)),
        (any::<usize>(), any::<u8>()).prop_map(|(at, b)| Edit::Insert(at, b)),
        (any::<usize>(), 1..64usize).prop_map(|(at, n)| Edit::Remove(at, n)),
        (any::<usize>(), 0..TOKENS.len()).prop_map(|(at, t)| Edit::Splice(at, t)),
        (any::<usize>(), 1..256usize).prop_map(|(at, n)| Edit::Duplicate(at, n)),
    ]
}

fn apply(mut bytes: Vec<u8>, edits: &[Edit]) -> Vec<u8> {
    for e in edits {
        let len = bytes.len().max(1);
        match *e {
            Edit::Replace(at, b) if !bytes.is_empty() => {
                let at = at % bytes.len();
                bytes[at] = b;
            }
            Edit::Replace(..) => {}
            Edit::Insert(at, b) => bytes.insert(at % (bytes.len() + 1), b),
            Edit::Remove(at, n) => {
                let from = (at % len).min(bytes.len());
                let to = (from + n).min(bytes.len());
                bytes.drain(from..to);
            }
            Edit::Splice(at, t) => {
                let at = at % (bytes.len() + 1);
                bytes.splice(at..at, TOKENS[t].bytes());
            }
            Edit::Duplicate(at, n) => {
                let from = (at % len).min(bytes.len());
                let piece: Vec<u8> = bytes[from..(from + n).min(bytes.len())].to_vec();
                bytes.splice(from..from, piece);
            }
        }
    }
    bytes
}

/// `seed` with up to `max_edits` edits.
pub fn mutated(seed: &[u8], max_edits: usize) -> impl Strategy<Value = Vec<u8>> + use<> {
    let seed = seed.to_vec();
    prop::collection::vec(edit(), 0..=max_edits).prop_map(move |edits| apply(seed.clone(), &edits))
}

/// `seed` mutated, as text (invalid UTF-8 replaced): for parsers that take a `&str`.
pub fn mutated_text(seed: &str, max_edits: usize) -> impl Strategy<Value = String> + use<> {
    mutated(seed.as_bytes(), max_edits).prop_map(|b| String::from_utf8_lossy(&b).into_owned())
}

/// How many cases each parser gets: SRVPROF_FUZZ_CASES, or a budget that takes each a few
/// seconds on a 2-core machine.
pub fn cases(default: u32) -> u32 {
    std::env::var("SRVPROF_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}
