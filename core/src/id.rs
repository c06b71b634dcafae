use std::borrow::Borrow;
use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::ops::Deref;

/// Ids up to this many bytes are stored inline (a UUID in text is 36).
const INLINE: usize = 38;

/// An owner or candidate id: bytes, stored inline when short (no allocation for the ids
/// clients actually use), on the heap otherwise. Compares, hashes and orders as its bytes.
#[derive(Clone)]
pub struct Id(Repr);

#[derive(Clone)]
enum Repr {
    Inline { len: u8, buf: [u8; INLINE] },
    Heap(Box<[u8]>),
}

impl Id {
    pub fn new(bytes: &[u8]) -> Id {
        if bytes.len() <= INLINE {
            let mut buf = [0u8; INLINE];
            buf[..bytes.len()].copy_from_slice(bytes);
            Id(Repr::Inline {
                len: bytes.len() as u8,
                buf,
            })
        } else {
            Id(Repr::Heap(bytes.into()))
        }
    }

    pub fn as_bytes(&self) -> &[u8] {
        match &self.0 {
            Repr::Inline { len, buf } => &buf[..usize::from(*len)],
            Repr::Heap(b) => b,
        }
    }

    /// Heap bytes this id owns (0 when inline).
    pub fn heap_len(&self) -> usize {
        match &self.0 {
            Repr::Inline { .. } => 0,
            Repr::Heap(b) => b.len(),
        }
    }
}

impl Deref for Id {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.as_bytes()
    }
}

impl AsRef<[u8]> for Id {
    fn as_ref(&self) -> &[u8] {
        self.as_bytes()
    }
}

impl Borrow<[u8]> for Id {
    fn borrow(&self) -> &[u8] {
        self.as_bytes()
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

impl From<Vec<u8>> for Id {
    fn from(v: Vec<u8>) -> Id {
        if v.len() <= INLINE {
            Id::new(&v)
        } else {
            Id(Repr::Heap(v.into_boxed_slice()))
        }
    }
}

impl From<Box<[u8]>> for Id {
    fn from(b: Box<[u8]>) -> Id {
        if b.len() <= INLINE {
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

impl PartialEq for Id {
    fn eq(&self, other: &Id) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl Eq for Id {}

impl PartialEq<[u8]> for Id {
    fn eq(&self, other: &[u8]) -> bool {
        self.as_bytes() == other
    }
}

impl PartialOrd for Id {
    fn partial_cmp(&self, other: &Id) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Id {
    fn cmp(&self, other: &Id) -> Ordering {
        self.as_bytes().cmp(other.as_bytes())
    }
}

impl Hash for Id {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_bytes().hash(state);
    }
}

impl fmt::Debug for Id {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_ids_are_inline_and_every_id_acts_as_its_bytes() {
        let uuid = Id::from("0f4a2c1e-8d3b-4e5f-9a6b-7c8d9e0f1a2b");
        assert_eq!(uuid.heap_len(), 0);
        let long = Id::new(&[7u8; 300]);
        assert_eq!(long.heap_len(), 300);
        assert_eq!(&*long, &[7u8; 300][..]);
        assert_eq!(Id::from(b"ab".to_vec()), Id::new(b"ab"));
        assert!(Id::new(b"a") < Id::new(b"b") && Id::new(b"") < Id::new(b"\0"));
        assert_eq!(std::mem::size_of::<Id>(), 40);
        let mut m = std::collections::HashMap::new();
        m.insert(Id::new(b"k"), 1);
        assert_eq!(m.get(&b"k"[..]), Some(&1));
    }
}
