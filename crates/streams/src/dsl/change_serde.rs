//! Serializing table changes for repartition topics.

use super::ktable::Change;
use crate::error::{Result, StreamsError};
use crate::processor::Data;
use crate::serde::{Serde, SerdeRef};

/// Serializes a [`Change`] for a repartition topic (Kafka's
/// `ChangedSerializer`): new value length (`-1`: none) and bytes, then the
/// old value's.
pub(crate) struct ChangeSerde<V> {
    pub inner: SerdeRef<V>,
}

impl<V: Data> Serde<Change<V>> for ChangeSerde<V> {
    fn serialize(&self, topic: &str, data: &Change<V>) -> Result<bytes::Bytes> {
        let mut out = Vec::new();
        for v in [&data.new_value, &data.old_value] {
            match v {
                Some(v) => {
                    let b = self.inner.serialize(topic, v)?;
                    out.extend_from_slice(&(b.len() as i32).to_be_bytes());
                    out.extend_from_slice(&b);
                }
                None => out.extend_from_slice(&(-1i32).to_be_bytes()),
            }
        }
        Ok(out.into())
    }
    fn deserialize(&self, topic: &str, data: &[u8]) -> Result<Change<V>> {
        let bad = || StreamsError::Serde(format!("topic {topic}: truncated change"));
        let mut pos = 0usize;
        let mut vals = [None, None];
        for slot in &mut vals {
            let len = i32::from_be_bytes(
                data.get(pos..pos + 4)
                    .ok_or_else(bad)?
                    .try_into()
                    .map_err(|_| bad())?,
            );
            pos += 4;
            if len >= 0 {
                let end = pos + len as usize;
                *slot = Some(
                    self.inner
                        .deserialize(topic, data.get(pos..end).ok_or_else(bad)?)?,
                );
                pos = end;
            }
        }
        let [new_value, old_value] = vals;
        Ok(Change {
            new_value,
            old_value,
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::serde::Serdes;

    #[test]
    fn changes_round_trip() {
        let c = ChangeSerde {
            inner: Serdes::string(),
        };
        for ch in [
            Change {
                new_value: Some("n".to_string()),
                old_value: Some("old".to_string()),
            },
            Change {
                new_value: None,
                old_value: Some(String::new()),
            },
            Change {
                new_value: Some("x".to_string()),
                old_value: None,
            },
            Change {
                new_value: None,
                old_value: None,
            },
        ] {
            let b = c.serialize("t", &ch).unwrap();
            assert_eq!(c.deserialize("t", &b).unwrap(), ch);
        }
        assert!(c.deserialize("t", &[0, 0, 0, 9, 1]).is_err());
    }
}
