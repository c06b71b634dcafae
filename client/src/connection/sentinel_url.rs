//! `redis+sentinel://` URLs (redis-rs parses none of its own).
//!
//! `redis+sentinel://[user[:password]@]host[:port][,host[:port]...]/service[/db][?sentinel_username=u&sentinel_password=p]`
//!
//! The hosts are the sentinels (port 26379 by default); `service` is the name they monitor
//! (`sentinel monitor <service> ...`); `user`, `password` and `db` are for the master and its
//! replicas. The sentinels' own credentials, if they need any, are the query parameters.
//! Percent-encoding is decoded in every part.

use crate::error::InvalidArgument;

/// The default Sentinel port.
const SENTINEL_PORT: u16 = 26379;

/// The parts of a `redis+sentinel://` URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SentinelUrl {
    pub sentinels: Vec<(String, u16)>,
    pub service: String,
    pub db: i64,
    pub username: Option<String>,
    pub password: Option<String>,
    pub sentinel_username: Option<String>,
    pub sentinel_password: Option<String>,
}

pub(crate) const SCHEME: &str = "redis+sentinel://";

/// Whether `url` names a Sentinel deployment.
pub(crate) fn is_sentinel(url: &str) -> bool {
    url.get(..SCHEME.len())
        .is_some_and(|s| s.eq_ignore_ascii_case(SCHEME))
        || url
            .get(..SCHEME.len() + 1)
            .is_some_and(|s| s.eq_ignore_ascii_case("rediss+sentinel://"))
}

/// The URL with any password replaced by `***` (for error messages).
fn redacted(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => {
            let userinfo = &url[s + 3..at];
            match userinfo.find(':') {
                Some(c) => format!("{}{}:***{}", &url[..s + 3], &userinfo[..c], &url[at..]),
                None => url.to_string(),
            }
        }
        _ => url.to_string(),
    }
}

pub(crate) fn parse(url: &str) -> Result<SentinelUrl, InvalidArgument> {
    let bad = |reason: &str| InvalidArgument::Url {
        url: redacted(url),
        reason: reason.to_string(),
    };
    if !is_sentinel(url) {
        return Err(bad("expected redis+sentinel://"));
    }
    if url.to_ascii_lowercase().starts_with("rediss+") {
        return Err(bad("TLS (rediss+sentinel) is not supported by this build"));
    }
    let rest = &url[SCHEME.len()..];
    let (rest, query) = match rest.split_once('?') {
        Some((r, q)) => (r, Some(q)),
        None => (rest, None),
    };
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    let (userinfo, hosts) = match authority.rfind('@') {
        Some(at) => (Some(&authority[..at]), &authority[at + 1..]),
        None => (None, authority),
    };
    let (username, password) = match userinfo {
        None => (None, None),
        Some(u) => {
            let (user, pass) = match u.split_once(':') {
                Some((user, pass)) => (user, Some(pass)),
                None => (u, None),
            };
            let user = decode(user).map_err(|_| bad("bad percent-encoding in the user"))?;
            let pass = pass
                .map(decode)
                .transpose()
                .map_err(|_| bad("bad percent-encoding in the password"))?;
            ((!user.is_empty()).then_some(user), pass)
        }
    };
    let mut sentinels = Vec::new();
    for h in hosts.split(',') {
        sentinels.push(host_port(h).ok_or_else(|| bad("expected host[:port] of each sentinel"))?);
    }
    let mut parts = path.split('/');
    let service = decode(parts.next().unwrap_or(""))
        .map_err(|_| bad("bad percent-encoding in the service name"))?;
    if service.is_empty() {
        return Err(bad("the service name (the path) is missing"));
    }
    let db = match parts.next() {
        None | Some("") => 0,
        Some(d) => d.parse().map_err(|_| bad("the db must be a number"))?,
    };
    if parts.any(|p| !p.is_empty()) {
        return Err(bad("expected /service[/db]"));
    }
    let mut sentinel_username = None;
    let mut sentinel_password = None;
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let v = decode(v).map_err(|_| bad("bad percent-encoding in a parameter"))?;
        match k {
            "sentinel_username" => sentinel_username = Some(v),
            "sentinel_password" => sentinel_password = Some(v),
            _ => return Err(bad(&format!("unknown parameter {k:?}"))),
        }
    }
    Ok(SentinelUrl {
        sentinels,
        service,
        db,
        username,
        password,
        sentinel_username,
        sentinel_password,
    })
}

fn host_port(s: &str) -> Option<(String, u16)> {
    if s.is_empty() {
        return None;
    }
    // [v6]:port, [v6], host:port, host
    let (host, port) = if let Some(r) = s.strip_prefix('[') {
        let (h, after) = r.split_once(']')?;
        let port = match after {
            "" => None,
            p => Some(p.strip_prefix(':')?),
        };
        (h, port)
    } else {
        match s.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (s, None),
        }
    };
    if host.is_empty() {
        return None;
    }
    let port = match port {
        None => SENTINEL_PORT,
        Some(p) => p.parse().ok().filter(|p| *p != 0)?,
    };
    Some((host.to_string(), port))
}

fn decode(s: &str) -> Result<String, ()> {
    percent_encoding::percent_decode_str(s)
        .decode_utf8()
        .map(|c| c.into_owned())
        .map_err(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sentinels_service_and_db() {
        let u = parse("redis+sentinel://10.0.0.1:26380,10.0.0.2,[::1]:5000/mymaster/3").unwrap();
        assert_eq!(
            u.sentinels,
            vec![
                ("10.0.0.1".to_string(), 26380),
                ("10.0.0.2".to_string(), 26379),
                ("::1".to_string(), 5000)
            ]
        );
        assert_eq!((u.service.as_str(), u.db), ("mymaster", 3));
        assert_eq!((u.username, u.password), (None, None));
    }

    #[test]
    fn credentials_for_the_data_nodes_and_the_sentinels() {
        let u = parse(
            "redis+sentinel://app:p%40ss%3Aword@h:1/svc?sentinel_username=s&sentinel_password=t%26u",
        )
        .unwrap();
        assert_eq!(u.username.as_deref(), Some("app"));
        assert_eq!(u.password.as_deref(), Some("p@ss:word"));
        assert_eq!(u.sentinel_username.as_deref(), Some("s"));
        assert_eq!(u.sentinel_password.as_deref(), Some("t&u"));
        // A password alone (the default user).
        let u = parse("redis+sentinel://:secret@h/svc").unwrap();
        assert_eq!((u.username, u.password.as_deref()), (None, Some("secret")));
        assert_eq!(u.db, 0);
    }

    #[test]
    fn what_is_refused() {
        for bad in [
            "redis://h/svc",
            "redis+sentinel://h",
            "redis+sentinel://h/",
            "redis+sentinel:///svc",
            "redis+sentinel://h:x/svc",
            "redis+sentinel://h:0/svc",
            "redis+sentinel://h,/svc",
            "redis+sentinel://h/svc/notadb",
            "redis+sentinel://h/svc/1/2",
            "redis+sentinel://h/svc?timeout=1",
            "rediss+sentinel://h/svc",
        ] {
            assert!(parse(bad).is_err(), "{bad} accepted");
        }
        assert!(is_sentinel("REDIS+SENTINEL://h/s"));
        assert!(!is_sentinel("redis://h/"));
    }

    #[test]
    fn errors_never_show_the_password() {
        let e = parse("redis+sentinel://u:hunter2@h/svc/x").unwrap_err();
        let text = e.to_string();
        assert!(!text.contains("hunter2"), "{text}");
        assert!(text.contains("u:***@h"), "{text}");
    }
}
