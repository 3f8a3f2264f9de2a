//! Operation parameters: Kafka's `Consumed`, `Produced`, `Grouped`,
//! `Materialized`, `Named`, `Repartitioned`, `Branched`.

use crate::processor::Data;
use crate::serde::SerdeRef;
use crate::topology::StoreType;

/// A user-given processor name (Kafka's `Named`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Named(pub(crate) String);

impl Named {
    /// The name `name`.
    pub fn as_(name: impl Into<String>) -> Self {
        Self(name.into())
    }
}

/// How a source reads (Kafka's `Consumed`): serdes and an optional name.
pub struct Consumed<K, V> {
    pub(crate) key_serde: SerdeRef<K>,
    pub(crate) value_serde: SerdeRef<V>,
    pub(crate) name: Option<String>,
}

impl<K: Data, V: Data> Consumed<K, V> {
    /// With these serdes.
    pub fn with(key_serde: SerdeRef<K>, value_serde: SerdeRef<V>) -> Self {
        Self {
            key_serde,
            value_serde,
            name: None,
        }
    }
    /// Names the source processor.
    pub fn with_name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }
}

/// How a sink writes (Kafka's `Produced`).
pub struct Produced<K, V> {
    pub(crate) key_serde: SerdeRef<K>,
    pub(crate) value_serde: SerdeRef<V>,
    pub(crate) name: Option<String>,
}

impl<K: Data, V: Data> Produced<K, V> {
    /// With these serdes.
    pub fn with(key_serde: SerdeRef<K>, value_serde: SerdeRef<V>) -> Self {
        Self {
            key_serde,
            value_serde,
            name: None,
        }
    }
    /// Names the sink processor.
    pub fn with_name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }
}

/// How a grouping repartitions (Kafka's `Grouped`): serdes for the
/// repartition topic and its name.
pub struct Grouped<K, V> {
    pub(crate) key_serde: Option<SerdeRef<K>>,
    pub(crate) value_serde: Option<SerdeRef<V>>,
    pub(crate) name: Option<String>,
}

impl<K: Data, V: Data> Default for Grouped<K, V> {
    fn default() -> Self {
        Self {
            key_serde: None,
            value_serde: None,
            name: None,
        }
    }
}

impl<K: Data, V: Data> Grouped<K, V> {
    /// With these serdes.
    pub fn with(key_serde: SerdeRef<K>, value_serde: SerdeRef<V>) -> Self {
        Self {
            key_serde: Some(key_serde),
            value_serde: Some(value_serde),
            name: None,
        }
    }
    /// Names the repartition topic `<application.id>-<name>-repartition`
    /// and its processors.
    pub fn as_(name: impl Into<String>) -> Self {
        Self {
            name: Some(name.into()),
            ..Self::default()
        }
    }
    /// Also name it.
    pub fn with_name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }
}

/// How a table is stored (Kafka's `Materialized`): store name, serdes,
/// caching (on by default, as in Kafka) and logging (on by default).
pub struct Materialized<K, V> {
    pub(crate) name: Option<String>,
    pub(crate) key_serde: Option<SerdeRef<K>>,
    pub(crate) value_serde: Option<SerdeRef<V>>,
    pub(crate) caching: bool,
    pub(crate) logging: bool,
    pub(crate) store_type: StoreType,
}

impl<K: Data, V: Data> Default for Materialized<K, V> {
    fn default() -> Self {
        Self {
            name: None,
            key_serde: None,
            value_serde: None,
            caching: true,
            logging: true,
            store_type: StoreType::Default,
        }
    }
}

impl<K: Data, V: Data> Materialized<K, V> {
    /// A store named `name` (Kafka's `Materialized.as`).
    pub fn as_(name: impl Into<String>) -> Self {
        Self {
            name: Some(name.into()),
            ..Self::default()
        }
    }
    /// An unnamed store with these serdes.
    pub fn with(key_serde: SerdeRef<K>, value_serde: SerdeRef<V>) -> Self {
        Self {
            key_serde: Some(key_serde),
            value_serde: Some(value_serde),
            ..Self::default()
        }
    }
    /// Sets the key serde.
    pub fn with_key_serde(mut self, s: SerdeRef<K>) -> Self {
        self.key_serde = Some(s);
        self
    }
    /// Sets the value serde.
    pub fn with_value_serde(mut self, s: SerdeRef<V>) -> Self {
        self.value_serde = Some(s);
        self
    }
    /// Turns the record cache off.
    pub fn with_caching_disabled(mut self) -> Self {
        self.caching = false;
        self
    }
    /// Turns the record cache on (the default).
    pub fn with_caching_enabled(mut self) -> Self {
        self.caching = true;
        self
    }
    /// Turns the changelog off.
    pub fn with_logging_disabled(mut self) -> Self {
        self.logging = false;
        self
    }
    /// Chooses the store type.
    pub fn with_store_type(mut self, t: StoreType) -> Self {
        self.store_type = t;
        self
    }
}

/// How `KStream::repartition` repartitions (Kafka's `Repartitioned`).
pub struct Repartitioned<K, V> {
    pub(crate) key_serde: Option<SerdeRef<K>>,
    pub(crate) value_serde: Option<SerdeRef<V>>,
    pub(crate) name: Option<String>,
    pub(crate) partitions: Option<i32>,
}

impl<K: Data, V: Data> Default for Repartitioned<K, V> {
    fn default() -> Self {
        Self {
            key_serde: None,
            value_serde: None,
            name: None,
            partitions: None,
        }
    }
}

impl<K: Data, V: Data> Repartitioned<K, V> {
    /// With these serdes.
    pub fn with(key_serde: SerdeRef<K>, value_serde: SerdeRef<V>) -> Self {
        Self {
            key_serde: Some(key_serde),
            value_serde: Some(value_serde),
            ..Self::default()
        }
    }
    /// Names the topic `<application.id>-<name>-repartition`.
    pub fn as_(name: impl Into<String>) -> Self {
        Self {
            name: Some(name.into()),
            ..Self::default()
        }
    }
    /// Also name it.
    pub fn with_name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }
    /// The topic's partition count.
    pub fn with_number_of_partitions(mut self, n: i32) -> Self {
        self.partitions = Some(n);
        self
    }
}

/// A branch's name (Kafka's `Branched`).
#[derive(Debug, Clone, Default)]
pub struct Branched(pub(crate) Option<String>);

impl Branched {
    /// Names the branch `<split name><name>`.
    pub fn as_(name: impl Into<String>) -> Self {
        Self(Some(name.into()))
    }
}

macro_rules! debug_by_name {
    ($($t:ident),*) => {$(
        impl<K, V> std::fmt::Debug for $t<K, V> {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($t)).field("name", &self.name).finish()
            }
        }
    )*};
}

debug_by_name!(Consumed, Produced, Grouped, Materialized, Repartitioned);
