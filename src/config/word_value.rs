//! The value of an override word (`++workload.a.b=VALUE`), read as Hydra reads it: with Hydra's
//! override grammar (hydra/grammar/OverrideLexer.g4 and OverrideParser.g4), not as YAML. The two
//! differ where users notice: `yes` and `on` are strings, `inf` and `nan` are numbers, `017` and
//! `0x1F` are strings, an empty value is the empty string, and `~`, `#` or `é` unquoted are errors.
//!
//! The lexer takes, at each place, the longest token any rule matches, the earlier rule on a tie,
//! as ANTLR's does; the parser follows the grammar's rules for a value: a primitive (one token
//! keeps its type; several are joined into a string, escapes undone), a list, a dictionary.
//! Sweeps (`a,b`) and Hydra's functions (`int(3)`, `range(1,5)`) are refused with the reason:
//! they make several jobs, or are not supported.

use super::value::Value;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    ParenOpen,
    Comma,
    ParenClose,
    BracketOpen,
    BracketClose,
    BraceOpen,
    BraceClose,
    Colon,
    Equal,
    Float,
    Int,
    Bool,
    Null,
    UnquotedChar,
    Id,
    Escape,
    Space,
    Quoted,
    Interpolation,
}

#[derive(Debug, Clone, Copy)]
struct Token<'a> {
    kind: Kind,
    text: &'a str,
}

/// Parses the text after `=`.
pub fn parse(text: &str) -> Result<Value, String> {
    // The `=` token takes the blanks after it.
    let text = text.trim_start_matches([' ', '\t']);
    if text.is_empty() {
        return Ok(Value::Str(String::new()));
    }
    let tokens = lex(text)?;
    let mut parser = Parser {
        tokens,
        at: 0,
        depth: 0,
    };
    let value = parser.element()?;
    match parser.peek() {
        None => Ok(value),
        Some(Token {
            kind: Kind::Comma, ..
        }) => Err(
            "values separated by commas are a sweep, which runs one job per value (Hydra's \
             --multirun); give one value, or quote it ('a,b')"
                .into(),
        ),
        Some(token) => Err(format!("unexpected '{}'", token.text)),
    }
}

// ---------------------------------------------------------------------------------------------
// The lexer: one function per rule, each giving the length it matches at the start of `s`.
// ---------------------------------------------------------------------------------------------

fn space(s: &[u8]) -> usize {
    s.iter().take_while(|&&b| b == b' ' || b == b'\t').count()
}

/// `WS? c WS?` (with `before` and `after` saying which blanks the rule takes).
fn punctuation(s: &[u8], c: u8, before: bool, after: bool) -> Option<usize> {
    let lead = if before { space(s) } else { 0 };
    if s.get(lead) != Some(&c) {
        return None;
    }
    let trail = if after { space(&s[lead + 1..]) } else { 0 };
    Some(lead + 1 + trail)
}

/// `DIGIT (('_')? DIGIT)*`, from `s[0]`, which must be a digit: the length.
fn digits(s: &[u8]) -> Option<usize> {
    if !s.first()?.is_ascii_digit() {
        return None;
    }
    let mut at = 1;
    loop {
        match (s.get(at), s.get(at + 1)) {
            (Some(d), _) if d.is_ascii_digit() => at += 1,
            (Some(b'_'), Some(d)) if d.is_ascii_digit() => at += 2,
            _ => return Some(at),
        }
    }
}

/// `INT_UNSIGNED: '0' | [1-9] (('_')? DIGIT)*`.
fn int_unsigned(s: &[u8]) -> Option<usize> {
    match s.first()? {
        b'0' => Some(1),
        b'1'..=b'9' => digits(s),
        _ => None,
    }
}

/// Every length `POINT_FLOAT` can match: `INT_UNSIGNED '.'`, or `INT_UNSIGNED? '.' DIGITS`.
fn point_float(s: &[u8]) -> Vec<usize> {
    let mut ends = Vec::new();
    let int = int_unsigned(s);
    for lead in [int, Some(0)].into_iter().flatten() {
        if s.get(lead) == Some(&b'.') {
            if lead > 0 {
                ends.push(lead + 1);
            }
            if let Some(fraction) = digits(&s[lead + 1..]) {
                ends.push(lead + 1 + fraction);
            }
        }
    }
    ends
}

/// `EXPONENT_FLOAT: (INT_UNSIGNED | POINT_FLOAT) [eE] [+-]? DIGITS`.
fn exponent_float(s: &[u8]) -> Option<usize> {
    let mantissas = int_unsigned(s).into_iter().chain(point_float(s));
    mantissas
        .filter_map(|m| {
            if !matches!(s.get(m), Some(b'e' | b'E')) {
                return None;
            }
            let sign = usize::from(matches!(s.get(m + 1), Some(b'+' | b'-')));
            digits(&s[m + 1 + sign..]).map(|d| m + 1 + sign + d)
        })
        .max()
}

fn sign(s: &[u8]) -> usize {
    usize::from(matches!(s.first(), Some(b'+' | b'-')))
}

fn word(s: &[u8], w: &str) -> Option<usize> {
    (s.len() >= w.len() && s[..w.len()].eq_ignore_ascii_case(w.as_bytes())).then_some(w.len())
}

fn float(s: &[u8]) -> Option<usize> {
    let signed = sign(s);
    let rest = &s[signed..];
    point_float(rest)
        .into_iter()
        .chain(exponent_float(rest))
        .chain(word(rest, "inf"))
        .chain(word(rest, "nan"))
        .max()
        .map(|n| signed + n)
}

fn int(s: &[u8]) -> Option<usize> {
    let signed = sign(s);
    int_unsigned(&s[signed..]).map(|n| signed + n)
}

fn id(s: &[u8]) -> Option<usize> {
    let first = *s.first()?;
    if !(first.is_ascii_alphabetic() || first == b'_') {
        return None;
    }
    Some(
        1 + s[1..]
            .iter()
            .take_while(|&&b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
            .count(),
    )
}

/// `ESC`: backslash pairs `\\`, `\(`, `\)`, `\[`, `\]`, `\{`, `\}`, `\:`, `\=`, `\,`, `\ `, `\<tab>`.
fn escape(s: &[u8]) -> Option<usize> {
    let pairs = s
        .chunks_exact(2)
        .take_while(|pair| pair[0] == b'\\' && b"\\()[]{}:=, \t".contains(&pair[1]))
        .count();
    (pairs > 0).then_some(2 * pairs)
}

/// `QUOTED_VALUE`: a quote, then the shortest run up to the same quote not escaped (preceded by an
/// even number of backslashes).
fn quoted(s: &[u8]) -> Option<usize> {
    let quote = *s.first()?;
    if quote != b'\'' && quote != b'"' {
        return None;
    }
    let mut backslashes = 0;
    for (at, &b) in s.iter().enumerate().skip(1) {
        if b == quote && backslashes % 2 == 0 {
            return Some(at + 1);
        }
        backslashes = if b == b'\\' { backslashes + 1 } else { 0 };
    }
    None
}

/// `INTERPOLATION: '${' ~('}')+ '}'`.
fn interpolation(s: &[u8]) -> Option<usize> {
    if !s.starts_with(b"${") {
        return None;
    }
    let inside = s[2..].iter().take_while(|&&b| b != b'}').count();
    (inside > 0 && s.get(2 + inside) == Some(&b'}')).then_some(3 + inside)
}

fn lex(text: &str) -> Result<Vec<Token<'_>>, String> {
    let bytes = text.as_bytes();
    let mut tokens = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let s = &bytes[at..];
        let unquoted = b"/-\\+.$%*@?|".contains(&s[0]);
        // In the grammar's order: on equal lengths the earlier rule wins.
        let candidates = [
            (Kind::ParenOpen, punctuation(s, b'(', true, true)),
            (Kind::Comma, punctuation(s, b',', true, true)),
            (Kind::ParenClose, punctuation(s, b')', true, false)),
            (Kind::BracketOpen, punctuation(s, b'[', false, true)),
            (Kind::BracketClose, punctuation(s, b']', true, false)),
            (Kind::BraceOpen, punctuation(s, b'{', false, true)),
            (Kind::BraceClose, punctuation(s, b'}', true, false)),
            (Kind::Colon, punctuation(s, b':', true, true)),
            (Kind::Equal, punctuation(s, b'=', true, true)),
            (Kind::Float, float(s)),
            (Kind::Int, int(s)),
            (Kind::Bool, word(s, "true").or_else(|| word(s, "false"))),
            (Kind::Null, word(s, "null")),
            (Kind::UnquotedChar, unquoted.then_some(1)),
            (Kind::Id, id(s)),
            (Kind::Escape, escape(s)),
            (Kind::Space, Some(space(s)).filter(|&n| n > 0)),
            (Kind::Quoted, quoted(s)),
            (Kind::Interpolation, interpolation(s)),
        ];
        let best = candidates
            .iter()
            .filter_map(|&(kind, len)| len.map(|len| (kind, len)))
            .fold(
                None,
                |best: Option<(Kind, usize)>, (kind, len)| match best {
                    Some((_, longest)) if longest >= len => best,
                    _ => Some((kind, len)),
                },
            );
        let Some((kind, len)) = best else {
            let c = text[at..].chars().next().unwrap_or('?');
            return Err(format!(
                "'{c}' cannot be written unquoted (Hydra's grammar); quote the value: '…'"
            ));
        };
        tokens.push(Token {
            kind,
            text: &text[at..at + len],
        });
        at += len;
    }
    Ok(tokens)
}

// ---------------------------------------------------------------------------------------------
// The parser.
// ---------------------------------------------------------------------------------------------

struct Parser<'a> {
    tokens: Vec<Token<'a>>,
    at: usize,
    /// Lists and dictionaries open around the element being read.
    depth: usize,
}

/// How deep lists and dictionaries may nest in one value (as in a workload file).
const MAX_DEPTH: usize = 64;

/// Tokens a primitive (a value) is made of; a dictionary key takes the same but colons,
/// quotes and interpolations.
fn in_primitive(kind: Kind) -> bool {
    matches!(
        kind,
        Kind::Id
            | Kind::Null
            | Kind::Int
            | Kind::Float
            | Kind::Bool
            | Kind::Interpolation
            | Kind::UnquotedChar
            | Kind::Colon
            | Kind::Escape
            | Kind::Space
    )
}

fn in_key(kind: Kind) -> bool {
    in_primitive(kind) && !matches!(kind, Kind::Colon | Kind::Interpolation)
}

impl<'a> Parser<'a> {
    fn peek(&self) -> Option<Token<'a>> {
        self.tokens.get(self.at).copied()
    }

    fn expect(&mut self, kind: Kind, what: &str) -> Result<(), String> {
        match self.peek() {
            Some(token) if token.kind == kind => {
                self.at += 1;
                Ok(())
            }
            Some(token) => Err(format!("expected {what}, found '{}'", token.text)),
            None => Err(format!("expected {what} at the end")),
        }
    }

    fn element(&mut self) -> Result<Value, String> {
        let Some(token) = self.peek() else {
            return Err("a value is missing".into());
        };
        if matches!(token.kind, Kind::BracketOpen | Kind::BraceOpen) && self.depth >= MAX_DEPTH {
            return Err(format!("nested deeper than {MAX_DEPTH} levels"));
        }
        match token.kind {
            Kind::BracketOpen => self.nested(Self::list),
            Kind::BraceOpen => self.nested(Self::dict),
            Kind::Quoted => {
                self.at += 1;
                Ok(Value::Str(unquote(token.text)))
            }
            Kind::Id if self.tokens.get(self.at + 1).map(|t| t.kind) == Some(Kind::ParenOpen) => {
                Err(format!(
                    "Hydra's function {}(…) is not supported; write the value itself",
                    token.text
                ))
            }
            _ => self.primitive(in_primitive),
        }
    }

    /// A run of tokens accepted by `takes`: one keeps its type; several make a string, blanks at
    /// either end dropped and escapes undone (Hydra's `_createPrimitive`).
    fn primitive(&mut self, takes: fn(Kind) -> bool) -> Result<Value, String> {
        let start = self.at;
        while self.peek().is_some_and(|t| takes(t.kind)) {
            self.at += 1;
        }
        let mut run = &self.tokens[start..self.at];
        if run.is_empty() {
            return Err(match self.peek() {
                Some(token) => format!("unexpected '{}'", token.text),
                None => "a value is missing".into(),
            });
        }
        if run.len() > 1 && run[0].kind == Kind::Space {
            run = &run[1..];
        } else if run.len() == 1 && run[0].kind == Kind::Space {
            return Err("a value is only blanks".into());
        }
        if run.len() > 1 && run[run.len() - 1].kind == Kind::Space {
            run = &run[..run.len() - 1];
        }
        if let [token] = run {
            return single(*token);
        }
        Ok(Value::Str(
            run.iter()
                .map(|t| match t.kind {
                    // `\,` is `,`: every other character.
                    Kind::Escape => t.text.chars().skip(1).step_by(2).collect(),
                    _ => t.text.to_string(),
                })
                .collect(),
        ))
    }

    fn nested(&mut self, read: fn(&mut Self) -> Result<Value, String>) -> Result<Value, String> {
        self.depth += 1;
        let value = read(self);
        self.depth -= 1;
        value
    }

    fn list(&mut self) -> Result<Value, String> {
        self.expect(Kind::BracketOpen, "'['")?;
        let mut items = Vec::new();
        if self.peek().map(|t| t.kind) != Some(Kind::BracketClose) {
            items.push(self.element()?);
            while self.peek().map(|t| t.kind) == Some(Kind::Comma) {
                self.at += 1;
                items.push(self.element()?);
            }
        }
        self.expect(Kind::BracketClose, "',' or ']'")?;
        Ok(Value::List(items))
    }

    fn dict(&mut self) -> Result<Value, String> {
        self.expect(Kind::BraceOpen, "'{'")?;
        let mut entries: Vec<(String, Value)> = Vec::new();
        if self.peek().map(|t| t.kind) != Some(Kind::BraceClose) {
            loop {
                let key = self.primitive(in_key)?.python_str();
                self.expect(Kind::Colon, "':'")?;
                let value = self.element()?;
                // A repeated key takes the last value, where the first one was.
                match entries.iter_mut().find(|(k, _)| *k == key) {
                    Some((_, slot)) => *slot = value,
                    None => entries.push((key, value)),
                }
                if self.peek().map(|t| t.kind) != Some(Kind::Comma) {
                    break;
                }
                self.at += 1;
            }
        }
        self.expect(Kind::BraceClose, "',' or '}'")?;
        Ok(Value::Map(entries))
    }
}

/// One token's value, as Hydra types it.
fn single(token: Token) -> Result<Value, String> {
    let text = token.text;
    Ok(match token.kind {
        Kind::Int => {
            let digits: String = text.chars().filter(|&c| c != '_').collect();
            Value::Int(digits.parse().map_err(|_| {
                format!("{text} is too large an integer (dlio-rs takes integers of 64 bits: ±9223372036854775807)")
            })?)
        }
        Kind::Float => {
            let digits: String = text.chars().filter(|&c| c != '_').collect();
            Value::Float(
                digits
                    .parse()
                    .map_err(|_| format!("{text} is not a number"))?,
            )
        }
        Kind::Bool => Value::Bool(text.eq_ignore_ascii_case("true")),
        Kind::Null => Value::Null,
        Kind::Escape => Value::Str(text.chars().skip(1).step_by(2).collect()),
        _ => Value::Str(text.to_string()),
    })
}

/// A quoted value's text: quotes off, and each run of backslashes before a quote halved (Hydra's
/// `_unescape_quoted_string`): an odd run keeps the quote, an even run stands before the closing
/// quote.
fn unquote(text: &str) -> String {
    let bytes = text.as_bytes();
    let quote = bytes[0];
    let inner = &bytes[1..];
    let mut out = Vec::with_capacity(inner.len());
    let mut at = 0;
    while at < inner.len() {
        let run = inner[at..].iter().take_while(|&&b| b == b'\\').count();
        if inner.get(at + run) == Some(&quote) {
            // The run and the quote, every other byte from the second.
            out.extend(inner[at..=at + run].iter().skip(1).step_by(2));
            at += run + 1;
        } else if run > 0 {
            out.extend_from_slice(&inner[at..at + run]);
            at += run;
        } else {
            out.push(inner[at]);
            at += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}
