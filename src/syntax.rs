//! A command's syntax as COMMAND DOCS shows it: its arguments (names, types, tokens, optional
//! and repeated ones) and its key specs. Pure: the table (`crate::table`) writes each command's
//! syntax once; its arity, its COMMAND DOCS and its usage line in docs/COMMANDS.md all come
//! from it, so none can drift from another.

use std::ffi::CStr;

/// What an argument is.
#[derive(Clone, Copy, Debug)]
pub enum Shape {
    /// A key name (its key spec is the command's `keys[key_spec]`).
    Key {
        key_spec: u8,
    },
    /// Any bytes (an owner, a command name).
    Text,
    Integer,
    /// Only its token (`READ`).
    Token,
    /// One of these.
    OneOf(&'static [Arg]),
    /// These, in this order.
    Block(&'static [Arg]),
}

/// One argument.
#[derive(Clone, Copy, Debug)]
pub struct Arg {
    pub name: &'static CStr,
    pub shape: Shape,
    /// The word before the value (`WAIT` of `WAIT ms`), or the word itself for a `Token`.
    pub token: Option<&'static CStr>,
    pub optional: bool,
    pub multiple: bool,
}

const fn arg(name: &'static CStr, shape: Shape) -> Arg {
    Arg {
        name,
        shape,
        token: None,
        optional: false,
        multiple: false,
    }
}

/// The key the command's first key spec finds.
pub const fn key(name: &'static CStr) -> Arg {
    arg(name, Shape::Key { key_spec: 0 })
}

pub const fn text(name: &'static CStr) -> Arg {
    arg(name, Shape::Text)
}

pub const fn integer(name: &'static CStr) -> Arg {
    arg(name, Shape::Integer)
}

/// A word alone (`READ`); `name` is how COMMAND DOCS names it.
pub const fn word(name: &'static CStr, token: &'static CStr) -> Arg {
    arg(name, Shape::Token).token(token)
}

pub const fn one_of(name: &'static CStr, args: &'static [Arg]) -> Arg {
    arg(name, Shape::OneOf(args))
}

pub const fn block(name: &'static CStr, args: &'static [Arg]) -> Arg {
    arg(name, Shape::Block(args))
}

impl Arg {
    /// `WAIT ms`: the value comes after this word.
    pub const fn token(mut self, token: &'static CStr) -> Arg {
        self.token = Some(token);
        self
    }

    pub const fn optional(mut self) -> Arg {
        self.optional = true;
        self
    }

    /// Given once or more.
    pub const fn multiple(mut self) -> Arg {
        self.multiple = true;
        self
    }

    /// The key found by key spec `i` of the command (for commands with more than one).
    #[cfg_attr(not(test), allow(dead_code))]
    pub const fn key_spec(mut self, i: u8) -> Arg {
        if let Shape::Key { .. } = self.shape {
            self.shape = Shape::Key { key_spec: i };
        }
        self
    }
}

/// The fewest arguments `args` take, and whether that is also the most.
const fn span(args: &[Arg]) -> (i32, bool) {
    let (mut n, mut fixed, mut i) = (0, true, 0);
    while i < args.len() {
        let a = &args[i];
        if a.optional || a.multiple {
            fixed = false;
        }
        if !a.optional {
            let (m, f) = span_of(a);
            n += m;
            fixed = fixed && f;
        }
        i += 1;
    }
    (n, fixed)
}

const fn span_of(a: &Arg) -> (i32, bool) {
    let word = if a.token.is_some() { 1 } else { 0 };
    match a.shape {
        Shape::Token => (1, true),
        Shape::Block(subs) => {
            let (m, f) = span(subs);
            (word + m, f)
        }
        Shape::OneOf(alts) => {
            let (mut least, mut fixed, mut i) = (i32::MAX, true, 0);
            while i < alts.len() {
                let (m, f) = span_of(&alts[i]);
                if i > 0 && m != least {
                    fixed = false;
                }
                if m < least {
                    least = m;
                }
                fixed = fixed && f;
                i += 1;
            }
            (word + least, fixed)
        }
        _ => (word + 1, true),
    }
}

/// The arity Redis checks: the argument count with the name, negative for "at least".
pub const fn arity(args: &[Arg]) -> i32 {
    let (n, fixed) = span(args);
    if fixed {
        n + 1
    } else {
        -(n + 1)
    }
}

/// Who may write a key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Reads it (RO ACCESS).
    Read,
    /// Reads and changes it, maybe making or deleting it (RW ACCESS UPDATE).
    Write,
    /// Reads it (RO ACCESS), and the command declares more keys as it is called (its
    /// getkeys-api; VARIABLE_FLAGS makes Redis ask it rather than trust the key spec).
    ReadAndDeclared,
}

/// Where a command's keys are.
#[derive(Clone, Copy, Debug)]
pub enum Keys {
    /// One key, at this argument.
    At(i32),
    /// A count at this argument, then that many keys.
    #[cfg_attr(not(test), allow(dead_code))]
    Numkeys(i32),
}

/// A key spec: where its keys are and what the command does to them.
#[derive(Clone, Copy, Debug)]
pub struct KeySpec {
    pub keys: Keys,
    pub access: Access,
}

/// Every form `args` documents, with a sample value for each argument (`value(name)`):
/// each optional argument left out and given, each repeated one once and twice, each
/// alternative of a choice.
#[cfg(test)]
pub fn forms(args: &[Arg], value: &dyn Fn(&str) -> String) -> Vec<Vec<String>> {
    let mut out = vec![Vec::new()];
    for a in args {
        let mut next = Vec::new();
        let once = forms_once(a, value);
        let mut choices: Vec<Vec<String>> = once.clone();
        if a.multiple {
            for x in &once {
                choices.push([x.clone(), x.clone()].concat());
            }
        }
        if a.optional {
            choices.push(Vec::new());
        }
        for head in &out {
            for c in &choices {
                next.push([head.clone(), c.clone()].concat());
            }
        }
        out = next;
    }
    out
}

#[cfg(test)]
fn forms_once(a: &Arg, value: &dyn Fn(&str) -> String) -> Vec<Vec<String>> {
    let token: Vec<String> = a.token.iter().map(|t| t.to_string_lossy().into()).collect();
    let values = match a.shape {
        Shape::Token => return vec![token],
        Shape::OneOf(alts) => alts.iter().flat_map(|x| forms(&[*x], value)).collect(),
        Shape::Block(subs) => forms(subs, value),
        _ => vec![vec![value(&a.name.to_string_lossy())]],
    };
    values
        .into_iter()
        .map(|v| [token.clone(), v].concat())
        .collect()
}

/// The usage line: `RWLOCK.RLOCK key owner ttl [WAIT ms]` (docs/COMMANDS.md shows each).
#[cfg(test)]
pub fn usage(name: &str, args: &[Arg]) -> String {
    let mut out = name.to_uppercase();
    for a in args {
        out.push(' ');
        out.push_str(&shown(a));
    }
    out
}

#[cfg(test)]
fn shown(a: &Arg) -> String {
    let one = shown_once(a);
    match (a.optional, a.multiple) {
        (false, false) => one,
        (false, true) => format!("{one} [{one} ...]"),
        (true, false) => format!("[{one}]"),
        (true, true) => format!("[{one} [{one} ...]]"),
    }
}

#[cfg(test)]
fn shown_once(a: &Arg) -> String {
    let name = a.name.to_string_lossy();
    let token = a.token.map(|t| t.to_string_lossy());
    let value = match a.shape {
        Shape::Token => return token.unwrap_or(name).into_owned(),
        Shape::OneOf(alts) => {
            let alts: Vec<String> = alts.iter().map(shown).collect();
            format!("<{}>", alts.join(" | "))
        }
        Shape::Block(subs) => subs.iter().map(shown).collect::<Vec<_>>().join(" "),
        _ => name.into_owned(),
    };
    match token {
        Some(t) => format!("{t} {value}"),
        None => value,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOCK: &[Arg] = &[
        key(c"key"),
        text(c"owner"),
        integer(c"ttl"),
        integer(c"ms").token(c"WAIT").optional(),
    ];
    const MULTI: &[Arg] = &[
        integer(c"numkeys"),
        key(c"key").multiple(),
        word(c"read", c"READ").optional(),
    ];
    const OPS: &[Arg] = &[
        key(c"key"),
        one_of(
            c"op",
            &[
                block(c"release", &[word(c"release", c"RELEASE"), text(c"owner")]),
                integer(c"token").token(c"LAST"),
            ],
        ),
    ];

    #[test]
    fn arity_counts_the_name_and_required_arguments() {
        assert_eq!(arity(LOCK), -4);
        assert_eq!(arity(&LOCK[..3]), 4);
        assert_eq!(arity(MULTI), -3);
        assert_eq!(arity(OPS), 4, "both ops take two words");
        assert_eq!(arity(&[]), 1);
    }

    #[test]
    fn usage_lines() {
        assert_eq!(
            usage("rwlock.rlock", LOCK),
            "RWLOCK.RLOCK key owner ttl [WAIT ms]"
        );
        assert_eq!(usage("m", MULTI), "M numkeys key [key ...] [READ]");
        assert_eq!(usage("x", OPS), "X key <RELEASE owner | LAST token>");
    }

    #[test]
    fn forms_cover_every_option_and_choice() {
        let v = |n: &str| n.to_string();
        let f = |args| -> Vec<String> { forms(args, &v).iter().map(|f| f.join(" ")).collect() };
        assert_eq!(f(LOCK), ["key owner ttl WAIT ms", "key owner ttl"]);
        assert_eq!(
            f(MULTI),
            [
                "numkeys key READ",
                "numkeys key",
                "numkeys key key READ",
                "numkeys key key"
            ]
        );
        assert_eq!(f(OPS), ["key RELEASE owner", "key LAST token"]);
        let keys = [key(c"a"), key(c"b").key_spec(1)];
        assert!(matches!(keys[1].shape, Shape::Key { key_spec: 1 }));
        let _ = Keys::Numkeys(1);
    }
}
