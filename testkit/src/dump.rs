//! DUMP payloads of module values, decoded and crafted: a payload is the value's RDB type
//! (7, a module value), the module type's 64-bit id, the module's fields (each an opcode and
//! an RDB-encoded unsigned or string), an EOF opcode, then the RDB version (2 bytes, little
//! endian) and a CRC64 (Jones, as Redis's crc64.c; 8 bytes, little endian) of all before it.
//! Tests take a real DUMP, decode it, change fields and encode it again to RESTORE crafted
//! values.

/// RDB type of a module value with opcodes before each field.
pub const RDB_TYPE_MODULE_2: u8 = 7;
const OPCODE_EOF: u64 = 0;
const OPCODE_UINT: u64 = 2;
const OPCODE_STRING: u64 = 5;

/// One field a module saved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Field {
    U64(u64),
    Bytes(Vec<u8>),
}

/// A decoded DUMP payload of a module value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Payload {
    /// The module type's id (its name and encoding version).
    pub module_id: u64,
    pub fields: Vec<Field>,
    /// The RDB version in the footer.
    pub rdb_version: u16,
}

/// Redis's CRC64 (Jones polynomial, reflected, no final xor).
pub fn crc64(data: &[u8]) -> u64 {
    const TABLE: [u64; 256] = {
        // The reflected form of 0xad93d23594c935a9.
        const POLY: u64 = 0x95ac_9329_ac4b_c9b5;
        let mut t = [0u64; 256];
        let mut i = 0;
        while i < 256 {
            let mut c = i as u64;
            let mut k = 0;
            while k < 8 {
                c = if c & 1 == 1 { (c >> 1) ^ POLY } else { c >> 1 };
                k += 1;
            }
            t[i] = c;
            i += 1;
        }
        t
    };
    data.iter().fold(0u64, |crc, &b| {
        TABLE[((crc ^ u64::from(b)) & 0xff) as usize] ^ (crc >> 8)
    })
}

/// An RDB length (or unsigned) as `rdbSaveLen` writes it.
pub fn put_len(out: &mut Vec<u8>, n: u64) {
    if n < 1 << 6 {
        out.push(n as u8);
    } else if n < 1 << 14 {
        out.extend([0x40 | (n >> 8) as u8, n as u8]);
    } else if n <= u64::from(u32::MAX) {
        out.push(0x80);
        out.extend((n as u32).to_be_bytes());
    } else {
        out.push(0x81);
        out.extend(n.to_be_bytes());
    }
}

/// A string as plain length and bytes (never integer-encoded or compressed; loaders accept
/// it for any string).
pub fn put_string(out: &mut Vec<u8>, b: &[u8]) {
    put_len(out, b.len() as u64);
    out.extend_from_slice(b);
}

struct Reader<'a> {
    buf: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], String> {
        let end = self.at.checked_add(n).filter(|e| *e <= self.buf.len());
        let end = end.ok_or_else(|| format!("payload ends at {} (wanted {n} more)", self.at))?;
        let s = &self.buf[self.at..end];
        self.at = end;
        Ok(s)
    }

    fn byte(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }

    /// A length, or (`Err(Ok(kind))`) the kind of a special string encoding.
    fn len_or_special(&mut self) -> Result<Result<u64, u8>, String> {
        let b = self.byte()?;
        Ok(match b >> 6 {
            0 => Ok(u64::from(b & 0x3f)),
            1 => Ok((u64::from(b & 0x3f) << 8) | u64::from(self.byte()?)),
            2 if b == 0x80 => Ok(u64::from(u32::from_be_bytes(
                self.take(4)?.try_into().unwrap(),
            ))),
            2 if b == 0x81 => Ok(u64::from_be_bytes(self.take(8)?.try_into().unwrap())),
            2 => return Err(format!("bad length byte {b:#04x}")),
            _ => Err(b & 0x3f),
        })
    }

    fn len(&mut self) -> Result<u64, String> {
        self.len_or_special()?
            .map_err(|k| format!("a special encoding ({k}) where a length belongs"))
    }

    fn string(&mut self) -> Result<Vec<u8>, String> {
        match self.len_or_special()? {
            Ok(n) => Ok(self.take(n as usize)?.to_vec()),
            Err(0) => Ok((self.byte()? as i8).to_string().into_bytes()),
            Err(1) => {
                let v = i16::from_le_bytes(self.take(2)?.try_into().unwrap());
                Ok(v.to_string().into_bytes())
            }
            Err(2) => {
                let v = i32::from_le_bytes(self.take(4)?.try_into().unwrap());
                Ok(v.to_string().into_bytes())
            }
            Err(k) => Err(format!(
                "string encoding {k} (LZF?) not supported: set rdbcompression no"
            )),
        }
    }
}

/// Decodes a DUMP payload of a module value (and checks its CRC).
pub fn decode(payload: &[u8]) -> Result<Payload, String> {
    if payload.len() < 11 {
        return Err("payload too short".into());
    }
    let (body, footer) = payload.split_at(payload.len() - 10);
    let rdb_version = u16::from_le_bytes([footer[0], footer[1]]);
    let crc = u64::from_le_bytes(footer[2..].try_into().unwrap());
    let want = crc64(&payload[..payload.len() - 8]);
    if crc != want {
        return Err(format!("CRC {crc:#x}, computed {want:#x}"));
    }
    let mut r = Reader { buf: body, at: 0 };
    let t = r.byte()?;
    if t != RDB_TYPE_MODULE_2 {
        return Err(format!("RDB type {t}, not a module value"));
    }
    let module_id = r.len()?;
    let mut fields = Vec::new();
    loop {
        match r.len()? {
            OPCODE_EOF => break,
            OPCODE_UINT => fields.push(Field::U64(r.len()?)),
            OPCODE_STRING => fields.push(Field::Bytes(r.string()?)),
            op => return Err(format!("module opcode {op} not supported")),
        }
    }
    if r.at != body.len() {
        return Err(format!("{} bytes after the EOF opcode", body.len() - r.at));
    }
    Ok(Payload {
        module_id,
        fields,
        rdb_version,
    })
}

/// Encodes a payload for RESTORE (with its footer and CRC).
pub fn encode(p: &Payload) -> Vec<u8> {
    let mut out = vec![RDB_TYPE_MODULE_2];
    put_len(&mut out, p.module_id);
    for f in &p.fields {
        match f {
            Field::U64(n) => {
                put_len(&mut out, OPCODE_UINT);
                put_len(&mut out, *n);
            }
            Field::Bytes(b) => {
                put_len(&mut out, OPCODE_STRING);
                put_string(&mut out, b);
            }
        }
    }
    put_len(&mut out, OPCODE_EOF);
    out.extend(p.rdb_version.to_le_bytes());
    let crc = crc64(&out);
    out.extend(crc.to_le_bytes());
    out
}

/// Restores `key` on the server at `port` as a copy of itself whose every token equals
/// `t + ahead` (`t`: its holder's token): that server then has a high-water mark `ahead` past
/// its clock (as a master whose clock runs ahead, or one that made more than 1000 grants a ms,
/// would). Answers the crafted token.
pub fn push_tokens_ahead(port: u16, key: &str, t: i64, ahead: u64) -> u64 {
    use crate::socket::{Resp, Sock};
    let mut s = Sock::connect(port);
    let Resp::Bulk(bytes) = s.cmd(&["DUMP", key]) else {
        panic!("DUMP {key}");
    };
    let mut p = decode(&bytes).unwrap();
    let crafted = t as u64 + ahead;
    for f in &mut p.fields {
        if *f == Field::U64(t as u64) {
            *f = Field::U64(crafted);
        }
    }
    let r = s.call(&[b"RESTORE", key.as_bytes(), b"0", &encode(&p), b"REPLACE"]);
    assert_eq!(r, Resp::Simple("OK".into()), "RESTORE of the crafted {key}");
    crafted
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc64_has_the_jones_check_value() {
        // The check value of Redis's crc64.c (its own self-test).
        assert_eq!(crc64(b"123456789"), 0xe9c6_d914_c4b8_d9ca);
        assert_eq!(crc64(b""), 0);
    }

    #[test]
    fn lengths_use_the_shortest_rdb_form() {
        let enc = |n: u64| {
            let mut v = Vec::new();
            put_len(&mut v, n);
            v
        };
        assert_eq!(enc(5), vec![5]);
        assert_eq!(enc(300), vec![0x41, 0x2c]);
        assert_eq!(enc(70_000), vec![0x80, 0, 1, 0x11, 0x70]);
        assert_eq!(enc(1 << 40), vec![0x81, 0, 0, 1, 0, 0, 0, 0, 0]);
        for n in [0, 63, 64, 16383, 16384, u32::MAX as u64, 1 << 40, u64::MAX] {
            let b = enc(n);
            assert_eq!(Reader { buf: &b, at: 0 }.len().unwrap(), n);
        }
    }

    #[test]
    fn a_payload_round_trips_and_a_flipped_byte_fails_the_crc() {
        let p = Payload {
            module_id: 0x1234_5678_9abc_def0,
            fields: vec![
                Field::U64(7),
                Field::Bytes(b"a\0b".to_vec()),
                Field::U64(1 << 62),
            ],
            rdb_version: 10,
        };
        let mut bytes = encode(&p);
        assert_eq!(decode(&bytes), Ok(p));
        bytes[3] ^= 1;
        assert!(decode(&bytes).unwrap_err().starts_with("CRC"));
    }

    #[test]
    fn integer_encoded_strings_decode_to_their_digits() {
        let mut b = vec![0xc0, 0xfb];
        b.extend([0xc1, 0x39, 0x30, 0xc2, 0x40, 0xe2, 0x01, 0x00]);
        let mut r = Reader { buf: &b, at: 0 };
        assert_eq!(r.string().unwrap(), b"-5");
        assert_eq!(r.string().unwrap(), b"12345");
        assert_eq!(r.string().unwrap(), b"123456");
    }
}
