//! Serdes: how keys and values become bytes at the edges of a topology
//! (sources, sinks, repartition topics, state stores). Kafka's
//! `Serde`/`Serializer`/`Deserializer` folded into one trait, with Kafka's
//! wire formats: strings as UTF-8, `i64` as `LongSerializer` (8 bytes
//! big-endian), `i32` as `IntegerSerializer` (4 bytes big-endian), JSON via
//! `serde_json`.
//!
//! Null: Kafka's serdes map `null` to `null`. Here a serde of `T` rejects a
//! null payload; [`Serdes::nullable`] makes a serde of `Option<T>` that maps
//! `None` to a null payload and back (use it for topics with null keys).

use std::marker::PhantomData;
use std::sync::Arc;

use bytes::Bytes;

use crate::error::{Result, StreamsError};

/// Turns `T` into bytes and back for a topic (Kafka's `Serde<T>`).
pub trait Serde<T>: Send + Sync + 'static {
    /// The bytes of `data` written to `topic`.
    fn serialize(&self, topic: &str, data: &T) -> Result<Bytes>;
    /// The value read from `topic`.
    fn deserialize(&self, topic: &str, data: &[u8]) -> Result<T>;
    /// Like [`Serde::serialize`], allowing a null payload (only nullable
    /// serdes return `None`).
    fn serialize_nullable(&self, topic: &str, data: &T) -> Result<Option<Bytes>> {
        self.serialize(topic, data).map(Some)
    }
    /// Like [`Serde::deserialize`] for a payload that may be null; the
    /// default rejects null.
    fn deserialize_nullable(&self, topic: &str, data: Option<&[u8]>) -> Result<T> {
        match data {
            Some(d) => self.deserialize(topic, d),
            None => Err(StreamsError::Serde(format!(
                "null payload on topic {topic} for a non-nullable serde (use Serdes::nullable)"
            ))),
        }
    }
}

/// A shared serde of `T`.
pub type SerdeRef<T> = Arc<dyn Serde<T>>;

/// Raw bytes, unchanged (Kafka's `Serdes.Bytes()` / `ByteArray()`).
#[derive(Debug, Clone, Copy, Default)]
pub struct BytesSerde;

impl Serde<Bytes> for BytesSerde {
    fn serialize(&self, _topic: &str, data: &Bytes) -> Result<Bytes> {
        Ok(data.clone())
    }
    fn deserialize(&self, _topic: &str, data: &[u8]) -> Result<Bytes> {
        Ok(Bytes::copy_from_slice(data))
    }
}

/// UTF-8 strings (Kafka's `StringSerializer`).
#[derive(Debug, Clone, Copy, Default)]
pub struct StringSerde;

impl Serde<String> for StringSerde {
    fn serialize(&self, _topic: &str, data: &String) -> Result<Bytes> {
        Ok(Bytes::copy_from_slice(data.as_bytes()))
    }
    fn deserialize(&self, topic: &str, data: &[u8]) -> Result<String> {
        String::from_utf8(data.to_vec())
            .map_err(|e| StreamsError::Serde(format!("topic {topic}: invalid UTF-8: {e}")))
    }
}

/// `i64` as 8 bytes big-endian (Kafka's `LongSerializer`).
#[derive(Debug, Clone, Copy, Default)]
pub struct I64Serde;

impl Serde<i64> for I64Serde {
    fn serialize(&self, _topic: &str, data: &i64) -> Result<Bytes> {
        Ok(Bytes::copy_from_slice(&data.to_be_bytes()))
    }
    fn deserialize(&self, topic: &str, data: &[u8]) -> Result<i64> {
        let a: [u8; 8] = data.try_into().map_err(|_| {
            StreamsError::Serde(format!(
                "topic {topic}: size of data received by LongDeserializer is not 8 ({})",
                data.len()
            ))
        })?;
        Ok(i64::from_be_bytes(a))
    }
}

/// `i32` as 4 bytes big-endian (Kafka's `IntegerSerializer`).
#[derive(Debug, Clone, Copy, Default)]
pub struct I32Serde;

impl Serde<i32> for I32Serde {
    fn serialize(&self, _topic: &str, data: &i32) -> Result<Bytes> {
        Ok(Bytes::copy_from_slice(&data.to_be_bytes()))
    }
    fn deserialize(&self, topic: &str, data: &[u8]) -> Result<i32> {
        let a: [u8; 4] = data.try_into().map_err(|_| {
            StreamsError::Serde(format!(
                "topic {topic}: size of data received by IntegerDeserializer is not 4 ({})",
                data.len()
            ))
        })?;
        Ok(i32::from_be_bytes(a))
    }
}

/// Any `serde` type as JSON (`serde_json`).
pub struct JsonSerde<T>(PhantomData<fn() -> T>);

impl<T> std::fmt::Debug for JsonSerde<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("JsonSerde")
    }
}

impl<T> Default for JsonSerde<T> {
    fn default() -> Self {
        Self(PhantomData)
    }
}

impl<T> Serde<T> for JsonSerde<T>
where
    T: serde::Serialize + serde::de::DeserializeOwned + 'static,
{
    fn serialize(&self, topic: &str, data: &T) -> Result<Bytes> {
        serde_json::to_vec(data)
            .map(Bytes::from)
            .map_err(|e| StreamsError::Serde(format!("topic {topic}: JSON: {e}")))
    }
    fn deserialize(&self, topic: &str, data: &[u8]) -> Result<T> {
        serde_json::from_slice(data)
            .map_err(|e| StreamsError::Serde(format!("topic {topic}: JSON: {e}")))
    }
}

/// `Option<T>` over a serde of `T`: `None` is a null payload.
pub struct NullableSerde<T> {
    inner: SerdeRef<T>,
}

impl<T> std::fmt::Debug for NullableSerde<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("NullableSerde")
    }
}

impl<T: 'static> Serde<Option<T>> for NullableSerde<T> {
    fn serialize(&self, topic: &str, data: &Option<T>) -> Result<Bytes> {
        match data {
            Some(v) => self.inner.serialize(topic, v),
            None => Ok(Bytes::new()),
        }
    }
    fn deserialize(&self, topic: &str, data: &[u8]) -> Result<Option<T>> {
        self.inner.deserialize(topic, data).map(Some)
    }
    fn serialize_nullable(&self, topic: &str, data: &Option<T>) -> Result<Option<Bytes>> {
        data.as_ref()
            .map(|v| self.inner.serialize(topic, v))
            .transpose()
    }
    fn deserialize_nullable(&self, topic: &str, data: Option<&[u8]>) -> Result<Option<T>> {
        data.map(|d| self.inner.deserialize(topic, d)).transpose()
    }
}

/// Constructors of the usual serdes (Kafka's `Serdes`).
#[derive(Debug)]
pub struct Serdes;

impl Serdes {
    /// Raw bytes.
    pub fn bytes() -> SerdeRef<Bytes> {
        Arc::new(BytesSerde)
    }
    /// UTF-8 strings.
    pub fn string() -> SerdeRef<String> {
        Arc::new(StringSerde)
    }
    /// `i64`, 8 bytes big-endian.
    pub fn i64() -> SerdeRef<i64> {
        Arc::new(I64Serde)
    }
    /// `i32`, 4 bytes big-endian.
    pub fn i32() -> SerdeRef<i32> {
        Arc::new(I32Serde)
    }
    /// JSON of any `serde` type.
    pub fn json<T>() -> SerdeRef<T>
    where
        T: serde::Serialize + serde::de::DeserializeOwned + 'static,
    {
        Arc::new(JsonSerde::<T>::default())
    }
    /// `Option<T>` where `None` is a null payload.
    pub fn nullable<T: 'static>(inner: SerdeRef<T>) -> SerdeRef<Option<T>> {
        Arc::new(NullableSerde { inner })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn wire_formats_match_kafka() {
        let l = Serdes::i64();
        assert_eq!(
            &l.serialize("t", &1).unwrap()[..],
            &[0, 0, 0, 0, 0, 0, 0, 1]
        );
        assert_eq!(l.deserialize("t", &[0, 0, 0, 0, 0, 0, 1, 0]).unwrap(), 256);
        assert!(l.deserialize("t", &[1, 2]).is_err());
        let i = Serdes::i32();
        assert_eq!(
            &i.serialize("t", &-2).unwrap()[..],
            &[0xff, 0xff, 0xff, 0xfe]
        );
        let s = Serdes::string();
        assert_eq!(s.deserialize("t", "héllo".as_bytes()).unwrap(), "héllo");
        assert!(s.deserialize("t", &[0xff]).is_err());
        assert!(s.deserialize_nullable("t", None).is_err());
        let n = Serdes::nullable(Serdes::string());
        assert_eq!(n.deserialize_nullable("t", None).unwrap(), None);
        assert_eq!(n.serialize_nullable("t", &None).unwrap(), None);
        let j = Serdes::json::<Vec<u32>>();
        assert_eq!(&j.serialize("t", &vec![1, 2]).unwrap()[..], b"[1,2]");
        assert_eq!(j.deserialize("t", b"[3]").unwrap(), vec![3]);
    }
}
