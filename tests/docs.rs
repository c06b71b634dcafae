//! COMMAND DOCS against the real parser: for every public command of the module, every form
//! its documented syntax allows (each optional argument left out and given, each repeated one
//! once and twice, each choice; tokens as documented and in lowercase) is sent over the wire
//! and must be answered without an error; its arity must be the documented syntax's; fewer
//! arguments than documented are an arity error and an argument the docs do not show is
//! refused. LEASE.APPLY, which clients cannot send, is checked against its parser in
//! `src/table.rs`.

use redis_lease_testkit::prelude::*;

/// One documented argument.
#[derive(Clone, Debug)]
struct DocArg {
    name: String,
    kind: String,
    token: Option<String>,
    optional: bool,
    multiple: bool,
    subs: Vec<DocArg>,
}

fn text_of(r: &Resp) -> String {
    String::from_utf8_lossy(r.bytes()).into_owned()
}

fn parse_arg(r: &Resp) -> DocArg {
    let flags: Vec<String> = r
        .get("flags")
        .map(|f| f.array().iter().map(text_of).collect())
        .unwrap_or_default();
    DocArg {
        name: text_of(r.get("name").expect("name")),
        kind: text_of(r.get("type").expect("type")),
        token: r.get("token").map(text_of),
        optional: flags.iter().any(|f| f == "optional"),
        multiple: flags.iter().any(|f| f == "multiple"),
        subs: r
            .get("arguments")
            .map(|a| a.array().iter().map(parse_arg).collect())
            .unwrap_or_default(),
    }
}

/// One word of a form: a token, or a value to fill in (by the argument's name and type).
#[derive(Clone, Debug)]
enum Word {
    Token(String),
    Value {
        name: String,
        kind: String,
        token: Option<String>,
    },
}

fn forms(args: &[DocArg]) -> Vec<Vec<Word>> {
    let mut out = vec![Vec::new()];
    for a in args {
        let once = forms_once(a);
        let mut choices = once.clone();
        if a.multiple {
            choices.extend(once.iter().map(|x| [x.clone(), x.clone()].concat()));
        }
        if a.optional {
            choices.push(Vec::new());
        }
        out = out
            .iter()
            .flat_map(|head| {
                choices
                    .iter()
                    .map(move |c| [head.clone(), c.clone()].concat())
            })
            .collect();
    }
    out
}

fn forms_once(a: &DocArg) -> Vec<Vec<Word>> {
    let token: Vec<Word> = a.token.iter().map(|t| Word::Token(t.clone())).collect();
    let values = match a.kind.as_str() {
        "pure-token" => return vec![token],
        "oneof" => a
            .subs
            .iter()
            .flat_map(|s| forms(std::slice::from_ref(s)))
            .collect(),
        "block" => forms(&a.subs),
        _ => vec![vec![Word::Value {
            name: a.name.clone(),
            kind: a.kind.clone(),
            token: a.token.clone(),
        }]],
    };
    values
        .into_iter()
        .map(|v| [token.clone(), v].concat())
        .collect()
}

/// The arity the docs imply (as Redis counts it, with the name).
fn arity(args: &[DocArg]) -> i64 {
    fn span(args: &[DocArg]) -> (i64, bool) {
        let (mut n, mut fixed) = (0, true);
        for a in args {
            fixed &= !(a.optional || a.multiple);
            if !a.optional {
                let (m, f) = span_one(a);
                n += m;
                fixed &= f;
            }
        }
        (n, fixed)
    }
    fn span_one(a: &DocArg) -> (i64, bool) {
        let word = i64::from(a.token.is_some());
        match a.kind.as_str() {
            "pure-token" => (1, true),
            "block" => {
                let (m, f) = span(&a.subs);
                (word + m, f)
            }
            "oneof" => {
                let spans: Vec<(i64, bool)> = a.subs.iter().map(span_one).collect();
                let least = spans.iter().map(|s| s.0).min().unwrap_or(0);
                let fixed = spans.iter().all(|s| s.1 && s.0 == least);
                (word + least, fixed)
            }
            _ => (word + 1, true),
        }
    }
    let (n, fixed) = span(args);
    if fixed {
        n + 1
    } else {
        -(n + 1)
    }
}

/// A form with values: keys unique to the form (`n`), `numkeys` their count, `token` a live
/// write token on the form's first key (taken here), LEASE.EXEC's `command` one that takes
/// as many arguments as the form gives it. `lower` writes tokens in lowercase.
fn fill(c: &mut Sock, name: &str, form: &[Word], n: usize, lower: bool) -> Vec<String> {
    let keys = form
        .iter()
        .filter(|w| matches!(w, Word::Value { kind, .. } if kind == "key"))
        .count();
    let inner_args = form
        .iter()
        .filter(|w| matches!(w, Word::Value { name, .. } if name == "arg"))
        .count();
    let mut k = 0;
    let mut out = vec![name.to_string()];
    for w in form {
        out.push(match w {
            Word::Token(t) if lower => t.to_lowercase(),
            Word::Token(t) => t.clone(),
            Word::Value { kind, .. } if kind == "key" => {
                k += 1;
                format!("docs:{n}:{k}")
            }
            // A cap on a hold must not be below its ttl.
            Word::Value { token: Some(t), .. } if t.eq_ignore_ascii_case("MAXHOLD") => {
                "60000".into()
            }
            Word::Value { name, .. } => match name.as_str() {
                "numkeys" => keys.to_string(),
                "ttl" => "10000".into(),
                "ms" => "10".into(),
                "limit" => "5".into(),
                "owner" | "candidate" => "o".into(),
                "token" => {
                    let t = c.cmd(&["RWLOCK.WLOCK", &format!("docs:{n}:1"), "exec", "10000"]);
                    t.int().to_string()
                }
                "command" if inner_args == 0 => "PING".into(),
                "command" => "TOUCH".into(),
                "arg" => format!("docs:{n}:arg"),
                _ => "1".into(),
            },
        });
    }
    out
}

fn public_commands(c: &mut Sock) -> Vec<String> {
    let mut names: Vec<String> = c
        .cmd(&["COMMAND", "LIST", "FILTERBY", "MODULE", "lease"])
        .array()
        .iter()
        .map(|n| text_of(n).to_lowercase())
        .filter(|n| n != "lease.apply" && n != "lease.fault")
        .collect();
    names.sort();
    names
}

#[test]
fn every_documented_form_of_every_command_parses() {
    let s = Server::start();
    let mut c = Sock::connect(s.port);
    let names = public_commands(&mut c);
    assert!(names.len() >= 14, "{names:?}");
    let mut n = 0;
    let mut sent = 0;
    for name in &names {
        let docs = c.cmd(&["COMMAND", "DOCS", name]);
        let doc = &docs.array()[1];
        let args: Vec<DocArg> = doc
            .get("arguments")
            .unwrap_or_else(|| panic!("{name}: COMMAND DOCS shows no arguments: {doc:?}"))
            .array()
            .iter()
            .map(parse_arg)
            .collect();
        // The key comes first, or a key count and then the keys (RWLOCK.MLOCK and its kin).
        let key_first = match args.as_slice() {
            [a, ..] if a.kind == "key" => true,
            [a, b, ..] => a.name == "numkeys" && b.kind == "key" && b.multiple,
            _ => false,
        };
        assert!(key_first, "{name}: the key comes first: {args:?}");
        let info = c.cmd(&["COMMAND", "INFO", name]);
        let documented = arity(&args);
        assert_eq!(
            info.array()[0].array()[1].int(),
            documented,
            "{name}: COMMAND INFO's arity is the documented syntax's"
        );
        let all = forms(&args);
        assert!(!all.is_empty());
        for form in &all {
            for lower in [false, true] {
                n += 1;
                let cmd = fill(&mut c, name, form, n, lower);
                let refs: Vec<&str> = cmd.iter().map(String::as_str).collect();
                let r = c.cmd(&refs);
                sent += 1;
                assert!(
                    !matches!(r, Resp::Error(_)),
                    "{name}: the documented form {refs:?} was refused: {r:?}"
                );
                // Whatever the docs do not show is refused (unless the last argument takes
                // any number, as LEASE.EXEC's command's do).
                if !args.last().is_some_and(|a| a.multiple) {
                    n += 1;
                    let mut extra = fill(&mut c, name, form, n, lower);
                    extra.push("BOGUS".into());
                    let refs: Vec<&str> = extra.iter().map(String::as_str).collect();
                    let r = c.cmd(&refs);
                    assert!(
                        matches!(&r, Resp::Error(e) if e.starts_with("ERR")),
                        "{name}: {refs:?} (not documented) was accepted: {r:?}"
                    );
                }
            }
        }
        // One argument short of the fewest documented is an arity error.
        n += 1;
        let shortest = all.iter().min_by_key(|f| f.len()).unwrap();
        let mut short = fill(&mut c, name, shortest, n, false);
        short.pop();
        let refs: Vec<&str> = short.iter().map(String::as_str).collect();
        let r = c.cmd(&refs);
        assert!(
            matches!(&r, Resp::Error(e) if e.contains("wrong number of arguments")),
            "{name}: {refs:?}: {r:?}"
        );
    }
    // Every option of every command at least once, in both spellings.
    assert!(sent >= 2 * 20, "{sent} forms sent");
}
