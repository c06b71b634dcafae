//! Redis Cluster's hash slot of a key: CRC16 (XMODEM) of the key, or of its hash tag (the part
//! between the first `{` and the next `}`, when not empty), modulo 16384. Pure, as in
//! cluster.c's `keyHashSlot`.

const fn table() -> [u16; 256] {
    let mut t = [0u16; 256];
    let mut i = 0;
    while i < 256 {
        let mut crc = (i as u16) << 8;
        let mut b = 0;
        while b < 8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
            b += 1;
        }
        t[i] = crc;
        i += 1;
    }
    t
}

static TABLE: [u16; 256] = table();

fn crc16(bytes: &[u8]) -> u16 {
    bytes.iter().fold(0u16, |crc, b| {
        (crc << 8) ^ TABLE[(((crc >> 8) as u8) ^ b) as usize]
    })
}

/// The hash slot of `key`.
pub fn of(key: &[u8]) -> u16 {
    let tagged = key.iter().position(|b| *b == b'{').and_then(|open| {
        let rest = &key[open + 1..];
        let close = rest.iter().position(|b| *b == b'}')?;
        (close > 0).then(|| &rest[..close])
    });
    crc16(tagged.unwrap_or(key)) & 16383
}

#[cfg(test)]
mod tests {
    use super::of;

    #[test]
    fn slots_match_redis() {
        // Values from CLUSTER KEYSLOT on a real server.
        assert_eq!(super::crc16(b"123456789"), 0x31c3);
        assert_eq!(of(b"foo"), 12182);
        assert_eq!(of(b"{user1000}.following"), 3443);
        assert_eq!(of(b"{user1000}.followers"), 3443);
        assert_eq!(of(b"foo{}{bar}"), 8363);
        assert_eq!(of(b"{}foo"), 9500);
        assert_eq!(of(b"order:42"), 8691);
        assert_eq!(of(b"{order:42}:data"), 8691);
    }
}
