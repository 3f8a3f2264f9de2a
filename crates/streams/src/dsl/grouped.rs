//! Grouped streams and tables (Kafka's `KGroupedStream`,
//! `KGroupedTable`): `count`, `reduce`, `aggregate` into a materialized
//! table, repartitioning first when the key changed.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::change_serde::ChangeSerde;
use super::config::Materialized;
use super::kstream::add_repartition;
use super::ktable::{
    add_store, forward_change, register_flush_listener, store_getter, Change, KTable,
};
use super::processors::{supplier, KvAccess, ProcessFn};
use super::{Shared, Sources};
use crate::error::StreamsError;
use crate::processor::{Data, ProcessorContext, Record};
use crate::serde::{SerdeRef, Serdes};

/// A grouped stream (Kafka's `KGroupedStream`).
pub struct KGroupedStream<K, V> {
    pub(crate) b: Shared,
    pub(crate) node: String,
    pub(crate) key_serde: Option<SerdeRef<K>>,
    pub(crate) value_serde: Option<SerdeRef<V>>,
    pub(crate) repartition_required: bool,
    pub(crate) repartition_name: Option<String>,
    pub(crate) sources: Sources,
    /// The repartition source made for a named grouping, for reuse.
    pub(crate) repartition_source: std::rc::Rc<std::cell::RefCell<Option<String>>>,
}

impl<K, V> std::fmt::Debug for KGroupedStream<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KGroupedStream")
            .field("node", &self.node)
            .finish()
    }
}

/// A re-grouped table (Kafka's `KGroupedTable`).
pub struct KGroupedTable<K, V> {
    pub(crate) b: Shared,
    pub(crate) node: String,
    pub(crate) key_serde: Option<SerdeRef<K>>,
    pub(crate) value_serde: Option<SerdeRef<V>>,
    pub(crate) repartition_name: Option<String>,
}

impl<K, V> std::fmt::Debug for KGroupedTable<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KGroupedTable")
            .field("node", &self.node)
            .finish()
    }
}

/// The timestamp of an updated aggregate (Kafka: the larger of the
/// record's and the old aggregate's).
fn agg_ts<V>(record_ts: i64, old: &Option<(V, i64)>) -> i64 {
    old.as_ref().map_or(record_ts, |(_, t)| record_ts.max(*t))
}

type Make<K, V, VA> = Box<dyn FnOnce(KvAccess<K, VA>, Arc<AtomicBool>) -> ProcessFn<K, V>>;

fn bad_table<K: Data, VA: Data>(b: &Shared, node: &str, msg: String) -> KTable<K, VA> {
    b.borrow_mut().check::<()>(Err(StreamsError::Topology(msg)));
    KTable {
        b: b.clone(),
        node: node.to_string(),
        key_serde: None,
        value_serde: None,
        sources: Default::default(),
        getter: super::ValueGetter {
            stores: Vec::new(),
            get: Arc::new(|_, _| Ok(None)),
        },
        old_flags: Vec::new(),
        next_name: None,
        store: None,
        materializers: Vec::new(),
    }
}

/// Adds store + aggregation processor under `parent`.
#[allow(clippy::too_many_arguments)]
fn finish<K: Data, VIn: Data, VA: Data>(
    b: &Shared,
    store: String,
    proc_name: String,
    parent: &str,
    m: Materialized<K, VA>,
    ks: SerdeRef<K>,
    vas: SerdeRef<VA>,
    sources: Sources,
    make: Make<K, VIn, VA>,
) -> KTable<K, VA> {
    let acc = KvAccess {
        store: store.clone(),
        key_serde: ks.clone(),
        value_serde: vas.clone(),
    };
    let flag = Arc::new(AtomicBool::new(false));
    let (acc2, flag2) = (acc.clone(), flag.clone());
    let process = make(acc.clone(), flag.clone());
    let s = supplier::<K, VIn>(
        Some(Arc::new(move |ctx| {
            register_flush_listener(ctx, acc2.clone(), flag2.clone())
        })),
        process,
    );
    {
        let mut inner = b.borrow_mut();
        let r = inner.topology.add_raw_processor(&proc_name, s, &[parent]);
        inner.check(r);
    }
    add_store(b, &store, &m, &proc_name);
    KTable {
        b: b.clone(),
        node: proc_name,
        key_serde: Some(ks),
        value_serde: Some(vas),
        sources,
        getter: store_getter(acc),
        old_flags: vec![flag],
        next_name: None,
        store: Some(store),
        materializers: Vec::new(),
    }
}

impl<K: Data, V: Data> KGroupedStream<K, V> {
    fn aggregate_internal<VA: Data>(
        &self,
        prefix: &str,
        m: Materialized<K, VA>,
        default_value_serde: Option<SerdeRef<VA>>,
        make: Make<K, V, VA>,
    ) -> KTable<K, VA> {
        let store = m
            .name
            .clone()
            .unwrap_or_else(|| self.b.borrow_mut().new_store_name(prefix));
        let proc_name = self.b.borrow_mut().new_processor_name(prefix);
        let Some(ks) = m.key_serde.clone().or_else(|| self.key_serde.clone()) else {
            return bad_table(
                &self.b,
                &self.node,
                format!("{proc_name} needs a key serde (Grouped::with or Materialized::with)"),
            );
        };
        let Some(vas) = m.value_serde.clone().or(default_value_serde) else {
            return bad_table(
                &self.b,
                &self.node,
                format!("{proc_name} needs a value serde (Materialized::with)"),
            );
        };
        let (parent, sources) = if self.repartition_required {
            let prefix_name = self
                .repartition_name
                .clone()
                .unwrap_or_else(|| store.clone());
            // Kafka reuses the repartition topic of a grouping the user
            // named for every aggregation of that grouping.
            let reused = self
                .repartition_name
                .as_ref()
                .and_then(|_| self.repartition_source.borrow().clone());
            let src = match reused {
                Some(src) => src,
                None => {
                    let Some(src) = add_repartition(
                        &self.b,
                        &self.node,
                        &prefix_name,
                        Some(ks.clone()),
                        self.value_serde.clone(),
                        true,
                        None,
                    ) else {
                        return bad_table(
                            &self.b,
                            &self.node,
                            format!("{proc_name}: repartition failed"),
                        );
                    };
                    *self.repartition_source.borrow_mut() = Some(src.clone());
                    src
                }
            };
            (src.clone(), [src].into())
        } else {
            (self.node.clone(), self.sources.clone())
        };
        finish(
            &self.b, store, proc_name, &parent, m, ks, vas, sources, make,
        )
    }

    /// Counts records per key (`KSTREAM-AGGREGATE-`), values as `i64`.
    pub fn count(&self, materialized: Materialized<K, i64>) -> KTable<K, i64> {
        self.aggregate(
            || 0i64,
            |_k, _v, agg| agg + 1,
            materialized.with_value_serde_default(Serdes::i64()),
        )
    }

    /// Combines values per key (`KSTREAM-REDUCE-`): the first value is the
    /// initial aggregate.
    pub fn reduce(
        &self,
        reducer: impl Fn(&V, &V) -> V + Send + Sync + 'static,
        materialized: Materialized<K, V>,
    ) -> KTable<K, V> {
        let vs = self.value_serde.clone();
        self.aggregate_internal(
            "KSTREAM-REDUCE-",
            materialized,
            vs,
            Box::new(move |acc, flag| {
                Arc::new(move |ctx: &mut ProcessorContext<'_>, r: Record<K, V>| {
                    if acc.key_is_null(&r.key)? {
                        return Ok(()); // Kafka skips records with a null key
                    }
                    let old = acc.get(ctx, &r.key)?;
                    let ts = agg_ts(r.timestamp, &old);
                    let old = old.map(|(v, _)| v);
                    let new = match &old {
                        None => r.value.clone(),
                        Some(o) => reducer(o, &r.value),
                    };
                    acc.put(ctx, &r.key, Some(&new), ts)?;
                    let send_old = flag.load(Ordering::Relaxed);
                    forward_change(ctx, &acc.store, r.key, Some(new), old, send_old, ts)
                })
            }),
        )
    }

    /// Aggregates values per key (`KSTREAM-AGGREGATE-`) from
    /// `initializer()` with `aggregator(key, value, aggregate)`.
    pub fn aggregate<VA: Data>(
        &self,
        initializer: impl Fn() -> VA + Send + Sync + 'static,
        aggregator: impl Fn(&K, &V, VA) -> VA + Send + Sync + 'static,
        materialized: Materialized<K, VA>,
    ) -> KTable<K, VA> {
        self.aggregate_internal(
            "KSTREAM-AGGREGATE-",
            materialized,
            None,
            Box::new(move |acc, flag| {
                Arc::new(move |ctx: &mut ProcessorContext<'_>, r: Record<K, V>| {
                    if acc.key_is_null(&r.key)? {
                        return Ok(()); // Kafka skips records with a null key
                    }
                    let old = acc.get(ctx, &r.key)?;
                    let ts = agg_ts(r.timestamp, &old);
                    let old = old.map(|(v, _)| v);
                    let base = old.clone().unwrap_or_else(&initializer);
                    let new = aggregator(&r.key, &r.value, base);
                    acc.put(ctx, &r.key, Some(&new), ts)?;
                    let send_old = flag.load(Ordering::Relaxed);
                    forward_change(ctx, &acc.store, r.key, Some(new), old, send_old, ts)
                })
            }),
        )
    }
}

impl<K: Data, V: Data> Materialized<K, V> {
    fn with_value_serde_default(mut self, s: SerdeRef<V>) -> Self {
        if self.value_serde.is_none() {
            self.value_serde = Some(s);
        }
        self
    }
}

impl<K: Data, V: Data> KGroupedTable<K, V> {
    fn aggregate_internal<VA: Data>(
        &self,
        prefix: &str,
        m: Materialized<K, VA>,
        default_value_serde: Option<SerdeRef<VA>>,
        make: Make<K, Change<V>, VA>,
    ) -> KTable<K, VA> {
        let store = m
            .name
            .clone()
            .unwrap_or_else(|| self.b.borrow_mut().new_store_name(prefix));
        let (sink, source, proc_name) = {
            let mut inner = self.b.borrow_mut();
            (
                inner.new_processor_name("KSTREAM-SINK-"),
                inner.new_processor_name("KSTREAM-SOURCE-"),
                inner.new_processor_name(prefix),
            )
        };
        let Some(ks) = m.key_serde.clone().or_else(|| self.key_serde.clone()) else {
            return bad_table(
                &self.b,
                &self.node,
                format!("{proc_name} needs a key serde (Grouped::with)"),
            );
        };
        let Some(vs) = self.value_serde.clone() else {
            return bad_table(
                &self.b,
                &self.node,
                format!("{proc_name} needs a value serde (Grouped::with)"),
            );
        };
        let Some(vas) = m.value_serde.clone().or(default_value_serde) else {
            return bad_table(
                &self.b,
                &self.node,
                format!("{proc_name} needs a value serde (Materialized::with)"),
            );
        };
        let topic = format!(
            "{}{}",
            self.repartition_name
                .clone()
                .unwrap_or_else(|| store.clone()),
            crate::topology::REPARTITION_TOPIC_SUFFIX
        );
        let change_serde: SerdeRef<Change<V>> = Arc::new(ChangeSerde { inner: vs });
        {
            let mut inner = self.b.borrow_mut();
            let tref = crate::topology::TopicRef {
                name: topic.clone(),
                internal: true,
            };
            let r = inner.topology.add_sink_ref(
                &sink,
                tref.clone(),
                crate::topology::raw_serializer(ks.clone(), change_serde.clone()),
                &[&self.node],
            );
            inner.check(r);
            let r = inner.topology.add_source_refs(
                &source,
                vec![tref],
                crate::topology::raw_deserializer(ks.clone(), change_serde),
            );
            inner.check(r);
            inner.topology.repartition_topics.insert(topic, None);
        }
        finish(
            &self.b,
            store,
            proc_name,
            &source.clone(),
            m,
            ks,
            vas,
            [source].into(),
            make,
        )
    }

    /// Counts entries per new key (`KTABLE-AGGREGATE-`): +1 for an added
    /// entry, -1 for a removed one.
    pub fn count(&self, materialized: Materialized<K, i64>) -> KTable<K, i64> {
        self.aggregate(
            || 0i64,
            |_k, _v, agg| agg + 1,
            |_k, _v, agg| agg - 1,
            materialized.with_value_serde_default(Serdes::i64()),
        )
    }

    /// Reduces with an adder for new values and a subtractor for old ones
    /// (`KTABLE-REDUCE-`); an aggregate subtracted to nothing is removed
    /// only if no value was ever added (as Kafka's `KTableReduce`).
    pub fn reduce(
        &self,
        adder: impl Fn(&V, &V) -> V + Send + Sync + 'static,
        subtractor: impl Fn(&V, &V) -> V + Send + Sync + 'static,
        materialized: Materialized<K, V>,
    ) -> KTable<K, V> {
        let vs = self.value_serde.clone();
        self.aggregate_internal(
            "KTABLE-REDUCE-",
            materialized,
            vs,
            Box::new(move |acc, flag| {
                Arc::new(
                    move |ctx: &mut ProcessorContext<'_>, r: Record<K, Change<V>>| {
                        if acc.key_is_null(&r.key)? {
                            return Ok(()); // Kafka skips records with a null key
                        }
                        let old_agg = acc.get(ctx, &r.key)?;
                        let ts = agg_ts(r.timestamp, &old_agg);
                        let old_agg = old_agg.map(|(v, _)| v);
                        let intermediate = match (&r.value.old_value, &old_agg) {
                            (Some(o), Some(a)) => Some(subtractor(a, o)),
                            _ => old_agg.clone(),
                        };
                        let new_agg = match (&r.value.new_value, intermediate) {
                            (Some(n), None) => Some(n.clone()),
                            (Some(n), Some(i)) => Some(adder(&i, n)),
                            (None, i) => i,
                        };
                        acc.put(ctx, &r.key, new_agg.as_ref(), ts)?;
                        let send_old = flag.load(Ordering::Relaxed);
                        forward_change(ctx, &acc.store, r.key, new_agg, old_agg, send_old, ts)
                    },
                )
            }),
        )
    }

    /// Aggregates with an adder for new values and a subtractor for old
    /// ones (`KTABLE-AGGREGATE-`).
    pub fn aggregate<VA: Data>(
        &self,
        initializer: impl Fn() -> VA + Send + Sync + 'static,
        adder: impl Fn(&K, &V, VA) -> VA + Send + Sync + 'static,
        subtractor: impl Fn(&K, &V, VA) -> VA + Send + Sync + 'static,
        materialized: Materialized<K, VA>,
    ) -> KTable<K, VA> {
        self.aggregate_internal(
            "KTABLE-AGGREGATE-",
            materialized,
            None,
            Box::new(move |acc, flag| {
                Arc::new(
                    move |ctx: &mut ProcessorContext<'_>, r: Record<K, Change<V>>| {
                        if acc.key_is_null(&r.key)? {
                            return Ok(()); // Kafka skips records with a null key
                        }
                        let old_agg = acc.get(ctx, &r.key)?;
                        let ts = agg_ts(r.timestamp, &old_agg);
                        let old_agg = old_agg.map(|(v, _)| v);
                        let mut agg = old_agg.clone().unwrap_or_else(&initializer);
                        if let Some(o) = &r.value.old_value {
                            agg = subtractor(&r.key, o, agg);
                        }
                        if let Some(n) = &r.value.new_value {
                            agg = adder(&r.key, n, agg);
                        }
                        acc.put(ctx, &r.key, Some(&agg), ts)?;
                        let send_old = flag.load(Ordering::Relaxed);
                        forward_change(ctx, &acc.store, r.key, Some(agg), old_agg, send_old, ts)
                    },
                )
            }),
        )
    }
}
