//! Kafka's primitive wire types as used inside `__consumer_offsets` and
//! `__transaction_state` record keys and values: big-endian integers, `int16`-length strings and
//! `int32`-length bytes/arrays for non-flexible versions, and the
//! "compact" (unsigned-varint length + 1) forms plus tagged-field sections
//! for flexible versions.
//!
//! The reader never panics and never allocates more than the remaining
//! input can justify, so garbage from the disk is rejected with
//! [`CoordinatorError::MalformedRecord`].

use crate::error::CoordinatorError;

/// Cursor over the bytes of one record key or value.
#[derive(Debug)]
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    record: &'static str,
}

impl<'a> Reader<'a> {
    /// `record` names the schema being read, for error messages.
    pub(crate) fn new(buf: &'a [u8], record: &'static str) -> Self {
        Self {
            buf,
            pos: 0,
            record,
        }
    }

    pub(crate) fn malformed(&self, reason: &'static str) -> CoordinatorError {
        CoordinatorError::MalformedRecord {
            record: self.record,
            reason,
        }
    }

    pub(crate) fn remaining(&self) -> usize {
        self.buf.len().saturating_sub(self.pos)
    }

    pub(crate) fn take(&mut self, n: usize) -> Result<&'a [u8], CoordinatorError> {
        if self.remaining() < n {
            return Err(self.malformed("truncated"));
        }
        let out = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(out)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], CoordinatorError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    pub(crate) fn i8(&mut self) -> Result<i8, CoordinatorError> {
        Ok(i8::from_be_bytes(self.array()?))
    }

    pub(crate) fn i16(&mut self) -> Result<i16, CoordinatorError> {
        Ok(i16::from_be_bytes(self.array()?))
    }

    pub(crate) fn i32(&mut self) -> Result<i32, CoordinatorError> {
        Ok(i32::from_be_bytes(self.array()?))
    }

    pub(crate) fn i64(&mut self) -> Result<i64, CoordinatorError> {
        Ok(i64::from_be_bytes(self.array()?))
    }

    /// Unsigned LEB128 varint of at most 5 bytes (a Java `int`).
    pub(crate) fn uvarint(&mut self) -> Result<u32, CoordinatorError> {
        let mut value: u32 = 0;
        for i in 0..5 {
            let b = self.take(1)?[0];
            let bits = u32::from(b & 0x7f);
            if i == 4 && bits > 0x0f {
                return Err(self.malformed("varint overflows 32 bits"));
            }
            value |= bits << (7 * i);
            if b & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(self.malformed("varint longer than 5 bytes"))
    }

    /// Length prefix of a string: `None` means null.
    fn string_len(&mut self, flexible: bool) -> Result<Option<usize>, CoordinatorError> {
        if flexible {
            let n = self.uvarint()?;
            Ok(if n == 0 { None } else { Some((n - 1) as usize) })
        } else {
            let n = self.i16()?;
            match n {
                -1 => Ok(None),
                n if n < 0 => Err(self.malformed("negative string length")),
                n => Ok(Some(n as usize)),
            }
        }
    }

    /// Bytes are decoded as Java does (`new String(bytes, UTF_8)`): invalid
    /// sequences become U+FFFD rather than failing the whole record.
    pub(crate) fn nullable_string(
        &mut self,
        flexible: bool,
    ) -> Result<Option<String>, CoordinatorError> {
        match self.string_len(flexible)? {
            None => Ok(None),
            Some(len) => {
                let bytes = self.take(len)?;
                Ok(Some(String::from_utf8_lossy(bytes).into_owned()))
            }
        }
    }

    pub(crate) fn string(&mut self, flexible: bool) -> Result<String, CoordinatorError> {
        self.nullable_string(flexible)?
            .ok_or_else(|| self.malformed("null in a non-nullable string field"))
    }

    /// Non-nullable `bytes` field.
    pub(crate) fn bytes(&mut self, flexible: bool) -> Result<Vec<u8>, CoordinatorError> {
        let len = if flexible {
            match self.uvarint()? {
                0 => return Err(self.malformed("null in a non-nullable bytes field")),
                n => (n - 1) as usize,
            }
        } else {
            let n = self.i32()?;
            if n < 0 {
                return Err(self.malformed("null in a non-nullable bytes field"));
            }
            n as usize
        };
        Ok(self.take(len)?.to_vec())
    }

    /// Element count of a non-nullable array. The count is checked against
    /// the remaining input (every element takes at least one byte) so a
    /// corrupt count cannot trigger a huge allocation.
    pub(crate) fn array_len(&mut self, flexible: bool) -> Result<usize, CoordinatorError> {
        self.nullable_array_len(flexible)?
            .ok_or_else(|| self.malformed("null in a non-nullable array field"))
    }

    /// Element count of a nullable array: `None` means null (-1, or a
    /// compact length of 0). Bounded by the input like [`Self::array_len`].
    pub(crate) fn nullable_array_len(
        &mut self,
        flexible: bool,
    ) -> Result<Option<usize>, CoordinatorError> {
        let len = if flexible {
            match self.uvarint()? {
                0 => return Ok(None),
                n => (n - 1) as usize,
            }
        } else {
            match self.i32()? {
                -1 => return Ok(None),
                n if n < 0 => return Err(self.malformed("negative array length")),
                n => n as usize,
            }
        };
        if len > self.remaining() {
            return Err(self.malformed("array count exceeds the input"));
        }
        Ok(Some(len))
    }

    /// Skips a tagged-field section (flexible versions). None of the
    /// schemas read here defines a tagged field yet, so every tag is
    /// unknown and skipped, as Kafka's generated readers do.
    pub(crate) fn skip_tagged_fields(&mut self) -> Result<(), CoordinatorError> {
        let count = self.uvarint()?;
        for _ in 0..count {
            let _tag = self.uvarint()?;
            let size = self.uvarint()? as usize;
            self.take(size)?;
        }
        Ok(())
    }
}

/// Appends Kafka wire types to a buffer. String and bytes writers fail
/// (rather than truncate) when a value does not fit its length prefix.
#[derive(Debug, Default)]
pub(crate) struct Writer {
    pub(crate) buf: Vec<u8>,
    record: &'static str,
}

impl Writer {
    pub(crate) fn new(record: &'static str) -> Self {
        Self {
            buf: Vec::new(),
            record,
        }
    }

    fn too_long(&self) -> CoordinatorError {
        CoordinatorError::FieldTooLong {
            record: self.record,
        }
    }

    pub(crate) fn i8(&mut self, v: i8) {
        self.buf.extend_from_slice(&v.to_be_bytes());
    }

    pub(crate) fn i16(&mut self, v: i16) {
        self.buf.extend_from_slice(&v.to_be_bytes());
    }

    pub(crate) fn i32(&mut self, v: i32) {
        self.buf.extend_from_slice(&v.to_be_bytes());
    }

    pub(crate) fn i64(&mut self, v: i64) {
        self.buf.extend_from_slice(&v.to_be_bytes());
    }

    pub(crate) fn uvarint(&mut self, mut v: u32) {
        while v >= 0x80 {
            self.buf.push((v as u8 & 0x7f) | 0x80);
            v >>= 7;
        }
        self.buf.push(v as u8);
    }

    /// Compact length: `len + 1` as an unsigned varint.
    fn compact_len(&mut self, len: usize) -> Result<(), CoordinatorError> {
        let n = u32::try_from(len)
            .ok()
            .and_then(|n| n.checked_add(1))
            .filter(|n| *n <= i32::MAX as u32)
            .ok_or_else(|| self.too_long())?;
        self.uvarint(n);
        Ok(())
    }

    pub(crate) fn nullable_string(
        &mut self,
        v: Option<&str>,
        flexible: bool,
    ) -> Result<(), CoordinatorError> {
        match (v, flexible) {
            (None, true) => self.uvarint(0),
            (None, false) => self.i16(-1),
            (Some(s), true) => {
                self.compact_len(s.len())?;
                self.buf.extend_from_slice(s.as_bytes());
            }
            (Some(s), false) => {
                let n = i16::try_from(s.len()).map_err(|_| self.too_long())?;
                self.i16(n);
                self.buf.extend_from_slice(s.as_bytes());
            }
        }
        Ok(())
    }

    pub(crate) fn string(&mut self, v: &str, flexible: bool) -> Result<(), CoordinatorError> {
        self.nullable_string(Some(v), flexible)
    }

    pub(crate) fn bytes(&mut self, v: &[u8], flexible: bool) -> Result<(), CoordinatorError> {
        if flexible {
            self.compact_len(v.len())?;
        } else {
            let n = i32::try_from(v.len()).map_err(|_| self.too_long())?;
            self.i32(n);
        }
        self.buf.extend_from_slice(v);
        Ok(())
    }

    pub(crate) fn array_len(&mut self, len: usize, flexible: bool) -> Result<(), CoordinatorError> {
        if flexible {
            self.compact_len(len)
        } else {
            let n = i32::try_from(len).map_err(|_| self.too_long())?;
            self.i32(n);
            Ok(())
        }
    }

    /// A null array (nullable array fields).
    pub(crate) fn null_array(&mut self, flexible: bool) {
        if flexible {
            self.uvarint(0);
        } else {
            self.i32(-1);
        }
    }

    /// An empty tagged-field section.
    pub(crate) fn no_tagged_fields(&mut self) {
        self.uvarint(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uvarint_roundtrip_edges() {
        for v in [0u32, 1, 127, 128, 300, 16_383, 16_384, u32::MAX] {
            let mut w = Writer::new("t");
            w.uvarint(v);
            let mut r = Reader::new(&w.buf, "t");
            assert_eq!(r.uvarint().ok(), Some(v));
            assert_eq!(r.remaining(), 0);
        }
    }

    #[test]
    fn uvarint_rejects_overlong() {
        let mut r = Reader::new(&[0xff, 0xff, 0xff, 0xff, 0xff, 0x01], "t");
        assert!(r.uvarint().is_err());
        let mut r = Reader::new(&[0x80, 0x80], "t");
        assert!(r.uvarint().is_err());
    }

    #[test]
    fn huge_array_count_is_rejected_without_allocating() {
        let mut r = Reader::new(&[0x7f, 0xff, 0xff, 0xff, 0, 0], "t");
        assert!(r.array_len(false).is_err());
    }

    #[test]
    fn string_too_long_for_int16_is_an_error() {
        let mut w = Writer::new("t");
        let s = "x".repeat(40_000);
        assert!(w.string(&s, false).is_err());
        assert!(w.string(&s, true).is_ok());
    }
}
