//! Crafted RESTORE payloads: a real `DUMP` with some 64-bit field replaced, resealed with the
//! checksum Redis checks (CRC-64/Jones over the body and the RDB version), so the payload
//! reaches the module's loader instead of being refused as corrupt by Redis itself.

/// Redis's CRC-64 (Jones polynomial 0xad93d23594c935a9, reflected, init 0, no final xor),
/// bit by bit: payloads are small.
pub fn crc64(bytes: &[u8]) -> u64 {
    // The Jones polynomial, bit-reversed for the reflected algorithm.
    const POLY: u64 = 0x95ac_9329_ac4b_c9b5;
    let mut crc = 0u64;
    for &b in bytes {
        crc ^= u64::from(b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ POLY
            } else {
                crc >> 1
            };
        }
    }
    crc
}

/// Whether a DUMP payload's trailing checksum matches its body.
pub fn checksum_ok(payload: &[u8]) -> bool {
    if payload.len() < 10 {
        return false;
    }
    let (body, crc) = payload.split_at(payload.len() - 8);
    crc64(body) == u64::from_le_bytes(crc.try_into().unwrap())
}

/// A module's `RM_SaveUnsigned(v)` for v >= 2^32 in a DUMP: the unsigned opcode (2), the
/// 64-bit length marker (0x81), then v big-endian.
fn encoded_u64(v: u64) -> Vec<u8> {
    let mut out = vec![0x02, 0x81];
    out.extend_from_slice(&v.to_be_bytes());
    out
}

/// Where `v` (>= 2^32) is stored in a DUMP payload's body, as byte offsets of its encoding.
pub fn u64_fields(payload: &[u8], v: u64) -> Vec<usize> {
    assert!(v >= 1 << 32, "only 64-bit encoded values can be found: {v}");
    let pat = encoded_u64(v);
    let body = &payload[..payload.len().saturating_sub(8)];
    body.windows(pat.len())
        .enumerate()
        .filter(|(_, w)| *w == pat.as_slice())
        .map(|(i, _)| i)
        .collect()
}

/// `payload` with the 64-bit fields at `offsets` (from `u64_fields`) set to `to`, resealed.
pub fn patch_u64(payload: &[u8], offsets: &[usize], to: u64) -> Vec<u8> {
    assert!(
        to >= 1 << 32,
        "the 64-bit encoding needs a value >= 2^32: {to}"
    );
    let mut body = payload[..payload.len() - 8].to_vec();
    for &at in offsets {
        body[at + 2..at + 10].copy_from_slice(&to.to_be_bytes());
    }
    let crc = crc64(&body);
    body.extend_from_slice(&crc.to_le_bytes());
    body
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc64_matches_redis_check_value() {
        // Redis's crc64.c self-test: crc64(0, "123456789") == 0xe9c6d914c4b8d9ca.
        assert_eq!(crc64(b"123456789"), 0xe9c6_d914_c4b8_d9ca);
    }

    #[test]
    fn a_patched_payload_is_resealed() {
        let v = 0x0006_1234_5678_9abc_u64;
        let mut body = vec![7u8, 1, 2];
        body.extend(encoded_u64(v));
        body.extend([0, 10, 0]);
        let crc = crc64(&body);
        let mut payload = body.clone();
        payload.extend_from_slice(&crc.to_le_bytes());
        assert!(checksum_ok(&payload));
        let at = u64_fields(&payload, v);
        assert_eq!(at, vec![3]);
        let p = patch_u64(&payload, &at, u64::MAX >> 1);
        assert!(checksum_ok(&p));
        assert_eq!(u64_fields(&p, u64::MAX >> 1), vec![3]);
        assert!(u64_fields(&p, v).is_empty());
        assert_eq!(p.len(), payload.len());
    }
}
