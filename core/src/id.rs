use std::borrow::Cow;
use std::cmp::Ordering;
use std::fmt;
use std::ops::Deref;

use uuid::Uuid;

/// Ids up to this many bytes are stored inline.
const INLINE: usize = 22;

/// The length of a UUID in text (`xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`).
const UUID_TEXT: usize = 36;

/// An owner or candidate id: bytes, stored in 24 bytes without an allocation for the ids
/// clients actually use: inline up to 22 bytes, as its 16 bytes when it is a UUID in
/// canonical text (lowercase, hyphenated: what both clients generate), on the heap
/// otherwise. Any other spelling of a UUID (uppercase, braces) stays bytes, so an id always
/// gives back exactly the bytes it was made from ([`Id::bytes`]).
///
/// The same bytes always make the same representation, so equality and hashing are those of
/// the representation; the order is the order of the bytes.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Id(Repr);

#[derive(Clone, PartialEq, Eq, Hash)]
enum Repr {
    /// `buf[len..]` is zero.
    Inline {
        len: u8,
        buf: [u8; INLINE],
    },
    Uuid([u8; 16]),
    /// More than `INLINE` bytes, and not a canonical UUID.
    Heap(Box<[u8]>),
}

/// The 16 bytes of `b` if it is a UUID in canonical text: 36 bytes, hyphens at 8, 13, 18
/// and 23, lowercase hex digits elsewhere (any version and variant).
///
/// Every request parses its owner, so this is written for the machine: the digits are
/// gathered with a few wide copies and decoded branch-free in a loop the compiler turns into
/// vector code (about 80 instructions a UUID; `Uuid::try_parse_ascii`, which also takes
/// capitals and other forms, plus a check for capitals took about 160). The tests hold it
/// to the uuid crate's own parsing and formatting.
fn canonical_uuid(b: &[u8]) -> Option<[u8; 16]> {
    let b: &[u8; UUID_TEXT] = b.try_into().ok()?;
    if [b[8], b[13], b[18], b[23]] != *b"----" {
        return None;
    }
    let mut hex = [0u8; 32];
    hex[..8].copy_from_slice(&b[..8]);
    hex[8..12].copy_from_slice(&b[9..13]);
    hex[12..16].copy_from_slice(&b[14..18]);
    hex[16..20].copy_from_slice(&b[19..23]);
    hex[20..].copy_from_slice(&b[24..]);
    let mut nibbles = [0u8; 32];
    let mut bad = 0u8;
    for (n, c) in nibbles.iter_mut().zip(hex) {
        let digit = c.wrapping_sub(b'0');
        let letter = c.wrapping_sub(b'a');
        let (is_digit, is_letter) = (digit < 10, letter < 6);
        *n = if is_digit {
            digit
        } else {
            letter.wrapping_add(10)
        };
        bad |= u8::from(!(is_digit | is_letter));
    }
    if bad != 0 {
        return None;
    }
    let mut out = [0u8; 16];
    for (o, pair) in out.iter_mut().zip(nibbles.chunks_exact(2)) {
        *o = (pair[0] << 4) | pair[1];
    }
    Some(out)
}

impl Id {
    pub fn new(bytes: &[u8]) -> Id {
        if bytes.len() <= INLINE {
            Id::inline(bytes)
        } else if let Some(u) = canonical_uuid(bytes) {
            Id(Repr::Uuid(u))
        } else {
            Id(Repr::Heap(bytes.into()))
        }
    }

    fn inline(bytes: &[u8]) -> Id {
        let mut buf = [0u8; INLINE];
        buf[..bytes.len()].copy_from_slice(bytes);
        Id(Repr::Inline {
            len: bytes.len() as u8,
            buf,
        })
    }

    /// The id's bytes: borrowed, or (for a UUID) its text on the stack.
    pub fn bytes(&self) -> IdBytes<'_> {
        IdBytes(match &self.0 {
            Repr::Inline { len, buf } => Text::Borrowed(&buf[..usize::from(*len)]),
            Repr::Heap(b) => Text::Borrowed(b),
            Repr::Uuid(u) => {
                let mut text = [0u8; UUID_TEXT];
                Uuid::from_bytes(*u).hyphenated().encode_lower(&mut text);
                Text::Uuid(text)
            }
        })
    }

    /// The id's bytes in a new vector.
    pub fn to_vec(&self) -> Vec<u8> {
        self.bytes().to_vec()
    }

    /// How many bytes the id has.
    pub fn len(&self) -> usize {
        match &self.0 {
            Repr::Inline { len, .. } => usize::from(*len),
            Repr::Uuid(_) => UUID_TEXT,
            Repr::Heap(b) => b.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Heap bytes this id owns (0 unless it is on the heap).
    pub fn heap_len(&self) -> usize {
        match &self.0 {
            Repr::Inline { .. } | Repr::Uuid(_) => 0,
            Repr::Heap(b) => b.len(),
        }
    }
}

/// An id's bytes (see [`Id::bytes`]); derefs to `[u8]`.
pub struct IdBytes<'a>(Text<'a>);

enum Text<'a> {
    Borrowed(&'a [u8]),
    Uuid([u8; UUID_TEXT]),
}

impl Deref for IdBytes<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match &self.0 {
            Text::Borrowed(b) => b,
            Text::Uuid(t) => t,
        }
    }
}

impl fmt::Debug for IdBytes<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", &**self)
    }
}

impl From<&[u8]> for Id {
    fn from(b: &[u8]) -> Id {
        Id::new(b)
    }
}

impl<const N: usize> From<&[u8; N]> for Id {
    fn from(b: &[u8; N]) -> Id {
        Id::new(b)
    }
}

impl From<&Vec<u8>> for Id {
    fn from(v: &Vec<u8>) -> Id {
        Id::new(v)
    }
}

impl From<Vec<u8>> for Id {
    fn from(v: Vec<u8>) -> Id {
        Id::from(v.into_boxed_slice())
    }
}

impl From<Box<[u8]>> for Id {
    fn from(b: Box<[u8]>) -> Id {
        if b.len() <= INLINE || b.len() == UUID_TEXT {
            // Inline, or maybe a UUID: the same rule as for borrowed bytes.
            Id::new(&b)
        } else {
            Id(Repr::Heap(b))
        }
    }
}

impl From<&str> for Id {
    fn from(s: &str) -> Id {
        Id::new(s.as_bytes())
    }
}

impl PartialEq<[u8]> for Id {
    fn eq(&self, other: &[u8]) -> bool {
        match &self.0 {
            Repr::Inline { len, buf } => &buf[..usize::from(*len)] == other,
            Repr::Heap(b) => **b == *other,
            Repr::Uuid(u) => canonical_uuid(other).is_some_and(|o| o == *u),
        }
    }
}

impl PartialEq<&[u8]> for Id {
    fn eq(&self, other: &&[u8]) -> bool {
        *self == **other
    }
}

impl<const N: usize> PartialEq<[u8; N]> for Id {
    fn eq(&self, other: &[u8; N]) -> bool {
        *self == other[..]
    }
}

impl<const N: usize> PartialEq<&[u8; N]> for Id {
    fn eq(&self, other: &&[u8; N]) -> bool {
        *self == other[..]
    }
}

impl PartialEq<Vec<u8>> for Id {
    fn eq(&self, other: &Vec<u8>) -> bool {
        *self == other[..]
    }
}

impl PartialEq<str> for Id {
    fn eq(&self, other: &str) -> bool {
        *self == *other.as_bytes()
    }
}

impl PartialEq<&str> for Id {
    fn eq(&self, other: &&str) -> bool {
        *self == *other.as_bytes()
    }
}

impl PartialOrd for Id {
    fn partial_cmp(&self, other: &Id) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Id {
    /// The order of the bytes. Two UUIDs compare by their 16 bytes: lowercase hex digits
    /// sort as the nibbles they spell, and the hyphens sit at the same places.
    fn cmp(&self, other: &Id) -> Ordering {
        match (&self.0, &other.0) {
            (Repr::Uuid(a), Repr::Uuid(b)) => a.cmp(b),
            _ => (*self.bytes()).cmp(&*other.bytes()),
        }
    }
}

impl fmt::Debug for Id {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", &*self.bytes())
    }
}

/// An owner as the core's operations take it: an [`Id`] (what the shell passes, made once
/// from the request's argument), or bytes (made into an id here, for tests and tools).
pub trait AsId {
    fn as_id(&self) -> Cow<'_, Id>;
}

impl AsId for Id {
    fn as_id(&self) -> Cow<'_, Id> {
        Cow::Borrowed(self)
    }
}

impl AsId for [u8] {
    fn as_id(&self) -> Cow<'_, Id> {
        Cow::Owned(Id::new(self))
    }
}

impl<const N: usize> AsId for [u8; N] {
    fn as_id(&self) -> Cow<'_, Id> {
        Cow::Owned(Id::new(self))
    }
}

impl AsId for Vec<u8> {
    fn as_id(&self) -> Cow<'_, Id> {
        Cow::Owned(Id::new(self))
    }
}

impl AsId for str {
    fn as_id(&self) -> Cow<'_, Id> {
        Cow::Owned(Id::new(self.as_bytes()))
    }
}

impl<T: AsId + ?Sized> AsId for &T {
    fn as_id(&self) -> Cow<'_, Id> {
        (**self).as_id()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::hash_map::DefaultHasher;
    use std::hash::{Hash, Hasher};

    use proptest::prelude::*;

    use super::*;

    const UUID: &str = "0f4a2c1e-8d3b-4e5f-9a6b-7c8d9e0f1a2b";

    fn is_uuid(id: &Id) -> bool {
        matches!(id.0, Repr::Uuid(_))
    }

    fn is_inline(id: &Id) -> bool {
        matches!(id.0, Repr::Inline { .. })
    }

    fn hash(id: &Id) -> u64 {
        let mut h = DefaultHasher::new();
        id.hash(&mut h);
        h.finish()
    }

    /// Every way to make an id from `b` gives the same id, with exactly `b`'s bytes.
    fn round_trip(b: &[u8]) -> Id {
        let id = Id::new(b);
        assert_eq!(&*id.bytes(), b);
        assert_eq!(id.to_vec(), b);
        assert_eq!(id.len(), b.len());
        assert!(id == *b, "{id:?} == its bytes");
        for other in [
            Id::from(b),
            Id::from(b.to_vec()),
            Id::from(b.to_vec().into_boxed_slice()),
            b.as_id().into_owned(),
        ] {
            assert!(other == id && hash(&other) == hash(&id));
            assert_eq!(other.cmp(&id), Ordering::Equal);
        }
        id
    }

    #[test]
    fn an_id_is_24_bytes_and_a_lock_72() {
        assert_eq!(std::mem::size_of::<Id>(), 24);
        // A capped hold goes to the holders' table, so the cap costs a one-holder lock nothing.
        assert_eq!(std::mem::size_of::<crate::Lock>(), 72);
    }

    #[test]
    fn each_representation_gives_its_bytes_back() {
        assert!(is_inline(&round_trip(b"")));
        assert!(is_inline(&round_trip(b"a")));
        assert!(is_inline(&round_trip(&[0xff; INLINE])));
        let u = round_trip(UUID.as_bytes());
        assert!(is_uuid(&u) && u.heap_len() == 0);
        // Every version and variant: only the spelling counts.
        for t in [
            "00000000-0000-0000-0000-000000000000",
            "ffffffff-ffff-ffff-ffff-ffffffffffff",
            "01234567-89ab-cdef-0123-456789abcdef",
        ] {
            assert!(is_uuid(&round_trip(t.as_bytes())), "{t}");
        }
        let long = round_trip(&[7u8; 300]);
        assert_eq!(long.heap_len(), 300);
        assert!(round_trip(&[0u8; INLINE + 1]).heap_len() == INLINE + 1);
    }

    #[test]
    fn near_uuids_stay_bytes() {
        let near = [
            UUID.to_uppercase(),
            "0F4a2c1e-8d3b-4e5f-9a6b-7c8d9e0f1a2b".into(),
            "0f4a2c1e-8d3b-4e5f-9a6b-7c8d9e0f1a2B".into(),
            format!("{{{UUID}}}"),
            format!("urn:uuid:{UUID}"),
            UUID.replace('-', ""),
            UUID[..35].into(),
            format!("{UUID}0"),
            "0f4a2c1e8-d3b-4e5f-9a6b-7c8d9e0f1a2b".into(),
            "0f4a2c1e-8d3b-4e5f-9a6b_7c8d9e0f1a2b".into(),
            "0f4a2c1e-8d3b-4e5f-9a6b-7c8d9e0f1a2g".into(),
            "0f4a2c1e-8d3b-4e5f-9a6b-7c8d9e0f1a2 ".into(),
            "0f4a2c1e-8d3b-4e5f-9a6b-7c8d9e0f1a-2".into(),
            "+f4a2c1e-8d3b-4e5f-9a6b-7c8d9e0f1a2b".into(),
            "0f4a2c1e-8d3b-4e5f-9a6b-7c8d9e0f1a2\u{7f}".into(),
        ];
        for t in &near {
            let id = round_trip(t.as_bytes());
            assert!(!is_uuid(&id), "{t}");
            assert!(id != Id::new(UUID.as_bytes()) || t == UUID);
        }
        let mut bad = UUID.as_bytes().to_vec();
        for i in 0..UUID_TEXT {
            for c in 0..=255u8 {
                bad[i] = c;
                let id = round_trip(&bad);
                let hex = matches!(c, b'0'..=b'9' | b'a'..=b'f');
                let dash = matches!(i, 8 | 13 | 18 | 23);
                assert_eq!(is_uuid(&id), if dash { c == b'-' } else { hex }, "{i} {c}");
            }
            bad[i] = UUID.as_bytes()[i];
        }
    }

    /// What the uuid crate says: it parses `b`, and its lowercase text of the result is `b`.
    fn uuid_says(b: &[u8]) -> Option<[u8; 16]> {
        let u = Uuid::try_parse_ascii(b).ok()?;
        let mut text = [0u8; UUID_TEXT];
        let text = u.hyphenated().encode_lower(&mut text);
        (text.as_bytes() == b).then(|| u.into_bytes())
    }

    /// Every one-byte change of a UUID's text, and of its text in capitals, at every place.
    #[test]
    fn the_parser_agrees_with_the_uuid_crate_on_every_one_byte_change() {
        for t in [UUID.to_string(), UUID.to_uppercase(), "0".repeat(36)] {
            let mut b = t.clone().into_bytes();
            for i in 0..UUID_TEXT {
                for c in 0..=255u8 {
                    b[i] = c;
                    assert_eq!(canonical_uuid(&b), uuid_says(&b), "{t} [{i}] = {c}");
                }
                b[i] = t.as_bytes()[i];
            }
        }
    }

    #[test]
    fn a_uuid_matches_only_its_own_text() {
        let u = Id::new(UUID.as_bytes());
        assert!(u == *UUID.as_bytes() && u == UUID);
        assert!(u != *UUID.to_uppercase().as_bytes());
        assert!(u != *"0f4a2c1e-8d3b-4e5f-9a6b-7c8d9e0f1a2c".as_bytes());
        assert!(u != *b"a".as_slice());
        assert!(Id::new(UUID.to_uppercase().as_bytes()) != u);
    }

    /// uuid's own text for 16 bytes, and bytes that are almost that text.
    fn near_uuid() -> impl Strategy<Value = Vec<u8>> {
        (any::<[u8; 16]>(), any::<bool>(), 0..UUID_TEXT, any::<u8>()).prop_map(
            |(raw, spoil, at, with)| {
                let mut t = Uuid::from_bytes(raw).hyphenated().to_string().into_bytes();
                if spoil {
                    t[at] = with;
                }
                t
            },
        )
    }

    fn any_id() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..30),
            proptest::collection::vec(any::<u8>(), 30..80),
            near_uuid(),
            near_uuid().prop_map(|t| t.to_ascii_uppercase()),
            near_uuid().prop_map(|mut t| {
                t.pop();
                t
            }),
            near_uuid().prop_map(|mut t| {
                t.push(b'0');
                t
            }),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4000))]

        #[test]
        fn every_id_round_trips(b in any_id()) {
            let id = round_trip(&b);
            prop_assert_eq!(canonical_uuid(&b), uuid_says(&b));
            prop_assert_eq!(is_uuid(&id), uuid_says(&b).is_some());
        }

        /// The uuid crate's text of any 16 bytes parses back to them.
        #[test]
        fn every_uuid_text_parses_back(raw in any::<[u8; 16]>()) {
            let text = Uuid::from_bytes(raw).hyphenated().to_string();
            prop_assert_eq!(canonical_uuid(text.as_bytes()), Some(raw));
            let id = Id::new(text.as_bytes());
            prop_assert_eq!(&*id.bytes(), text.as_bytes());
        }

        #[test]
        fn ids_order_and_match_as_their_bytes(a in any_id(), b in any_id()) {
            let (x, y) = (Id::new(&a), Id::new(&b));
            prop_assert_eq!(x.cmp(&y), a.cmp(&b));
            prop_assert_eq!(x == y, a == b);
            prop_assert_eq!(x == *b.as_slice(), a == b);
            if x == y {
                prop_assert_eq!(hash(&x), hash(&y));
            }
        }

        /// A UUID against its prefixes, its extensions and its one-byte neighbours.
        #[test]
        fn a_uuid_orders_as_its_text_among_its_neighbours(
            t in near_uuid(),
            cut in 0..=UUID_TEXT,
            at in 0..UUID_TEXT,
            with in any::<u8>(),
        ) {
            let mut other = t.clone();
            other[at] = with;
            let longer = [t.as_slice(), b"-"].concat();
            for b in [&t[..cut], &other[..], &longer[..]] {
                let (x, y) = (Id::new(&t), Id::new(b));
                prop_assert_eq!(x.cmp(&y), t.as_slice().cmp(b));
                prop_assert_eq!(y.cmp(&x), b.cmp(t.as_slice()));
                prop_assert_eq!(x == y, t.as_slice() == b);
            }
        }
    }
}
